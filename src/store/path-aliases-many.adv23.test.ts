// adv23: a hostile listing of thousands of spellings of one name costs work in proportion to their number.
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { caseInsensitiveFs } from '../../test/helpers/aliasing-fs.js';
import { findPathAliases } from './path-aliases.js';

const LETTERS = 'abcdefghijk';
const K = 2 ** LETTERS.length;

/** Every case spelling of `abcdefghijkl.json`, the one sorting last first (each union then lengthened a chain). */
function spellings(): string[] {
  const all = Array.from({ length: K }, (_, bits) =>
    [...LETTERS].map((c, i) => ((bits >> i) & 1 ? c.toUpperCase() : c)).join(''),
  );
  // Through JSON, as a listing's paths come: flat strings.
  return JSON.parse(
    JSON.stringify(
      all
        .sort()
        .reverse()
        .map((name) => `${name}.json`),
    ),
  ) as string[];
}

/** Runs `work`, counting the elements `Array.prototype.includes` visits and the calls of `Map.prototype.get`. */
async function counted(work: () => Promise<void>): Promise<{ includes: number; gets: number }> {
  const { includes } = Array.prototype;
  const { get } = Map.prototype;
  const counts = { includes: 0, gets: 0 };
  Array.prototype.includes = function countedIncludes(this: unknown[], ...args: [unknown, number?]) {
    counts.includes += this.length;
    return includes.apply(this, args);
  };
  Map.prototype.get = function countedGet(this: Map<unknown, unknown>, key: unknown) {
    counts.gets += 1;
    return get.call(this, key);
  };
  try {
    await work();
  } finally {
    Array.prototype.includes = includes;
    Map.prototype.get = get;
  }
  return counts;
}

let root: string;
beforeEach(async () => {
  root = await mkdtemp(path.join(os.tmpdir(), 'config-agent-adv23-aliases-'));
});
afterEach(async () => {
  await rm(root, { recursive: true, force: true });
});

describe(`${K} spellings of one name`, () => {
  it('on a case-insensitive root: one file, found with work in proportion to the spellings', async () => {
    await writeFile(path.join(root, `${LETTERS}.json`), 'a');
    const names = spellings();
    let aliases = new Map<string, string>();

    const counts = await counted(async () => {
      aliases = await findPathAliases(caseInsensitiveFs(root), root, names);
    });

    expect(aliases.size).toBe(K);
    expect(new Set(aliases.values())).toEqual(new Set([[...names].sort()[0]]));
    // Before: each spelling looked for in its group (2,096,127 visited), and each union walked the chain of the
    // ones before it (4,206,590 gets with the first fixed alone).
    expect(counts.includes).toBeLessThan(K);
    expect(counts.gets).toBeLessThan(100 * K);
  });

  it('none of them on disk: no alias, each spelling looked at once', async () => {
    const names = spellings();
    let aliases = new Map<string, string>();

    const counts = await counted(async () => {
      aliases = await findPathAliases(caseInsensitiveFs(root), root, [...names, ...names.slice(0, 10)]);
    });

    expect(aliases.size).toBe(0);
    expect(counts.includes).toBeLessThan(K);
  });
});
