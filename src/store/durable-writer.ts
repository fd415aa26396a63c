// Crash-safe publishing and removal of files under a root: temp file + fsync + rename + directory fsync.
import { createHash, randomBytes } from 'node:crypto';
import { constants, type Dirent, type Stats } from 'node:fs';
import path from 'node:path';
import { AgentError, errnoCode } from '../lib/errors.js';
import type { DescriptorCalls, FileHandle, FsPort } from '../lib/fs-port.js';
import { sha256Hex } from '../lib/hash.js';
import type { DirectorySyncLedger, RenewalAsides } from './directory-syncs.js';
import { DiskError, PathRejectedError } from './errors.js';
import {
  assertRegularOrAbsent,
  checkRoot,
  inspectPath,
  lstatOrUndefined,
  MAX_PATH_BYTES,
  type PathInspection,
  TEMP_PREFIX,
  VerifiedDirectories,
  validateRelativePath,
} from './path-guard.js';

export interface PublishRequest {
  rootDir: string;
  relativePath: string;
  data: Uint8Array;
  /** Permission bits of the published file (mode & 0o7777); applied with chmod, so the umask does not apply. */
  mode: number;
  /** Permission bits of every directory this call creates. */
  dirMode: number;
  /** Group (gid) of the published file; undefined leaves the group the file gets from the process. */
  gid?: number;
  signal?: AbortSignal;
  /**
   * Default true: fsync the target's directory after the rename. False leaves that to the caller, who must
   * pass `PublishResult.directory` to `syncDirectories` before anyone is told the file is in place: a batch of
   * files in one directory then costs one directory fsync instead of one each.
   */
  syncDirectory?: boolean;
  /**
   * With `syncDirectory: false`: each directory this publish makes (under a parent nobody else can change) is
   * added here, and the fsync of its parent for the new entry is left to the caller too, who passes to
   * `syncDirectories`, with each file's directory, the parent of every directory in this set on that file's way,
   * before anyone is told the file is in place. A batch that makes ten directories in one parent then fsyncs that
   * parent once instead of ten times. The set outlives the publish (the caller's batch or pass): a directory made
   * by a publish that failed afterwards may hold the files of other publishes.
   */
  madeDirectories?: Set<string>;
  /**
   * With `madeDirectories`, shared by the publishes of a batch (with its `verified`): a directory one of them is
   * making is not made again
   * by another that needs it meanwhile; that one waits, and goes on once the maker has found it stable (else it
   * makes it as before). Sixteen publishes into one new directory otherwise each tried the mkdir (EEXIST) and
   * opened, stat'ed and closed the directory: ~370 such tries per first sync of the bench's 1,000 files.
   */
  makingDirectories?: Map<string, Promise<void>>;
  /**
   * When the bytes are already in place, fsync the file and its directory before answering `unchanged`: the
   * bytes may be the leftover of a write whose fsync failed or was cut by a power loss, and nobody may be told
   * they are in place until they are durable. Set for every publish the caller has no durable record of.
   */
  ensureDurable?: boolean;
  /**
   * The directories found stable by the other publishes of this batch (see VerifiedDirectories): their
   * parents are not lstat'ed again, and a target whose directory is stable is not checked again before the
   * rename (nobody but the agent's user or root can change what is in it).
   */
  verified?: VerifiedDirectories;
  /**
   * Default true. False skips every fsync (of the file, of its directory, of directories it creates) and
   * keeps only the temp file + rename, so a reader never meets a half-written file: for content whose every
   * read verifies it against its name and on which nothing durable is decided (the content cache). A power
   * cut may then lose or tear such a file, never a managed one.
   */
  durable?: boolean;
}

export interface PublishResult {
  /** metadata: the bytes were already right; only the mode and/or group changed, in place (no rewrite). */
  outcome: 'written' | 'unchanged' | 'metadata';
  sha256: string;
  bytes: number;
  /** Relative dirs this call created, parent-first: record them to prune on removal. */
  createdDirs: string[];
  /** The target's directory relative to the root ('' for the root itself). */
  directory: string;
  /**
   * The permission bits the file kept when a fchmod to `mode` left them as they were (exFAT, vfat: the mount's
   * fmask): the bytes are in place and nothing more can change. Absent when the file has `mode`.
   */
  keptMode?: number;
}

export interface RemoveRequest {
  rootDir: string;
  relativePath: string;
  /** Relative dirs the agent created for this file; removed deepest-first when empty. */
  pruneDirs: readonly string[];
  /**
   * The file the caller checked (`RegularFile.identity`): another one found at the path (renamed in by someone
   * since the check) is 'refused', never deleted.
   */
  expected?: FileIdentity;
}

/** Which file: device and inode. */
export interface FileIdentity {
  dev: number;
  ino: number;
}

export type RemoveOutcome = 'removed' | 'absent' | 'refused';

export interface RegularFile {
  data: Buffer;
  mode: number;
  sha256: string;
  /** Group of the file (files.rules may want another one). */
  gid: number;
  /** The file these bytes were read from. */
  identity: FileIdentity;
}

const TEMP_FLAGS = constants.O_WRONLY | constants.O_CREAT | constants.O_EXCL | constants.O_NOFOLLOW;
// O_NONBLOCK: if a FIFO is swapped in after the lstat, open must not hang the agent waiting for a writer.
const READ_FLAGS = constants.O_RDONLY | constants.O_NOFOLLOW | constants.O_NONBLOCK;
const DIR_FLAGS = constants.O_RDONLY | constants.O_DIRECTORY;
const PERMISSION_BITS = 0o7777;

function assertMode(value: number, field: string): void {
  if (!Number.isInteger(value) || value < 0 || value > PERMISSION_BITS) {
    throw new RangeError(`${field} must be an integer between 0 and 0o7777, got ${String(value)}`);
  }
}

/** Runs one fs call and turns whatever it throws into a DiskError naming the step and the relative path. */
async function step<T>(operation: string, relativePath: string, run: () => Promise<T>): Promise<T> {
  try {
    return await run();
  } catch (error) {
    if (error instanceof AgentError) throw error;
    throw new DiskError({ operation, path: relativePath, cause: error });
  }
}

function relativeDir(relativePath: string): string {
  const dir = path.posix.dirname(relativePath);
  return dir === '.' ? '' : dir;
}

/** Whether a failed fsync of its directory may have dropped the entry at `absolute` (DirectorySyncLedger). */
function entryDropped(fs: FsPort, absolute: string): boolean {
  return fs.directorySyncs?.dropped(path.dirname(absolute), path.basename(absolute)) ?? false;
}

/**
 * fsync a directory so the entries just created, renamed or removed in it survive a power cut. Filesystems
 * that cannot fsync a directory answer EINVAL (some FUSE and network filesystems); there is nothing stronger
 * to do there, so that answer is accepted.
 */
async function fsyncDirectory(
  fs: FsPort,
  absolute: string,
  relativePath: string,
  key = absolute,
): Promise<void> {
  const ledger = fs.directorySyncs;
  const since = ledger?.syncing() ?? 0;
  try {
    await fsyncDirectoryOnce(fs, absolute, relativePath);
  } catch (error) {
    if (error instanceof DiskError && error.operation === 'fsync directory') ledger?.failed(key);
    throw error;
  }
  ledger?.synced(key, since);
}

async function fsyncDirectoryOnce(fs: FsPort, absolute: string, relativePath: string): Promise<void> {
  const calls = fs.descriptors;
  if (calls !== undefined) {
    const fd = await step('open directory', relativePath, () => calls.open(absolute, DIR_FLAGS, 0));
    try {
      await calls.fsync(fd);
    } catch (error) {
      refuseDirectorySyncFailure(error, relativePath);
    } finally {
      await calls.close(fd).catch(() => undefined);
    }
    return;
  }
  const handle = await step('open directory', relativePath, () => fs.open(absolute, DIR_FLAGS));
  try {
    await handle.sync();
  } catch (error) {
    refuseDirectorySyncFailure(error, relativePath);
  } finally {
    await handle.close().catch(() => undefined);
  }
}

/** A directory fsync's failure as a DiskError, except EINVAL and ENOTSUP (see fsyncDirectory): accepted. */
function refuseDirectorySyncFailure(error: unknown, relativePath: string): void {
  const code = errnoCode(error);
  if (code !== 'EINVAL' && code !== 'ENOTSUP') {
    throw new DiskError({ operation: 'fsync directory', path: relativePath, cause: error });
  }
}

/** The temp file a publish writes: a raw descriptor through the port's `descriptors`, else a FileHandle. */
interface TempFile {
  /** Bytes written from the file's position (a write may be short). */
  write(buffer: Uint8Array, offset: number, length: number): Promise<number>;
  chgrp(gid: number): Promise<void>;
  chmod(mode: number): Promise<void>;
  sync(): Promise<void>;
  /** Called once, on every path: a raw descriptor closed twice could close a file that reused its number. */
  close(): Promise<void>;
}

class DescriptorTempFile implements TempFile {
  constructor(
    private readonly calls: DescriptorCalls,
    private readonly fd: number,
  ) {}
  write(buffer: Uint8Array, offset: number, length: number): Promise<number> {
    return this.calls.write(this.fd, buffer, offset, length);
  }
  chgrp(gid: number): Promise<void> {
    return this.calls.fchown(this.fd, -1, gid);
  }
  chmod(mode: number): Promise<void> {
    return this.calls.fchmod(this.fd, mode);
  }
  sync(): Promise<void> {
    return this.calls.fsync(this.fd);
  }
  close(): Promise<void> {
    return this.calls.close(this.fd);
  }
}

class HandleTempFile implements TempFile {
  constructor(private readonly handle: FileHandle) {}
  async write(buffer: Uint8Array, offset: number, length: number): Promise<number> {
    return (await this.handle.write(buffer, offset, length, null)).bytesWritten;
  }
  chgrp(gid: number): Promise<void> {
    return this.handle.chown(-1, gid);
  }
  chmod(mode: number): Promise<void> {
    return this.handle.chmod(mode);
  }
  sync(): Promise<void> {
    return this.handle.sync();
  }
  close(): Promise<void> {
    return this.handle.close();
  }
}

/** Creates the temp file at `candidate` (TEMP_FLAGS, private until its mode is set). */
async function createTempFile(fs: FsPort, candidate: string): Promise<TempFile> {
  const calls = fs.descriptors;
  if (calls !== undefined)
    return new DescriptorTempFile(calls, await calls.open(candidate, TEMP_FLAGS, 0o600));
  return new HandleTempFile(await fs.open(candidate, TEMP_FLAGS, 0o600));
}

/**
 * Opens a regular file for reading without following a symlink at its last component; undefined if it
 * vanished. The caller closes the handle. A directory or other non-regular file there is refused.
 */
async function openRegularNoFollow(
  fs: FsPort,
  absolute: string,
  relativePath: string,
): Promise<{ handle: FileHandle; stats: Stats } | undefined> {
  let handle: FileHandle;
  try {
    handle = await fs.open(absolute, READ_FLAGS);
  } catch (error) {
    const code = errnoCode(error);
    if (code === 'ENOENT') return undefined;
    if (code === 'ELOOP') throw new PathRejectedError('crosses_symlink', relativePath, 'the target itself');
    throw new DiskError({ operation: 'open for reading', path: relativePath, cause: error });
  }
  try {
    const stats = await step('fstat', relativePath, () => handle.stat());
    if (!stats.isFile()) {
      throw new PathRejectedError(
        stats.isDirectory() ? 'target_is_directory' : 'target_not_regular_file',
        relativePath,
      );
    }
    return { handle, stats };
  } catch (error) {
    await handle.close().catch(() => undefined);
    throw error;
  }
}

