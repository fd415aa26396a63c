// adv23: retiring many instances at once costs the plan and the record work in proportion to their number.
import * as nodeFs from 'node:fs/promises';
import { describe, expect, it } from 'vitest';
import { instanceFactory } from '../../test/helpers/instances.js';
import type { ConfigInstance } from '../api/schemas.js';
import { silentLogger } from '../lib/logger.js';
import { StatusOutbox } from '../store/outbox.js';
import { emptyState, type ManagedFile } from '../store/state.js';
import type { AppliedStep } from './apply.js';
import { planSteps, type RemoveStep } from './plan.js';
import { type RecordContext, recordStep } from './record.js';

const N = 2_000;
const make = instanceFactory();
const SHA = 'a'.repeat(64);

/** Instance i, retired (`removed`) while deployed, its file `d<i>/e/f/g.json` in directories the agent made. */
function retired(i: number): { instance: ConfigInstance; path: string; file: ManagedFile } {
  const path = `d${i}/e/f/g.json`;
  const instance = make({
    id: `cfg_${i}`,
    relative_filepath: path,
    target_status: 'removed',
    activity_status: 'deployed',
    config_schema_id: `sch_${i}`,
  });
  const file = {
    instanceId: instance.id,
    sha256: SHA,
    mode: 0o640,
    createdDirs: [`d${i}`, `d${i}/e`, `d${i}/e/f`],
    writtenAt: '2026-01-01T00:00:00.000Z',
  };
  return { instance, path, file };
}

describe('retiring many instances at once', () => {
  // Each removal looked for a successor (the same config schema elsewhere) among every listed instance: n² reads.
  it('plans them reading each instance a bounded number of times', () => {
    let reads = 0;
    const instances: ConfigInstance[] = [];
    const files = new Map<string, ManagedFile>();
    const disk = new Map();
    for (let i = 0; i < N; i += 1) {
      const { instance, path, file } = retired(i);
      const { target_status: target } = instance;
      Object.defineProperty(instance, 'target_status', {
        get: () => {
          reads += 1;
          return target;
        },
        enumerable: true,
      });
      instances.push(instance);
      files.set(path, file);
      disk.set(path, { kind: 'file', sha256: SHA, mode: 0o640, gid: 0 });
    }

    const steps = planSteps({
      instances,
      local: { files, cooldowns: new Map() },
      disk,
      now: 0,
      fileMode: 0o640,
      complete: true,
    });

    expect(steps.filter((step) => step.kind === 'remove')).toHaveLength(N);
    // Before: 4,008,000 (n² + a few per instance).
    expect(reads).toBeLessThan(20 * N);
  });

  // Each removal scanned every recorded file for each directory it had made (to hand it down to another file
  // below it): 3n²/2 map entries, 47 s of CPU at 16,000.
  it('records them visiting a bounded number of recorded files', () => {
    let visited = 0;
    class CountingMap extends Map<string, ManagedFile> {
      override *[Symbol.iterator](): MapIterator<[string, ManagedFile]> {
        for (const entry of super.entries()) {
          visited += 1;
          yield entry;
        }
      }
    }
    const state = emptyState('dvc_1', '/root');
    state.files = new CountingMap();
    const applied: AppliedStep[] = [];
    for (let i = 0; i < N; i += 1) {
      const { instance, path, file } = retired(i);
      state.files.set(path, file);
      const step: RemoveStep = {
        kind: 'remove',
        instance,
        path,
        report: { activity_status: 'removed', error_status: 'none' },
      };
      applied.push({ step, result: { kind: 'removed' }, displaced: [] });
    }
    // Two files sharing a directory the first one made: it is handed down to the other, as before.
    state.files.set('shared/a.json', { ...retired(N).file, instanceId: 'cfg_a', createdDirs: ['shared'] });
    state.files.set('shared/b.json', { ...retired(N).file, instanceId: 'cfg_b', createdDirs: [] });
    const shared = make({ id: 'cfg_a', relative_filepath: 'shared/a.json', target_status: 'removed' });
    applied.push({
      step: { kind: 'remove', instance: shared, path: 'shared/a.json', report: undefined },
      result: { kind: 'removed' },
      displaced: [],
    });
    const ctx: RecordContext = {
      state,
      outbox: StatusOutbox.ephemeral(nodeFs, '/state', silentLogger()),
      clock: { now: () => 0, monotonic: () => 0, sleep: async () => undefined },
      random: () => 0.5,
      logger: silentLogger(),
      fileMode: 0o640,
      retry: { maxAttempts: 3, baseDelaySeconds: 1, maxDelaySeconds: 2 },
      trackHookPaths: false,
    };

    for (const step of applied) recordStep(step, ctx);

    expect([...state.files.keys()]).toEqual(['shared/b.json']);
    expect(state.files.get('shared/b.json')?.createdDirs).toEqual(['shared']);
    // Before: about 6,000,000.
    expect(visited).toBeLessThan(10 * N);
  });
});
