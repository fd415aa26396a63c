// The fs port: the synchronous lstat only while no mount at or under rootDir can hang (network, FUSE); a quiet pool lstat always.
import {
  accessSync,
  closeSync,
  constants,
  fchmod,
  fchown,
  fstatSync,
  fsync,
  lstat,
  lstatSync,
  mkdirSync,
  opendirSync,
  openSync,
  readdirSync,
  readFileSync,
  readlinkSync,
  readSync,
  realpathSync,
  type Stats,
  statSync,
  unlinkSync,
} from 'node:fs';
import * as nodeFs from 'node:fs/promises';
import path from 'node:path';
import { KERNEL_FILESYSTEMS, type OwnPathsPort } from '../config/own-paths.js';
import type { Clock } from '../lib/clock.js';
import { nodeDescriptorCalls } from '../lib/descriptor-calls.js';
import type { FsPort } from '../lib/fs-port.js';
import { lstatFieldsSync } from '../lib/lstat-fields.js';
import { ownMountPoints } from '../lib/own-mounts.js';
import { DirectorySyncLedger } from '../store/directory-syncs.js';
import { gateMountsThatMayHang, type HeldPlace, MountLanes } from './mount-gate.js';

/**
 * Filesystems whose lstat is answered by the kernel from memory or a local disk. Anything else — nfs, cifs,
 * 9p, ceph, fuse.* (sshfs, a wedged FUSE daemon) — may wait for a server or a process that never answers.
 */
const LOCAL_FILESYSTEMS = new Set([
  'ext2',
  'ext3',
  'ext4',
  'xfs',
  'btrfs',
  'f2fs',
  'tmpfs',
  'ramfs',
  'overlay',
  'vfat',
  'msdos',
  'exfat',
  'ntfs3',
  'jfs',
  'reiserfs',
  'nilfs2',
  'ubifs',
  'jffs2',
  'squashfs',
  'erofs',
  'iso9660',
  'udf',
  'zfs',
  'bcachefs',
  'hfsplus',
]);

/** One mount of /proc/self/mountinfo: its mount point (escapes undone) and its filesystem type. */
interface MountEntry {
  mountPoint: string;
  type: string;
}

/** /proc/self/mountinfo's text as its mounts, in the table's order; lines without a mount point or a type are skipped. */
function parseMountTable(mountinfo: string): MountEntry[] {
  const mounts: MountEntry[] = [];
  for (const line of mountinfo.split('\n')) {
    const fields = line.split(' ');
    const dash = fields.indexOf('-', 6);
    const mountPoint = fields[4];
    const type = dash === -1 ? undefined : fields[dash + 1];
    if (mountPoint === undefined || type === undefined) continue;
    mounts.push({ mountPoint: unescapeMountPath(mountPoint), type });
  }
  return mounts;
}

/** The mount holding `realDir`: the longest mount point at or above it; of equal ones the last, which hides the others. */
function mountHolding(mounts: readonly MountEntry[], realDir: string): MountEntry | undefined {
  let holding: MountEntry | undefined;
  for (const mount of mounts) {
    if (
      isSameOrInside(realDir, mount.mountPoint) &&
      mount.mountPoint.length >= (holding?.mountPoint.length ?? 0)
    ) {
      holding = mount;
    }
  }
  return holding;
}

/**
 * Filesystems whose ctime is no change time: FAT keeps none (the kernel gives the modification or creation time
 * read back from disk), nor do exFAT and FUSE filesystems in general (exfat-fuse, ntfs-3g as `fuseblk`, sshfs's
 * server times). A rewrite there that puts the mtime back (`cp -p`, `rsync -t --inplace`) keeps every field of a
 * file's identity once the inode was evicted, so a fingerprint (store/fingerprints.ts) proves nothing.
 */
export function keepsNoChangeTime(type: string): boolean {
  return (
    type === 'vfat' ||
    type === 'msdos' ||
    type === 'exfat' ||
    type === 'fuse' ||
    type.startsWith('fuse.') ||
    type === 'fuseblk'
  );
}

/**
 * The mount points at or below `realRootDir` of filesystems that keep no change time (keepsNoChangeTime): the one
 * holding it (as '') and those strictly below it, relative to it ('/'-separated), from /proc/self/mountinfo's text.
 */