/** Reads a regular file without following a symlink at its last component; undefined if it vanished. */
async function readNoFollow(
  fs: FsPort,
  absolute: string,
  relativePath: string,
  maxBytes: number | undefined,
): Promise<RegularFile | undefined> {
  const opened = await openRegularNoFollow(fs, absolute, relativePath);
  if (opened === undefined) return undefined;
  const { handle, stats } = opened;
  try {
    const data =
      maxBytes === undefined
        ? await step('read', relativePath, () => handle.readFile())
        : await readAtMost(handle, Math.min(stats.size, maxBytes) + 1, relativePath);
    return {
      data,
      mode: stats.mode & PERMISSION_BITS,
      sha256: sha256Hex(data),
      gid: stats.gid,
      identity: { dev: stats.dev, ino: stats.ino },
    };
  } finally {
    await handle.close().catch(() => undefined);
  }
}

/**
 * On one descriptor (so a file swapped in meanwhile is never touched): when the file holds exactly `data`,
 * brings its group and mode to the wanted ones with fchown/fchmod and fsyncs the change. 'differs' when the
 * bytes differ or the metadata cannot change in place (see settleMetadata): the caller rewrites; undefined
 * when the file vanished.
 */
async function settleMetadataInPlace(
  fs: FsPort,
  absolute: string,
  relativePath: string,
  wanted: {
    data: Uint8Array;
    mode: number;
    gid: number | undefined;
    ensureDurable: boolean;
    durable: boolean;
  },
): Promise<MetadataVerdict | 'differs' | undefined> {
  const opened = await openRegularNoFollow(fs, absolute, relativePath);
  if (opened === undefined) return undefined;
  const { handle, stats } = opened;
  try {
    // The size the caller's lstat saw may be stale (a local user can grow the file meanwhile): the descriptor's
    // decides, and no more than one byte past the wanted ones is read, so a planted file is never held whole.
    if (stats.size !== wanted.data.byteLength) return 'differs';
    const existing = await readToCompare(handle, wanted.data.byteLength + 1, relativePath);
    if (existing === undefined || Buffer.compare(existing, wanted.data) !== 0) return 'differs';
    return await settleMetadata(handle, stats, relativePath, wanted);
  } finally {
    await handle.close().catch(() => undefined);
  }
}

/**
 * The bytes of the open file are the wanted ones: brings its group and mode to the wanted ones (see above).
 * 'differs' when they must change on a file with other names (nlink > 1: a hard link someone planted where
 * fs.protected_hardlinks is 0): a fchmod/fchown would change the inode those names share, so the caller
 * publishes a fresh file instead and the other names keep their mode and group.
 */
async function settleMetadata(
  handle: FileHandle,
  stats: Stats,
  relativePath: string,
  wanted: { mode: number; gid: number | undefined; ensureDurable: boolean; durable: boolean },
): Promise<MetadataVerdict | 'differs'> {
  const groupChanges = wanted.gid !== undefined && stats.gid !== wanted.gid;
  const before = stats.mode & PERMISSION_BITS;
  if (!groupChanges && before === wanted.mode) {
    if (wanted.ensureDurable) await step('fsync', relativePath, () => handle.sync());
    return { outcome: 'unchanged' };
  }
  if (stats.nlink > 1) return 'differs';
  const gid = wanted.gid;
  if (groupChanges && gid !== undefined) await step('chown', relativePath, () => handle.chown(-1, gid));
  await step('chmod', relativePath, () => handle.chmod(wanted.mode));
  if (!groupChanges) {
    // A filesystem without permission bits (exFAT, vfat) takes the fchmod and keeps its own: nothing changed,
    // so the file is as it was (its fsync as for unchanged bytes), and the caller records the mode it kept.
    const after = (await step('fstat', relativePath, () => handle.stat())).mode & PERMISSION_BITS;
    if (after === before) {
      if (wanted.ensureDurable) await step('fsync', relativePath, () => handle.sync());
      return { outcome: 'unchanged', keptMode: after };
    }
  }
  if (wanted.durable) await step('fsync', relativePath, () => handle.sync());
  return { outcome: 'metadata' };
}

/** What settleMetadata did: `keptMode` when the filesystem kept other permission bits than those asked for. */
interface MetadataVerdict {
  outcome: 'unchanged' | 'metadata';
  keptMode?: number;
}

/**
 * The content and permission bits of a regular file under the root; undefined when it (or a parent) is absent.
 * A symlink or directory there throws PathRejectedError: drift detection must not read through one.
 */
export async function readRegularFile(
  fs: FsPort,
  rootDir: string,
  relativePath: string,
  /** When given, no more than one byte past it is read (a longer file's data and sha256 are of that prefix). */
  maxBytes?: number,
): Promise<RegularFile | undefined> {
  const inspection = await inspectPath(fs, rootDir, relativePath);
  assertRegularOrAbsent(inspection.final, relativePath);
  if (inspection.final === undefined) return undefined;
  return readNoFollow(fs, inspection.absolute, relativePath, maxBytes);
}

/**
 * The regular file at a path under the root, opened without following a symlink, with its fstat; undefined
 * when it (or a parent) is absent. A symlink or directory there throws PathRejectedError.
 */
async function openRegularUnderRoot(fs: FsPort, rootDir: string, relativePath: string) {
  const inspection = await inspectPath(fs, rootDir, relativePath);
  assertRegularOrAbsent(inspection.final, relativePath);
  if (inspection.final === undefined) return undefined;
  return openRegularNoFollow(fs, inspection.absolute, relativePath);
}

/** Up to `length` bytes from the handle's position: fewer when the file ends first. */
async function readAtMost(handle: FileHandle, length: number, relativePath: string): Promise<Buffer> {
  const buffer = Buffer.alloc(length);
  let filled = 0;
  while (filled < length) {
    const { bytesRead } = await step('read', relativePath, () =>
      handle.read(buffer, filled, length - filled, null),
    );
    if (bytesRead === 0) break;
    filled += bytesRead;
  }
  return buffer.subarray(0, filled);
}

/**
 * readAtMost for a compare-first, undefined when the file in place cannot be read (EIO: a bad block of that file
 * on a worn SD card). Its bytes are then not known to be the wanted ones, so the caller publishes a fresh file,
 * which a failing disk refuses in its turn; throwing instead refused the write for as long as that one file's
 * blocks stayed unreadable, which is for good.
 */
async function readToCompare(
  handle: FileHandle,
  length: number,
  relativePath: string,
): Promise<Buffer | undefined> {
  try {
    return await readAtMost(handle, length, relativePath);
  } catch {
    return undefined;
  }
}

/**
 * The bytes of a regular file under the root when it holds at most `maxBytes`, else only its size (what it
 * holds when read: a file that grows meanwhile is not read past `maxBytes`). For a dry run's diff: a file a
 * local user planted at a managed path is never held whole.
 */
export async function readRegularFileUpTo(
  fs: FsPort,
  rootDir: string,
  relativePath: string,
  maxBytes: number,
): Promise<{ size: number; data?: Buffer } | undefined> {
  const opened = await openRegularUnderRoot(fs, rootDir, relativePath);
  if (opened === undefined) return undefined;
  const { handle, stats } = opened;
  try {
    if (stats.size > maxBytes) return { size: stats.size };
    // One byte past the size sees the end; a file that grew past it is not shown (only what was read counted).
    const data = await readAtMost(handle, stats.size + 1, relativePath);
    return data.length > stats.size ? { size: data.length } : { size: data.length, data };
  } finally {
    await handle.close().catch(() => undefined);
  }
}

/** Bytes read at a time when only a file's hash is wanted. */
const HASH_CHUNK_BYTES = 256 * 1024;

/**
 * The `sha256` hashRegularFile gives a file it did not read because its size is none of `onlySizes`: no digest
 * (64 hex digits) ever equals it, so the file compares as holding other bytes than any the caller wanted.
 */
export const NOT_HASHED = 'not-hashed';

/**
 * The sha256, permission bits and group of a regular file under the root (what readRegularFile gives, without
 * the bytes), read a chunk at a time: memory stays flat whatever the file's size. With `onlySizes` (the sizes of
 * the bytes the caller compares with), a file of another size is not read at all (`sha256` is NOT_HASHED): a
 * sparse file of a terabyte at a managed path took 50 minutes of reading per pass (4 GiB: 12 s here). A local user can put a sparse
 * file of gigabytes at a managed path; read whole, the agent allocated all of it on every pass (1.5 GB: 1.6 GB
 * resident), enough to be killed for it on a small device, again after every restart.
 */
export async function hashRegularFile(
  fs: FsPort,
  rootDir: string,
  relativePath: string,
  options: { onlySizes?: ReadonlySet<number> } = {},
): Promise<(Omit<RegularFile, 'data'> & { size: number; links: number }) | undefined> {
  const opened = await openRegularUnderRoot(fs, rootDir, relativePath);
  if (opened === undefined) return undefined;
  const { handle, stats } = opened;
  try {
    if (options.onlySizes !== undefined && !options.onlySizes.has(stats.size)) {
      return {
        sha256: NOT_HASHED,
        mode: stats.mode & PERMISSION_BITS,
        gid: stats.gid,
        size: stats.size,
        identity: { dev: stats.dev, ino: stats.ino },
        links: stats.nlink,
      };
    }
    const hash = createHash('sha256');
    // One read past the size sees the end: a small file costs what readFile costs.
    const buffer = Buffer.allocUnsafe(Math.min(HASH_CHUNK_BYTES, stats.size + 1));
    let size = 0;
    for (;;) {
      const { bytesRead } = await step('read', relativePath, () =>
        handle.read(buffer, 0, buffer.length, null),
      );
      if (bytesRead === 0) break;
      hash.update(buffer.subarray(0, bytesRead));
      size += bytesRead;
    }
    return {
      sha256: hash.digest('hex'),
      mode: stats.mode & PERMISSION_BITS,
      gid: stats.gid,
      size,
      identity: { dev: stats.dev, ino: stats.ino },
      links: stats.nlink,
    };
  } finally {
    await handle.close().catch(() => undefined);
  }
}

/**
 * The sha256 and permission bits of a regular file under the root when they are `sha256`, after the file and
 * every directory up to the root were fsynced: bytes a run renamed into place and could not record (killed, or its directory
 * fsync failed) become durable before anything is recorded of them. Undefined when the file is absent or holds
 * other bytes (nothing is fsynced then); a symlink or directory there throws PathRejectedError.
 */
export async function syncRegularFileIf(
  fs: FsPort,
  rootDir: string,
  relativePath: string,
  sha256: string,
): Promise<{ mode: number } | undefined> {
  const opened = await openRegularUnderRoot(fs, rootDir, relativePath);
  if (opened === undefined) return undefined;
  const { handle, stats } = opened;
  try {
    const hash = createHash('sha256');
    const buffer = Buffer.allocUnsafe(Math.min(HASH_CHUNK_BYTES, stats.size + 1));
    for (;;) {
      const { bytesRead } = await step('read', relativePath, () =>
        handle.read(buffer, 0, buffer.length, null),
      );
      if (bytesRead === 0) break;
      hash.update(buffer.subarray(0, bytesRead));
    }
    if (hash.digest('hex') !== sha256) return undefined;
    await step('fsync', relativePath, () => handle.sync());
  } finally {
    await handle.close().catch(() => undefined);
  }
  // Up to the root: the run that renamed them in may have made their directories and died before its batch
  // fsynced those directories' parents, and a recorded file is reported without another write.
  const root = path.resolve(rootDir);
  let dir = relativePath;
  do {
    dir = relativeDir(dir);
    await fsyncDirectory(fs, path.join(root, dir), dir);
  } while (dir !== '');
  // Not on the strength of these fsyncs when a failed one of this process may have dropped an entry on the way:
  // left to a publish, which writes the file (and renews such a directory) again.
  const unsettled = unsettledEntry(fs, root, relativePath);
  if (unsettled !== undefined) throw unsettled;
  return { mode: stats.mode & PERMISSION_BITS };
}

