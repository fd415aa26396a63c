// Server-supplied relative paths: validated by rule (reject, never repair) and resolved under the root without symlinks.
import type { Stats } from 'node:fs';
import path from 'node:path';
import { errnoCode } from '../lib/errors.js';
import type { FsPort } from '../lib/fs-port.js';
import { DiskError, PathRejectedError } from './errors.js';

/** Prefix of the writer's temp files; reserved so the sweep can never delete a file the server asked for. */
export const TEMP_PREFIX = '.config-agent.tmp-';

/** The writer's temp file names: the prefix and 12 random bytes in hex (durable-writer.ts). */
const TEMP_NAME_BYTES = TEMP_PREFIX.length + 24;

/** NAME_MAX on Linux filesystems. */
export const MAX_SEGMENT_BYTES = 255;
/** PATH_MAX (4096) minus the terminating NUL. */
export const MAX_PATH_BYTES = 4095;

// \p{Cc} is C0 (U+0000–U+001F), DEL (U+007F) and C1 (U+0080–U+009F): C1 is included too because those code
// points are never part of a legitimate file name and some terminals act on them when a path is printed.
const CONTROL = /\p{Cc}/u;
// With the u flag a surrogate pair is one code point, so this matches only unpaired halves. A lone surrogate
// would be written as U+FFFD, letting two different server paths land on the same file.
const LONE_SURROGATE = /[\uD800-\uDFFF]/u;
const PRINTABLE_ASCII = /^[\x20-\x7e]*$/;

/**
 * Throws PathRejectedError unless `relativePath` is a canonical relative POSIX path.
 *
 * Unicode that is not NFC is rejected (not normalised): Linux filesystems compare bytes, so "é" as one code
 * point and as "e" + U+0301 are different files there but the same file on normalising filesystems (and look
 * identical to a person). Requiring NFC keeps the server's conflict check (string equality) in agreement with
 * file identity everywhere, and a path that arrives decomposed is a bug to fix on the server, not to guess at.
 */
export function validateRelativePath(relativePath: string): void {
  if (relativePath.length === 0) throw new PathRejectedError('empty', relativePath);
  if (relativePath.startsWith('/')) throw new PathRejectedError('absolute', relativePath);
  if (relativePath.includes('\\')) throw new PathRejectedError('backslash', relativePath);
  // Printable ASCII (nearly every path) holds no control character or surrogate, is NFC and one byte a character.
  const ascii = PRINTABLE_ASCII.test(relativePath);
  if (!ascii) {
    if (CONTROL.test(relativePath)) throw new PathRejectedError('control_character', relativePath);
    if (LONE_SURROGATE.test(relativePath)) throw new PathRejectedError('lone_surrogate', relativePath);
    if (relativePath.normalize('NFC') !== relativePath) throw new PathRejectedError('not_nfc', relativePath);
  }
  const bytes = ascii ? relativePath.length : Buffer.byteLength(relativePath, 'utf8');
  if (bytes > MAX_PATH_BYTES) {
    throw new PathRejectedError('path_too_long', relativePath, `${bytes} bytes`);
  }
  // Each segment by its bounds, not `split('/')`: every pass validates each listed path several times
  // (observation, plan, aliases, the writer's guard), and an array of new strings per call cost ~2.5 ms of CPU per
  // 4,000 calls in a fresh process. The same checks in the same order as on `split`'s segments.
  for (let start = 0; start <= relativePath.length; ) {
    const slash = relativePath.indexOf('/', start);
    const end = slash === -1 ? relativePath.length : slash;
    const length = end - start;
    if (length === 0) throw new PathRejectedError('empty_segment', relativePath);
    if (isDotSegment(relativePath, start, length)) throw new PathRejectedError('dot_segment', relativePath);
    const segmentBytes = ascii ? length : Buffer.byteLength(relativePath.slice(start, end), 'utf8');
    if (segmentBytes > MAX_SEGMENT_BYTES) {
      throw new PathRejectedError('segment_too_long', relativePath, `${segmentBytes} bytes`);
    }
    // TEMP_PREFIX holds no `/`: a match at `start` lies inside this segment.
    if (relativePath.startsWith(TEMP_PREFIX, start))
      throw new PathRejectedError('reserved_prefix', relativePath);
    start = end + 1;
  }
}

const DOT = 0x2e;

/** Whether the segment of `length` characters at `start` is `.` or `..`. */
function isDotSegment(text: string, start: number, length: number): boolean {
  if (length > 2 || text.charCodeAt(start) !== DOT) return false;
  return length === 1 || text.charCodeAt(start + 1) === DOT;
}

