// The slice of node:fs/promises the agent uses; node's and memfs's promise APIs both satisfy it.
import type { BigIntStats, Stats } from 'node:fs';
import type * as fsp from 'node:fs/promises';
import type { DirectorySyncLedger } from '../store/directory-syncs.js';
import type { LstatFieldsSync } from './lstat-fields.js';

/**
 * The promise calls' contract is theirs whatever thread answers: the production port (cli/hang-safe-fs.ts) answers
 * some of them on the calling thread, settled as promises, where the mount is local (synchronousWhereLocal).
 */
export type FsPort = Pick<
  typeof fsp,
  | 'open'
  | 'rename'
  | 'unlink'
  | 'link'
  | 'lstat'
  | 'stat'
  | 'mkdir'
  | 'readdir'
  | 'readFile'
  | 'rmdir'
  | 'chmod'
> & {
  /**
   * Optional: an lstat answered on the calling thread, for observation's one lstat per managed file each pass
   * (node:fs's lstatSync in production: one syscall instead of a thread-pool round trip), and for the path
   * checks to learn that a path is absent without an Error (store/path-guard.ts). Without it the promise
   * `lstat` is used; tests that inject faults into `lstat` leave this out.
   */
  lstatSync?: (file: string, options: { bigint: true; throwIfNoEntry: false }) => BigIntStats | undefined;
  /**
   * Optional, offered with `lstatSync` (while it is): the same lstat answering only the fields observation reads,
   * without building a Stats (lib/lstat-fields.ts); observation's lstats ahead of the pass use it.
   */
  lstatFieldsSync?: LstatFieldsSync;
  /**
   * Optional: lstat through the thread pool that answers undefined where nothing is (ENOENT) and rejects with the
   * errno error otherwise, whose Error carries no JavaScript stack (node:fs's callback lstat). The writer's path
   * checks use it in preference to `lstatSync`: while the pool creates files in a directory, a synchronous
   * lookup of a new name there waits on the kernel's directory lock on the calling thread (store/path-guard.ts).
   */
  lstatOrAbsent?: (file: string) => Promise<Stats | undefined>;
  /**
   * Optional: the size of the filesystem holding a path (node:fs/promises's statfs), to tell a write that can
   * never fit (larger than the whole filesystem) from one waiting for space (reconcile/apply.ts).
   */
  statfs?: (file: string) => Promise<{ blocks: number; bsize: number }>;
  /**
   * Optional: node:fs/promises's opendir, a directory read a few entries at a time. The start-up sweep lists
   * directories it does not own with it (store/durable-writer.ts): `readdir` holds a whole listing, ~300 bytes an
   * entry, so a directory of a million entries under rootDir took ~300 MiB at every start.
   */
  opendir?: (typeof fsp)['opendir'];
  /**
   * Optional: node:fs/promises's access, to ask whether rootDir itself refuses the agent when a subdirectory
   * did (reconcile/apply.ts). Without it such a refusal is the subdirectory's.
   */
  access?: (file: string, mode?: number) => Promise<void>;
  /**
   * Optional: node:fs/promises's realpath, to tell that rootDir resolves to another directory than it did (a
   * symlink swapped in for it or for a directory above it: store/root-mount.ts). Without it that is not told.
   */
  realpath?: (file: string) => Promise<string>;
  /**
   * Optional: for the start-up sweep of temp files under `dir` (store/durable-writer.ts sweepTempFiles), a port
   * whose `open`, `opendir`, `readdir`, `unlink`, `stat`, file handles and listings answer on the calling thread (node:fs's synchronous
   * calls, settled as promises), or undefined to sweep through the thread pool. Offered for rootDir while its
   * mounts are all local, like `lstatSync` (cli/hang-safe-fs.ts): the walk is the same, without ~3 pool round
   * trips per directory.
   */
  sweepPort?: (dir: string) => FsPort | undefined;
  /**
   * Optional: the mount points below `dir` (rootDir) of filesystems that may hang (NFS, CIFS, FUSE, ...), relative
   * to it: walks of the whole tree (the start-up sweep, the drift watcher) do not enter them, where an open or a
   * lookup of a dead server's or a wedged FUSE daemon's mount waits in the kernel for good. From the mount table
   * (cli/hang-safe-fs.ts); without it every directory is entered.
   */
  mountsThatMayHangBelow?: (dir: string) => ReadonlySet<string>;
  /**
   * Optional: every mount point strictly below `dir` (rootDir), relative to it ('/'-separated), from the mount table
   * as last read (cli/hang-safe-fs.ts: at start and reload, then at most every 10 s). store/root-mount.ts remembers
   * them, so that one gone is not written into. Without it: none known.
   */
  mountsBelow?: (dir: string) => ReadonlySet<string>;
  /**
   * Optional: whether `file` (absolute) lies on a filesystem that may hang: rootDir or stateDir on one, or a mount
   * below rootDir that may hang (cli/hang-safe-fs.ts). The drift watcher sets no `fs.watch` there (a synchronous
   * lookup that would hold the event loop) and judges those files on its poll instead. Without it: none may.
   */
  mayHangAt?: (file: string) => boolean;
  /**
   * Optional: the mount point of the filesystem holding `file` (absolute, anywhere; through the symlinks on its way,
   * read on local mounts only) when that filesystem may hang (NFS, CIFS, FUSE, ...), undefined when it is local
   * (cli/hang-safe-fs.ts). store/same-root.ts does not stat a former rootDir on such a mount that is not rootDir's
   * own: nothing bounds that call. Without it: every path is taken as local.
   */
  mountThatMayHangAt?: (file: string) => string | undefined;
  /**
   * Optional: `call` (calls on `file`, absolute, outside rootDir: a former root's) made as one call into the lane of
   * the mount that may hang holding `file` (mountThatMayHangAt), bounded as the mount gate bounds rootDir's
   * (cli/mount-gate.ts: MountNotAnswering, ETIMEDOUT, past the bound, and at once while that call has not come
   * back); made as it is where that mount is local, or `file` is rootDir, under it or above it (gated call by call).
   * Without it: made as it is.
   */
  throughMountAt?: <T>(file: string, call: () => Promise<T>) => Promise<T>;
  /**
   * Optional: whether `file` (absolute, under rootDir) lies on a filesystem whose ctime is no change time (FAT,
   * exFAT, FUSE: cli/hang-safe-fs.ts `keepsNoChangeTime`), where a file's fingerprint is not trusted and its bytes
   * are read on every pass. Without it: every filesystem keeps one.
   */
  keepsNoChangeTimeAt?: (file: string) => boolean;
  /**
   * Optional: calls on raw descriptors (node:fs's callback API in production, lib/descriptor-calls.ts), for the
   * writer's temp files and directory fsyncs: the same syscalls through the same thread pool as `open` and its
   * `FileHandle`, with less JavaScript per call. Without it (tests' ports, memfs) those go through `open`.
   */
  descriptors?: DescriptorCalls;
  /**
   * Optional: the process's record of directory entries a failed fsync may have dropped (store/directory-syncs.ts),
   * kept by the writer: such an entry is not taken as durable on a later good fsync until it was changed anew.
   * One per process (cli/hang-safe-fs.ts); without it (tests' ports) a later good fsync counts, as before.
   */
  directorySyncs?: DirectorySyncLedger;
};

/** The descriptor calls the writer makes; each rejects with node's errno error, as the promise API does. */
export interface DescriptorCalls {
  open(file: string, flags: number, mode: number): Promise<number>;
  /** Bytes written, from the descriptor's position (a write may be short). */
  write(fd: number, buffer: Uint8Array, offset: number, length: number): Promise<number>;
  fchown(fd: number, uid: number, gid: number): Promise<void>;
  fchmod(fd: number, mode: number): Promise<void>;
  fsync(fd: number): Promise<void>;
  close(fd: number): Promise<void>;
}

export type FileHandle = fsp.FileHandle;
