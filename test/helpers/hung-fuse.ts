// A FUSE mount nobody serves: every lookup below it waits in the kernel, as on a dead NFS server.
import { type ChildProcess, spawn, spawnSync } from 'node:child_process';
import { existsSync } from 'node:fs';
import { mkdir, mkdtemp, rm } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { skipWithoutRoot } from './built-packages.js';

/**
 * Root with /dev/fuse: a hung mount can be made. Under .ci/run as root a missing /dev/fuse throws (skipWithoutRoot)
 * instead of hiding the hung-mount tests behind their runIf.
 */
export const canMountFuse =
  process.geteuid?.() === 0 && (existsSync('/dev/fuse') || skipWithoutRoot('no /dev/fuse') === '');

/**
 * A child opens /dev/fuse, mounts it at `mountPoint` and never answers, so every lookup below it waits until
 * the child exits (after `hangMs` by itself, or when killed), which aborts the connection (ENOTCONN).
 */
export function hungFuseMount(mountPoint: string, hangMs: number): Promise<ChildProcess> {
  // The shell becomes `sleep`, which holds /dev/fuse as fd 3: killing it aborts the connection.
  const script =
    'exec 3<>/dev/fuse; mount -i -t fuse -o fd=3,rootmode=40000,user_id=0,group_id=0 config-agent-hung "$1" ' +
    '&& echo mounted && exec sleep "$2"; echo failed';
  const child = spawn('sh', ['-c', script, 'sh', mountPoint, String(hangMs / 1000)], {
    stdio: ['ignore', 'pipe', 'inherit'],
  });
  return new Promise((resolve, reject) => {
    child.stdout?.once('data', (data: Buffer) =>
      String(data).startsWith('mounted') ? resolve(child) : reject(new Error('mount failed')),
    );
  });
}

/**
 * A temp dir (named after `prefix`) holding `hung`, a FUSE mount nobody serves for `hangMs`: `make()` makes it,
 * `clean()` (afterEach) kills the child, unmounts lazily and removes the dir, whatever became of the test.
 */
export function hungFuseDir(prefix: string) {
  let dir: string | undefined;
  let fuse: ChildProcess | undefined;
  return {
    async make(hangMs: number): Promise<{ dir: string; mountPoint: string; fuse: ChildProcess }> {
      dir = await mkdtemp(path.join(os.tmpdir(), prefix));
      const mountPoint = path.join(dir, 'hung');
      await mkdir(mountPoint);
      fuse = await hungFuseMount(mountPoint, hangMs);
      return { dir, mountPoint, fuse };
    },
    async clean(): Promise<void> {
      fuse?.kill('SIGKILL');
      fuse = undefined;
      if (dir !== undefined) {
        spawnSync('umount', ['-l', path.join(dir, 'hung')]);
        await rm(dir, { recursive: true, force: true });
      }
      dir = undefined;
    },
  };
}
