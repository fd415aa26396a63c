// memfs as the agent's FsPort: the one place that states memfs's promise API satisfies the slice of fs the agent uses.
import { createFsFromVolume, type Volume } from 'memfs';
import type { FsPort } from '../../src/lib/fs-port.js';

/**
 * memfs implements every FsPort method with node's semantics for what the agent uses (O_EXCL, O_NOFOLLOW,
 * modes), but its declared types differ from node's in details (overloads, Dirent, PathLike): hence the one
 * cast, here.
 */
export function memfsPort(volume: InstanceType<typeof Volume>): FsPort {
  return createFsFromVolume(volume).promises as unknown as FsPort;
}
