// Disk observation before planning: what is at each path the pulled instances name.
import type { ConfigInstance } from '../api/schemas.js';
import { errorMessage } from '../lib/errors.js';
import type { FsPort } from '../lib/fs-port.js';
import { readRegularFile } from '../store/durable-writer.js';
import { DiskError, PathRejectedError } from '../store/errors.js';
import type { DiskObservation } from './plan.js';

/** Paths read at once: a pass with nothing to do is mostly these reads, each a few thread-pool round trips. */
export const OBSERVE_CONCURRENCY = 16;

/** Observes each distinct path once; a path that cannot be judged is `rejected` or `unreadable`, never thrown. */
export async function observeDisk(
  fs: FsPort,
  rootDir: string,
  instances: readonly Pick<ConfigInstance, 'relative_filepath'>[],
  signal?: AbortSignal,
): Promise<Map<string, DiskObservation>> {
  const paths = [...new Set(instances.map((instance) => instance.relative_filepath))];
  const observed = new Array<DiskObservation>(paths.length);
  let next = 0;
  const worker = async (): Promise<void> => {
    while (next < paths.length) {
      signal?.throwIfAborted();
      const index = next++;
      observed[index] = await observePath(fs, rootDir, paths[index]!);
    }
  };
  await Promise.all(Array.from({ length: Math.min(OBSERVE_CONCURRENCY, paths.length) }, worker));
  return new Map(paths.map((path, index) => [path, observed[index]!]));
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
