// Disk observation before planning: what is at each path the pulled instances name.
import type { BigIntStats } from 'node:fs';
import path from 'node:path';
import type { ConfigInstance } from '../api/schemas.js';
import { errorMessage } from '../lib/errors.js';
import type { FsPort } from '../lib/fs-port.js';
import { hashRegularFile } from '../store/durable-writer.js';
import { DiskError, PathRejectedError } from '../store/errors.js';
import { type FileFingerprints, identityOf, sameIdentity } from '../store/fingerprints.js';
import { validateRelativePath } from '../store/path-guard.js';
import type { DiskObservation } from './plan.js';

/** Paths observed at once: a pass with nothing to do is mostly these, each a few thread-pool round trips. */
export const OBSERVE_CONCURRENCY = 16;

const PERMISSION_BITS = 0o7777;

export interface ObserveOptions {
  signal?: AbortSignal;
  /**
   * With fingerprints, a regular file whose identity (device, inode, size, mtime, ctime) is the recorded one
   * is not read: its recorded sha256 stands (see store/fingerprints.ts for what that guarantees). Every file
   * read is recorded. `now` is the wall clock (ms) the records are dated by.
   */
  fingerprints?: { store: FileFingerprints; now: () => number };
}

/** Observes each distinct path once; a path that cannot be judged is `rejected` or `unreadable`, never thrown. */
export async function observeDisk(
  fs: FsPort,
  rootDir: string,
  instances: readonly Pick<ConfigInstance, 'relative_filepath'>[],
  options: ObserveOptions = {},
): Promise<Map<string, DiskObservation>> {
  const { signal, fingerprints } = options;
  const paths = [...new Set(instances.map((instance) => instance.relative_filepath))];
  const observed = new Array<DiskObservation>(paths.length);
  const directories = new DirectoryCheck(fs, rootDir);
  let next = 0;
  const worker = async (): Promise<void> => {
    while (next < paths.length) {
      signal?.throwIfAborted();
      const index = next++;
      const relative = paths[index]!;
      observed[index] =
        fingerprints === undefined
          ? await observePath(fs, rootDir, relative)
          : await observeWithFingerprint(fs, rootDir, relative, directories, fingerprints);
    }
  };
  await Promise.all(Array.from({ length: Math.min(OBSERVE_CONCURRENCY, paths.length) }, worker));
  return new Map(paths.map((relative, index) => [relative, observed[index]!]));
}

export async function observePath(fs: FsPort, rootDir: string, relative: string): Promise<DiskObservation> {
  try {
    const file = await hashRegularFile(fs, rootDir, relative);
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

/**
 * One lstat when the path is valid, its parents are real directories (checked once per directory per pass)
 * and the file's identity is the fingerprinted one. Anything else — a new or changed file, a symlink, a
 * missing parent, an error — goes through `observePath`, whose verdict stands, and a file read there is
 * fingerprinted when its identity did not change while it was read.
 */
async function observeWithFingerprint(
  fs: FsPort,
  rootDir: string,
  relative: string,
  directories: DirectoryCheck,
  fingerprints: NonNullable<ObserveOptions['fingerprints']>,
): Promise<DiskObservation> {
  const { store, now } = fingerprints;
  const readFrom = now();
  const before = await regularFileStats(fs, rootDir, relative, directories);
  if (before !== undefined) {
    const sha256 = store.lookup(relative, identityOf(before), readFrom);
    if (sha256 !== undefined) {
      return { kind: 'file', sha256, mode: Number(before.mode) & PERMISSION_BITS, gid: Number(before.gid) };
    }
  }
  const observation = await observePath(fs, rootDir, relative);
  if (observation.kind !== 'file' || before === undefined) {
    store.forget(relative);
    return observation;
  }
  const after = await regularFileStats(fs, rootDir, relative, directories);
  if (after !== undefined && sameIdentity(identityOf(before), identityOf(after))) {
    store.record(relative, identityOf(after), observation.sha256, readFrom);
  } else {
    store.forget(relative);
  }
  return observation;
}

/** The lstat of a regular file at a valid path under real directories; undefined for anything else. */
async function regularFileStats(
  fs: FsPort,
  rootDir: string,
  relative: string,
  directories: DirectoryCheck,
): Promise<BigIntStats | undefined> {
  try {
    validateRelativePath(relative);
  } catch {
    return undefined;
  }
  const parent = path.posix.dirname(relative);
  if (!(await directories.isRealDirectory(parent === '.' ? '' : parent))) return undefined;
  const stats = await lstatOrUndefined(fs, path.join(path.resolve(rootDir), relative));
  return stats?.isFile() ? stats : undefined;
}

/**
 * lstat, never following a symlink; undefined when it fails. Synchronous where the port offers it: a pass with
 * nothing to do is mostly these, and a thread-pool round trip costs several syscalls and two thread switches.
 */
async function lstatOrUndefined(fs: FsPort, absolute: string): Promise<BigIntStats | undefined> {
  try {
    if (fs.lstatSync !== undefined) return fs.lstatSync(absolute, { bigint: true, throwIfNoEntry: false });
    return await fs.lstat(absolute, { bigint: true });
  } catch {
    return undefined;
  }
}

/** Whether each directory under the root is a real directory (no symlink on the way), asked once per pass. */
class DirectoryCheck {
  readonly #fs: FsPort;
  readonly #root: string;
  readonly #known = new Map<string, Promise<boolean>>();

  constructor(fs: FsPort, rootDir: string) {
    this.#fs = fs;
    this.#root = path.resolve(rootDir);
  }

  isRealDirectory(relative: string): Promise<boolean> {
    let known = this.#known.get(relative);
    if (known === undefined) {
      known = this.#check(relative);
      this.#known.set(relative, known);
    }
    return known;
  }

  async #check(relative: string): Promise<boolean> {
    try {
      if (relative === '') {
        // The root is the trust anchor: reached through symlinks on purpose, as path-guard's checkRoot does.
        return (await this.#fs.stat(this.#root)).isDirectory();
      }
      const parent = path.posix.dirname(relative);
      if (!(await this.isRealDirectory(parent === '.' ? '' : parent))) return false;
      const stats = await lstatOrUndefined(this.#fs, path.join(this.#root, relative));
      if (stats === undefined) return false;
      return stats.isDirectory() && !stats.isSymbolicLink();
    } catch {
      return false;
    }
  }
}
