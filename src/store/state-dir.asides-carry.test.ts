// A reload to another state directory carries the running process's renewal records over, durably, or fails.
import * as nodeFs from 'node:fs/promises';
import { chmod, mkdir, mkdtemp, readdir, readFile, rm, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import type { FsPort } from '../lib/fs-port.js';
import { silentLogger } from '../lib/logger.js';
import { ASIDES_FILE } from './directory-asides.js';
import { DirectorySyncLedger } from './directory-syncs.js';
import { publishFile } from './durable-writer.js';
import { TEMP_PREFIX } from './path-guard.js';
import { StateDir, type StateDirSettings } from './state-dir.js';

const EUID = process.geteuid?.() ?? -1;
const ASIDE = `${TEMP_PREFIX}${'cd'.repeat(12)}`;
const CLOCK = { now: () => 0 };

let dir: string;
let root: string;
let settings: StateDirSettings;
let moved: StateDirSettings;
const record = { rootDir: '', dir: 'top', name: 'app', aside: ASIDE };

beforeEach(async () => {
  dir = await mkdtemp(path.join(os.tmpdir(), 'asides-carry-'));
  root = path.join(dir, 'root');
  record.rootDir = root;
  settings = { stateDir: path.join(dir, 'state'), rootDir: root, deviceId: 'dev-1' };
  moved = { ...settings, stateDir: path.join(dir, 'state-new') };
  // What a run killed between a renewal's two renames leaves: top/app at its aside name, and the record of it.
  await mkdir(path.join(root, 'top', ASIDE), { recursive: true, mode: 0o755 });
  await chmod(root, 0o755);
  await chmod(path.join(root, 'top'), 0o755);
  await writeFile(path.join(root, 'top', ASIDE, 'a.json'), 'deployed\n');
  await mkdir(settings.stateDir, { mode: 0o700 });
  await mkdir(moved.stateDir, { mode: 0o700 });
  await writeFile(
    path.join(settings.stateDir, ASIDES_FILE),
    JSON.stringify({ version: 1, asides: [record] }),
  );
});

afterEach(async () => {
  await rm(dir, { recursive: true, force: true });
});

/** The records in `stateDir`'s renewal-asides.json; [] when there is none. */
async function recordsIn(stateDir: string): Promise<unknown[]> {
  const text = await readFile(path.join(stateDir, ASIDES_FILE), 'utf8').catch(() => undefined);
  return text === undefined ? [] : (JSON.parse(text) as { asides: unknown[] }).asides;
}

/** The real fs with a ledger of its own, the restore's rename of the aside failing (EIO) while `world.fails`. */
function failingRestore(world: { fails: boolean; failWrite?: string }): FsPort {
  return {
    ...(nodeFs as unknown as FsPort),
    directorySyncs: new DirectorySyncLedger(),
    rename: (async (from: string, to: string) => {
      if (world.fails && String(from) === path.join(root, 'top', ASIDE))
        throw Object.assign(new Error('EIO'), { code: 'EIO' });
      if (world.failWrite !== undefined && String(to) === path.join(world.failWrite, ASIDES_FILE))
        throw Object.assign(new Error('ENOSPC'), { code: 'ENOSPC' });
      return nodeFs.rename(from, to);
    }) as FsPort['rename'],
  };
}

const write = (fs: FsPort) =>
  publishFile(fs, {
    rootDir: root,
    relativePath: 'top/app/b.json',
    data: Buffer.from('b\n'),
    mode: 0o644,
    dirMode: 0o755,
  });

describe('a reload to another stateDir while a directory the start could not put back is still aside (gaps18)', () => {
  it('carries its record into the new stateDir (and out of the old one): still held, and put back by a start there', async () => {
    const world = { fails: true };
    const fs = failingRestore(world);
    const running = await StateDir.open(fs, settings, silentLogger(), { euid: EUID, clock: CLOCK });
    const next = await StateDir.open(fs, moved, silentLogger(), { euid: EUID, clock: CLOCK });
    await running.close();
    try {
      // Before: the new stateDir held no record, the old one did; the name was no longer held in the run.
      expect(await recordsIn(moved.stateDir)).toEqual([record]);
      expect(await recordsIn(settings.stateDir)).toEqual([]);
      await expect(write(fs)).rejects.toMatchObject({ code: 'disk_error', path: 'top/app' });
      expect(await readdir(path.join(root, 'top'))).toEqual([ASIDE]);
    } finally {
      await next.close();
    }
    // A later start on the new stateDir (a restart after the reload): put back, with its file.
    const restarted = await StateDir.open(nodeFs as unknown as FsPort, moved, silentLogger(), {
      euid: EUID,
      clock: CLOCK,
    });
    await restarted.close();
    expect(await readdir(path.join(root, 'top'))).toEqual(['app']);
    expect(await readdir(path.join(root, 'top/app'))).toEqual(['a.json']);
    expect(await recordsIn(moved.stateDir)).toEqual([]);
  });

  it('a new stateDir that cannot take the records fails the reload: the old one keeps them, and the name stays held', async () => {
    const world = { fails: true, failWrite: moved.stateDir };
    const fs = failingRestore(world);
    const running = await StateDir.open(fs, settings, silentLogger(), { euid: EUID, clock: CLOCK });
    try {
      // Before: the open succeeded with the records left in the old stateDir only.
      await expect(StateDir.open(fs, moved, silentLogger(), { euid: EUID, clock: CLOCK })).rejects.toThrow(
        'ENOSPC',
      );
      expect(await recordsIn(settings.stateDir)).toEqual([record]);
      await expect(write(fs)).rejects.toMatchObject({ code: 'disk_error', path: 'top/app' });
      world.fails = false;
      await write(fs);
      expect((await readdir(path.join(root, 'top/app'))).sort()).toEqual(['a.json', 'b.json']);
    } finally {
      await running.close();
    }
  });
});
