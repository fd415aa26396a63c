// memfs as the agent's FsPort: the one place that states memfs's promise API satisfies the slice of fs the agent uses.
import { createFsFromVolume, type Volume } from 'memfs';
import type { FsPort } from '../../src/lib/fs-port.js';

/**
 * memfs implements every FsPort method with node's semantics for what the agent uses (O_EXCL, O_NOFOLLOW,
 * modes), but its declared types differ from node's in details (overloads, Dirent, PathLike): hence the one
 * cast, here.
 */
export function memfsPort(volume: InstanceType<typeof Volume>): FsPort {
  neverReuseInodeNumbers(volume);
  return createFsFromVolume(volume).promises as unknown as FsPort;
}

/**
 * memfs hands the number of an inode it freed (an unlink, an rmdir) to the next one made, as ext4 does. The
 * power-cut model (power-cut-fs.ts) knows an inode by its number, so a file unlinked without its directory fsynced
 * came back from a cut with the bytes of whatever file was made after it (adv34). Here a number names one inode
 * for the volume's life, as on tmpfs.
 */
function neverReuseInodeNumbers(volume: InstanceType<typeof Volume>): void {
  const core = (volume as unknown as { _core?: { releasedInos?: unknown } })._core;
  if (core !== undefined && Array.isArray(core.releasedInos)) {
    core.releasedInos = { push: () => 0, pop: () => undefined };
  }
}
