// Disk observation before planning: what is at each path the pulled instances name.
import type { ConfigInstance } from '../api/schemas.js';
import { errorMessage } from '../lib/errors.js';
import type { FsPort } from '../lib/fs-port.js';
import { readRegularFile } from '../store/durable-writer.js';
import { DiskError, PathRejectedError } from '../store/errors.js';
import type { DiskObservation } from './plan.js';

/** Observes each distinct path once; a path that cannot be judged is `rejected` or `unreadable`, never thrown. */
export async function observeDisk(
  fs: FsPort,
  rootDir: string,
  instances: readonly Pick<ConfigInstance, 'relative_filepath'>[],
  signal?: AbortSignal,
): Promise<Map<string, DiskObservation>> {
  const disk = new Map<string, DiskObservation>();
  for (const instance of instances) {
    signal?.throwIfAborted();
    const path = instance.relative_filepath;
    if (!disk.has(path)) disk.set(path, await observePath(fs, rootDir, path));
  }
  return disk;
}

export async function observePath(fs: FsPort, rootDir: string, path: string): Promise<DiskObservation> {
  try {
    const file = await readRegularFile(fs, rootDir, path);
    return file === undefined
      ? { kind: 'absent' }
      : { kind: 'file', sha256: file.sha256, mode: file.mode, gid: file.gid };
  } catch (error) {
    if (error instanceof PathRejectedError) return { kind: 'rejected', reason: error.message };
    // A root that does not exist yet (first dry run) holds no file at all.
    if (error instanceof DiskError && error.errno === 'ENOENT') return { kind: 'absent' };
    return { kind: 'unreadable', reason: errorMessage(error) };
  }
}
