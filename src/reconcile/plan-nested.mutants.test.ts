// planSteps at a nested path conflict: which file is removed for the winner (only the agent's own), and the order
// of the writes (the winner's swap before a plain write that needs the same directory).
import { describe, expect, it } from 'vitest';
import { instanceFactory } from '../../test/helpers/instances.js';
import type { ManagedFile } from '../store/state.js';
import { type DiskObservation, type PlanInstance, planSteps, type Step } from './plan.js';

const NOW = 50_000;
const FILE_MODE = 0o640;
const makeInstance = instanceFactory({ relative_filepath: 'a.json', content: { a: 1 } });
const at = (id: string, path: string, day: number) =>
  makeInstance({ id, relative_filepath: path, updated_at: `2026-01-0${day}T00:00:00.000Z` });

function managed(instanceId: string, createdDirs: string[] = []): ManagedFile {
  return {
    instanceId,
    sha256: 'a'.repeat(64),
    mode: FILE_MODE,
    createdDirs,
    writtenAt: '2026-01-01T00:00:00.000Z',
  };
}

const fileOnDisk: DiskObservation = { kind: 'file', sha256: 'b'.repeat(64), mode: FILE_MODE };

function plan(
  instances: PlanInstance[],
  files: Record<string, ManagedFile>,
  disk: Record<string, DiskObservation>,
): Step[] {
  return planSteps({
    instances,
    local: { files: new Map(Object.entries(files)), cooldowns: new Map() },
    disk: new Map(Object.entries(disk)),
    now: NOW,
    fileMode: FILE_MODE,
    complete: true,
  });
}

/** Each step as `kind id`, and every path a step would remove (a removal alone or displaced by a write). */
function summary(steps: Step[]): { steps: string[]; removed: string[] } {
  const removed: string[] = [];
  for (const step of steps) {
    if (step.kind === 'remove') removed.push(step.path);
    if (step.kind === 'write') for (const displaced of step.displaces) removed.push(displaced.path);
  }
  return { steps: steps.map((step) => `${step.kind} ${step.instance.id}`), removed };
}

describe('planSteps: a nested conflict removes only the agent’s own file of a loser', () => {
  const loser = at('cfg_file', 'a.json', 1);
  const winner = at('cfg_dir', 'a.json/b.json', 2);

  it('a local file at the loser’s path, or one recorded as another instance’s, is never removed', () => {
    for (const files of [{}, { 'a.json': managed('cfg_old') }]) {
      expect(summary(plan([loser, winner], files, { 'a.json': fileOnDisk }))).toEqual({
        steps: ['write cfg_dir', 'refuse cfg_file'],
        removed: [],
      });
    }
  });

  it('along a chain with no file of the agent’s, nothing is removed', () => {
    const steps = plan([at('cfg_a', 'a', 1), at('cfg_ab', 'a/b', 3), at('cfg_abc', 'a/b/c', 2)], {}, {});
    expect(summary(steps).removed).toEqual([]);
  });

  it('the winner’s swap comes before a plain write needing the same directory, whatever the listing order', () => {
    const beside = at('cfg_beside', 'a.json/x.json', 1);
    const steps = plan([beside, loser, winner], { 'a.json': managed('cfg_file') }, { 'a.json': fileOnDisk });
    expect(summary(steps)).toEqual({
      steps: ['write cfg_dir', 'write cfg_beside', 'refuse cfg_file'],
      removed: ['a.json'],
    });
  });
});

describe('planSteps: who wins a nested conflict', () => {
  const kinds = (steps: Step[]) => Object.fromEntries(steps.map((step) => [step.instance.id, step.kind]));

  it('the one updated last, whichever of the two is listed first', () => {
    for (const listed of [
      [at('cfg_ab', 'a/b', 1), at('cfg_a', 'a', 3)],
      [at('cfg_a', 'a', 3), at('cfg_ab', 'a/b', 1)],
    ]) {
      expect(kinds(plan(listed, {}, {}))).toEqual({ cfg_a: 'write', cfg_ab: 'refuse' });
    }
  });

  it('a path that only begins with another (`a` and `ab`, `a` and `a.json`) does not nest with it', () => {
    const steps = plan([at('cfg_a', 'a', 1), at('cfg_ab', 'ab', 2), at('cfg_aj', 'a.json', 3)], {}, {});
    expect(kinds(steps)).toEqual({ cfg_a: 'write', cfg_ab: 'write', cfg_aj: 'write' });
  });

  it('a loser under several winners is refused naming the one updated last', () => {
    const steps = plan([at('cfg_a', 'a', 1), at('cfg_ac', 'a/c', 2), at('cfg_ab', 'a/b', 3)], {}, {});
    expect(kinds(steps)).toEqual({ cfg_a: 'refuse', cfg_ab: 'write', cfg_ac: 'write' });
    expect(steps.find((step) => step.instance.id === 'cfg_a')).toMatchObject({
      message: expect.stringContaining('"a" and "a/b" of cfg_ab, the instance updated last'),
    });
  });
});

describe('planSteps: the directories the agent made for several nested losers of one winner', () => {
  it('are pruned with the last of that winner’s removals, all of them; the others prune only their own', () => {
    const steps = plan(
      [at('cfg_b', 'a.json/x/b.json', 1), at('cfg_c', 'a.json/x/c.json', 1), at('cfg_a', 'a.json', 2)],
      {
        'a.json/x/b.json': managed('cfg_b', ['a.json']),
        'a.json/x/c.json': managed('cfg_c', ['a.json/x']),
      },
      { 'a.json/x/b.json': fileOnDisk, 'a.json/x/c.json': fileOnDisk },
    );
    const write = steps.find((step) => step.kind === 'write');
    expect(
      write?.kind === 'write' && write.displaces.map((remove) => [remove.path, remove.pruneWith]),
    ).toEqual([
      ['a.json/x/b.json', undefined],
      ['a.json/x/c.json', ['a.json', 'a.json/x']],
    ]);
  });
});
