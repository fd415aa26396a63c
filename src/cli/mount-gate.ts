// Calls into a mount that may hang (NFS, FUSE: below rootDir, or holding rootDir or stateDir) one at a time and bounded: one that does not answer fails its file, not the pass.
import { constants } from 'node:fs';
import type { FileHandle } from 'node:fs/promises';
import path from 'node:path';
import type { Clock } from '../lib/clock.js';
import type { DescriptorCalls, FsPort } from '../lib/fs-port.js';
import { POOL_DRAIN_MS } from './process-exit.js';

/** How long one call into such a mount may take before the mount counts as not answering. */
export const MOUNT_ANSWER_MS = 15_000;

/**
 * What a stop still needs after a call of its own into such a mount gave up (the lock's close, the process's wait
 * for libuv's pool, POOL_DRAIN_MS, and its end): a call begun after the stop is bounded by its deadline less this.
 */
export const STOP_RESERVE_MS = POOL_DRAIN_MS + 1_000;

/** Seconds as a message says them: 15 s, 7.5 s. */
const seconds = (ms: number) => `${Math.round(ms / 100) / 10} s`;

/** The port's calls that name a path as their first argument (`rename` and `link` name two). */
export const PATH_CALLS = [
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
  'readlink',
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
      `ETIMEDOUT: the mount at ${mountPoint} did not answer within ${seconds(ms)} (a dead NFS server, a wedged FUSE daemon?): its files wait until it answers`,
    );
    this.name = 'MountNotAnswering';
    this.mountPoint = mountPoint;
  }
}

/**
 * A call into a mount that had not answered when the process's stop came (SIGTERM, SIGINT: the pass is being
 * abandoned): given up on at once, not after the bound, so the pass ends and the stop goes on. Still `ETIMEDOUT`
 * (a mount that does not answer: retried, no attempt), and the call itself is undone when it comes back.
 */
export class MountAbandonedAtStop extends MountNotAnswering {
  constructor(mountPoint: string, ms: number) {
    super(mountPoint, ms);
    this.message = `ETIMEDOUT: the mount at ${mountPoint} had not answered when the agent was told to stop (a dead NFS server, a wedged FUSE daemon?): its call is given up on`;
    this.name = 'MountAbandonedAtStop';
  }
}

/**
 * A directory the agent works in (rootDir, stateDir) on a mount that may hang, and that mount's point: every call
 * at or under `dir` takes the mount's lane (a mount below rootDir that `mayHang` names is judged first).
 */
export interface HeldPlace {
  dir: string;
  mountPoint: string;
}

/** A call's answer, kept whole: a late answer is looked at after its caller was given up on. */
type Settled<T> = { value: T } | { error: unknown };

/** A call made again once its lane answers (a close, a removal asked for while it was late). */
type Deferred = () => Promise<unknown>;

/**
 * One mount's lane: a call at a time; `late` while a call past MOUNT_ANSWER_MS has not come back. `deferred`:
 * closes of descriptors opened there and removals of temp files made there, asked for while late, made (in order)
 * once the late call is back, so the descriptor and the temp file do not outlive the hang.
 */
interface Lane {
  busy: boolean;
  late: boolean;
  waiting: (() => void)[];
  deferred: Deferred[];
}

/** What a call refused while its lane is late leaves to do, and what a late answer leaves to undo. */
interface LaneOptions<T> {
  /** Refused while the lane is late: made once it answers (a close, the removal of a temp file made here). */
  later?: Deferred;
  /** Refused while the lane is late, the call answers at once instead of failing (a close, made `later`). */
  quietWhenRefused?: boolean;
  /** The call answered after its caller was given up on: undo what it made that nobody will (close, remove). */
  onLate?: (settled: Settled<T>) => Promise<void>;
}

/** Flags that make a new file or fail: a file opened with them was made by this call. */
const CREATING = constants.O_CREAT | constants.O_EXCL;