export function mountsKeepingNoChangeTime(mountinfo: string, realRootDir: string): Set<string> {
  const found = new Set<string>();
  const mounts = parseMountTable(mountinfo);
  for (const { mountPoint, type } of mounts) {
    if (keepsNoChangeTime(type) && mountPoint !== realRootDir && isSameOrInside(mountPoint, realRootDir)) {
      found.add(realRootDir === '/' ? mountPoint.slice(1) : mountPoint.slice(realRootDir.length + 1));
    }
  }
  const holding = mountHolding(mounts, realRootDir);
  if (holding !== undefined && keepsNoChangeTime(holding.type)) found.add('');
  return found;
}

/** How old the mount table may get before the next lstat asks for it again (a mount made under rootDir). */
const RECHECK_MS = 10_000;

/**
 * True when the mount holding `realRootDir` and every mount below it are local filesystems (LOCAL_FILESYSTEMS),
 * judged from /proc/self/mountinfo's text; false when any may hang, or when the table says nothing.
 */
export function mountsUnderRootAreLocal(mountinfo: string, realRootDir: string): boolean {
  const mounts = parseMountTable(mountinfo);
  let holding = '';
  for (const { mountPoint } of mounts) {
    if (isSameOrInside(realRootDir, mountPoint) && mountPoint.length > holding.length) holding = mountPoint;
  }
  if (holding === '') return false;
  return mounts.every(
    ({ mountPoint, type }) =>
      LOCAL_FILESYSTEMS.has(type) || (mountPoint !== holding && !isSameOrInside(mountPoint, realRootDir)),
  );
}

/**
 * Every mount point of its own (`ownMountPoints`) strictly below `realRootDir`, as paths relative to it
 * ('/'-separated), from /proc/self/mountinfo's text (store/root-mount.ts watches them: one gone leaves a bare directory).
 */
export function mountPointsBelow(mountinfo: string, realRootDir: string): Set<string> {
  const below = new Set<string>();
  // Not a directory bound onto itself (a unit's ReadWritePaths=): gone, it leaves the same directory.
  for (const mountPoint of ownMountPoints(mountinfo)) {
    if (mountPoint !== realRootDir && isSameOrInside(mountPoint, realRootDir)) {
      below.add(realRootDir === '/' ? mountPoint.slice(1) : mountPoint.slice(realRootDir.length + 1));
    }
  }
  return below;
}

/**
 * The mount points strictly below `realRootDir` whose filesystem may hang (not in LOCAL_FILESYSTEMS), as paths
 * relative to it ('/'-separated), from /proc/self/mountinfo's text.
 */
export function mountsThatMayHangBelow(mountinfo: string, realRootDir: string): Set<string> {
  const below = new Set<string>();
  for (const { mountPoint, type } of parseMountTable(mountinfo)) {
    if (LOCAL_FILESYSTEMS.has(type)) continue;
    if (mountPoint !== realRootDir && isSameOrInside(mountPoint, realRootDir)) {
      below.add(realRootDir === '/' ? mountPoint.slice(1) : mountPoint.slice(realRootDir.length + 1));
    }
  }
  return below;
}

/**
 * The mount point holding `realDir` when its filesystem may hang (neither in LOCAL_FILESYSTEMS nor a kernel
 * filesystem, which answers from memory: config/own-paths.ts), from /proc/self/mountinfo's text; undefined when it is
 * local or the table does not say. Kernel ones were taken to hang (syncfs28): /dev (devtmpfs) on the way to a root
 * under /dev/shm made a former root there "on a mount that may hang", compared as a string only (store/same-root.ts).
 */
export function mountHoldingThatMayHang(mountinfo: string, realDir: string): string | undefined {
  const holding = mountHolding(parseMountTable(mountinfo), realDir);
  return holding === undefined || LOCAL_FILESYSTEMS.has(holding.type) || KERNEL_FILESYSTEMS.has(holding.type)
    ? undefined
    : holding.mountPoint;
}

/** Symlinks followed at most on one path's way (the kernel's MAXSYMLINKS). */
const MAX_SYMLINK_HOPS = 40;

