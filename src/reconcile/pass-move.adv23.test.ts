// adv23: an instance the service moves to a path that nests with its own old file (`x/a.json` -> `x`): its own
// old file is in the way of its new one, which was retried for good (`retrying`, "something on the device is in the
// way") since the old file went only once the new one was in place.
import * as nodeFs from 'node:fs/promises';
import { lstat, readFile, rm, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { createPassWorld, type PassWorld } from '../../test/helpers/pass-world.js';
import type { Clock } from '../lib/clock.js';
import type { ConfigInstanceRecord } from '../mock-server/state.js';
import type { PassResult } from './pass-runner.js';

const T1 = '2026-02-01T00:00:00.000Z';

let monotonic = 1_000;
const clock: Clock = {
  now: () => Date.parse('2026-06-01T00:00:00.000Z') + monotonic,
  monotonic: () => monotonic,
  sleep: async () => undefined,
};

/** The fs port, its renames failing with ENOSPC where `failRenameTo` says (a full disk at the new file). */
const fs = {
  ...nodeFs,
  failRenameTo: (_target: string) => false,
  rename: async (from: Parameters<typeof nodeFs.rename>[0], to: Parameters<typeof nodeFs.rename>[1]) => {
    if (fs.failRenameTo(String(to))) {
      throw Object.assign(new Error(`ENOSPC: simulated failure, rename '${String(to)}'`), { code: 'ENOSPC' });
    }
    return nodeFs.rename(from, to);
  },
};

let world: PassWorld;
let rootDir: string;

beforeEach(async () => {
  monotonic = 1_000;
  fs.failRenameTo = () => false;
  world = await createPassWorld({ name: 'adv23', deps: { fs, clock }, maxResponseBytes: 1 << 20 });
  rootDir = world.rootDir;
});

afterEach(() => world.close());

/** Puts the instance over what the service has for it (a move keeps its other fields). */
function put(fields: Partial<ConfigInstanceRecord> & { id: string }): void {
  world.put({ ...world.server.state.instances.get(fields.id), ...fields });
}

/** A full pass past every cooldown (a minute of the monotonic clock later). */
const pass = (): Promise<PassResult> => {
  monotonic += 3_600_000;
  return world.pass();
};
const fileAt = (relative: string) => world.fileAt(relative);
const isFile = (relative: string) =>
  lstat(path.join(rootDir, relative)).then(
    (stats) => stats.isFile(),
    () => false,
  );
const reports = () => world.reports();

const json = (value: unknown) => `${JSON.stringify(value, null, 2)}\n`;
const MOVES = [
  ['into the directory that held it', 'x/a.json', 'x'],
  ['below the file it was', 'x.json', 'x.json/a.json'],
] as const;

async function deployThenMove(from: string, to: string): Promise<void> {
  put({ id: 'cfg_a', relative_filepath: from, content: { v: 1 } });
  expect((await pass()).converged).toBe(true);
  expect(await fileAt(from)).toBe(json({ v: 1 }));
  put({ id: 'cfg_a', relative_filepath: to, content: { v: 2 }, activity_status: 'queued', updated_at: T1 });
}

describe('an instance moved to a path that nests with its own old file', () => {
  it.each(MOVES)(
    '%s (%s -> %s): written in the next pass, the old file gone, converged',
    async (_name, from, to) => {
      await deployThenMove(from, to);

      const moved = await pass();

      expect(await isFile(to)).toBe(true);
      expect(await fileAt(to)).toBe(json({ v: 2 }));
      expect(await isFile(from)).toBe(false);
      expect(moved.converged).toBe(true);
      expect(reports()).toEqual(['cfg_a deployed/none', 'cfg_a deployed/none']);
      const state = JSON.parse(await readFile(path.join(world.stateDir, 'state.json'), 'utf8'));
      expect(Object.keys(state.files)).toEqual([to]);
      const again = await pass();
      expect(again.converged).toBe(true);
      expect(reports()).toHaveLength(2);
    },
  );

  it.each(MOVES)(
    '%s (%s -> %s), the new file failing: the old one is put back whole',
    async (_name, from, to) => {
      await deployThenMove(from, to);
      fs.failRenameTo = (target) => target === path.join(rootDir, to);

      const failed = await pass();

      expect(failed.converged).toBe(false);
      expect(await fileAt(from)).toBe(json({ v: 1 }));
      expect(reports().at(-1)).toBe('cfg_a queued/retrying');
      fs.failRenameTo = () => false;
      expect((await pass()).converged).toBe(true);
      expect(await fileAt(to)).toBe(json({ v: 2 }));
      expect(await isFile(from)).toBe(false);
    },
  );

  it('an operator file beside the old one keeps it in place: nothing removed until it goes', async () => {
    await deployThenMove('x/a.json', 'x');
    await writeFile(path.join(rootDir, 'x', 'mine.txt'), 'operator\n');
    const before = await lstat(path.join(rootDir, 'x', 'a.json'));

    for (let i = 0; i < 3; i += 1) expect((await pass()).converged).toBe(false);

    const after = await lstat(path.join(rootDir, 'x', 'a.json'));
    expect(after.ino).toBe(before.ino);
    expect(await fileAt('x/mine.txt')).toBe('operator\n');
    expect(reports().at(-1)).toMatch(/^cfg_a queued\/retrying$/);
    await rm(path.join(rootDir, 'x', 'mine.txt'));
    expect((await pass()).converged).toBe(true);
    expect(await fileAt('x')).toBe(json({ v: 2 }));
  });
});