/** mkdir of one parent (`target`, a path or a /proc/self/fd name); true when this call made it (then in `created`). */
async function makeDirectory(
  fs: FsPort,
  target: string,
  dirMode: number,
  relative: string,
  created: string[],
  root: string,
): Promise<boolean> {
  const asides = fs.directorySyncs?.asides;
  const parentKey = path.join(root, relativeDir(relative));
  const name = path.posix.basename(relative);
  // A directory recorded aside whose file system was out of sight (not mounted) may be back now: put it back first.
  const before = asides?.beforeMaking(parentKey, name);
  if (before !== undefined) await before;
  if (
    asides?.holding === true &&
    asides.holds(parentKey, name) &&
    (await asides.stillHolds(parentKey, name))
  ) {
    // The directory is at its renewal's aside name (store/directory-asides.ts): one made anew here would
    // hold this write while the old one, with every other file, stayed aside. Put back by the next renewal
    // (or, one the start could not put back, by a later start).
    throw new DiskError({
      operation: 'create directory (renamed aside, put back first)',
      path: relative,
      errno: 'EBUSY',
      renamedAside: true,
    });
  }
  try {
    await fs.mkdir(target, { mode: dirMode });
  } catch (error) {
    if (errnoCode(error) === 'EEXIST') return false;
    throw new DiskError({ operation: 'create directory', path: relative, cause: error });
  }
  created.push(relative);
  fs.directorySyncs?.changed(path.join(root, relativeDir(relative)), path.posix.basename(relative));
  return true;
}

/** Opens a parent just made or found with O_NOFOLLOW|O_DIRECTORY: a symlink or a file raced in there is refused. */
async function openDirectoryNoFollow(
  fs: FsPort,
  target: string,
  relative: string,
  relativePath: string,
): Promise<FileHandle> {
  try {
    return await fs.open(target, DIR_FLAGS | constants.O_NOFOLLOW);
  } catch (error) {
    const code = errnoCode(error);
    if (code === 'ELOOP') throw new PathRejectedError('crosses_symlink', relativePath, relative);
    if (code === 'ENOTDIR') throw new PathRejectedError('not_a_directory', relativePath, relative);
    throw new DiskError({ operation: 'open directory', path: relative, cause: error });
  }
}

/**
 * Creates the missing parents of the target one by one/**
 * Creates the missing parents of the target one by one, recording each one this call made. Each directory is
 * then opened with O_NOFOLLOW|O_DIRECTORY: a symlink that raced in is caught there, and the chmod goes through
 * the handle, so it lands on the directory just checked and not on whatever a path lookup would find later.
 */
async function createParents(
  fs: FsPort,
  root: string,
  segments: readonly string[],
  existingParents: number,
  dirMode: number,
  relativePath: string,
  created: string[],
  signal: AbortSignal | undefined,
  durable: boolean,
  verified: VerifiedDirectories,
  making: Map<string, Promise<void>> | undefined,
): Promise<void> {
  for (let index = existingParents; index < segments.length - 1; index += 1) {
    signal?.throwIfAborted();
    const relative = segments.slice(0, index + 1).join('/');
    const pending = making?.get(relative);
    if (pending !== undefined) {
      await pending;
      // Made and found stable by another publish of the batch: nobody else can have changed it since.
      if (verified.has(relative)) continue;
    }
    let finished: (() => void) | undefined;
    if (pending === undefined) making?.set(relative, new Promise<void>((resolve) => (finished = resolve)));
    try {
      await makeParent(fs, root, relative, dirMode, relativePath, created, verified);
    } finally {
      finished?.();
    }
  }
  // A new directory's own entry lives in its parent: without this fsync a power cut can lose the whole subtree.
  if (!durable) return;
  for (const relative of created) {
    const parent = relativeDir(relative);
    await fsyncDirectory(fs, path.join(root, parent), parent);
  }
}

/** One parent of createParents: made (or found), opened without following a symlink, chmod'ed if made, stat'ed. */
async function makeParent(
  fs: FsPort,
  root: string,
  relative: string,
  dirMode: number,
  relativePath: string,
  created: string[],
  verified: VerifiedDirectories,
): Promise<void> {
  const absolute = path.join(root, relative);
  const made = await makeDirectory(fs, absolute, dirMode, relative, created, root);
  const handle = await openDirectoryNoFollow(fs, absolute, relative, relativePath);
  try {
    // mkdir's mode is filtered by the umask; the operator asked for exactly dirMode.
    if (made) await step('chmod directory', relative, () => handle.chmod(dirMode));
    // Just opened without following a symlink, under a parent nobody else can change: stable when sealed.
    if (verified.has(relativeDir(relative))) {
      verified.saw(relative, await step('stat directory', relative, () => handle.stat()));
    }
  } finally {
    await handle.close().catch(() => undefined);
  }
}

/**
 * The error for a file at `relativePath` under `rootDir` whose entry, or the entry of a directory on its way up
 * to the root, a failed directory fsync of this process may have dropped, or that no good fsync covered since it
 * changed (DirectorySyncLedger): such a file is not durable, whatever a later fsync answered. Undefined when
 * none is, and always when no fsync of the process failed. `ownEntryOnly`: the file's own entry alone (a publish
 * that fsynced only its own directory; the caller fsyncs the rest of the chain and asks again).
 */
export function unsettledEntry(
  fs: FsPort,
  rootDir: string,
  relativePath: string,
  ownEntryOnly = false,
): DiskError | undefined {
  const ledger = fs.directorySyncs;
  if (ledger === undefined || !ledger.anyDropped) return undefined;
  const root = path.resolve(rootDir);
  for (let entry = relativePath; entry !== ''; entry = relativeDir(entry)) {
    const directory = relativeDir(entry);
    if (ledger.unsettled(path.join(root, directory), path.posix.basename(entry))) {
      // Why writing it again failed, when it did (renewDroppedDirectories): the reason an operator can act on.
      const cause = ledger.renewalFailure(path.join(root, directory), path.posix.basename(entry));
      return new DiskError({
        operation:
          cause === undefined
            ? 'fsync directory (an earlier fsync of it failed, so the entry is written again first)'
            : `fsync directory (an earlier fsync of it failed, and writing the entry again failed: ${renewalReason(cause)})`,
        path: entry,
        errno: 'EIO',
        ...(cause === undefined ? {} : { cause }),
      });
    }
    if (ownEntryOnly) break;
  }
  // The root's own entry: a root this process made again (remakeMissingRoot) whose parent's fsync failed and
  // that could not be removed again holds nothing durable either.
  if (!ownEntryOnly && ledger.unsettled(path.dirname(root), path.basename(root))) {
    return new DiskError({
      operation: 'fsync directory (an earlier fsync of it failed, so the entry is written again first)',
      path: root,
      errno: 'EIO',
    });
  }
  return undefined;
}

/** A renewal's failure in a message: its own (relative paths only), or its errno. */
function renewalReason(cause: unknown): string {
  if (cause instanceof DiskError) return cause.message.replace(/^disk error: /, '');
  return errnoCode(cause) ?? 'unknown error';
}

/**
 * Changes anew the entry of every directory on the way to `relativePath` that a failed fsync of its parent may
 * have dropped (DirectorySyncLedger): the directory is renamed to a temp name beside it and back (the same
 * directory, the same inode; for that moment it is not at its name). Only under a parent nobody but the agent's
 * user or root can change (`verified`): elsewhere a directory swapped in on the way could be moved instead, and
 * the file stays unsettled (unsettledEntry). The parent's fsync then covers the change: done here when
 * `syncNow`, else left to the caller through `made` (a batch fsyncs the parent of each directory in it).
 */
async function renewDroppedDirectories(
  fs: FsPort,
  root: string,
  relativePath: string,
  verified: VerifiedDirectories,
  made: Set<string> | undefined,
  syncNow: boolean,
): Promise<boolean> {
  const ledger = fs.directorySyncs;
  if (ledger === undefined || !ledger.anyDropped) return false;
  const segments = relativePath.split('/');
  for (let index = 1; index < segments.length; index += 1) {
    const relative = segments.slice(0, index).join('/');
    const parent = relativeDir(relative);
    const parentAbsolute = path.join(root, parent);
    const name = segments[index - 1]!;
    // Without a durable record of the aside name (the state directory not open), no rename: see RenewalAsides.
    const asides = ledger.asides;
    if (!ledger.dropped(parentAbsolute, name) || !verified.has(parent) || asides === undefined) continue;
    try {
      if (await renewDroppedDirectory(fs, ledger, asides, root, relative, made, syncNow)) return true;
    } catch (error) {
      // Kept for the error the files below it are held back with (unsettledEntry), and logged once.
      ledger.renewalFailed(parentAbsolute, name, error);
      throw error;
    }
  }
  return false;
}

/** renewDroppedDirectories for the one directory `relative`: true when found gone (made anew by the write). */
async function renewDroppedDirectory(
  fs: FsPort,
  ledger: DirectorySyncLedger,
  asides: RenewalAsides,
  root: string,
  relative: string,
  made: Set<string> | undefined,
  syncNow: boolean,
): Promise<boolean> {
  const parent = relativeDir(relative);
  const parentAbsolute = path.join(root, parent);
  const name = path.posix.basename(relative);
  const absolute = path.join(root, relative);
  // One a rename back that failed left aside (its entry still dropped): putting it back renews it.
  let renewal = asides.asideAt(parentAbsolute, name);
  if (renewal === undefined) {
    // Gone since (an operator's rmdir, a prune by another path, a rename): nothing to renew and no record to
    // write. The name is changed anew, unsettled until a good fsync of the parent covers it: the write's mkdir
    // makes the directory there as any new one, and its parent's fsync settles it. All below it is new too.
    if ((await lstatOrUndefined(fs, absolute, relative)) === undefined) {
      ledger.changed(parentAbsolute, name);
      return true;
    }
    const asideName = `${TEMP_PREFIX}${randomBytes(12).toString('hex')}`;
    const recorded = await step('record directory renewal', relative, () =>
      asides.record(root, parent, name, asideName),
    );
    try {
      await fs.rename(absolute, path.join(parentAbsolute, asideName));
    } catch (error) {
      recorded.state = 'unmoved';
      // Gone between the lstat and the rename: as above (the record names an aside never made, which the next
      // record drops, and a start finds nothing at and drops once the directory is made again at its name).
      if (errnoCode(error) === 'ENOENT') {
        ledger.changed(parentAbsolute, name);
        return true;
      }
      throw new DiskError({ operation: 'rename directory aside', path: relative, cause: error });
    }
    recorded.state = 'aside';
    renewal = recorded;
  }
  const aside = path.join(parentAbsolute, renewal.aside);
  await step('rename directory back', relative, () => fs.rename(aside, absolute));
  renewal.state = 'back';
  ledger.changed(parentAbsolute, name);
  if (syncNow) await fsyncDirectory(fs, parentAbsolute, parent);
  else made?.add(relative);
  return false;
}

/**
 * Puts back a directory a renewal renamed aside (`entry`, from `renewal-asides.json`) when a run died before
 * renaming it back: `restored` once renamed to its name and the parent fsynced; `gone` when nothing is at the
 * aside name (never renamed, or back already); `occupied` when something that is not an empty directory is at
 * its name now (both are left: an operator's files are never removed, never merged); `kept` when the parent
 * may be changed by someone other than the agent's user or root, or the aside is not a real directory (only
 * under a sealed parent does the agent ever rename aside, so a look-alike anywhere else is not its own).
 * No symlink is followed: the chain is lstat'ed from the root, and rename never follows its last component.
 */