/**
 * The mount that may hang which a lookup of `absolute` goes into: the one holding it as written, or one that a
 * symlink on its way leads into (a rootDir recorded as `/srv/config`, a symlink to `/mnt/nfs/config`). Symlinks are
 * read with lstat and readlink on local mounts only, each component judged before it is looked up: never a call
 * into a mount that may hang. A component that cannot be read (gone) ends the walk: the rest is judged as written.
 */
export function mountOnTheWay(mountinfo: string, absolute: string): string | undefined {
  let at = '/';
  let rest = absolute.split('/');
  let hops = 0;
  for (;;) {
    if (at === '/') {
      const holding = mountHoldingThatMayHang(mountinfo, at);
      if (holding !== undefined) return holding;
    }
    const name = rest.shift();
    if (name === undefined) return undefined;
    if (name === '' || name === '.') continue;
    if (name === '..') {
      at = path.dirname(at);
      continue;
    }
    const next = path.join(at, name);
    // A mount point's own lstat is answered by the filesystem mounted there.
    const mounted = mountHoldingThatMayHang(mountinfo, next);
    if (mounted !== undefined) return mounted;
    let target: string | undefined;
    try {
      target = lstatSync(next).isSymbolicLink() ? readlinkSync(next) : undefined;
    } catch {
      return mountHoldingThatMayHang(mountinfo, path.join(next, ...rest));
    }
    if (target === undefined) {
      at = next;
      continue;
    }
    hops += 1;
    if (hops > MAX_SYMLINK_HOPS) return undefined;
    rest = [...target.split('/'), ...rest];
    if (target.startsWith('/')) at = '/';
  }
}

/** What the port reads: rootDir's real path and the mount table (undefined where there is none). */
export interface MountTablePort {
  realpath(file: string): Promise<string>;
  mountinfo(): Promise<string | undefined>;
}

const nodeMountTablePort: MountTablePort = {
  realpath: (file) => nodeFs.realpath(file),
  // procfs answers from the kernel's memory: read on the calling thread (~5 pool round trips fewer per read).
  mountinfo: () => settled(() => readFileSync('/proc/self/mountinfo', 'utf8')).catch(() => undefined),
};

/**
 * node:fs/promises as the agent's FsPort, with `lstatSync` only while rootDir's mounts are all local: a
 * synchronous lstat on a hung NFS or FUSE mount blocks the event loop, and with it the local API, the stop
 * on SIGTERM and its deadline; through the thread pool it blocks one pool thread and the agent still answers
 * and exits. Decided before it returns, then again in the background once RECHECK_MS have passed.
 */
