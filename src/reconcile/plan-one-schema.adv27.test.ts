// adv27: retiring many instances of one config schema while many others of it are listed `deployed` costs the
// plan work in proportion to their number (each removal filtered the whole schema group: n²).
import { describe, expect, it } from 'vitest';
import { instanceFactory } from '../../test/helpers/instances.js';
import type { ConfigInstance } from '../api/schemas.js';
import type { ManagedFile } from '../store/state.js';
import { type DiskObservation, type PlanInput, planSteps, type WriteStep } from './plan.js';

const N = 2_000;
const make = instanceFactory();
const SHA = 'a'.repeat(64);

/** N retired instances of schema `sch` whose files are in place, and N new ones of it, counting reads of their ids. */
function world(newInPlace: boolean): { input: PlanInput; idReads: () => number } {
  let reads = 0;
  const instances: ConfigInstance[] = [];
  const files = new Map<string, ManagedFile>();
  const disk = new Map<string, DiskObservation>();
  const record = (instance: ConfigInstance) => {
    files.set(instance.relative_filepath, {
      instanceId: instance.id,
      sha256: SHA,
      mode: 0o640,
      createdDirs: [],
      writtenAt: '2026-01-01T00:00:00.000Z',
    });
    disk.set(instance.relative_filepath, { kind: 'file', sha256: SHA, mode: 0o640, gid: 0 });
  };
  for (let i = 0; i < N; i += 1) {
    const old = make({
      id: `old_${i}`,
      relative_filepath: `old/${i}.json`,
      target_status: 'removed',
      activity_status: 'deployed',
      config_schema_id: 'sch',
    });
    record(old);
    instances.push(old);
    const fresh = make({
      id: `new_${i}`,
      relative_filepath: `new/${i}.json`,
      target_status: 'deployed',
      activity_status: 'queued',
      config_schema_id: 'sch',
    });
    if (newInPlace && i === N - 1) record(fresh);
    const { id } = fresh;
    Object.defineProperty(fresh, 'id', {
      get: () => {
        reads += 1;
        return id;
      },
      enumerable: true,
    });
    instances.push(fresh);
  }
  const input: PlanInput = {
    instances,
    local: { files, cooldowns: new Map() },
    disk,
    now: 0,
    fileMode: 0o640,
    complete: true,
  };
  return { input, idReads: () => reads };
}

describe('retiring many instances of one config schema beside many deployed ones', () => {
  it('plans each removal as a swap with the first write, reading each instance a bounded number of times', () => {
    const { input, idReads } = world(false);

    const steps = planSteps(input);

    const writes = steps.filter((step): step is WriteStep => step.kind === 'write');
    expect(writes).toHaveLength(N);
    const swap = writes.find((write) => write.displaces.length > 0);
    expect(swap?.instance.id).toBe('new_0');
    expect(swap?.displaces.map((remove) => remove.instance.id).sort()).toEqual(
      Array.from({ length: N }, (_, i) => `old_${i}`).sort(),
    );
    expect(steps.filter((step) => step.kind === 'remove')).toEqual([]);
    // Before: 8,028,001 (each removal read the id of every deployed instance of the schema, twice).
    expect(idReads()).toBeLessThan(50 * N);
  });

  it('removes them at once when a successor is in place and none is written', () => {
    const { input } = world(true);
    // Every new instance waits for a retry, one of them with its file in place: nothing of the schema is written.
    const cooldowns = new Map<string, number>();
    for (let i = 0; i < N; i += 1) cooldowns.set(`new_${i}`, 1_000);
    const steps = planSteps({ ...input, local: { ...input.local, cooldowns } });

    expect(steps.filter((step) => step.kind === 'write')).toEqual([]);
    expect(steps.filter((step) => step.kind === 'remove')).toHaveLength(N);
  });
});