export async function restoreRenewedDirectory(
  fs: FsPort,
  entry: { rootDir: string; dir: string; name: string; aside: string },
  euid: number,
): Promise<'restored' | 'gone' | 'occupied' | 'kept'> {
  const relative = entry.dir === '' ? entry.name : `${entry.dir}/${entry.name}`;
  const verified = new VerifiedDirectories(euid);
  const inspection = await inspectPath(fs, entry.rootDir, relative, verified);
  const parentAbsolute = path.join(inspection.root, entry.dir);
  const aside = path.join(parentAbsolute, entry.aside);
  const found = await lstatOrUndefined(fs, aside, relative);
  if (found === undefined) return 'gone';
  if (!verified.has(entry.dir) || !found.isDirectory()) return 'kept';
  try {
    // Onto nothing or an empty directory (one the next run made before it died too): rename replaces only that.
    await fs.rename(aside, inspection.absolute);
  } catch (error) {
    const code = errnoCode(error);
    if (code === 'ENOTEMPTY' || code === 'EEXIST' || code === 'ENOTDIR' || code === 'EISDIR')
      return 'occupied';
    throw new DiskError({ operation: 'rename directory back', path: relative, cause: error });
  }
  fs.directorySyncs?.changed(parentAbsolute, entry.name);
  await fsyncDirectory(fs, parentAbsolute, entry.dir);
  return 'restored';
}

/**
 * For a batch, before any of its writes starts (none of them is inside such a directory while it is renamed
 * aside): renews the directories on the way to `relativePath` whose entry a failed fsync may have dropped (see
 * renewDroppedDirectories), each added to `made` for the batch to fsync its parent. Never rejects: a path that
 * cannot be inspected is left to its write to meet.
 */
export async function renewDroppedOnTheWay(
  fs: FsPort,
  rootDir: string,
  relativePath: string,
  verified: VerifiedDirectories,
  made: Set<string>,
): Promise<void> {
  if (fs.directorySyncs?.anyDropped !== true) return;
  try {
    const inspection = await inspectPath(fs, rootDir, relativePath, verified);
    await renewDroppedDirectories(fs, inspection.root, relativePath, verified, made, false);
  } catch {
    // A directory that cannot be renamed (a mount point: EBUSY) stays dropped: the files below it are not
    // handed on (unsettledEntry), and the other writes of the batch go on.
  }
}

/** A path through an open descriptor: the kernel resolves it to that very directory, whatever was swapped since. */
const PROC_FD = '/proc/self/fd';

/**
 * The name `relative` under `root`: inside its pinned parent directory when there is one (the /proc link is the
 * open directory itself, never a walk of the path: unlinkat/rmdirat semantics), else by path.
 */
function entryPath(root: string, relative: string, parent: FileHandle | undefined): string {
  return parent === undefined
    ? path.join(root, relative)
    : `${PROC_FD}/${parent.fd}/${path.posix.basename(relative)}`;
}

/**
 * The target's parent, opened by a walk from the root that follows no symlink: each directory opened with
 * O_NOFOLLOW|O_DIRECTORY inside the one before it, named through /proc/self/fd (openat() without openat(), which
 * Node lacks). The temp file is created, and renamed, inside this descriptor's directory: another local user
 * who swaps a directory on the way for a symlink at any moment — between the walk, the create, the re-walk and
 * the rename — cannot take the write out of the root. Undefined when the file system port has no /proc that
 * names the descriptor (memfs in tests): the re-walk before the rename is then the only check.
 */
async function pinParent(
  fs: FsPort,
  root: string,
  segments: readonly string[],
  relativePath: string,
): Promise<FileHandle | undefined> {
  let handle = await step('open directory', '', () => fs.open(root, DIR_FLAGS));
  try {
    if (!(await namesItself(fs, handle))) {
      await handle.close().catch(() => undefined);
      return undefined;
    }
    let relative = '';
    for (const segment of segments.slice(0, -1)) {
      relative = relative === '' ? segment : `${relative}/${segment}`;
      let next: FileHandle;
      try {
        next = await fs.open(`${PROC_FD}/${handle.fd}/${segment}`, DIR_FLAGS | constants.O_NOFOLLOW);
      } catch (error) {
        const code = errnoCode(error);
        if (code === 'ELOOP') throw new PathRejectedError('crosses_symlink', relativePath, relative);
        if (code === 'ENOTDIR') throw new PathRejectedError('not_a_directory', relativePath, relative);
        throw new DiskError({ operation: 'open directory', path: relative, cause: error });
      }
      await handle.close().catch(() => undefined);
      handle = next;
    }
    return handle;
  } catch (error) {
    await handle.close().catch(() => undefined);
    throw error;
  }
}

/**
 * createParents for a chain someone else could change: each missing directory is made, opened (O_NOFOLLOW) and
 * chmod'ed inside the descriptor of the one before (`start`, the deepest existing parent, pinned), and that one
 * fsynced for its new entry; a symlink swapped in anywhere never has a directory made in its target. Returns
 * the descriptor of the target's parent. The descriptor of each directory it made one in stays open in
 * `parents` (by relative path), for a rollback to remove what it made through them (`removeCreatedDirs`); the
 * caller closes those. Every other descriptor is closed, the target's parent too when it throws.
 */
async function createParentsPinned(
  fs: FsPort,
  root: string,
  start: FileHandle,
  segments: readonly string[],
  from: number,
  dirMode: number,
  relativePath: string,
  created: string[],
  parents: Map<string, FileHandle>,
  signal: AbortSignal | undefined,
  durable: boolean,
): Promise<FileHandle> {
  let current = start;
  const release = async (handle: FileHandle) => {
    if (![...parents.values()].includes(handle)) await handle.close().catch(() => undefined);
  };
  try {
    for (let index = from; index < segments.length - 1; index += 1) {
      signal?.throwIfAborted();
      const relative = segments.slice(0, index + 1).join('/');
      const entry = `${PROC_FD}/${current.fd}/${segments[index]}`;
      const made = await makeDirectory(fs, entry, dirMode, relative, created, root);
      if (made) parents.set(relativeDir(relative), current);
      const next = await openDirectoryNoFollow(fs, entry, relative, relativePath);
      try {
        if (made) await step('chmod directory', relative, () => next.chmod(dirMode));
        // The new entry lives in its parent: without this fsync a power cut can lose the whole subtree.
        if (made && durable) {
          const parent = relativeDir(relative);
          await syncOpenDirectory(fs, current, parent, path.join(root, parent));
        }
      } catch (error) {
        await next.close().catch(() => undefined);
        throw error;
      }
      await release(current);
      current = next;
    }
    return current;
  } catch (error) {
    await release(current);
    throw error;
  }
}

/** fsyncDirectory on a directory already open; `key`: its absolute path (see DirectorySyncLedger). */
async function syncOpenDirectory(
  fs: FsPort,
  handle: FileHandle,
  relativePath: string,
  key: string,
): Promise<void> {
  const ledger = fs.directorySyncs;
  const since = ledger?.syncing() ?? 0;
  try {
    await handle.sync();
  } catch (error) {
    const code = errnoCode(error);
    if (code !== 'EINVAL' && code !== 'ENOTSUP') {
      ledger?.failed(key);
      throw new DiskError({ operation: 'fsync directory', path: relativePath, cause: error });
    }
  }
  ledger?.synced(key, since);
}

/** Whether /proc/self/fd/N names this open directory (not so on memfs, nor without /proc). */
async function namesItself(fs: FsPort, handle: FileHandle): Promise<boolean> {
  const [named, own] = await Promise.all([
    fs.stat(`${PROC_FD}/${handle.fd}`).catch(() => undefined),
    handle.stat().catch(() => undefined),
  ]);
  return named !== undefined && own !== undefined && named.dev === own.dev && named.ino === own.ino;
}

/**
 * Best-effort rollback after a failed publish: the caller never learns these dirs exist, so nobody would prune
 * them. A directory made through a pinned parent (`parents`: see createParentsPinned) is removed inside that
 * descriptor (`/proc/self/fd/<fd>/<name>`: rmdirat() without rmdirat(), the path never walked again), so a
 * symlink another local user swapped in on the way since cannot turn the rmdir onto a directory of the same
 * name in its target; the others were made under a stable chain (nobody else can change it) and go by path.
 */
async function removeCreatedDirs(
  fs: FsPort,
  root: string,
  created: readonly string[],
  parents: ReadonlyMap<string, FileHandle>,
): Promise<string[]> {
  const removed: string[] = [];
  for (const relative of [...created].reverse()) {
    const parent = parents.get(relativeDir(relative));
    try {
      await fs.rmdir(entryPath(root, relative, parent));
    } catch {
      break;
    }
    // A change of the parent's entry like any other: a failed fsync's drop of the mkdir no longer stands (there is
    // no directory to renew; the next publish makes it anew).
    fs.directorySyncs?.changed(path.join(root, relativeDir(relative)), path.posix.basename(relative));
    removed.push(relative);
  }
  return removed;
}

/**
 * Publishes `data` at `relativePath` under `rootDir` so that, whatever happens (power cut, kill -9, full disk),
 * the path holds either the complete old file or the complete new one. Identical bytes and mode → 'unchanged'
 * without writing anything. Throws PathRejectedError for hostile paths, DiskError for fs failures, and the
 * signal's reason on abort; in every failure before the rename the old file is intact and no temp file is left.
 */
export async function publishFile(fs: FsPort, request: PublishRequest): Promise<PublishResult> {
  try {
    return await publishFileOnce(fs, request);
  } catch (error) {
    const top = request.relativePath.split('/')[0]!;
    if (request.verified === undefined || top === request.relativePath || !parentRemovedMeanwhile(error))
      throw error;
    // Another publish of the batch made a directory on the way, this one went on into it, and that one's
    // rollback removed it before this one's temp file was created: once more, the chain looked up afresh, so
    // this publish makes it again (else it failed for nothing and waited for the next batch).
    request.verified.forget(top);
    return publishFileOnce(fs, request);
  }
}

/** The temp file could not be created because its directory was gone (ENOENT): see publishFile. */
function parentRemovedMeanwhile(error: unknown): boolean {
  return error instanceof DiskError && error.operation === 'create temp file' && error.errno === 'ENOENT';
}