export async function hangSafeFs(
  rootDir: string,
  clock: Pick<Clock, 'monotonic'> & Partial<Pick<Clock, 'sleep'>>,
  port: MountTablePort = nodeMountTablePort,
  directorySyncs: DirectorySyncLedger = new DirectorySyncLedger(),
  places: { stateDir?: string; lanes?: MountLanes } = {},
): Promise<FsPort> {
  const { stateDir } = places;
  const sleep = clock.sleep;
  const lanes = places.lanes ?? (sleep === undefined ? undefined : new MountLanes({ sleep }));
  let local = false;
  /** Whether the mount holding stateDir's real path and every mount below it are local (synchronousWhereLocal). */
  let stateLocal = false;
  let mayHang: ReadonlySet<string> = new Set();
  let mountPoints: ReadonlySet<string> = new Set();
  let noChangeTime: ReadonlySet<string> = new Set();
  let held: readonly HeldPlace[] = [];
  /** The mount table as last read, and the mount holding rootDir's real path if it may hang (mountThatMayHangAt). */
  let mountTable = '';
  let rootMount: string | undefined;
  let checkedAt = Number.NEGATIVE_INFINITY;
  let checking: Promise<void> | undefined;
  const check = (): Promise<void> => {
    checking ??= (async () => {
      try {
        const mountinfo = (await port.mountinfo()) ?? '';
        mountTable = mountinfo;
        const realpathOf = (dir: string) => boundedRealpath(port, lanes, mountinfo, dir);
        const real = await realpathOf(rootDir);
        local = mountsUnderRootAreLocal(mountinfo, real);
        rootMount = mountHoldingThatMayHang(mountinfo, real);
        mayHang = mountsThatMayHangBelow(mountinfo, real);
        mountPoints = mountPointsBelow(mountinfo, real);
        noChangeTime = mountsKeepingNoChangeTime(mountinfo, real);
        const places: HeldPlace[] = [];
        const realState = stateDir === undefined ? undefined : await realpathOf(stateDir);
        stateLocal = realState !== undefined && mountsUnderRootAreLocal(mountinfo, realState);
        for (const [dir, realDir] of [
          [rootDir, real],
          ...(stateDir === undefined || realState === undefined ? [] : [[stateDir, realState] as const]),
        ] as const) {
          const mountPoint = mountHoldingThatMayHang(mountinfo, realDir);
          if (mountPoint !== undefined) places.push({ dir: path.resolve(dir), mountPoint });
        }
        held = places;
      } catch {
        local = false;
        stateLocal = false;
      } finally {
        checkedAt = clock.monotonic();
        checking = undefined;
      }
    })();
    return checking;
  };
  await check();
  const root = path.resolve(rootDir);
  const stateRoot = stateDir === undefined ? undefined : path.resolve(stateDir);
  /** Asks the mount table again once RECHECK_MS have passed (in the background), as `lstatSync` does. */
  const fresh = () => {
    if (checking === undefined && clock.monotonic() - checkedAt > RECHECK_MS) void check();
  };
  const answeredHere: SynchronousPlaces = (absolute) => {
    fresh();
    if (absolute === root) return local;
    if (!stateLocal || stateRoot === undefined || !isSameOrInside(absolute, stateRoot)) return false;
    return absolute === stateRoot || plainWayInside(stateRoot, absolute);
  };
  const base: FsPort = {
    ...nodeFs,
    ...synchronousWhereLocal(answeredHere),
    lstatOrAbsent,
    descriptors: nodeDescriptorCalls,
    directorySyncs,
  };
  // A managed file in a mount below rootDir that stops answering fails alone, bounded, and so does every call into
  // rootDir or stateDir on a mount that may hang (cli/mount-gate.ts).
  const fs =
    lanes === undefined
      ? base
      : gateMountsThatMayHang(base, rootDir, () => mayHang, lanes.clock, lanes.ms, {
          held: () => held,
          lanes,
        });
  Object.defineProperty(fs, 'lstatSync', {
    enumerable: true,
    get() {
      fresh();
      return local ? lstatSync : undefined;
    },
  });
  const fieldsSync = lstatFieldsSync('/');
  Object.defineProperty(fs, 'lstatFieldsSync', {
    enumerable: true,
    get: () => (fs.lstatSync === undefined ? undefined : fieldsSync),
  });
  fs.mountsThatMayHangBelow = (dir) => (dir === rootDir ? mayHang : new Set());
  fs.mountsBelow = (dir) => (dir === rootDir ? mountPoints : new Set());
  // rootDir as configured by its real path (a symlink to a mount that may hang is on that mount); the rest through
  // the symlinks on their way too (review33: a former root spelled through one into a dead NFS mount was local).
  fs.mountThatMayHangAt = (file) => {
    const absolute = path.resolve(file);
    return absolute === root ? rootMount : mountOnTheWay(mountTable, absolute);
  };
  fs.throughMountAt = (file, call) => {
    const absolute = path.resolve(file);
    const mount = fs.mountThatMayHangAt?.(absolute);
    // At, under or above rootDir (holding it), some of its calls are gated one by one already: one lane call around
    // them would wait on its own lane until the bound.
    if (mount === undefined || lanes === undefined) return call();
    if (isSameOrInside(absolute, root) || isSameOrInside(root, absolute)) return call();
    return lanes.through(mount, call);
  };
  fs.mayHangAt = (file) => {
    const absolute = path.resolve(file);
    if (held.some((place) => isSameOrInside(absolute, place.dir))) return true;
    if (mayHang.size === 0 || !absolute.startsWith(`${root}/`)) return false;
    const relative = absolute.slice(root.length + 1);
    for (const mount of mayHang) if (relative === mount || relative.startsWith(`${mount}/`)) return true;
    return false;
  };
  fs.keepsNoChangeTimeAt = (file) => {
    if (noChangeTime.size === 0) return false;
    if (noChangeTime.has('')) return true;
    const absolute = path.resolve(file);
    if (!absolute.startsWith(`${root}/`)) return false;
    const relative = absolute.slice(root.length + 1);
    for (const mount of noChangeTime) if (relative === mount || relative.startsWith(`${mount}/`)) return true;
    return false;
  };
  // Only for rootDir as configured, whose mounts the check judged: the state directory may be elsewhere.
  const sweepPort = synchronousSweepPort(fs);
  fs.sweepPort = (dir) => (dir === rootDir && fs.lstatSync !== undefined ? sweepPort : undefined);
  return fs;
}

