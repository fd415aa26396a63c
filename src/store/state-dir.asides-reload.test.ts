// A state directory that fails to open on a reload leaves the running process's record of renewal asides in place.
import * as nodeFs from 'node:fs/promises';
import { chmod, mkdir, mkdtemp, readdir, rm, writeFile } from 'node:fs/promises';
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
const ASIDE = `${TEMP_PREFIX}${'ab'.repeat(12)}`;
const CLOCK = { now: () => 0 };

let dir: string;
let root: string;
let settings: StateDirSettings;

beforeEach(async () => {
  dir = await mkdtemp(path.join(os.tmpdir(), 'asides-reload-'));
  root = path.join(dir, 'root');
  settings = { stateDir: path.join(dir, 'state'), rootDir: root, deviceId: 'dev-1' };
  // What a run killed between a renewal's two renames leaves: top/app at its aside name, and the record of it.
  await mkdir(path.join(root, 'top', ASIDE), { recursive: true, mode: 0o755 });
  await chmod(root, 0o755);
  await chmod(path.join(root, 'top'), 0o755);
  await writeFile(path.join(root, 'top', ASIDE, 'a.json'), 'deployed\n');
  await mkdir(settings.stateDir, { mode: 0o700 });
  await writeFile(
    path.join(settings.stateDir, ASIDES_FILE),
    JSON.stringify({ version: 1, asides: [{ rootDir: root, dir: 'top', name: 'app', aside: ASIDE }] }),
  );
});

afterEach(async () => {
  await rm(dir, { recursive: true, force: true });
});

describe('a reload whose new state directory cannot be opened', () => {
  it('keeps holding the name of a directory the start could not put back: nothing is made at it', async () => {
    // The start's restore rename fails (EIO) until the test lets it: top/app is held aside for the run.
    let restoreFails = true;
    const fs: FsPort = {
      ...(nodeFs as unknown as FsPort),
      directorySyncs: new DirectorySyncLedger(),
      rename: (async (from: string, to: string) => {
        if (restoreFails && String(from) === path.join(root, 'top', ASIDE))
          throw Object.assign(new Error('EIO'), { code: 'EIO' });
        return nodeFs.rename(from, to);
      }) as FsPort['rename'],
    };
    const running = await StateDir.open(fs, settings, silentLogger(), { euid: EUID, clock: CLOCK });
    try {
      // SIGHUP to another stateDir whose state.json an operator made a directory: the reload fails, the old runs on.
      const moved = { ...settings, stateDir: path.join(dir, 'state-new') };
      await mkdir(path.join(moved.stateDir, 'state.json'), { recursive: true, mode: 0o700 });
      await chmod(moved.stateDir, 0o700);
      await expect(
        StateDir.open(fs, moved, silentLogger(), { euid: EUID, clock: CLOCK }),
      ).rejects.toMatchObject({ code: 'state_dir_unusable' });
      // Before: the failed open's empty record replaced the running one, and this write made a new top/app,
      // leaving a.json aside (and out of the agent's sight) while b.json was reported deployed.
      await expect(
        publishFile(fs, {
          rootDir: root,
          relativePath: 'top/app/b.json',
          data: Buffer.from('b\n'),
          mode: 0o644,
          dirMode: 0o755,
        }),
      ).rejects.toMatchObject({ code: 'disk_error', path: 'top/app' });
      expect(await readdir(path.join(root, 'top'))).toEqual([ASIDE]);
      // Once the rename works again, the next write below it puts the directory back and writes into it.
      restoreFails = false;
      await publishFile(fs, {
        rootDir: root,
        relativePath: 'top/app/b.json',
        data: Buffer.from('b\n'),
        mode: 0o644,
        dirMode: 0o755,
      });
      expect((await readdir(path.join(root, 'top/app'))).sort()).toEqual(['a.json', 'b.json']);
    } finally {
      await running.close();
    }
  });
});