/** How a gate finds its mounts beyond those below rootDir, and whose lanes it takes. */
export interface GateOptions {
  /** Directories (rootDir, stateDir) on a mount that may hang: every call at or under one takes its lane. */
  held?: () => readonly HeldPlace[];
  /** The process's lanes, shared by every gate (start-up's, each reload's port): one late call per mount, ever. */
  lanes?: MountLanes;
}

/**
 * The lanes of the mounts that may hang, by mount point: one call at a time into each, bounded by `ms` on the
 * clock. One per process, shared by the gates of its ports (start-up's configuration checks, the daemon's port and
 * each reload's), so a mount that does not answer holds one thread of libuv's pool whoever asks.
 */
export class MountLanes {
  readonly #lanes = new Map<string, Lane>();
  /** Gives up on a call in flight, one per call begun before the stop (forgotten when it answers). */
  readonly #abandons = new Set<() => void>();
  /** Told when a call given up on comes back (its mount answers again): `nextAnswer`'s waiters. */
  readonly #answerWaiters = new Set<() => void>();
  /**
   * The refusals of calls never made (their lane late when they came): a deferred call refused so is made at the
   * next answer, one made that went late is not (it ends by itself: a close made twice could close a number reused).
   */
  readonly #refusals = new WeakSet<object>();
  readonly #stop: AbortSignal | undefined;
  /** When the stop's calls must have ended (on `clock.monotonic`), once the stop came with a deadline. */
  #stopEndsAt: number | undefined;
  readonly clock: Pick<Clock, 'sleep'> & Partial<Pick<Clock, 'monotonic'>>;
  readonly ms: number;

