// A removal below a directory this run's renewal left aside (its rename back failed) puts it back, as a write does.
import * as nodeFs from 'node:fs/promises';
import { chmod, mkdir, mkdtemp, readdir, readFile, rm, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { afterEach, beforeEach, expect, it } from 'vitest';
import type { FsPort } from '../lib/fs-port.js';
import { silentLogger } from '../lib/logger.js';
import { DirectoryAsides } from './directory-asides.js';
import { DirectorySyncLedger } from './directory-syncs.js';
import { removeManagedFile, renewDroppedOnTheWay } from './durable-writer.js';
import { TEMP_PREFIX, VerifiedDirectories } from './path-guard.js';

const EUID = process.geteuid?.() ?? -1;

let dir: string;
let root: string;
let stateDir: string;

beforeEach(async () => {
  dir = await mkdtemp(path.join(os.tmpdir(), 'aside-removal-'));
  root = path.join(dir, 'root');
  stateDir = path.join(dir, 'state');
  await mkdir(path.join(root, 'top/app'), { recursive: true, mode: 0o755 });
  await mkdir(stateDir, { mode: 0o700 });
  await chmod(root, 0o755);
  await chmod(path.join(root, 'top'), 0o755);
  await writeFile(path.join(root, 'top/app/a.json'), 'deployed\n');
  await writeFile(path.join(root, 'top/app/operator.conf'), 'the operator wrote this\n');
});

afterEach(async () => {
  await rm(dir, { recursive: true, force: true });
});

it('a removal below a directory whose rename back failed puts it back, and its next attempt removes the file', async () => {
  // This run made top/app, the fsync of top failed (its entry dropped), and the renewal's rename back fails once.
  const ledger = new DirectorySyncLedger();
  ledger.changed(path.join(root, 'top'), 'app');
  ledger.failed(path.join(root, 'top'));
  ledger.keepAsidesIn(
    await DirectoryAsides.open(nodeFs as unknown as FsPort, stateDir, root, ledger, silentLogger(), {
      euid: EUID,
      clock: { now: () => 0 },
    }),
  );
  let failBack = 1;
  const fs: FsPort = {
    ...(nodeFs as unknown as FsPort),
    directorySyncs: ledger,
    rename: (async (from: string, to: string) => {
      if (
        failBack > 0 &&
        path.basename(String(from)).startsWith(TEMP_PREFIX) &&
        String(to) === path.join(root, 'top/app')
      ) {
        failBack -= 1;
        throw Object.assign(new Error('EIO'), { code: 'EIO' });
      }
      return nodeFs.rename(from, to);
    }) as FsPort['rename'],
  };
  await renewDroppedOnTheWay(fs, root, 'top/app/a.json', new VerifiedDirectories(EUID), new Set());
  const [aside] = await readdir(path.join(root, 'top'));
  expect(aside?.startsWith(TEMP_PREFIX)).toBe(true);

  // The instance at top/app/a.json retired, and no write below top/app in this run: only removals come by.
  const removal = { rootDir: root, relativePath: 'top/app/a.json', pruneDirs: ['top/app'] };
  // Its file looks gone (it is aside): not `removed`, retried.
  await expect(removeManagedFile(fs, removal)).rejects.toMatchObject({ code: 'disk_error', path: 'top/app' });
  // Before: every attempt was refused the same way for the rest of the run (only a write's renewal renamed the
  // directory back), so the instance was never removed until a restart.
  expect(await removeManagedFile(fs, removal)).toBe('removed');
  expect(await readdir(path.join(root, 'top'))).toEqual(['app']);
  expect(await readdir(path.join(root, 'top/app'))).toEqual(['operator.conf']);
  expect(await readFile(path.join(root, 'top/app/operator.conf'), 'utf8')).toBe('the operator wrote this\n');
});