/**
 * `dir`'s real path, asked through its mount's lane when the mount holding it as written may hang: one that does not
 * answer (a dead NFS server) gives the path as written, and while it has not come back none is asked again.
 */
async function boundedRealpath(
  port: MountTablePort,
  lanes: MountLanes | undefined,
  mountinfo: string,
  dir: string,
): Promise<string> {
  const asWritten = path.resolve(dir);
  const mount = lanes === undefined ? undefined : mountHoldingThatMayHang(mountinfo, asWritten);
  const asking = () => port.realpath(dir);
  try {
    return await (mount === undefined || lanes === undefined ? asking() : lanes.through(mount, asking));
  } catch {
    return asWritten;
  }
}

/**
 * The checks of start-up (config/load.ts: the configuration's places, rootDir's and stateDir's owners, their
 * creation) on `fs` and own-paths' port, with every call on a path inside a mount that may hang (a network or FUSE
 * filesystem, per /proc/self/mountinfo now) through that mount's lane in `lanes`: rootDir on a dead NFS server
 * fails its check (ETIMEDOUT, MountNotAnswering) after the bound instead of holding start-up for good, and a start
 * tried again meanwhile sends nothing more into it. Where no mount at all may hang and `fs` and the table are node's,
 * the metadata calls and reads are answered on the calling thread instead (~70 pool round trips of a start).
 */
export async function hangSafeConfigCalls(
  lanes: MountLanes,
  fs: FsPort = nodeFs as unknown as FsPort,
  port: Pick<MountTablePort, 'mountinfo'> = nodeMountTablePort,
): Promise<{ fs: FsPort; ownPathsPort: OwnPathsPort }> {
  const mountinfo = (await port.mountinfo()) ?? '';
  const held: HeldPlace[] = [];
  for (const { mountPoint, type } of parseMountTable(mountinfo)) {
    // Kernel filesystems (config/own-paths.ts) are no files' home and answer from memory: never a mount that may hang.
    if (LOCAL_FILESYSTEMS.has(type) || KERNEL_FILESYSTEMS.has(type)) continue;
    held.push({ dir: mountPoint, mountPoint });
  }
  // No mount in the whole table may hang: no path, through whatever symlinks, leads into one, and node's own calls
  // (not a port a caller gave) are answered on the calling thread (synchronousWhereLocal, everywhere).
  const nowhereHangs = held.length === 0 && fs === (nodeFs as unknown) && port === nodeMountTablePort;
  const gated = nowhereHangs
    ? ({
        ...fs,
        ...synchronousWhereLocal(() => true),
        readlink: (file: string) => settled(() => readlinkSync(file)),
      } as FsPort)
    : held.length === 0
      ? fs
      : gateMountsThatMayHang(fs, '/', () => new Set(), lanes.clock, lanes.ms, { held: () => held, lanes });
  const readlink = (gated as unknown as { readlink: OwnPathsPort['readlink'] }).readlink;
  return {
    fs: gated,
    ownPathsPort: {
      realpath: (file) => gated.realpath?.(file) ?? nodeFs.realpath(file),
      readlink: (file) => readlink(file),
      stat: (file) => gated.stat(file),
      mountinfo: () => Promise.resolve(mountinfo),
    },
  };
}

/** The call's result as a settled promise: a synchronous error becomes a rejection, as the promise API gives it. */
function settled<T>(call: () => T): Promise<T> {
  try {
    return Promise.resolve(call());
  } catch (error) {
    return Promise.reject(error);
  }
}

/** Whether a call on `absolute` (resolved) may be answered on the calling thread: its mount is judged local. */
type SynchronousPlaces = (absolute: string) => boolean;