  /**
   * `stop`: the process's stop (its pass's abort). When it fires, every call waiting on its bound or in a lane's
   * queue fails at once (MountAbandonedAtStop) instead of after `ms`, its lane counts as late until the call comes
   * back (then undone as any late call), and calls made after it go in as ever into a lane with nothing in flight,
   * bounded by what is left of `stopDeadlineMs` (from the stop, on `clock.monotonic`) less STOP_RESERVE_MS when
   * that is shorter than `ms`: the stop's own flush of state gives up before the stop deadline cuts the process.
   */
  constructor(
    clock: Pick<Clock, 'sleep'> & Partial<Pick<Clock, 'monotonic'>>,
    ms = MOUNT_ANSWER_MS,
    stop?: AbortSignal,
    stopDeadlineMs?: number,
  ) {
    this.clock = clock;
    this.ms = ms;
    this.#stop = stop;
    stop?.addEventListener(
      'abort',
      () => {
        const now = clock.monotonic?.();
        if (stopDeadlineMs !== undefined && now !== undefined)
          this.#stopEndsAt = now + stopDeadlineMs - STOP_RESERVE_MS;
        for (const abandon of [...this.#abandons]) abandon();
      },
      { once: true },
    );
  }

  /** The mounts whose call given up on has not come back: every call into them is refused meanwhile. */
  lateMounts(): string[] {
    return [...this.#lanes].filter(([, lane]) => lane.late).map(([mount]) => mount);
  }

  /**
   * Settles when a call given up on comes back (its mount answers again: a start waiting on it tries now), or at
   * once when `signal` aborts; either way nothing of it is kept.
   */
  nextAnswer(signal?: AbortSignal): Promise<void> {
    return new Promise<void>((resolve) => {
      const done = () => {
        this.#answerWaiters.delete(done);
        signal?.removeEventListener('abort', done);
        resolve();
      };
      if (signal?.aborted === true) return resolve();
      this.#answerWaiters.add(done);
      signal?.addEventListener('abort', done, { once: true });
    });
  }

  /** A call's bound now: `ms`, or after a stop with a deadline what is left of it (never below 0). */
  #bound(): number {
    const now = this.#stopEndsAt === undefined ? undefined : this.clock.monotonic?.();
    if (this.#stopEndsAt === undefined || now === undefined) return this.ms;
    return Math.max(0, Math.min(this.ms, this.#stopEndsAt - now));
  }

  /** The refusal of a call into a late lane: named for the stop once the stop came. */
  #refusal(mount: string): MountNotAnswering {
    const refusal =
      this.#stop?.aborted === true
        ? new MountAbandonedAtStop(mount, this.ms)
        : new MountNotAnswering(mount, this.ms);
    this.#refusals.add(refusal);
    return refusal;
  }

  #laneOf(mount: string): Lane {
    let lane = this.#lanes.get(mount);
    if (lane === undefined) {
      lane = { busy: false, late: false, waiting: [], deferred: [] };
      this.#lanes.set(mount, lane);
    }
    return lane;
  }

  /** Made once the lane answers; kept for the next answer when the mount stops answering again meanwhile. */
  #defer(lane: Lane, later: Deferred): void {
    const attempt = async () => {
      try {
        await later();
      } catch (error) {
        // Only one refused unmade while the mount is late again: one refused past the stop deadline, tried again,
        // looped for ever; and one made that went late is in flight still, and ends by itself: a close made again
        // after it closed whatever descriptor had its number by then (review32).
        if (this.#refusals.has(error as object) && lane.late) lane.deferred.push(attempt);
      }
    };
    lane.deferred.push(attempt);
  }

  /** What a call given up on left and the closes and removals asked for meanwhile, in order, once it is back. */
  async #settleLate<T>(lane: Lane, settled: Settled<T>, onLate: LaneOptions<T>['onLate']): Promise<void> {
    await onLate?.(settled).catch(() => undefined);
    for (let next = lane.deferred.shift(); next !== undefined; next = lane.deferred.shift()) {
      await next().catch(() => undefined);
      if (lane.late) return;
    }
  }

  /**
   * `call` into `mount`, after the calls before it, bounded: past `ms` it fails with MountNotAnswering, and until
   * it answers every call into the mount fails at once (or, per `options`, answers and is made later).
   */
  async through<T>(mount: string, call: () => Promise<T>, options: LaneOptions<T> = {}): Promise<T> {
    const lane = this.#laneOf(mount);
    while (lane.busy && !lane.late) await new Promise<void>((resolve) => lane.waiting.push(resolve));
    if (lane.late) {
      if (options.later !== undefined) this.#defer(lane, options.later);
      if (options.quietWhenRefused === true) return undefined as T;
      throw this.#refusal(mount);
    }
    const ms = this.#bound();
    if (ms <= 0) {
      // Nothing left of the stop deadline: the call is not made, so no pool thread waits in a hung mount until exit;
      // a close or a removal neither (the exit closes the descriptor, the next start's sweep removes the temp file):
      // raced against a 0 ms bound, a healthy mount's lost and that mount was judged late.
      if (options.quietWhenRefused === true) return undefined as T;
      throw new MountAbandonedAtStop(mount, this.ms);
    }
    lane.busy = true;
    const bound = new AbortController();
    let givenUp = false;
    let abandon: () => void = () => undefined;
    const abandoned = new Promise<'abandoned'>((resolve) => {
      abandon = () => resolve('abandoned');
    });
    // A call begun after the stop (the stop's own flush of state) is bounded as ever.
    if (this.#stop !== undefined && !this.#stop.aborted) this.#abandons.add(abandon);
    const answer: Promise<Settled<T>> = call().then(
      (value) => ({ value }),
      (error: unknown) => ({ error }),
    );
    void answer.then((settled) => {
      this.#abandons.delete(abandon);
      bound.abort();
      lane.busy = false;
      lane.late = false;
      lane.waiting.shift()?.();
      if (givenUp) {
        void this.#settleLate(lane, settled, options.onLate);
        for (const tell of [...this.#answerWaiters]) tell();
      }
    });
    const late = this.clock.sleep(ms, bound.signal).then(
      () => 'late' as const,
      () => 'answered' as const,
    );
    const first = await Promise.race([answer, late, abandoned]);
    if (first === 'late' || first === 'abandoned') {
      givenUp = true;
      lane.late = true;
      this.#abandons.delete(abandon);
      for (const wake of lane.waiting.splice(0)) wake();
      if (first === 'late') throw new MountNotAnswering(mount, ms);
      bound.abort();
      throw new MountAbandonedAtStop(mount, this.ms);
    }
    const settled = first === 'answered' ? await answer : first;
    if ('error' in settled) throw settled.error;
    return settled.value;
  }

  /** A close into `mount`: refused while it is late, it answers at once and is made once the mount answers. */
  closing(mount: string, close: () => Promise<void>): Promise<void> {
    return this.through(mount, close, { later: () => this.through(mount, close), quietWhenRefused: true });
  }
}

/**
 * `fs` with every call into a mount below `rootDir` that `mayHang()` names, or at or under a directory `held()`
 * names (rootDir or stateDir on such a mount), made one at a time per mount and bounded: a call that has not
 * answered after `ms` fails with MountNotAnswering (ETIMEDOUT), and until it comes back every call into that mount
 * fails at once, with no call made. So a dead server holds one thread of libuv's pool (of four) however many files
 * lie there, the pass goes on with the others and ends, and once the mount answers its files are written again.
 * Calls on a descriptor opened there (a FileHandle, `descriptors`) take the same lane, and so does a name built on
 * such a descriptor (`/proc/self/fd/<fd>/<name>`, the writer's pinned parents), judged by the path the descriptor
 * was opened at. Everything outside such mounts passes as it is.
 *
 * What a call given up on leaves is undone when it comes back: a descriptor it opened is closed, and the file it
 * made (opened O_CREAT|O_EXCL: the writer's temp file) removed when that name is still the file it opened; closes
 * asked for while the mount was late (the caller's, of a temp file or a pinned parent) are made then, and so are
 * removals of temp files this port made there. Nothing it did not make is ever removed.
 */
export function gateMountsThatMayHang(
  fs: FsPort,
  rootDir: string,
  mayHang: () => ReadonlySet<string>,
  clock: Pick<Clock, 'sleep'>,
  ms = MOUNT_ANSWER_MS,
  options: GateOptions = {},
): FsPort {
  const root = path.resolve(rootDir);
  const lanes = options.lanes ?? new MountLanes(clock, ms);
  const held = options.held ?? (() => []);
  const through = <T>(mount: string, call: () => Promise<T>, laneOptions?: LaneOptions<T>) =>
    lanes.through(mount, call, laneOptions);
  const closing = (mount: string, close: () => Promise<void>) => lanes.closing(mount, close);
  /** Files made here by an open with O_CREAT|O_EXCL (in a mount that may hang) not yet removed or renamed away. */
  const created = new Set<string>();
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

  const inside = (absolute: string, dir: string) => absolute === dir || absolute.startsWith(`${dir}/`);

  /** The mount (its point, the lane's name) a call on `absolute` goes into, when it may hang. */
  const mountOf = (absolute: string | undefined): string | undefined => {
    if (absolute === undefined) return undefined;
    const mounts = mayHang();
    if (mounts.size > 0 && absolute.startsWith(`${root}/`)) {
      const relative = path.posix.normalize(absolute.slice(root.length + 1));
      for (const mount of mounts) {
        if (relative === mount || relative.startsWith(`${mount}/`)) return path.join(root, mount);
      }
    }
    let holding: HeldPlace | undefined;
    for (const place of held()) {
      // `/` held (an NFS root: start-up's, doctor's and init's checks hold every mount that may hang) holds every path
      // that no longer held place does: `inside` alone took it for none, and such calls went unbounded (doctor28).
      const within = place.dir === '/' || inside(absolute, place.dir);
      if (within && place.dir.length > (holding?.dir.length ?? -1)) holding = place;
    }
    return holding?.mountPoint;
  };

  /** Whether `absolute` is rootDir or below it, or in a mount that may hang: its descriptors are remembered. */
  const remembered = (absolute: string | undefined): absolute is string =>
    absolute !== undefined && (inside(absolute, root) || mountOf(absolute) !== undefined);

  const gating = () => mayHang().size > 0 || held().length > 0;

  const mountOfDescriptor = (fd: number): string | undefined => mountOf(descriptorPaths.get(fd));

  /**
   * After a late open that made `absolute` answered with a descriptor nobody holds: removes the file when the
   * name is still the one opened (same device and inode), so a file someone put there since is never touched.
   */
  const removeIfStillMade = async (
    mount: string,
    absolute: string,
    opened: () => Promise<{ dev: number; ino: number }>,
  ) => {
    const mine = await through(mount, opened);
    const there = await through(mount, () => fs.lstat(absolute));
    if (there.dev === mine.dev && there.ino === mine.ino) await through(mount, () => fs.unlink(absolute));
  };

  /** Removes a file this port made, by the path it was made at, unless it was removed or renamed away since. */
  const removeMade = async (mount: string, absolute: string) => {
    if (!created.has(absolute)) return;
    // Made and late, it is not made again (MountLanes #defer): forgotten once it comes back.
    const forget = async (settled: Settled<void>) => {
      if ('value' in settled) created.delete(absolute);
    };
    await through(mount, () => fs.unlink(absolute), { onLate: forget }).catch((error: unknown) => {
      if (error instanceof MountNotAnswering) throw error;
    });
    created.delete(absolute);
  };

  /**
   * Directories a late `mkdir` made, each with its clean-up in progress: a call at or under one waits for it, so a
   * pass that finds the directory (EEXIST) never writes into one about to go.
   */
  const cleaning = new Map<string, Promise<void>>();

  /**
   * After a late `mkdir` answered: the directories it made (`made`, deepest first) removed in that order, each
   * only while it is still a directory of this process's user and empty (rmdir itself refuses one that is not).
   * Nothing recorded them: the caller was given up on, and its pass made no file below them. A directory that
   * holds something, or a name someone put there since, is left as it is.
   */
  const removeLateDirectories = async (mount: string, made: readonly string[]) => {
    const uid = process.geteuid?.();
    for (const dir of made) {
      const stats = await through(mount, () => fs.lstat(dir));
      if (!stats.isDirectory() || (uid !== undefined && stats.uid !== uid)) return;
      if ((await through(mount, () => fs.readdir(dir))).length > 0) return;
      await through(mount, () => fs.rmdir(dir));
    }
  };

  /** Runs `call` once no late mkdir's clean-up holds `absolute` (at or under a directory being removed). */
  const afterCleaning = <T>(absolute: string | undefined, call: () => Promise<T>): Promise<T> => {
    if (cleaning.size === 0 || absolute === undefined) return call();
    const holding = [...cleaning].filter(([dir]) => inside(absolute, dir)).map(([, done]) => done);
    return holding.length === 0 ? call() : Promise.all(holding).then(call);
  };

  /** Whether `flags` (a number, as the writer gives them) make a new file. */
  const creates = (flags: unknown) => typeof flags === 'number' && (flags & CREATING) === CREATING;

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
          if (mount === undefined) return call();
          return property === 'close' ? closing(mount, call as () => Promise<void>) : through(mount, call);
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
      if (!gating()) return call.apply(fs, args);
      const absolute = resolved(args[0]);
      return afterCleaning(absolute, () => gatedCall(name, call, args, absolute));
    };
  }
  function gatedCall(
    name: (typeof PATH_CALLS)[number],
    call: (...args: unknown[]) => Promise<unknown>,
    args: unknown[],
    absolute: string | undefined,
  ): Promise<unknown> {
    const mount =
      mountOf(absolute) ?? (name === 'rename' || name === 'link' ? mountOf(resolved(args[1])) : undefined);
    if (name === 'open' && remembered(absolute)) {
      const opening = () => call.apply(fs, args) as Promise<FileHandle>;
      if (mount === undefined) return opening().then((handle) => trackHandle(handle, absolute, mount));
      const made = creates(args[1]);
      return through(mount, opening, {
        onLate: async (settled) => {
          if (!('value' in settled)) return;
          const handle = settled.value;
          if (made) await removeIfStillMade(mount, absolute, () => handle.stat()).catch(() => undefined);
          await closing(mount, () => handle.close());
        },
      }).then((handle) => {
        if (made) created.add(absolute);
        return trackHandle(handle, absolute, mount);
      });
    }
    if (mount === undefined) return call.apply(fs, args);
    if (name === 'mkdir' && absolute !== undefined) {
      // A directory made after its caller was given up on: removed when it comes back, if still empty and ours.
      return through(mount, () => call.apply(fs, args), {
        onLate: async (settled) => {
          if (!('value' in settled)) return;
          // A recursive mkdir answers the first directory it made: those from there down to `absolute` are its;
          // undefined when it made none (all were there: removing `absolute` took someone's directory, review29).
          const recursive = (args[1] as { recursive?: unknown } | undefined)?.recursive === true;
          if (recursive && typeof settled.value !== 'string') return;
          const first = typeof settled.value === 'string' ? path.resolve(settled.value) : absolute;
          const made = [absolute];
          if (first !== absolute && inside(absolute, first)) {
            for (let dir = path.dirname(absolute); inside(dir, first); dir = path.dirname(dir))
              made.push(dir);
          }
          const top = made.at(-1) ?? absolute;
          const done = removeLateDirectories(mount, made).catch(() => undefined);
          cleaning.set(top, done);
          await done;
          if (cleaning.get(top) === done) cleaning.delete(top);
        },
      });
    }
    if (absolute !== undefined && created.has(absolute) && (name === 'unlink' || name === 'rename')) {
      // A temp file this port made: removed (or renamed away) it is forgotten; a removal refused while the
      // mount is late is made once it answers, by the path it was made at (a pinned parent's descriptor named
      // in `args` may be closed and its number reused by then).
      return through(mount, () => call.apply(fs, args), {
        ...(name === 'unlink' ? { later: () => removeMade(mount, absolute) } : {}),
        onLate: async (settled) => {
          if ('value' in settled) created.delete(absolute);
        },
      }).then((value) => {
        created.delete(absolute);
        return value;
      });
    }
    return through(mount, () => call.apply(fs, args));
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
        if (!gating()) return descriptors.open(file, flags, mode);
        const absolute = resolved(file);
        if (!remembered(absolute)) return descriptors.open(file, flags, mode);
        const mount = mountOf(absolute);
        const opening = () => descriptors.open(file, flags, mode);
        const made = mount !== undefined && creates(flags);
        const opened = afterCleaning(absolute, () =>
          mount === undefined
            ? opening()
            : through(mount, opening, {
                onLate: async (settled) => {
                  if (!('value' in settled)) return;
                  const fd = settled.value;
                  // The descriptor's own file, through /proc: fstat is not among the descriptor calls.
                  if (made)
                    await removeIfStillMade(mount, absolute, () => fs.stat(`/proc/self/fd/${fd}`)).catch(
                      () => undefined,
                    );
                  await closing(mount, () => descriptors.close(fd));
                },
              }),
        );
        return opened.then((fd) => {
          descriptorPaths.set(fd, absolute);
          if (made) created.add(absolute);
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
        return mount === undefined ? descriptors.close(fd) : closing(mount, () => descriptors.close(fd));
      },
    } satisfies DescriptorCalls;
  }
  return gated;
}

/** Whether a call into a mount that did not answer (cli/mount-gate.ts) is in the error's chain of causes. */
export function mountDidNotAnswer(error: unknown): boolean {
  let current: unknown = error;
  // Causes form a chain; a bound keeps a cyclic one from looping.
  for (let depth = 0; depth < 8 && typeof current === 'object' && current !== null; depth += 1) {
    if (current instanceof MountNotAnswering) return true;
    current = 'cause' in current ? current.cause : undefined;
  }
  return false;
}
