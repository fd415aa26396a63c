// adv27: a chain of instances nesting in one another (a, a/a, a/a/a, ...) is planned in proportion to the length
// of their paths: every directory above each path was sliced out and hashed (n³ characters for a chain of n).
import { describe, expect, it } from 'vitest';
import { instanceFactory } from '../../test/helpers/instances.js';
import { planSteps } from './plan.js';

// 2,000 paths of up to 3,999 bytes: the longest chain a path of at most PATH_MAX fits.
const N = 2_000;
const make = instanceFactory();

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
    // Process CPU time, not wall time (the machine may be busy): before, 4.9 s of it (growing with the cube of
    // the chain's length); now about 0.25 s.
    const before = process.cpuUsage();

    const steps = planSteps({
      instances,
      local: { files: new Map(), cooldowns: new Map() },
      disk: new Map(),
      now: 0,
      fileMode: 0o640,
      complete: true,
    });

    const used = process.cpuUsage(before);
    const written = steps.filter((step) => step.kind === 'write').map((step) => step.instance.id);
    expect(written).toEqual([`cfg_${N - 1}`]);
    const refused = steps.filter((step) => step.kind === 'refuse');
    expect(refused).toHaveLength(N - 1);
    expect((used.user + used.system) / 1e6).toBeLessThan(1.5);
  });
});