async function publishFileOnce(fs: FsPort, request: PublishRequest): Promise<PublishResult> {
  const { rootDir, relativePath, data, mode, dirMode, gid, signal, durable = true } = request;
  // Without a batch's cache, one for this publish alone: its walk tells a parent nobody else can change (then
  // no re-walk and no pinned descriptor are needed) from one they can.
  const verified = request.verified ?? new VerifiedDirectories(process.geteuid?.() ?? -1);
  const syncDirectory = durable && (request.syncDirectory ?? true);
  const ensureDurable = durable && (request.ensureDurable ?? false);
  const madeDirectories = syncDirectory ? undefined : request.madeDirectories;
  assertMode(mode, 'PublishRequest.mode');
  if (gid !== undefined && (!Number.isInteger(gid) || gid < 0)) {
    throw new RangeError(`PublishRequest.gid must be a non-negative integer, got ${String(gid)}`);
  }
  assertMode(dirMode, 'PublishRequest.dirMode');
  signal?.throwIfAborted();
  let inspection = await inspectPath(fs, rootDir, relativePath, verified);
  assertRegularOrAbsent(inspection.final, relativePath);
  const sha256 = sha256Hex(data);
  const bytes = data.byteLength;
  // Alone (a batch renews them before any of its writes starts: renewDroppedOnTheWay). A directory that cannot be
  // renewed (a mount point: EBUSY) stays dropped, as in a batch: the file is held back by the chain's check after
  // the fsyncs (unsettledEntry: the disk's condition, retried), not failed by the rename's errno (an attempt).
  // One found gone since the walk (by other hands: nothing to renew) is made anew by this write: the path is
  // walked again, so the write knows to make it.
  if (
    syncDirectory &&
    (await renewDroppedDirectories(fs, inspection.root, relativePath, verified, undefined, true).catch(
      () => false,
    ))
  ) {
    verified.forget(inspection.segments[0]!);
    inspection = await inspectPath(fs, rootDir, relativePath, verified);
    assertRegularOrAbsent(inspection.final, relativePath);
  }

  // Compare first: rewriting identical files wears flash and makes watching apps reload for nothing. Identical
  // bytes under another mode or group get only their metadata changed, in place. Bytes whose entry a failed
  // directory fsync may have dropped are published again (a new entry, which the next fsync writes).
  const current = inspection.final;
  if (current !== undefined && current.size === bytes && !entryDropped(fs, inspection.absolute)) {
    const verdict = await settleMetadataInPlace(fs, inspection.absolute, relativePath, {
      data,
      mode,
      gid,
      ensureDurable,
      durable,
    });
    if (verdict !== undefined && verdict !== 'differs') {
      const directory = relativeDir(relativePath);
      if (ensureDurable && syncDirectory) {
        await fsyncDirectory(fs, path.dirname(inspection.absolute), directory);
        const unsettled = unsettledEntry(fs, rootDir, relativePath, true);
        if (unsettled !== undefined) throw unsettled;
      }
      return { ...verdict, sha256, bytes, createdDirs: [], directory };
    }
  }

  return writeTempAndRename(fs, inspection, {
    relativePath,
    mode,
    dirMode,
    gid,
    signal,
    durable,
    syncDirectory,
    madeDirectories,
    // Only where the batch fsyncs the new directories' parents: a waiter must not be told it is done before them.
    makingDirectories: madeDirectories === undefined ? undefined : request.makingDirectories,
    verified,
    verify: () => inspectPath(fs, rootDir, relativePath, verified),
    // Not FileHandle.writeFile: it loops over short writes, but for good on a write that takes no bytes.
    write: (handle) => writeAll(handle, data, relativePath),
    sha256: () => sha256,
    bytes: () => bytes,
  });
}

/**
 * The publish itself, once the path was inspected and the bytes in place found different: missing parents made,
 * a temp file beside the target written by `write`, its group and mode set, fsynced, renamed over the target,
 * the directory fsynced. `sha256` and `bytes` are asked once `write` is done.
 */
async function writeTempAndRename(
  fs: FsPort,
  inspection: Awaited<ReturnType<typeof inspectPath>>,
  options: {
    relativePath: string;
    mode: number;
    dirMode: number;
    gid: number | undefined;
    signal: AbortSignal | undefined;
    durable: boolean;
    syncDirectory: boolean;
    /** Where the directories made are recorded when their parents' fsyncs are the caller's (PublishRequest). */
    madeDirectories?: Set<string> | undefined;
    /** The batch's directories being made (PublishRequest.makingDirectories). */
    makingDirectories?: Map<string, Promise<void>> | undefined;
    /** What the inspection (and any earlier publish of its batch) found stable; createParents adds to it. */
    verified: VerifiedDirectories;
    /** The path checked again before the rename (see below). */
    verify: () => ReturnType<typeof inspectPath>;
    write: (file: TempFile) => Promise<unknown>;
    sha256: () => string;
    bytes: () => number;
  },
): Promise<PublishResult> {
  const { relativePath, mode, dirMode, gid, signal, durable, syncDirectory, verified } = options;
  const { root, segments, absolute } = inspection;
  const parentRelative = relativeDir(relativePath);
  const parentAbsolute = path.dirname(absolute);
  const created: string[] = [];
  const createdIn = new Map<string, FileHandle>();
  let tempPath: string | undefined;
  let handle: TempFile | undefined;
  let renamed = false;
  let pinned: FileHandle | undefined;
  try {
    signal?.throwIfAborted();
    const { existingParents } = inspection;
    // Parents to make under a directory someone else could change: made through descriptors, never by path.
    if (
      existingParents < segments.length - 1 &&
      !verified.has(segments.slice(0, existingParents).join('/'))
    ) {
      const deepest = segments.slice(0, existingParents + 1);
      const start = await pinParent(fs, root, deepest, relativePath);
      if (start !== undefined) {
        pinned = await createParentsPinned(
          fs,
          root,
          start,
          segments,
          existingParents,
          dirMode,
          relativePath,
          created,
          createdIn,
          signal,
          durable,
        );
      }
    }
    if (pinned === undefined) {
      const made = options.madeDirectories;
      const before = created.length;
      try {
        await createParents(
          fs,
          root,
          segments,
          existingParents,
          dirMode,
          relativePath,
          created,
          signal,
          durable && made === undefined,
          verified,
          options.makingDirectories,
        );
      } finally {
        // Recorded even when this publish fails: its rollback may leave a directory another publish wrote into.
        for (let index = before; index < created.length; index += 1) made?.add(created[index]!);
      }
    }
    signal?.throwIfAborted();
    const stableParent = inspection.stableParent || verified.has(parentRelative);
    // Where someone else could swap a directory on the way, the rest goes through the parent's descriptor.
    if (!stableParent && pinned === undefined) pinned = await pinParent(fs, root, segments, relativePath);
    const directory = pinned === undefined ? parentAbsolute : `${PROC_FD}/${pinned.fd}`;

    // Same directory as the target so the rename is atomic; unguessable name + O_EXCL|O_NOFOLLOW so nobody can
    // pre-plant a symlink or a file there for the agent to write through.
    const candidate = path.join(directory, `${TEMP_PREFIX}${randomBytes(12).toString('hex')}`);
    handle = await step('create temp file', relativePath, () => createTempFile(fs, candidate));
    tempPath = candidate;
    const open = handle;
    await options.write(open);
    signal?.throwIfAborted();
    // Group before mode: chown clears the set-id bits. The file is still private (0600) while it changes hands.
    if (gid !== undefined) await step('chown temp file', relativePath, () => open.chgrp(gid));
    await step('chmod temp file', relativePath, () => open.chmod(mode));
    if (durable) await step('fsync temp file', relativePath, () => open.sync());
    handle = undefined;
    await step('close temp file', relativePath, () => open.close());
    signal?.throwIfAborted();

    // Node has no openat(): re-walk the chain so a symlink swapped in since the first check is still refused
    // (where anyone but the agent's user or root could have swapped one: see VerifiedDirectories).
    if (!stableParent) {
      const recheck = await options.verify();
      assertRegularOrAbsent(recheck.final, relativePath);
    }

    const temp = candidate;
    const target = path.join(directory, path.basename(absolute));
    await step('rename', relativePath, () => fs.rename(temp, target));
    renamed = true;
    if (durable) fs.directorySyncs?.changed(parentAbsolute, path.basename(absolute));
    // The rename is the commit point: it is not undone, and an abort no longer applies. Until the directory is
    // fsynced a power cut may still bring back the old file, so a failure here is still reported.
    if (syncDirectory) {
      await fsyncDirectory(fs, directory, parentRelative, parentAbsolute);
      // A failed fsync of the directory meanwhile (another publish's) may have dropped this rename too.
      const unsettled = unsettledEntry(fs, root, relativePath, true);
      if (unsettled !== undefined) throw unsettled;
    }
  } catch (error) {
    if (handle !== undefined) await handle.close().catch(() => undefined);
    if (tempPath !== undefined && !renamed) {
      const temp = tempPath;
      await fs.unlink(temp).catch(() => undefined);
    }
    if (!renamed) {
      // Gone again: the batch's other publishes must look them up and make them anew, and their parents' fsyncs
      // are no longer owed for them (another publish that makes one again records it again).
      const removedDirs = await removeCreatedDirs(fs, root, created, createdIn);
      for (const removed of removedDirs) {
        verified.forget(removed);
        options.madeDirectories?.delete(removed);
      }
      // The mkdir was fsynced into its parent: so is its removal, else a power cut brings back an empty directory
      // nobody records nor prunes. Best effort (the write's own error is the one thrown; the ledger keeps a
      // failed fsync's drop). Below the top one, the directories went with it.
      const top = removedDirs.at(-1);
      if (durable && top !== undefined) {
        const parent = relativeDir(top);
        const handle = createdIn.get(parent);
        await (handle === undefined
          ? fsyncDirectory(fs, path.join(root, parent), parent)
          : syncOpenDirectory(fs, handle, parent, path.join(root, parent))
        ).catch(() => undefined);
      }
    }
    throw error;
  } finally {
    await pinned?.close().catch(() => undefined);
    for (const parent of createdIn.values()) await parent.close().catch(() => undefined);
  }
  return {
    outcome: 'written',
    sha256: options.sha256(),
    bytes: options.bytes(),
    createdDirs: created,
    directory: parentRelative,
  };
}

/** Bytes a text is written and compared in, at most (a larger piece goes on its own). */
const PIECE_CHUNK_BYTES = 64 * 1024;

/**
 * The UTF-8 bytes of `pieces`, joined, `PIECE_CHUNK_BYTES` at a time in one reused buffer: each chunk is valid
 * only until the next is asked for. A piece that might not fit in a chunk is yielded on its own.
 */
function* chunksOf(pieces: Iterable<string>): Generator<Buffer> {
  const buffer = Buffer.allocUnsafe(PIECE_CHUNK_BYTES);
  let used = 0;
  for (const piece of pieces) {
    // A UTF-16 code unit takes at most three bytes in UTF-8.
    if (piece.length * 3 > PIECE_CHUNK_BYTES - used) {
      if (used > 0) yield buffer.subarray(0, used);
      used = 0;
      if (piece.length * 3 > PIECE_CHUNK_BYTES) {
        yield Buffer.from(piece, 'utf8');
        continue;
      }
    }
    used += buffer.write(piece, used, 'utf8');
  }
  if (used > 0) yield buffer.subarray(0, used);
}

/**
 * Writes all of `chunk` at the handle's position (a write may be short). A write that takes no bytes (a FUSE
 * filesystem may answer 0 written) is an I/O error: retried, it looped for good and the pass never ended.
 */
async function writeAll(file: TempFile, chunk: Uint8Array, relativePath: string): Promise<void> {
  let written = 0;
  while (written < chunk.byteLength) {
    const bytesWritten = await step('write temp file', relativePath, () =>
      file.write(chunk, written, chunk.byteLength - written),
    );
    if (bytesWritten === 0) {
      const cause = Object.assign(new Error('write took no bytes'), { code: 'EIO' });
      throw new DiskError({ operation: 'write temp file', path: relativePath, cause });
    }
    written += bytesWritten;
  }
}

/**
 * Compares the file open at `handle` (read from its position) with the text of `pieces`, a chunk of each at a
 * time: when it holds exactly those bytes, their sha256 and length, else undefined.
 */
async function holdsPieces(
  handle: FileHandle,
  pieces: Iterable<string>,
  relativePath: string,
): Promise<{ sha256: string; bytes: number } | undefined> {
  const hash = createHash('sha256');
  let bytes = 0;
  for (const chunk of chunksOf(pieces)) {
    const existing = await readToCompare(handle, chunk.byteLength, relativePath);
    if (existing === undefined || !existing.equals(chunk)) return undefined;
    hash.update(chunk);
    bytes += chunk.byteLength;
  }
  if ((await readToCompare(handle, 1, relativePath))?.byteLength !== 0) return undefined;
  return { sha256: hash.digest('hex'), bytes };
}