/**
 * Directories under one root that nobody but the agent's own user (or root) can change, found while walking
 * the paths of one batch of publishes, so that the next paths through them need no lstat of their parents.
 *
 * A directory is **stable** when it is a real directory (no symlink), owned by the agent's user or root,
 * writable by neither group nor others, and its own parent is stable (or it is the root). Replacing a
 * directory by a symlink needs write permission on the directory holding it: so within a stable chain no
 * other local user can swap anything, and checking it again would find the same thing. The root itself is the
 * trust anchor (its stat is taken once). A directory writable by anyone else, or below one, is never
 * remembered: it is lstat'ed on every walk, before the write and again before the rename, as without a cache.
 * Only positive answers are kept (a missing directory may be created meanwhile), and the cache lives for one
 * batch of plain writes: removals, which can delete directories, run between batches.
 */
export class VerifiedDirectories {
  readonly #uid: number;
  readonly #stable = new Set<string>();
  #root: Promise<string> | undefined;
  #rootDir: string | undefined;

  /** `uid`: the agent's effective user id (its own directories are trusted like root's). */
  constructor(uid: number) {
    this.#uid = uid;
  }

  /** The checked root (see `checkRoot`), once per cache; a failed check is not kept. */
  async root(fs: FsPort, rootDir: string): Promise<string> {
    if (this.#rootDir !== undefined && this.#rootDir !== rootDir) {
      throw new Error(`VerifiedDirectories holds ${this.#rootDir}, asked for ${rootDir}`);
    }
    this.#rootDir = rootDir;
    this.#root ??= checkRootStats(fs, rootDir).then(({ root, stats }) => {
      if (this.sealed(stats)) this.#stable.add('');
      return root;
    });
    try {
      return await this.#root;
    } catch (error) {
      this.#root = undefined;
      throw error;
    }
  }

  /** Whether `relative` ('' for the root) is known stable. */
  has(relative: string): boolean {
    return this.#stable.has(relative);
  }

  /**
   * Drops `relative` and every directory below it: removed since it was found (a failed publish's rollback), it
   * is looked up again, and made again by whoever needs it.
   */
  forget(relative: string): void {
    this.#stable.delete(relative);
    const below = `${relative}/`;
    for (const known of this.#stable) if (known.startsWith(below)) this.#stable.delete(known);
  }

  /** Records a directory just lstat'ed as a real directory: kept only when it and its parent are stable. */
  saw(relative: string, stats: Stats): void {
    const slash = relative.lastIndexOf('/');
    const parent = slash < 0 ? '' : relative.slice(0, slash);
    if (this.#stable.has(parent) && this.sealed(stats)) this.#stable.add(relative);
  }

  /** Owned by the agent's user or root, and writable by neither group nor others. */
  sealed(stats: Stats): boolean {
    return (stats.uid === this.#uid || stats.uid === 0) && (stats.mode & 0o022) === 0;
  }
}

/** What `inspectPath` found on disk for a validated relative path. */
export interface PathInspection {
  /** The root, made absolute; symlinks in it are kept (the root is the trust anchor). */
  root: string;
  absolute: string;
  segments: string[];
  /** How many leading segments of the parent chain exist as real directories. */
  existingParents: number;
  /** lstat of the final path when every parent exists and it does too. */
  final: Stats | undefined;
  /** The final path's directory is stable (see VerifiedDirectories): nobody else can change its entries. */
  stableParent: boolean;
}

/**
 * lstat that maps ENOENT to undefined and every other failure to DiskError. Through the port's `lstatOrAbsent`
 * when it has one (production): on the event loop, a lookup of a name not yet in a directory where the thread
 * pool is creating files waited on the directory's lock, ~230 ms of a first sync of 1,000 under strace
 * (docs/performance.md "First sync, eighth round").
 */
export async function lstatOrUndefined(
  fs: FsPort,
  absolute: string,
  relativeForErrors: string,
): Promise<Stats | undefined> {
  const { lstatOrAbsent } = fs;
  if (lstatOrAbsent !== undefined) {
    try {
      return await lstatOrAbsent(absolute);
    } catch (error) {
      throw new DiskError({ operation: 'lstat', path: relativeForErrors, cause: error });
    }
  }
  if (absentNow(fs, absolute)) return undefined;
  try {
    return await fs.lstat(absolute);
  } catch (error) {
    if (errnoCode(error) === 'ENOENT') return undefined;
    throw new DiskError({ operation: 'lstat', path: relativeForErrors, cause: error });
  }
}

/**
 * Without the port's `lstatOrAbsent`: an absent path is the common case of a first sync (every file, and each new directory's first file), and node's
 * promise lstat rejects it with an Error whose stack it captures: ~2 KiB of garbage each, 46 MiB over a first
 * sync of 10,000 (docs/performance.md "Memory, fourth round"). The port's synchronous lstat, when there is one
 * (only while rootDir's mounts cannot hang: cli/hang-safe-fs.ts), answers undefined instead; a path that exists is lstat'ed again for its Stats, and any failure of the
 * synchronous call is left to the promise lstat to throw and report.
 */
function absentNow(fs: FsPort, absolute: string): boolean {
  const { lstatSync } = fs;
  if (lstatSync === undefined) return false;
  try {
    return lstatSync(absolute, { bigint: true, throwIfNoEntry: false }) === undefined;
  } catch {
    return false;
  }
}

/** Fails with DiskError unless the root exists and is a directory; symlinks to it are followed on purpose. */
export async function checkRoot(fs: FsPort, rootDir: string): Promise<string> {
  return (await checkRootStats(fs, rootDir)).root;
}

/**
 * stat()'s answers for a rootDir replaced by a dangling symlink or a symlink loop, or gone with its parent
 * ('not_a_directory'), or out of the agent's user's reach (EACCES, EPERM: 'not_writable').
 */
const ROOT_ITSELF_ERRNOS = new Set(['ENOENT', 'ENOTDIR', 'ELOOP', 'EACCES', 'EPERM']);

async function checkRootStats(fs: FsPort, rootDir: string): Promise<{ root: string; stats: Stats }> {
  const root = path.resolve(rootDir);
  let stats: Stats;
  try {
    stats = await fs.stat(root);
  } catch (error) {
    // The absolute directory, not "": the same check guards rootDir and the metrics textfile's directory.
    // rootItself (a condition that waits, never an attempt: errors.ts rootConditionOf) only where rootDir was
    // replaced, is gone or refuses the agent's user; EIO and the like are judged by their errno as any failure.
    const own = ROOT_ITSELF_ERRNOS.has(errnoCode(error) ?? '');
    throw new DiskError({ operation: 'stat directory', path: root, cause: error, rootItself: own });
  }
  if (!stats.isDirectory()) {
    throw new DiskError({ operation: 'stat directory', path: root, errno: 'ENOTDIR', rootItself: true });
  }
  return { root, stats };
}

/**
 * Validates `relativePath`, then lstats every existing parent under the root: a symlink or a non-directory
 * anywhere in the chain throws PathRejectedError. The final path is lstat'ed but not judged: callers differ
 * (the writer rejects a symlink there, the remover refuses it without throwing).
 */
export async function inspectPath(
  fs: FsPort,
  rootDir: string,
  relativePath: string,
  verified?: VerifiedDirectories,
): Promise<PathInspection> {
  validateRelativePath(relativePath);
  const root = verified === undefined ? await checkRoot(fs, rootDir) : await verified.root(fs, rootDir);
  assertFitsUnderRoot(root, relativePath);
  const segments = relativePath.split('/');
  let current = root;
  let relative = '';
  let existingParents = 0;
  for (const segment of segments.slice(0, -1)) {
    current = path.join(current, segment);
    relative = relative === '' ? segment : `${relative}/${segment}`;
    existingParents += 1;
    if (verified?.has(relative)) continue;
    const stats = await lstatOrUndefined(fs, current, relative);
    if (stats === undefined) {
      const absolute = path.join(root, relativePath);
      return {
        root,
        absolute,
        segments,
        existingParents: existingParents - 1,
        final: undefined,
        stableParent: false,
      };
    }
    if (stats.isSymbolicLink()) throw new PathRejectedError('crosses_symlink', relativePath, relative);
    if (!stats.isDirectory()) throw new PathRejectedError('not_a_directory', relativePath, relative);
    verified?.saw(relative, stats);
  }
  const absolute = path.join(root, relativePath);
  const final = await lstatOrUndefined(fs, absolute, relativePath);
  return { root, absolute, segments, existingParents, final, stableParent: verified?.has(relative) ?? false };
}

/**
 * The kernel refuses a path over PATH_MAX with ENAMETOOLONG: a path that fits alone may not once the root is in
 * front of it, nor its temp file beside it. That never changes while the root stays, so it is a rule broken
 * (the instance fails at once), not a disk error retried for hours before it fails anyway.
 */
function assertFitsUnderRoot(root: string, relativePath: string): void {
  const longest = longestPathUnderRoot(root, relativePath);
  if (longest > MAX_PATH_BYTES) {
    throw new PathRejectedError('too_long_under_root', relativePath, `${longest} bytes`);
  }
}

/** Whether `inspectPath` lets `relativePath` under `root` (made absolute) through its length check. */
export function fitsUnderRoot(root: string, relativePath: string): boolean {
  return longestPathUnderRoot(root, relativePath) <= MAX_PATH_BYTES;
}

/** The longer of the target's absolute path and its temp file's, in bytes. */
function longestPathUnderRoot(root: string, relativePath: string): number {
  const absolute = path.join(root, relativePath);
  const temp = Buffer.byteLength(path.dirname(absolute)) + 1 + TEMP_NAME_BYTES;
  return Math.max(Buffer.byteLength(absolute), temp);
}

/** Throws PathRejectedError unless `stats` (the final path's lstat, if it exists) is a regular file. */
export function assertRegularOrAbsent(stats: Stats | undefined, relativePath: string): void {
  if (stats === undefined || stats.isFile()) return;
  if (stats.isSymbolicLink())
    throw new PathRejectedError('crosses_symlink', relativePath, 'the target itself');
  if (stats.isDirectory()) throw new PathRejectedError('target_is_directory', relativePath);
  throw new PathRejectedError('target_not_regular_file', relativePath);
}
