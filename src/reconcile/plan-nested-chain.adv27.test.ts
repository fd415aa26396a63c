// adv27: a chain of instances nesting in one another (a, a/a, a/a/a, ...) is planned in proportion to the length
// of their paths: every directory above each path was sliced out and hashed (n³ characters for a chain of n).
import { describe, expect, it } from 'vitest';
import { instanceFactory } from '../../test/helpers/instances.js';
import { planSteps } from './plan.js';

// 2,000 paths of up to 3,999 bytes: the longest chain a path of at most PATH_MAX fits.
const N = 2_000;
const make = instanceFactory();

/** `run`'s result, and the characters of the string keys it passed to any Map's or Set's get, has, set, add or delete. */
function countingKeyCharacters<T>(run: () => T): { result: T; keyCharacters: number } {
  let keyCharacters = 0;
  const patched: [object, string, (...args: unknown[]) => unknown][] = [];
  for (const proto of [Map.prototype, Set.prototype] as object[]) {
    for (const name of ['get', 'has', 'set', 'add', 'delete']) {
      const original = (proto as Record<string, unknown>)[name];
      if (typeof original !== 'function') continue;
      patched.push([proto, name, original as (...args: unknown[]) => unknown]);
      (proto as Record<string, unknown>)[name] = function (this: unknown, ...args: unknown[]) {
        if (typeof args[0] === 'string') keyCharacters += args[0].length;
        return (original as (...a: unknown[]) => unknown).apply(this, args);
      };
    }
  }
  try {
    return { result: run(), keyCharacters };
  } finally {
    for (const [proto, name, original] of patched) (proto as Record<string, unknown>)[name] = original;
  }
}

describe('a chain of nested paths a hostile service lists', () => {
  it('refuses all but the instance updated last, at a cost in proportion to the paths', () => {
    const instances = Array.from({ length: N }, (_, i) =>
      make({
        id: `cfg_${i}`,
        relative_filepath: `${'a/'.repeat(i)}a`,
        config_schema_id: `sch_${i}`,
        updated_at: new Date(Date.parse('2026-01-01T00:00:00Z') + i * 1000).toISOString(),
      }),
    );
    // The work counted, not timed: the characters of every string key the plan's Maps and Sets were asked about.
    // Before, every directory above each path was a key of its own (~2.7e9 characters for this chain, 4.9 s of
    // CPU); walked as a tree of segments, each path costs about its length in keys.
    const steps = countingKeyCharacters(() =>
      planSteps({
        instances,
        local: { files: new Map(), cooldowns: new Map() },
        disk: new Map(),
        now: 0,
        fileMode: 0o640,
        complete: true,
      }),
    );

    const written = steps.result.filter((step) => step.kind === 'write').map((step) => step.instance.id);
    expect(written).toEqual([`cfg_${N - 1}`]);
    const refused = steps.result.filter((step) => step.kind === 'refuse');
    expect(refused).toHaveLength(N - 1);
    // 3.0e7 after the fix (the paths themselves hold 4e6 characters, each looked up a few times), 2.7e9 before.
    expect(steps.keyCharacters).toBeLessThan(100_000_000);
  });
});
