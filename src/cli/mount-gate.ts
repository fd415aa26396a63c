// Calls into a mount below rootDir that may hang (NFS, FUSE) one at a time and bounded: one that does not answer fails its file, not the pass.
import type { FileHandle } from 'node:fs/promises';
import path from 'node:path';
import type { Clock } from '../lib/clock.js';
import type { DescriptorCalls, FsPort } from '../lib/fs-port.js';

/** How long one call into such a mount may take before the mount counts as not answering. */
export const MOUNT_ANSWER_MS = 15_000;

/** The port's calls that name a path as their first argument (`rename` and `link` name two). */
const PATH_CALLS = [
  'open',
  'rename',
  'unlink',
  'link',
  'lstat',
  'stat',
  'mkdir',
  'readdir',
  'readFile',
  'rmdir',
  'chmod',
  'lstatOrAbsent',
  'statfs',
  'opendir',
  'access',
  'realpath',
] as const;

/** FileHandle methods that reach the file system (`fd` and the rest are left as they are). */
const HANDLE_CALLS = [
  'read',
  'readFile',
  'stat',
  'close',
  'sync',
  'datasync',
  'chmod',
  'chown',
  'write',
  'truncate',
];

/** A mount that did not answer in time: the file's operation fails as a failing disk does (retried, no attempt). */
export class MountNotAnswering extends Error {
  readonly code = 'ETIMEDOUT';
  readonly mountPoint: string;

  constructor(mountPoint: string, ms: number) {
    super(
      `ETIMEDOUT: the mount at ${mountPoint} did not answer within ${ms / 1000} s (a dead NFS server, a wedged FUSE daemon?): its files wait until it answers`,
    );
    this.name = 'MountNotAnswering';
    this.mountPoint = mountPoint;
  }
}

/** One mount's lane: a call at a time; `late` while a call past MOUNT_ANSWER_MS has not come back. */
interface Lane {
  busy: boolean;
  late: boolean;
  waiting: (() => void)[];
}

/**
 * `fs` with every call into a mount below `rootDir` that `mayHang()` names made one at a time per mount and
 * bounded: a call that has not answered after `ms` fails with MountNotAnswering (ETIMEDOUT), and until it comes
 * back every call into that mount fails at once, with no call made. So a dead server holds one thread of
 * libuv's pool (of four) however many files lie there, the pass goes on with the others and ends, and once the
 * mount answers its files are written again. Calls on a descriptor opened there (a FileHandle, `descriptors`)
 * take the same lane. Paths through `/proc/self/fd` and everything outside such mounts pass as they are.
 */
export function gateMountsThatMayHang(
  fs: FsPort,
  rootDir: string,
  mayHang: () => ReadonlySet<string>,
  clock: Pick<Clock, 'sleep'>,
  ms = MOUNT_ANSWER_MS,
): FsPort {
  const root = path.resolve(rootDir);
  const lanes = new Map<string, Lane>();
  /** Descriptors opened into a gated mount, and the mount. */
  const descriptorMounts = new Map<number, string>();

  const mountOf = (file: unknown): string | undefined => {
    if (typeof file !== 'string') return undefined;
    const mounts = mayHang();
    if (mounts.size === 0 || !file.startsWith(`${root}/`)) return undefined;
    const relative = path.posix.normalize(file.slice(root.length + 1));
    for (const mount of mounts) {
      if (relative === mount || relative.startsWith(`${mount}/`)) return mount;
    }
    return undefined;
  };

  const laneOf = (mount: string): Lane => {
    let lane = lanes.get(mount);
    if (lane === undefined) {
      lane = { busy: false, late: false, waiting: [] };
      lanes.set(mount, lane);
    }
    return lane;
  };

  const through = async <T>(mount: string, call: () => Promise<T>): Promise<T> => {
    const lane = laneOf(mount);
    while (lane.busy && !lane.late) await new Promise<void>((resolve) => lane.waiting.push(resolve));
    if (lane.late) throw new MountNotAnswering(path.join(root, mount), ms);
    lane.busy = true;
    const stop = new AbortController();
    const answer = call().then(
      (value) => ({ value }),
      (error: unknown) => ({ error }),
    );
    void answer.then(() => {
      stop.abort();
      lane.busy = false;
      lane.late = false;
      lane.waiting.shift()?.();
    });
    const late = clock.sleep(ms, stop.signal).then(
      () => 'late' as const,
      () => 'answered' as const,
    );
    const first = await Promise.race([answer, late]);
    if (first === 'late') {
      lane.late = true;
      for (const wake of lane.waiting.splice(0)) wake();
      throw new MountNotAnswering(path.join(root, mount), ms);
    }
    if (first === 'answered') return ((await answer) as { value: T }).value;
    if ('error' in first) throw first.error;
    return first.value;
  };

  const gateHandle = (handle: FileHandle, mount: string): FileHandle =>
    new Proxy(handle, {
      get(target, property, receiver) {
        const value: unknown = Reflect.get(target, property, receiver);
        if (typeof value !== 'function' || !HANDLE_CALLS.includes(String(property))) return value;
        return (...args: unknown[]) =>
          through(mount, () => (value as (...a: unknown[]) => Promise<unknown>).apply(target, args));
      },
    });

  const gated: FsPort = { ...fs };
  const record = gated as unknown as Record<string, unknown>;
  for (const name of PATH_CALLS) {
    const original = (fs as unknown as Record<string, unknown>)[name];
    if (typeof original !== 'function') continue;
    const call = original as (...args: unknown[]) => Promise<unknown>;
    record[name] = (...args: unknown[]) => {
      const mount = mountOf(args[0]) ?? (name === 'rename' || name === 'link' ? mountOf(args[1]) : undefined);
      if (mount === undefined) return call.apply(fs, args);
      if (name === 'open') {
        return through(mount, () => call.apply(fs, args)).then((handle) =>
          gateHandle(handle as FileHandle, mount),
        );
      }
      return through(mount, () => call.apply(fs, args));
    };
  }
  const descriptors = fs.descriptors;
  if (descriptors !== undefined) {
    const onDescriptor =
      <A extends unknown[], R>(call: (fd: number, ...rest: A) => Promise<R>) =>
      (fd: number, ...rest: A): Promise<R> => {
        const mount = descriptorMounts.get(fd);
        return mount === undefined ? call(fd, ...rest) : through(mount, () => call(fd, ...rest));
      };
    gated.descriptors = {
      open: (file, flags, mode) => {
        const mount = mountOf(file);
        if (mount === undefined) return descriptors.open(file, flags, mode);
        return through(mount, () => descriptors.open(file, flags, mode)).then((fd) => {
          descriptorMounts.set(fd, mount);
          return fd;
        });
      },
      write: onDescriptor(descriptors.write),
      fchown: onDescriptor(descriptors.fchown),
      fchmod: onDescriptor(descriptors.fchmod),
      fsync: onDescriptor(descriptors.fsync),
      close: (fd) => {
        const mount = descriptorMounts.get(fd);
        if (mount === undefined) return descriptors.close(fd);
        // Forgotten whatever the close answers: the number may be reused by the next open.
        descriptorMounts.delete(fd);
        return through(mount, () => descriptors.close(fd));
      },
    } satisfies DescriptorCalls;
  }
  return gated;
}
