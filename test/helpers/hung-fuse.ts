// A FUSE mount nobody serves: every lookup below it waits in the kernel, as on a dead NFS server.
import { type ChildProcess, spawn } from 'node:child_process';
import { existsSync } from 'node:fs';
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