/**
 * Whether every entry on the way from `dir` (judged local) down to `absolute` inside it is a directory or, the last,
 * a regular file, by lstat on the calling thread (each is in a local directory: never waits). A symlink may lead onto
 * any mount (a cache directory moved onto NFS) and a FIFO's open or read waits for a writer: on the calling thread
 * either held the whole event loop for good (review38), so such a call goes through the pool. An entry that is not
 * there (ENOENT, ENOTDIR) is answered here: the call fails or creates at once. A symlink put in the way after this
 * lstat and before the call (root's hand, in a 0700 stateDir) is not seen.
 */
function plainWayInside(dir: string, absolute: string): boolean {
  let at = dir === '/' ? '' : dir;
  for (const name of absolute.slice(at.length + 1).split('/')) {
    at = `${at}/${name}`;
    let stats: Stats;
    try {
      stats = lstatSync(at);
    } catch {
      return true;
    }
    if (stats.isDirectory()) continue;
    return stats.isFile() && at === absolute;
  }
  return true;
}

/**
 * The files of /proc the agent reads whole: the kernel's own memory, never a mount that may hang. Not /proc/<pid>/fd,
 * cwd or root, whose names lead into any filesystem.
 */
const PROC_TEXT =
  /^\/proc\/(?:self|thread-self|\d+)\/(?:mountinfo|stat|status)$|^\/proc\/sys\/kernel\/random\/boot_id$/;

/** Whether `flags` open a file for reading only, creating and truncating nothing. */
function readsOnly(flags: unknown): boolean {
  if (flags === undefined || flags === 'r') return true;
  if (typeof flags !== 'number') return false;
  return (
    (flags & (constants.O_WRONLY | constants.O_RDWR)) === 0 &&
    (flags & (constants.O_CREAT | constants.O_TRUNC)) === 0
  );
}

/**
 * A descriptor opened for reading as the FileHandle the agent's readers use: `fd`, `stat`, `read` (positional),
 * `readFile` and `close` on the calling thread; what changes the file or makes it durable (`sync`, `chown`, `chmod`
 * on a directory: the writer's and init's) through the thread pool, as every fsync and every write.
 */
function readHandle(fd: number): nodeFs.FileHandle {
  let closed = false;
  return {
    fd,
    stat: (options?: { bigint?: boolean }) => settled(() => fstatSync(fd, options)),
    read: (buffer: NodeJS.ArrayBufferView, offset: number, length: number, position: number | null) =>
      settled(() => ({ bytesRead: readSync(fd, buffer, offset, length, position), buffer })),
    readFile: (options?: { encoding?: BufferEncoding | null }) => settled(() => readFileSync(fd, options)),
    sync: () => pooled((done) => fsync(fd, done)),
    chown: (uid: number, gid: number) => pooled((done) => fchown(fd, uid, gid, done)),
    chmod: (mode: number) => pooled((done) => fchmod(fd, mode, done)),
    close: () =>
      settled(() => {
        if (closed) return;
        closed = true;
        closeSync(fd);
      }),
  } as unknown as nodeFs.FileHandle;
}

/** A callback call of node:fs (through the thread pool) as a promise. */
function pooled(call: (done: (error: NodeJS.ErrnoException | null) => void) => void): Promise<void> {
  return new Promise((resolve, reject) => {
    call((error) => (error === null ? resolve() : reject(error)));
  });
}

/**
 * node:fs/promises's metadata calls and small reads answered on the calling thread where `here` says the path's mount
 * is local (rootDir itself, stateDir and what is in it through directories only, to a directory or regular file: hangSafeFs, plainWayInside), through the thread pool everywhere else: `stat`,
 * `lstat`, `realpath`, `access`, `readdir`, `mkdir`, `unlink`, `readFile` (also of PROC_TEXT, anywhere) and `open` for
 * reading. On this VM a pool round trip costs ~20 µs of CPU (futex wake-ups) against ~2 µs for the synchronous call,
 * and an idle `--once` made ~100 of them on these places. Writes of content, renames and fsyncs stay on the pool.
 */
function synchronousWhereLocal(
  here: SynchronousPlaces,
): Pick<
  Required<FsPort>,
  'stat' | 'lstat' | 'realpath' | 'access' | 'readdir' | 'mkdir' | 'unlink' | 'readFile' | 'open'
