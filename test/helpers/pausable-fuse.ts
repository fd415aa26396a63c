// A FUSE mount that can be made to hang and come back: exfat-fuse on a loop image, its daemon stopped and continued.
import { type ChildProcess, spawn, spawnSync } from 'node:child_process';
import { existsSync } from 'node:fs';
import { readdir, readFile } from 'node:fs/promises';
import path from 'node:path';
import { skipWithoutRoot } from './built-packages.js';

/**
 * Root with /dev/fuse, exfat-fuse and mkfs.exfat (Debian's exfat-fuse and exfatprogs, which .ci/run installs). Under
 * .ci/run as root a missing one throws (skipWithoutRoot) instead of hiding the tests behind their runIf.
 */
export const canPauseFuse =
  process.geteuid?.() === 0 &&
  ((existsSync('/dev/fuse') &&
    spawnSync('sh', ['-c', 'command -v mount.exfat-fuse && command -v mkfs.exfat']).status === 0) ||
    skipWithoutRoot('needs /dev/fuse, mount.exfat-fuse and mkfs.exfat (packages exfat-fuse, exfatprogs)') ===
      '');

export interface PausableMount {
  readonly mountPoint: string;
  /** Stops the FUSE daemon (SIGSTOP): every call into the mount waits in the kernel, as on a dead NFS server. */
  pause(): void;
  /** Continues it (SIGCONT): the waiting calls are answered, as when the server comes back. */
  resume(): void;
  /** Continues the daemon and unmounts (lazily if busy); never throws. */
  close(): void;
}

/** The pid of the exfat-fuse daemon serving `mountPoint` (its command line names it). */
async function daemonOf(mountPoint: string): Promise<number> {
  for (const entry of await readdir('/proc')) {
    if (!/^\d+$/.test(entry)) continue;
    const args = await readFile(`/proc/${entry}/cmdline`, 'utf8').catch(() => '');
    const argv = args.split('\0');
    if (argv[0]?.endsWith('mount.exfat-fuse') === true && argv.includes(mountPoint)) return Number(entry);
  }
  throw new Error(`no exfat-fuse daemon serves ${mountPoint}`);
}

/** A stopped daemon is continued after this by itself: a test killed while it hung leaves no mount hung for good. */
const MAX_PAUSE_S = 120;

/**
 * An exFAT image `image` (made here, 32 MiB) mounted at `mountPoint` by exfat-fuse; throws when that fails. Each
 * pause also starts a detached `sleep; kill -CONT`, stopped by resume or close: if the test process dies while the
 * mount hangs (a run killed at its timeout), the mount still answers again after MAX_PAUSE_S (a `sync` of every
 * filesystem, the bench's, would otherwise wait on it for good).
 */
export async function pausableFuseMount(
  image: string,
  mountPoint: string,
  /** More mount options (`umask=077`: exFAT has no modes, and stateDir must be no one else's to write). */
  options = '',
): Promise<PausableMount> {
  const made = spawnSync('sh', ['-c', 'truncate -s 32M "$1" && mkfs.exfat "$1"', 'sh', image], {
    encoding: 'utf8',
  });
  if (made.status !== 0) throw new Error(`mkfs.exfat: ${made.stderr}`);
  const mounted = spawnSync(
    'mount',
    ['-t', 'exfat-fuse', '-o', options === '' ? 'loop' : `loop,${options}`, image, mountPoint],
    {
      encoding: 'utf8',
    },
  );
  if (mounted.status !== 0) throw new Error(`mount: ${mounted.stderr}`);
  const absolute = path.resolve(mountPoint);
  const pid = await daemonOf(absolute);
  let resumer: ChildProcess | undefined;
  const stopResumer = () => {
    resumer?.kill('SIGKILL');
    resumer = undefined;
  };
  return {
    mountPoint: absolute,
    pause: () => {
      stopResumer();
      // Detached: a signal to the test's process group does not take it along. Killed, its sleep ends by itself.
      resumer = spawn('sh', ['-c', 'sleep "$1"; kill -CONT "$2"', 'sh', String(MAX_PAUSE_S), String(pid)], {
        stdio: 'ignore',
        detached: true,
      });
      resumer.unref();
      process.kill(pid, 'SIGSTOP');
    },
    resume: () => {
      stopResumer();
      process.kill(pid, 'SIGCONT');
    },
    close: () => {
      stopResumer();
      try {
        process.kill(pid, 'SIGCONT');
      } catch {
        // Gone already.
      }
      if (spawnSync('umount', [absolute]).status !== 0) spawnSync('umount', ['-l', absolute]);
    },
  };
}