export interface PublishTextRequest extends Omit<PublishRequest, 'data' | 'verified'> {
  /**
   * The file's text as pieces joined in order, made afresh each time it is called (it may be called twice: once
   * to compare with the file in place, once to write): the whole text is never held at once, only a chunk of
   * its bytes (64 KiB) — for the agent's own state, whose text at 10,000 managed files is ~4 MB.
   * Each piece is a whole string: one ending in half of a surrogate pair would be written as U+FFFD.
   */
  pieces: () => Iterable<string>;
  /**
   * Default true: a file in place holding exactly these bytes is not rewritten (read back and compared a chunk
   * at a time). False when the caller knows the text changed since it last wrote the file (state.json after a
   * persist of this process): the file is rewritten without being read back and serialised twice.
   */
  compare?: boolean;
}

/**
 * `publishFile` for a text given in pieces: the same protocol (temp file, fsync, rename, directory fsync), the
 * same answers, and unchanged bytes are not rewritten — compared with the file in place a chunk at a time.
 */
export async function publishText(fs: FsPort, request: PublishTextRequest): Promise<PublishResult> {
  const {
    rootDir,
    relativePath,
    pieces,
    mode,
    dirMode,
    gid,
    signal,
    durable = true,
    compare = true,
  } = request;
  const syncDirectory = durable && (request.syncDirectory ?? true);
  const ensureDurable = durable && (request.ensureDurable ?? false);
  assertMode(mode, 'PublishRequest.mode');
  if (gid !== undefined && (!Number.isInteger(gid) || gid < 0)) {
    throw new RangeError(`PublishRequest.gid must be a non-negative integer, got ${String(gid)}`);
  }
  assertMode(dirMode, 'PublishRequest.dirMode');
  signal?.throwIfAborted();
  // This publish's own cache: see publishFile.
  const verified = new VerifiedDirectories(process.geteuid?.() ?? -1);
  const inspection = await inspectPath(fs, rootDir, relativePath, verified);
  assertRegularOrAbsent(inspection.final, relativePath);
  const directory = relativeDir(relativePath);
  if (inspection.final !== undefined && compare && !entryDropped(fs, inspection.absolute)) {
    const opened = await openRegularNoFollow(fs, inspection.absolute, relativePath);
    if (opened !== undefined) {
      const { handle, stats } = opened;
      let same: ({ sha256: string; bytes: number } & MetadataVerdict) | undefined;
      try {
        const held = await holdsPieces(handle, pieces(), relativePath);
        if (held !== undefined) {
          const wanted = { mode, gid, ensureDurable, durable };
          const verdict = await settleMetadata(handle, stats, relativePath, wanted);
          if (verdict !== 'differs') same = { ...held, ...verdict };
        }
      } finally {
        await handle.close().catch(() => undefined);
      }
      if (same !== undefined) {
        if (ensureDurable && syncDirectory) {
          await fsyncDirectory(fs, path.dirname(inspection.absolute), directory);
          const unsettled = unsettledEntry(fs, rootDir, relativePath, true);
          if (unsettled !== undefined) throw unsettled;
        }
        return { ...same, createdDirs: [], directory };
      }
    }
  }
  const hash = createHash('sha256');
  let bytes = 0;
  return writeTempAndRename(fs, inspection, {
    relativePath,
    mode,
    dirMode,
    gid,
    signal,
    durable,
    syncDirectory,
    verified,
    verify: () => inspectPath(fs, rootDir, relativePath, verified),
    write: async (handle) => {
      for (const chunk of chunksOf(pieces())) {
        hash.update(chunk);
        bytes += chunk.byteLength;
        await writeAll(handle, chunk, relativePath);
      }
    },
    sha256: () => hash.digest('hex'),
    bytes: () => bytes,
  });
}

/**
 * fsyncs each distinct directory (relative to the root, '' for the root) once, up to `concurrency` at a
 * time, after publishes made with `syncDirectory: false`. Returns the DiskError of every directory that
 * could not be fsynced: the files renamed into it are in place but may not survive a power cut yet.
 */
export async function syncDirectories(
  fs: FsPort,
  rootDir: string,
  directories: Iterable<string>,
  options: {
    concurrency?: number;
    /**
     * The batch's stable directories: any other one is fsynced through a descriptor from a walk that follows
     * no symlink (pinParent), so a symlink swapped in meanwhile fails its fsync instead of taking it elsewhere.
     */
    verified?: VerifiedDirectories;
  } = {},
): Promise<Map<string, DiskError>> {
  const root = path.resolve(rootDir);
  const failures = new Map<string, DiskError>();
  const fail = (relative: string, error: unknown) => {
    failures.set(
      relative,
      error instanceof DiskError
        ? error
        : new DiskError({ operation: 'fsync directory', path: relative, cause: error }),
    );
  };
  const jobs: (() => Promise<void>)[] = [];
  /** The directories fsynced through a walk from the root that follows no symlink (pinParent's). */
  const walked = new Set<string>();
  for (const relative of new Set(directories)) {
    try {
      validateDirectory(relative);
    } catch (error) {
      fail(relative, error);
      continue;
    }
    if (options.verified === undefined || options.verified.has(relative)) {
      jobs.push(() =>
        fsyncDirectory(fs, path.join(root, relative), relative).catch((error) => fail(relative, error)),
      );
    } else walked.add(relative);
  }
  // One walk per deepest directory, fsyncing each walked one it passes: a walk per directory opened d²/2
  // directories for a new chain d levels deep (2,000 levels: over 80 s of CPU).
  const parentsOfWalked = new Set<string>();
  for (const relative of walked) if (relative !== '') parentsOfWalked.add(relativeDir(relative));
  const claimed = new Set<string>();
  for (const leaf of walked) {
    if (!parentsOfWalked.has(leaf)) jobs.push(() => syncAlongWalk(fs, root, leaf, walked, claimed, fail));
  }
  let next = 0;
  const worker = async (): Promise<void> => {
    while (next < jobs.length) await jobs[next++]!();
  };
  const workers = Math.min(jobs.length, Math.max(1, options.concurrency ?? 8));
  await Promise.all(Array.from({ length: workers }, worker));
  return failures;
}

/**
 * Walks from the root to `leaf` as pinParent does (each directory opened O_NOFOLLOW inside the one before) and
 * fsyncs, through the open descriptor, each directory of `walked` on the way that no other walk took (`claimed`).
 * A directory that cannot be opened fails every one below it still to fsync, as their own walks failed there.
 */
async function syncAlongWalk(
  fs: FsPort,
  root: string,
  leaf: string,
  walked: ReadonlySet<string>,
  claimed: Set<string>,
  fail: (relative: string, error: unknown) => void,
): Promise<void> {
  const chain =
    leaf === '' ? [''] : ['', ...leaf.split('/').map((_, i, all) => all.slice(0, i + 1).join('/'))];
  const take = (relative: string) => {
    if (!walked.has(relative) || claimed.has(relative)) return false;
    claimed.add(relative);
    return true;
  };
  let handle: FileHandle | undefined;
  let index = 0;
  try {
    handle = await step('open directory', '', () => fs.open(root, DIR_FLAGS));
    if (!(await namesItself(fs, handle))) {
      await handle.close().catch(() => undefined);
      handle = undefined;
      for (const relative of chain) {
        if (take(relative)) {
          await fsyncDirectory(fs, path.join(root, relative), relative).catch((error) =>
            fail(relative, error),
          );
        }
      }
      return;
    }
    for (; index < chain.length; index += 1) {
      const relative = chain[index]!;
      if (index > 0) {
        const segment = relative.slice(relative.lastIndexOf('/') + 1);
        let opened: FileHandle;
        try {
          opened = await fs.open(`${PROC_FD}/${handle.fd}/${segment}`, DIR_FLAGS | constants.O_NOFOLLOW);
        } catch (error) {
          const code = errnoCode(error);
          for (const below of chain.slice(index)) {
            if (!take(below)) continue;
            if (code === 'ELOOP') fail(below, new PathRejectedError('crosses_symlink', below, relative));
            else if (code === 'ENOTDIR')
              fail(below, new PathRejectedError('not_a_directory', below, relative));
            else fail(below, new DiskError({ operation: 'open directory', path: relative, cause: error }));
          }
          return;
        }
        await handle.close().catch(() => undefined);
        handle = opened;
      }
      if (take(relative)) {
        await syncOpenDirectory(fs, handle, relative, path.join(root, relative)).catch((error) =>
          fail(relative, error),
        );
      }
    }
  } catch (error) {
    for (const relative of chain.slice(index)) if (take(relative)) fail(relative, error);
  } finally {
    await handle?.close().catch(() => undefined);
  }
}

/** '' (the root) or a canonical relative path: a directory name from anywhere else is a bug, not a path. */
function validateDirectory(relative: string): void {
  if (relative !== '') validateRelativePath(relative);
}

/**
 * Removes a file the agent published. Only a regular file is ever deleted: a symlink, directory or device
 * node at the path is 'refused' and left alone. `pruneDirs` are then removed deepest-first when empty; they
 * are pruned on 'absent' too, so a crash between the unlink and the prune heals on the next pass.
 */
export async function removeManagedFile(fs: FsPort, request: RemoveRequest): Promise<RemoveOutcome> {
  const { rootDir, relativePath, pruneDirs } = request;
  for (const dir of pruneDirs) validateRelativePath(dir);
  const verified = newVerified();
  const inspection = await inspectPath(fs, rootDir, relativePath, verified);
  let outcome: RemoveOutcome = 'absent';
  if (inspection.final !== undefined) {
    const parent = await pinUnstableParent(fs, inspection, relativePath);
    if (parent !== 'absent') {
      try {
        outcome = await unlinkChecked(fs, inspection, relativePath, request.expected, parent);
      } finally {
        await parent?.close().catch(() => undefined);
      }
      if (outcome === 'refused') return outcome;
    }
  }
  // Already gone: maybe by our own unlink whose directory fsync a crash or an error cut off. It is reported
  // `removed` all the same, so the nearest directory still there is made durable first.
  if (outcome === 'absent') {
    // Gone with a directory on the way that is at a renewal's aside name: it comes back with that directory.
    const aside = await asideOnTheWay(fs, inspection.root, relativePath, verified);
    if (aside !== undefined) {
      throw new DiskError({
        operation: 'remove file (a directory on the way is renamed aside, put back first)',
        path: aside,
        errno: 'EBUSY',
        renamedAside: true,
      });
    }
    await renewDroppedRemoval(fs, inspection);
    await fsyncNearestDirectory(fs, inspection.root, relativeDir(relativePath));
    // (A directory on the way gone since holds no file to come back: nothing more to ask.)
    const unsettled = unsettledEntry(fs, inspection.root, relativePath, true);
    if (unsettled !== undefined && inspection.existingParents === inspection.segments.length - 1)
      throw unsettled;
  }
  await pruneDirectories(fs, inspection.root, pruneDirs);
  return outcome;
}

/**
 * The first directory on the way to `relativePath` the renewal record says may be at its aside name now, tried
 * once more to put back for the removal's next attempt: one the start could not put back (stillHolds), and one of
 * this run whose rename back failed (its renewal again, as a write's renewal retries it; before, only a write
 * below it did, so a directory holding only files to remove stayed aside, and its removals refused, until a start).
 */
