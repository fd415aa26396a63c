// adv27: many instances at spellings of one file (a case-insensitive filesystem), thousands retired and thousands
// deployed, cost the plan work in proportion to their number: the claims were sorted again for each retired path.
import { describe, expect, it } from 'vitest';
import { instanceFactory } from '../../test/helpers/instances.js';
import type { ConfigInstance } from '../api/schemas.js';
import { planSteps } from './plan.js';

const N = 2_000;
const make = instanceFactory();

/** The i-th case spelling of a 16-letter name: every one names the same file on a case-insensitive filesystem. */
function spelling(i: number): string {
  return `${Array.from('abcdefghijklmnop', (c, k) => ((i >> k) & 1 ? c.toUpperCase() : c)).join('')}.json`;
}

describe('thousands of instances at spellings of one file', () => {
  it('gives the file to the one updated last, reading each a bounded number of times', () => {
    let reads = 0;
    const instances: ConfigInstance[] = [];
    const aliases = new Map<string, string>();
    for (let i = 0; i < N; i += 1) {
      const updatedAt = new Date(Date.parse('2026-01-01T00:00:00Z') + i * 1000).toISOString();
      const deployed = make({
        id: `dep_${i}`,
        relative_filepath: spelling(2 * i),
        config_schema_id: `sch_${i}`,
        updated_at: updatedAt,
      });
      Object.defineProperty(deployed, 'updated_at', {
        get: () => {
          reads += 1;
          return updatedAt;
        },
        enumerable: true,
      });
      const retired = make({
        id: `ret_${i}`,
        relative_filepath: spelling(2 * i + 1),
        target_status: 'removed',
        activity_status: 'deployed',
        config_schema_id: `old_${i}`,
        updated_at: updatedAt,
      });
      instances.push(deployed, retired);
      aliases.set(deployed.relative_filepath, 'one-file');
      aliases.set(retired.relative_filepath, 'one-file');
    }

    const steps = planSteps({
      instances,
      local: { files: new Map(), cooldowns: new Map() },
      disk: new Map(),
      now: 0,
      fileMode: 0o640,
      complete: true,
      aliases,
    });

    expect(steps.filter((step) => step.kind === 'write').map((step) => step.instance.id)).toEqual([
      `dep_${N - 1}`,
    ]);
    expect(steps.filter((step) => step.kind === 'refuse')).toHaveLength(N - 1);
    // Each retired instance is told its file belongs to the winner; nothing of it is removed.
    const reports = steps.filter((step) => step.kind === 'report');
    expect(reports).toHaveLength(N);
    expect(steps.filter((step) => step.kind === 'remove')).toEqual([]);
    // Before: 7,999,998 (each retired path sorted every deployed claim again).
    expect(reads).toBeLessThan(50 * N);
  });
});
