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

/** A name inside an open directory, as the writer builds it for a pinned parent. */
const PROC_FD_NAME = /^\/proc\/self\/fd\/(\d+)(?:\/|$)/;

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
 * take the same lane, and so does a name built on such a descriptor (`/proc/self/fd/<fd>/<name>`, the writer's pinned
 * parents), judged by the path the descriptor was opened at. Everything outside such mounts passes as it is.
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
  /**
   * Descriptors opened at or under rootDir while some mount may hang, and the path each names: a name built on
   * one (the writer's pinned parents, `/proc/self/fd/<fd>/<name>`) is judged by that path. Forgotten at close.
   */
  const descriptorPaths = new Map<number, string>();

  /** The absolute path `file` names (through a known descriptor), or undefined when it is not known. */
  const resolved = (file: unknown): string | undefined => {
    if (typeof file !== 'string') return undefined;
    const throughDescriptor = PROC_FD_NAME.exec(file);
    if (throughDescriptor === null) return file;
    const base = descriptorPaths.get(Number(throughDescriptor[1]));
    const rest = file.slice(throughDescriptor[0].length);
    return base === undefined ? undefined : rest === '' ? base : `${base}/${rest}`;
  };

  /** Whether `absolute` is rootDir or below it: its descriptors are remembered. */
  const underRoot = (absolute: string | undefined): absolute is string =>
    absolute !== undefined && (absolute === root || absolute.startsWith(`${root}/`));

  const mountOf = (absolute: string | undefined): string | undefined => {
    if (absolute === undefined || !absolute.startsWith(`${root}/`)) return undefined;
    const mounts = mayHang();
    if (mounts.size === 0) return undefined;
    const relative = path.posix.normalize(absolute.slice(root.length + 1));
    for (const mount of mounts) {
      if (relative === mount || relative.startsWith(`${mount}/`)) return mount;
    }
    return undefined;
  };

  const mountOfDescriptor = (fd: number): string | undefined => mountOf(descriptorPaths.get(fd));

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

  /** A handle whose calls take its mount's lane (none: as they are), its path remembered until its close. */
  const trackHandle = (handle: FileHandle, absolute: string, mount: string | undefined): FileHandle => {
    const fd = handle.fd;
    descriptorPaths.set(fd, absolute);
    return new Proxy(handle, {
      get(target, property) {
        const value: unknown = Reflect.get(target, property, target);
        if (typeof value !== 'function' || !HANDLE_CALLS.includes(String(property))) return value;
        const method = value as (...a: unknown[]) => Promise<unknown>;
        return (...args: unknown[]) => {
          // Forgotten whatever the close answers: the number may be reused by the next open.
          if (property === 'close' && descriptorPaths.get(fd) === absolute) descriptorPaths.delete(fd);
          const call = () => method.apply(target, args);
          return mount === undefined ? call() : through(mount, call);
        };
      },
    });
  };

  const gated: FsPort = { ...fs };
  const record = gated as unknown as Record<string, unknown>;
  for (const name of PATH_CALLS) {
    const original = (fs as unknown as Record<string, unknown>)[name];
    if (typeof original !== 'function') continue;
    const call = original as (...args: unknown[]) => Promise<unknown>;
    record[name] = (...args: unknown[]) => {
      if (mayHang().size === 0) return call.apply(fs, args);
      const absolute = resolved(args[0]);
      const mount =
        mountOf(absolute) ?? (name === 'rename' || name === 'link' ? mountOf(resolved(args[1])) : undefined);
      if (name === 'open' && underRoot(absolute)) {
        const opening = () => call.apply(fs, args) as Promise<FileHandle>;
        return (mount === undefined ? opening() : through(mount, opening)).then((handle) =>
          trackHandle(handle, absolute, mount),
        );
      }
      return mount === undefined ? call.apply(fs, args) : through(mount, () => call.apply(fs, args));
    };
  }
  const descriptors = fs.descriptors;
  if (descriptors !== undefined) {
    const onDescriptor =
      <A extends unknown[], R>(call: (fd: number, ...rest: A) => Promise<R>) =>
      (fd: number, ...rest: A): Promise<R> => {
        const mount = mountOfDescriptor(fd);
        return mount === undefined ? call(fd, ...rest) : through(mount, () => call(fd, ...rest));
      };
    gated.descriptors = {
      open: (file, flags, mode) => {
        if (mayHang().size === 0) return descriptors.open(file, flags, mode);
        const absolute = resolved(file);
        if (!underRoot(absolute)) return descriptors.open(file, flags, mode);
        const mount = mountOf(absolute);
        const opening = () => descriptors.open(file, flags, mode);
        return (mount === undefined ? opening() : through(mount, opening)).then((fd) => {
          descriptorPaths.set(fd, absolute);
          return fd;
        });
      },
      write: onDescriptor(descriptors.write),
      fchown: onDescriptor(descriptors.fchown),
      fchmod: onDescriptor(descriptors.fchmod),
      fsync: onDescriptor(descriptors.fsync),
      close: (fd) => {
        const mount = mountOfDescriptor(fd);
        // Forgotten whatever the close answers: the number may be reused by the next open.
        descriptorPaths.delete(fd);
        return mount === undefined ? descriptors.close(fd) : through(mount, () => descriptors.close(fd));
      },
    } satisfies DescriptorCalls;
  }
  return gated;
}