async function asideOnTheWay(
  fs: FsPort,
  root: string,
  relativePath: string,
  verified: VerifiedDirectories,
): Promise<string | undefined> {
  const asides = fs.directorySyncs?.asides;
  if (asides?.holding !== true) return undefined;
  const segments = relativePath.split('/');
  for (let index = 1; index < segments.length; index += 1) {
    const relative = segments.slice(0, index).join('/');
    const parent = path.join(root, relativeDir(relative));
    const name = segments[index - 1]!;
    if (!asides.holds(parent, name)) continue;
    // This one found its file gone either way: the next attempt finds it back, or the directory still aside.
    if (asides.asideAt(parent, name) === undefined) await asides.stillHolds(parent, name);
    else await renewDroppedDirectories(fs, root, relativePath, verified, undefined, true).catch(() => false);
    return relative;
  }
  return undefined;
}

function newVerified(): VerifiedDirectories {
  return new VerifiedDirectories(process.geteuid?.() ?? -1);
}

/**
 * The descriptor of the path's directory when someone else could change the chain to it (pinParent), so what
 * follows acts inside that directory and never walks the path again: undefined where the chain is stable or
 * no /proc names descriptors; 'absent' when a directory on the way is gone since.
 */
async function pinUnstableParent(
  fs: FsPort,
  inspection: PathInspection,
  relativePath: string,
): Promise<FileHandle | undefined | 'absent'> {
  if (inspection.stableParent) return undefined;
  try {
    return await pinParent(fs, inspection.root, inspection.segments, relativePath);
  } catch (error) {
    if (error instanceof DiskError && (error.errno === 'ENOENT' || error.errno === 'ENOTDIR'))
      return 'absent';
    throw error;
  }
}

/**
 * Unlinks the regular file at the inspected path when it is the `expected` one, then fsyncs its directory; in
 * the pinned `parent` when given (lstat, unlink and fsync by `/proc/self/fd/<fd>/<name>`: unlinkat()), so a
 * symlink swapped in for a directory on the way cannot take the unlink to a file of that name elsewhere.
 */
async function unlinkChecked(
  fs: FsPort,
  inspection: PathInspection,
  relativePath: string,
  expected: FileIdentity | undefined,
  parent: FileHandle | undefined,
): Promise<RemoveOutcome> {
  const entry = entryPath(inspection.root, relativePath, parent);
  const current = parent === undefined ? inspection.final : await lstatOrUndefined(fs, entry, relativePath);
  if (current === undefined) return 'absent';
  if (!current.isFile()) return 'refused';
  if (expected !== undefined && (current.dev !== expected.dev || current.ino !== expected.ino))
    return 'refused';
  try {
    await fs.unlink(entry);
  } catch (error) {
    if (errnoCode(error) === 'ENOENT') return 'absent';
    throw new DiskError({ operation: 'unlink', path: relativePath, cause: error });
  }
  const directory = relativeDir(relativePath);
  const key = path.dirname(inspection.absolute);
  fs.directorySyncs?.changed(key, path.basename(inspection.absolute));
  if (parent === undefined) await fsyncDirectory(fs, key, directory);
  else await syncOpenDirectory(fs, parent, directory, key);
  return 'removed';
}

/**
 * A removal found its file gone, and a failed fsync of its directory may have dropped the unlink (this process's,
 * whose fsync failed): a power cut could bring the file back after `removed` was reported. The entry is changed
 * anew, an empty directory made at the name and removed (for that moment the name is a directory, never a file),
 * so the fsync after covers it; only under a parent nobody but the agent's user or root can change.
 */
async function renewDroppedRemoval(fs: FsPort, inspection: PathInspection): Promise<void> {
  const ledger = fs.directorySyncs;
  if (ledger === undefined || !entryDropped(fs, inspection.absolute) || !inspection.stableParent) return;
  const relative = path.relative(inspection.root, inspection.absolute);
  try {
    await fs.mkdir(inspection.absolute, { mode: 0o700 });
  } catch (error) {
    // Someone put something there since: not the agent's to remove; the removal stays unsettled, retried.
    if (errnoCode(error) === 'EEXIST') return;
    throw new DiskError({ operation: 'create directory', path: relative, cause: error });
  }
  await step('remove directory', relative, () => fs.rmdir(inspection.absolute));
  ledger.changed(path.dirname(inspection.absolute), path.basename(inspection.absolute));
}

async function fsyncNearestDirectory(fs: FsPort, root: string, relative: string): Promise<void> {
  for (let dir = relative; ; dir = relativeDir(dir)) {
    const stats = await lstatOrUndefined(fs, path.join(root, dir), dir);
    if (stats?.isDirectory()) return fsyncDirectory(fs, path.join(root, dir), dir);
    if (dir === '') return;
  }
}

function depth(relative: string): number {
  return relative.split('/').length;
}

/**
 * Removes the empty ones of `pruneDirs`, deepest first, then fsyncs the directories they were in. Under a chain
 * someone else could change, each rmdir and fsync goes through the pinned parent (see pinUnstableParent): a
 * symlink swapped in on the way cannot turn the rmdir onto an empty directory of the same name in its target.
 */
async function pruneDirectories(fs: FsPort, root: string, pruneDirs: readonly string[]): Promise<void> {
  const ordered = [...new Set(pruneDirs)].sort((a, b) => depth(b) - depth(a) || (a < b ? 1 : a > b ? -1 : 0));
  const touchedParents = new Map<string, FileHandle | undefined>();
  const removed = new Set<string>();
  try {
    for (const relative of ordered) {
      let inspection: PathInspection;
      try {
        inspection = await inspectPath(fs, root, relative, newVerified());
      } catch (error) {
        // A symlink in the way means the tree is no longer what the agent built: leave it alone.
        if (error instanceof PathRejectedError) continue;
        throw error;
      }
      if (inspection.final === undefined || !inspection.final.isDirectory()) continue;
      let parent: FileHandle | undefined | 'absent';
      try {
        parent = await pinUnstableParent(fs, inspection, relative);
      } catch (error) {
        if (error instanceof PathRejectedError) continue;
        throw error;
      }
      if (parent === 'absent') continue;
      try {
        await fs.rmdir(entryPath(root, relative, parent));
      } catch (error) {
        await parent?.close().catch(() => undefined);
        const code = errnoCode(error);
        // Not empty (someone else's files, or another instance's), a mount point, or no longer a directory
        // there (a symlink swapped in: rmdir never follows it): keeping it is correct.
        if (code === 'ENOTEMPTY' || code === 'EEXIST' || code === 'ENOENT' || code === 'EBUSY') continue;
        if (code === 'ENOTDIR') continue;
        throw new DiskError({ operation: 'remove directory', path: relative, cause: error });
      }
      removed.add(relative);
      fs.directorySyncs?.changed(path.join(root, relativeDir(relative)), path.posix.basename(relative));
      const key = relativeDir(relative);
      if (touchedParents.has(key)) await parent?.close().catch(() => undefined);
      else touchedParents.set(key, parent);
    }
    for (const [relative, handle] of touchedParents) {
      if (removed.has(relative)) continue;
      if (handle !== undefined) {
        await syncOpenDirectory(fs, handle, relative, path.join(root, relative));
        continue;
      }
      const stats = await lstatOrUndefined(fs, path.join(root, relative), relative);
      if (stats?.isDirectory()) await fsyncDirectory(fs, path.join(root, relative), relative);
    }
  } finally {
    for (const handle of touchedParents.values()) await handle?.close().catch(() => undefined);
  }
}

/**
 * Makes `rootDir` again when it is missing (its parent still there), as start-up does: mode `dirMode`, its entry
 * fsynced in its parent. A root removed under a running agent (a clean-up script) would otherwise fail every
 * write of every instance, each failure an attempt, until the service held them all `failed` for good. True
 * when it made the root; anything else (a dangling symlink, a missing parent, a failure) is left for the writes
 * to meet and name.
 */
export async function remakeMissingRoot(fs: FsPort, rootDir: string, dirMode: number): Promise<boolean> {
  assertMode(dirMode, 'dirMode');
  const root = path.resolve(rootDir);
  const parent = path.dirname(root);
  try {
    await fs.stat(root);
    // Made again by this process, its entry dropped by a failed fsync and not removed then (the rmdir failed):
    // removed now if still empty, and made anew below; holding files (not the agent's), it stays unsettled.
    if (fs.directorySyncs?.dropped(parent, path.basename(root)) !== true) return false;
    await fs.rmdir(root);
    fs.directorySyncs.changed(parent, path.basename(root));
  } catch (error) {
    if (errnoCode(error) !== 'ENOENT') return false;
  }
  try {
    await fs.mkdir(root, { mode: dirMode });
  } catch {
    return false;
  }
  fs.directorySyncs?.changed(parent, path.basename(root));
  try {
    await step('chmod directory', '', () => fs.chmod(root, dirMode));
    await fsyncDirectory(fs, parent, '');
  } catch (error) {
    // Its entry may not survive a power cut, nor anything written below it: the root just made (still empty)
    // goes again, so the writes meet a missing root (retried, never `deployed`) and the next pass makes it anew.
    await fs
      .rmdir(root)
      .then(() => fs.directorySyncs?.changed(parent, path.basename(root)))
      .catch(() => undefined);
    throw error;
  }
  return true;
}

/** A directory below the root the sweep could not read, or a temp file it could not unlink: left as it is. */
export interface SweepSkip {
  path: string;
  /** `not entered`: a mount point of a filesystem that may hang (FsPort.mountsThatMayHangBelow). */
  operation: 'read directory' | 'unlink temp file' | 'not entered';
  errno: string | undefined;
}

/**
 * Deletes temp files left by a crash (regular files whose name starts with TEMP_PREFIX) anywhere under the
 * root, never following symlinks, and returns their relative paths. Run it at start, before the first publish.
 * Below the root it is best effort: a directory it cannot read (another user's 0700 directory, one past
 * PATH_MAX, a failing one) or a temp file it cannot unlink (another user's in a sticky directory, an immutable
 * one, a read-only root) is handed to `onSkip` and left, since a leftover temp file costs only its bytes and a
 * local user's junk must never keep the agent from starting. Only the root's own listing and the agent's own
 * resource trouble (EMFILE, ENOMEM, ...) still throw.
 */
export async function sweepTempFiles(
  fs: FsPort,
  rootDir: string,
  onSkip: (skip: SweepSkip) => void = () => undefined,
): Promise<string[]> {
  let root: string;
  try {
    root = await checkRoot(fs, rootDir);
  } catch (error) {
    if (error instanceof DiskError && (error.errno === 'ENOENT' || error.errno === 'ENOTDIR')) return [];
    throw error;
  }
  // A dead NFS server's or a wedged FUSE daemon's mount below the root: its open waits in the kernel for good.
  const mayHang = fs.mountsThatMayHangBelow?.(rootDir) ?? new Set<string>();
  const enters = (child: string): boolean => {
    if (!mayHang.has(child)) return sweepsInto(child);
    onSkip({ path: child, operation: 'not entered', errno: undefined });
    return false;
  };
  const pinned = await openPinnedRoot(fs, root);
  const removed =
    pinned === undefined
      ? await sweepByPath(fs, root, onSkip, enters)
      : await sweepPinned(fs, pinned, onSkip, enters);
  return removed.sort();
}

/**
 * A directory's relative path longer than this cannot hold a temp file of the writer: its target's relative path
 * (at most MAX_PATH_BYTES) is that directory, a slash and at least one byte. Deeper junk is not walked.
 */
const MAX_SWEPT_DIRECTORY_BYTES = MAX_PATH_BYTES - 2;

function sweepsInto(relative: string): boolean {
  return Buffer.byteLength(relative, 'utf8') <= MAX_SWEPT_DIRECTORY_BYTES;
}

