// Whether a rootDir recorded in stateDir names the configured one: the same directory, however it is spelled.
import type { FsPort } from '../lib/fs-port.js';

/**
 * True when `recorded` (a record's rootDir) and `rootDir` (the configuration's) name one directory: the same
 * string, or both resolving (stat, through symlinks) to the same device and inode, so a rootDir spelled another
 * way (a trailing slash, `//`, a symlink to it, a bind mount of it) keeps what the agent recorded there. One that
 * does not resolve any more (the old directory gone), or lies on a mount that may hang other than rootDir's
 * (FsPort.mountThatMayHangAt), is compared as a string only.
 */
export async function sameRoot(fs: FsPort, recorded: string, rootDir: string): Promise<boolean> {
  if (recorded === rootDir) return true;
  if (recorded === '' || rootDir === '') return false;
  // A former root on a mount that may hang and is not rootDir's (a root moved off a dead NFS server): nothing bounds
  // its stat, which waited in the kernel until the server answered and held the start-up with it (review32).
  const recordedMount = fs.mountThatMayHangAt?.(recorded);
  if (recordedMount !== undefined && recordedMount !== fs.mountThatMayHangAt?.(rootDir)) return false;
  try {
    // rootDir first: its calls are bounded where it may hang (cli/mount-gate.ts), and so answered, its mount is up.
    const now = await fs.stat(rootDir);
    const before = await fs.stat(recorded);
    return before.isDirectory() && before.dev === now.dev && before.ino === now.ino;
  } catch {
    return false;
  }
}
