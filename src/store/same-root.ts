// Whether a rootDir recorded in stateDir names the configured one: the same directory, however it is spelled.
import type { FsPort } from '../lib/fs-port.js';

/**
 * True when `recorded` (a record's rootDir) and `rootDir` (the configuration's) name one directory: the same
 * string, or both resolving (stat, through symlinks) to the same device and inode, so a rootDir spelled another
 * way (a trailing slash, `//`, a symlink to it, a bind mount of it) keeps what the agent recorded there. One that
 * does not resolve any more (the old directory gone) is compared as a string only.
 */
export async function sameRoot(fs: FsPort, recorded: string, rootDir: string): Promise<boolean> {
  if (recorded === rootDir) return true;
  if (recorded === '' || rootDir === '') return false;
  try {
    const [before, now] = await Promise.all([fs.stat(recorded), fs.stat(rootDir)]);
    return before.isDirectory() && before.dev === now.dev && before.ino === now.ino;
  } catch {
    return false;
  }
}