/** The root opened as a directory, when /proc names its descriptor (not under memfs); else undefined. */
async function openPinnedRoot(fs: FsPort, root: string): Promise<FileHandle | undefined> {
  let handle: FileHandle;
  try {
    handle = await fs.open(root, DIR_FLAGS);
  } catch {
    return undefined;
  }
  if (await namesItself(fs, handle)) return handle;
  await handle.close().catch(() => undefined);
  return undefined;
}

/** The sweep's answer to a directory it could not open or list, or a temp file it could not unlink. */
function sweepFailure(
  operation: SweepSkip['operation'],
  relative: string,
  error: unknown,
  onSkip: (skip: SweepSkip) => void,
): void {
  const failure = new DiskError({ operation, path: relative, cause: error });
  if ((operation === 'read directory' && relative === '') || failure.resource) throw failure;
  onSkip({ path: relative, operation, errno: errnoCode(error) });
}

/**
 * Levels the walk by descriptor holds before running out of descriptors is taken as the tree's depth, not the
 * agent's trouble: below that, EMFILE/ENFILE skips the directory (logged) instead of failing the start.
 */
const SWEEP_LEVELS_BEFORE_DEPTH_SKIP = 64;

/**
 * The walk by descriptor: each directory is opened (O_NOFOLLOW) inside its parent's descriptor and listed, and
 * its temp files unlinked, through /proc/self/fd, so a subdirectory a local user swaps for a symlink at any
 * moment is refused (ELOOP) or, once opened, is still the directory that was inside the root: the sweep never
 * lists or unlinks outside it. Depth-first, each level's listing read a few entries at a time (the port's
 * `opendir`), a subdirectory entered as it is met: what the walk holds is a few entries and two descriptors a
 * level, at most ~2,000 levels (sweepsInto), however many entries a directory has. A tree that deep under a low
 * RLIMIT_NOFILE (1,024) runs out of descriptors: past SWEEP_LEVELS_BEFORE_DEPTH_SKIP levels that skips the
 * directory instead of failing every start EMFILE for good.
 */
async function sweepPinned(
  fs: FsPort,
  rootHandle: FileHandle,
  onSkip: (skip: SweepSkip) => void,
  enters: (relative: string) => boolean,
): Promise<string[]> {
  const removed: string[] = [];
  const frames: Array<{ relative: string; handle: FileHandle; listing: Listing }> = [];
  const cannotRead = (relative: string, error: unknown): void => {
    const code = errnoCode(error);
    if (frames.length >= SWEEP_LEVELS_BEFORE_DEPTH_SKIP && (code === 'EMFILE' || code === 'ENFILE')) {
      onSkip({ path: relative, operation: 'read directory', errno: code });
      return;
    }
    sweepFailure('read directory', relative, error, onSkip);
  };
  const enter = async (relative: string, handle: FileHandle): Promise<void> => {
    let listing: Listing;
    try {
      listing = await openListing(fs, `${PROC_FD}/${handle.fd}`);
    } catch (error) {
      await handle.close().catch(() => undefined);
      const code = errnoCode(error);
      if (code === 'ENOENT' || code === 'ENOTDIR') return;
      cannotRead(relative, error);
      return;
    }
    frames.push({ relative, handle, listing });
  };
  try {
    await enter('', rootHandle);
    for (let top = frames.at(-1); top !== undefined; top = frames.at(-1)) {
      let entry: Dirent | null;
      try {
        entry = await top.listing.read();
      } catch (error) {
        // A directory failing part-way through its listing: what it listed so far was swept.
        entry = null;
        if (!['ENOENT', 'ENOTDIR'].includes(errnoCode(error) ?? '')) cannotRead(top.relative, error);
      }
      if (entry === null) {
        frames.pop();
        await top.listing.close().catch(() => undefined);
        await top.handle.close().catch(() => undefined);
        continue;
      }
      const name = String(entry.name);
      const child = top.relative === '' ? name : `${top.relative}/${name}`;
      if (entry.isFile() && name.startsWith(TEMP_PREFIX)) {
        try {
          await fs.unlink(`${PROC_FD}/${top.handle.fd}/${name}`);
          removed.push(child);
        } catch (error) {
          if (errnoCode(error) !== 'ENOENT') sweepFailure('unlink temp file', child, error, onSkip);
        }
        continue;
      }
      if (!entry.isDirectory() || !enters(child)) continue;
      let handle: FileHandle;
      try {
        handle = await fs.open(`${PROC_FD}/${top.handle.fd}/${name}`, DIR_FLAGS | constants.O_NOFOLLOW);
      } catch (error) {
        const code = errnoCode(error);
        // Gone, or no longer a directory: a symlink swapped in (ELOOP) is never followed.
        if (code === 'ENOENT' || code === 'ENOTDIR' || code === 'ELOOP') continue;
        cannotRead(child, error);
        continue;
      }
      await enter(child, handle);
    }
  } finally {
    for (const frame of frames) {
      await frame.listing.close().catch(() => undefined);
      await frame.handle.close().catch(() => undefined);
    }
  }
  return removed;
}

/** One directory's entries, read as they are asked for. */
interface Listing {
  read(): Promise<Dirent | null>;
  close(): Promise<void>;
}

/**
 * The entries of the directory at `absolute` (a /proc/self/fd name: the very directory that descriptor holds) a
 * few at a time through the port's `opendir`; without it (tests' ports), its whole `readdir` listing.
 */
async function openListing(fs: FsPort, absolute: string): Promise<Listing> {
  if (fs.opendir !== undefined) {
    const dir = await fs.opendir(absolute, { bufferSize: 64 });
    let closed = false;
    return {
      read: () => dir.read(),
      close: async () => {
        if (closed) return;
        closed = true;
        await dir.close();
      },
    };
  }
  const entries = (await readDirectory(fs, absolute)).reverse();
  return { read: async () => entries.pop() ?? null, close: async () => undefined };
}

/**
 * The walk by path, where /proc does not name descriptors (memfs in tests): every entry is judged by lstat
 * semantics, so a symlink already there is never followed, but one swapped in between a listing and the next
 * is (the descriptor walk above closes that).
 */
async function sweepByPath(
  fs: FsPort,
  root: string,
  onSkip: (skip: SweepSkip) => void,
  enters: (relative: string) => boolean,
): Promise<string[]> {
  const removed: string[] = [];
  // Iterative walk: a deep tree cannot overflow the stack.
  const pending: string[] = [''];
  while (pending.length > 0) {
    const relative = pending.pop()!;
    const absolute = path.join(root, relative);
    let entries: Awaited<ReturnType<typeof readDirectory>>;
    try {
      entries = await readDirectory(fs, absolute);
    } catch (error) {
      const code = errnoCode(error);
      if (code === 'ENOENT' || code === 'ENOTDIR') continue;
      sweepFailure('read directory', relative, error, onSkip);
      continue;
    }
    for (const entry of entries) {
      const name = String(entry.name);
      const child = relative === '' ? name : `${relative}/${name}`;
      // Dirent types come from the entry itself (lstat semantics): a symlink is neither isDirectory nor isFile.
      if (entry.isDirectory()) {
        if (enters(child)) pending.push(child);
      } else if (entry.isFile() && name.startsWith(TEMP_PREFIX)) {
        try {
          await fs.unlink(path.join(root, child));
          removed.push(child);
        } catch (error) {
          if (errnoCode(error) !== 'ENOENT') sweepFailure('unlink temp file', child, error, onSkip);
        }
      }
    }
  }
  return removed;
}

function readDirectory(fs: FsPort, absolute: string) {
  return fs.readdir(absolute, { withFileTypes: true });
}

/**
 * `mkdir -p dir`, each directory it makes (mode `mode`) fsynced into its parent, as start-up makes stateDir
 * (config/load.ts ensureDirectories): a state directory made again under a running agent (an operator's `rm -rf`)
 * must not be lost by a power cut with the state, journal and queued reports then written durably into it.
 * One stat when `dir` is there.
 */
export async function makeDirectoryDurably(fs: FsPort, dir: string, mode: number): Promise<void> {
  const ledger = fs.directorySyncs;
  const missing: string[] = [];
  for (let each = path.resolve(dir); ; each = path.dirname(each)) {
    try {
      await fs.stat(each);
      // Made by this process, its entry dropped by a failed fsync, and not removed then (below): removed now
      // if still empty, and made anew; a failing rmdir (EIO) fails this call too, so nothing is written below
      // that entry. One holding files (someone else's, ENOTEMPTY) stays and is written into: see
      // docs/reliability.md Known gaps.
      if (ledger?.dropped(path.dirname(each), path.basename(each)) !== true) break;
      const removed = await fs.rmdir(each).then(
        () => true,
        (error: unknown) => {
          if (errnoCode(error) === 'ENOTEMPTY' || errnoCode(error) === 'EEXIST') return false;
          throw error;
        },
      );
      if (!removed) break;
      ledger.changed(path.dirname(each), path.basename(each));
    } catch (error) {
      if (errnoCode(error) !== 'ENOENT') throw error;
    }
    missing.unshift(each);
    if (path.dirname(each) === each) break;
  }
  for (const each of missing) {
    try {
      await fs.mkdir(each, { mode });
    } catch (error) {
      // Made meanwhile by another process: its maker fsyncs its entry.
      if (errnoCode(error) === 'EEXIST') continue;
      throw error;
    }
    ledger?.changed(path.dirname(each), path.basename(each));
    try {
      await fsyncDirectory(fs, path.dirname(each), '');
    } catch (error) {
      // Its entry may not survive a power cut, nor anything written below it: the directory just made (still
      // empty) goes again, so the next write makes it anew and fsyncs it instead of writing below it.
      await fs
        .rmdir(each)
        .then(() => ledger?.changed(path.dirname(each), path.basename(each)))
        .catch(() => undefined);
      throw error;
    }
  }
}

/**
 * Durably writes `value` as pretty JSON to `<dir>/<name>` (for the agent's own state files), creating `dir`
 * with mode 0o700 if needed. Unchanged content is not rewritten.
 */
export async function writeDurableJson(
  fs: FsPort,
  dir: string,
  name: string,
  value: unknown,
  mode = 0o600,
  options: { ensureDurable?: boolean } = {},
): Promise<PublishResult> {
  const text = JSON.stringify(value, null, 2);
  if (text === undefined)
    throw new TypeError(`writeDurableJson: value for ${JSON.stringify(name)} is not JSON`);
  try {
    await makeDirectoryDurably(fs, dir, 0o700);
  } catch (error) {
    throw new DiskError({ operation: 'create state directory', path: '', cause: error });
  }
  return publishFile(fs, {
    rootDir: dir,
    relativePath: name,
    data: Buffer.from(`${text}\n`, 'utf8'),
    mode,
    dirMode: 0o700,
    ...(options.ensureDurable === undefined ? {} : { ensureDurable: options.ensureDurable }),
  });
}

/**
 * Durably writes a text given in pieces (see `PublishTextRequest.pieces`) to `<dir>/<name>`, as
 * `writeDurableJson` does: `dir` made with mode 0o700 if needed, unchanged content not rewritten.
 */
export async function writeDurableText(
  fs: FsPort,
  dir: string,
  name: string,
  pieces: () => Iterable<string>,
  mode = 0o600,
  options: { ensureDurable?: boolean; compare?: boolean } = {},
): Promise<PublishResult> {
  try {
    await makeDirectoryDurably(fs, dir, 0o700);
  } catch (error) {
    throw new DiskError({ operation: 'create state directory', path: '', cause: error });
  }
  return publishText(fs, {
    rootDir: dir,
    relativePath: name,
    pieces,
    mode,
    dirMode: 0o700,
    ...(options.ensureDurable === undefined ? {} : { ensureDurable: options.ensureDurable }),
    ...(options.compare === undefined ? {} : { compare: options.compare }),
  });
}