> {
  const at = (file: unknown): file is string => typeof file === 'string' && here(path.resolve(file));
  const noSignal = (options: unknown) =>
    typeof options !== 'object' || options === null || !('signal' in options);
  return {
    stat: ((file: string, options?: { bigint?: boolean }) =>
      at(file) ? settled(() => statSync(file, options)) : nodeFs.stat(file, options)) as FsPort['stat'],
    lstat: ((file: string, options?: { bigint?: boolean }) =>
      at(file) ? settled(() => lstatSync(file, options)) : nodeFs.lstat(file, options)) as FsPort['lstat'],
    realpath: (file) => (at(file) ? settled(() => realpathSync.native(file)) : nodeFs.realpath(file)),
    access: (file, mode) => (at(file) ? settled(() => accessSync(file, mode)) : nodeFs.access(file, mode)),
    readdir: ((file: string, options?: { withFileTypes?: boolean }) =>
      at(file)
        ? settled(() => readdirSync(file, options as { withFileTypes: true }))
        : nodeFs.readdir(file, options as { withFileTypes: true })) as FsPort['readdir'],
    mkdir: ((file: string, options?: { mode?: number; recursive?: boolean }) =>
      at(file) ? settled(() => mkdirSync(file, options)) : nodeFs.mkdir(file, options)) as FsPort['mkdir'],
    unlink: (file) => (at(file) ? settled(() => unlinkSync(file)) : nodeFs.unlink(file)),
    readFile: ((file: unknown, options?: unknown) =>
      typeof file === 'string' && noSignal(options) && (PROC_TEXT.test(file) || at(file))
        ? settled(() => readFileSync(file, options as BufferEncoding))
        : nodeFs.readFile(file as string, options as BufferEncoding)) as FsPort['readFile'],
    open: ((file: string, flags?: number | string, mode?: number) =>
      at(file) && readsOnly(flags)
        ? settled(() => readHandle(openSync(file, flags ?? 'r', mode)))
        : nodeFs.open(file, flags, mode)) as FsPort['open'],
  };
}

/**
 * `fs` with the calls of the start-up sweep answered on the calling thread: `open` gives a handle and `opendir` a
 * listing with only what the sweep uses (`fd`, `stat`, `close`; `read`, `close`). For local mounts only (hangSafeFs).
 */
function synchronousSweepPort(fs: FsPort): FsPort {
  const handleOf = (fd: number) =>
    ({
      fd,
      stat: () => settled(() => fstatSync(fd)),
      close: () => settled(() => closeSync(fd)),
    }) as unknown as nodeFs.FileHandle;
  return {
    ...fs,
    open: ((file: string, flags?: number) =>
      settled(() => handleOf(openSync(file, flags ?? 'r')))) as FsPort['open'],
    // A directory read 64 entries at a time, as the pool's opendir reads it: a huge directory is never held whole.
    opendir: ((dir: string, options?: { bufferSize?: number }) =>
      settled(() => {
        const listing = opendirSync(dir, options);
        return {
          read: () => settled(() => listing.readSync()),
          close: () => settled(() => listing.closeSync()),
        };
      })) as unknown as NonNullable<FsPort['opendir']>,
    readdir: ((dir: string, options: { withFileTypes: true }) =>
      settled(() => readdirSync(dir, options))) as FsPort['readdir'],
    unlink: (file) => settled(() => unlinkSync(file)),
    stat: ((file: string, options?: { bigint?: boolean }) =>
      settled(() => statSync(file, options))) as FsPort['stat'],
  };
}

function isSameOrInside(file: string, dir: string): boolean {
  return file === dir || dir === '/' || file.startsWith(`${dir}/`);
}

function unescapeMountPath(value: string): string {
  return value.replace(/\\([0-7]{3})/g, (_all, octal: string) =>
    String.fromCharCode(Number.parseInt(octal, 8)),
  );
}

/**
 * lstat through the thread pool (hang-safe whatever the mount), undefined for ENOENT. node:fs's callback API
 * builds its errno error from the pool's completion, with no JavaScript frames to capture: a first sync's
 * absent paths cost no captured stack each, unlike the promise API's rejections.
 */
function lstatOrAbsent(file: string): Promise<Stats | undefined> {
  return new Promise((resolve, reject) => {
    lstat(file, (error, stats) => {
      if (error === null) resolve(stats);
      else if (error.code === 'ENOENT') resolve(undefined);
      else reject(error);
    });
  });
}
