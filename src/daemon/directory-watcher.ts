// Watches every directory under a root with one fs.watch (one inotify watch) each, never one per file.
import { type FSWatcher, watch } from 'node:fs';
import path from 'node:path';
import type { FsPort } from '../lib/fs-port.js';
import { DiskError } from '../store/errors.js';

export interface DirectoryWatcherOptions {
  /** `readFile`: for the kernel's `max_queued_events` (see `maxQueuedEvents`). */
  fs: Pick<FsPort, 'lstat' | 'readdir'> &
    Partial<Pick<FsPort, 'readFile' | 'mountsThatMayHangBelow' | 'mayHangAt'>>;
  rootDir: string;
  /**
   * A name in a watched directory was created, written, re-moded, removed or renamed: `file` is its absolute
   * path. When it is a directory, whatever was under it may have changed too (the caller decides what that
   * covers): a directory renamed away or replaced reports only its own name.
   */
  onChange: (file: string) => void;
  onError: (error: unknown) => void;
  /** Names never reported (the agent's temp files). */
  ignored?: (file: string) => boolean;
  /**
   * Directories watched at most besides the priority ones (DEFAULT_MAX_DIRECTORIES); those past it are not
   * watched. The priority directories (`setPriority`, and rootDir) never count and are never refused for it.
   */
  maxDirectories?: number;
  /**
   * A directory was left unwatched for want of room: past `maxDirectories`, or the kernel's inotify limit
   * (ENOSPC, `fs.inotify.max_user_watches`) with no other directory's watch left to give up for a priority
   * one. Told once until a watched directory goes away.
   */
  onLimit?: (watched: number) => void;
  /** node:fs `watch` (tests stand in for the kernel's inotify limit with one that throws ENOSPC). */
  watch?: typeof watch;
  /**
   * Events may have been lost: at least BURST_EVENTS names were reported in one turn of the event loop, what one
   * read of a full inotify queue delivers. The kernel queues `fs.inotify.max_queued_events` (16,384 by default)
   * and drops the rest, and libuv drops the overflow's notice: a flood of changes while the agent was busy hides
   * a change to a managed file among the lost ones. Told once per such turn.
   */
  onBurst?: (events: number) => void;
  /**
   * The kernel's `fs.inotify.max_queued_events`; read from /proc/sys at start when not given. A queue set smaller
   * than BURST_EVENTS overflows with fewer names than that, so a turn delivering as many as it holds is a burst.
   */
  maxQueuedEvents?: number;
}

/** Names reported in one turn of the event loop from which events are taken as possibly lost (see `onBurst`). */
export const BURST_EVENTS = 4096;

const MAX_QUEUED_EVENTS_FILE = '/proc/sys/fs/inotify/max_queued_events';

/**
 * Each watched directory costs about 2.6 KiB of the agent's memory (measured: 20,000 directories a local process
 * made under rootDir grew the idle daemon from 77 to 130 MB) and one of the user's inotify watches; a process
 * making directories there without end grew the agent with them. Far above any real tree of configs.
 */
const DEFAULT_MAX_DIRECTORIES = 10_000;

interface Watched {
  watcher: FSWatcher;
  /** The directory's inode when it was watched: a directory replaced under the same name is watched again. */
  ino: number;
}

/**
 * Every directory from `rootDir` down to each file's directory (`relativeFiles` are '/'-separated paths
 * relative to it), as absolute paths: the directories a watcher must see to notice those files change.
 */
export function directoriesHolding(rootDir: string, relativeFiles: Iterable<string>): Set<string> {
  const dirs = new Set<string>();
  for (const relative of relativeFiles) {
    let parent = path.posix.dirname(relative);
    while (parent !== '.' && parent !== '/') {
      const absolute = path.join(rootDir, parent);
      // Its own parents are in the set already.
      if (dirs.has(absolute)) break;
      dirs.add(absolute);
      parent = path.posix.dirname(parent);
    }
  }
  return dirs;
}

/**
 * A directory's inotify watch reports what happens to its entries (create, write, chmod, delete, rename), so
 * one per directory sees every file in it — chokidar watched each file as well (1,113 watchers for 1,000
 * files in 111 directories, ~25 MiB of the idle daemon). A directory that appears is watched with all below it;
 * one that goes away (or is replaced) stops being watched. Symbolic links are not followed.
 *
 * The priority directories (those holding the agent's files and the chain from rootDir to them) are watched
 * first and always: the cap counts only the others, and at the kernel's limit another directory's watch is
 * given up to make room for a priority one. A local flood of directories therefore never hides the agent's
 * own files, whatever order a walk meets them in.
 */
export class DirectoryWatcher {
  readonly #options: DirectoryWatcherOptions;
  readonly #watched = new Map<string, Watched>();
  /** The watched directories that are not priority ones (the cap counts these), oldest first. */
  readonly #others = new Set<string>();
  #priority: ReadonlySet<string> = new Set();
  /** A priority directory went unwatched for want of kernel watches: retried when a watch is freed. */
  #priorityMissed = false;
  /** Another directory went unwatched for want of room (the cap or the kernel's limit): looked for again by
   * `setPriority` once there is room. */
  #othersMissed = false;
  /** The kernel refused a watch (ENOSPC) and none of ours was freed since: walking for room would find none. */
  #kernelFull = false;
  #started = false;
  #closed = false;
  #limitTold = false;
  /** Events reported in this turn of the event loop. */
  #burst = 0;
  /** Events in one turn taken as a burst: BURST_EVENTS, or the kernel's queue when it holds fewer. */
  #burstEvents = BURST_EVENTS;
  /** rootDir's device and inode when its watch was set (`#checkRoot`). */
  #rootId: { dev: number; ino: number } | undefined;
  /** A `#checkRoot` is running: one at a time, so a hung lstat is not stacked once per pass. */
  #checkingRoot = false;

  constructor(options: DirectoryWatcherOptions) {
    this.#options = options;
  }

  /** Watches the root and every directory below it; rejects when the root itself cannot be watched. */
  async start(): Promise<void> {
    // Not awaited: the watch is not held up for it (until it is read, BURST_EVENTS).
    void this.#readMaxQueuedEvents();
    const root = await this.#options.fs.lstat(this.#options.rootDir);
    if (!root.isDirectory()) {
      throw new DiskError({
        operation: 'watch',
        path: this.#options.rootDir,
        errno: 'ENOTDIR',
        rootItself: true,
      });
    }
    const watched = this.#add(this.#options.rootDir, root.ino, true);
    this.#rootId = { dev: root.dev, ino: root.ino };
    this.#started = true;
    // rootDir on a mount that may hang: nothing under it is watched (see #add).
    if (!watched) return;
    // The priority directories first: a flood of others met earlier by the walk cannot take their room.
    await this.#watchPriority(false);
    await this.#watchBelow(this.#options.rootDir);
  }

  /**
   * The directories always watched (absolute paths, `directoriesHolding`): any not watched yet is watched now
   * (and reported to `onChange`, its entries may have changed unseen); those no longer in it count against the
   * cap again, the oldest given up past it. Then, when directories were left unwatched for want of room and
   * room has come back since (watched ones removed), the tree is walked again to watch them, up to the cap.
   */
  async setPriority(dirs: ReadonlySet<string>): Promise<void> {
    this.#priority = dirs;
    if (!this.#started || this.#closed) return;
    // Not awaited: an lstat of rootDir on a hung mount must not hold up the pass that handed the set over.
    this.#checkRootOnce();
    for (const dir of this.#watched.keys()) {
      if (this.#isPriority(dir)) this.#others.delete(dir);
      else this.#others.add(dir);
    }
    while (this.#others.size > this.#maxOthers()) this.#dropOther();
    await this.#watchPriority(true);
    if (this.#othersMissed && this.#roomForOthers() && !this.#closed) {
      this.#othersMissed = false;
      await this.#watchBelow(this.#options.rootDir, true);
    }
  }

  close(): void {
    this.#closed = true;
    for (const { watcher } of this.#watched.values()) watcher.close();
    this.#watched.clear();
    this.#others.clear();
  }

  /** How many directories are watched (for tests and the docs' numbers). */
  get size(): number {
    return this.#watched.size;
  }

  /**
   * Watches `dir` (already lstat-ed as a directory with inode `ino`); throws only when `rethrow`. False when it
   * is not watched for want of room (nothing below it is then worth walking).
   */
  #add(dir: string, ino: number, rethrow = false): boolean {
    if (this.#closed) return true;
    const existing = this.#watched.get(dir);
    if (existing !== undefined) {
      if (existing.ino === ino) return true;
      this.#unwatch(dir);
    }
    // On a mount that may hang (FsPort.mayHangAt): `fs.watch` looks the path up on the calling thread, so a mount
    // that stopped answering since its lstat would hold the event loop for good. Not watched, nor anything below:
    // the drift watcher judges the files there on its poll, through the mount gate.
    if (this.#options.fs.mayHangAt?.(dir) === true) return false;
    const priority = this.#isPriority(dir);
    if (!priority && this.#others.size >= this.#maxOthers()) {
      this.#othersMissed = true;
      this.#tellLimit();
      return false;
    }
    let watcher: FSWatcher;
    for (;;) {
      try {
        watcher = (this.#options.watch ?? watch)(dir, { persistent: true }, (_event, name) =>
          this.#onEvent(dir, name),
        );
        break;
      } catch (error) {
        if (rethrow) throw error;
        if ((error as NodeJS.ErrnoException | undefined)?.code === 'ENOSPC') {
          this.#kernelFull = true;
          // The kernel's watches are used up: a priority directory takes another's (closing a watch frees it at once).
          if (priority && this.#dropOther()) continue;
          if (priority) this.#priorityMissed = true;
          else this.#othersMissed = true;
          this.#tellLimit();
          return false;
        }
        // Gone or replaced since it was listed: its parent's event for that is on its way.
        if (!isVanished(error)) this.#options.onError(error);
        return true;
      }
    }
    watcher.on('error', (error) => {
      this.#unwatch(dir);
      if (!isVanished(error)) this.#options.onError(error);
    });
    this.#watched.set(dir, { watcher, ino });
    if (!priority) this.#others.add(dir);
    return true;
  }

  #isPriority(dir: string): boolean {
    return dir === this.#options.rootDir || this.#priority.has(dir);
  }

  #roomForOthers(): boolean {
    return this.#others.size < this.#maxOthers() && !this.#kernelFull;
  }

  #maxOthers(): number {
    return this.#options.maxDirectories ?? DEFAULT_MAX_DIRECTORIES;
  }

  /** Gives up the oldest non-priority watch (a change below it is left to the next full pass); false if none. */
  #dropOther(): boolean {
    for (const dir of this.#others) {
      this.#othersMissed = true;
      this.#others.delete(dir);
      this.#watched.get(dir)?.watcher.close();
      this.#watched.delete(dir);
      this.#tellLimit();
      return true;
    }
    return false;
  }

  /** Watches each priority directory not watched yet; `notify`: reports each newly watched to `onChange`. */
  async #watchPriority(notify: boolean): Promise<void> {
    this.#priorityMissed = false;
    const newlyWatched: string[] = [];
    for (const dir of this.#priority) {
      if (this.#closed) return;
      if (this.#watched.has(dir)) continue;
      const stats = await this.#options.fs.lstat(dir).catch(() => undefined);
      if (stats?.isDirectory() !== true || this.#watched.has(dir)) continue;
      if (this.#add(dir, stats.ino)) newlyWatched.push(dir);
    }
    if (!notify) return;
    for (const dir of newlyWatched) if (!this.#closed) this.#options.onChange(dir);
  }

  #tellLimit(): void {
    if (this.#limitTold) return;
    this.#limitTold = true;
    this.#options.onLimit?.(this.#watched.size);
  }

  /**
   * Watches the directories below `dir`, depth first; one that vanished meanwhile is skipped. `untilFull`: stops
   * once the cap is reached (a walk to fill room again, through directories mostly watched already).
   */
  async #watchBelow(dir: string, untilFull = false): Promise<void> {
    const pending = [dir];
    while (pending.length > 0 && !this.#closed) {
      if (untilFull && !this.#roomForOthers()) {
        // What is left of the walk may hold more unwatched directories.
        this.#othersMissed = true;
        return;
      }
      const current = pending.pop() as string;
      const entries = await this.#options.fs.readdir(current, { withFileTypes: true }).catch(() => []);
      for (const entry of entries) {
        if (!entry.isDirectory()) continue;
        if (untilFull && !this.#roomForOthers()) {
          this.#othersMissed = true;
          return;
        }
        const child = path.join(current, entry.name);
        if (this.#options.ignored?.(child) === true || this.#mayHang(child)) continue;
        // Watched already: a walk for room only looks below it (a replacement is its parent's event to follow).
        if (untilFull && this.#watched.has(child)) {
          pending.push(child);
          continue;
        }
        const stats = await this.#options.fs.lstat(child).catch(() => undefined);
        if (stats?.isDirectory() !== true) continue;
        if (this.#add(child, stats.ino)) pending.push(child);
      }
    }
  }

  #onEvent(dir: string, name: string | Buffer | null): void {
    if (this.#closed) return;
    this.#countBurst();
    // Linux always names the entry; without a name, anything in the directory may have changed.
    const file = name === null ? dir : path.join(dir, name.toString());
    // The end of rootDir's own watch (its filesystem unmounted: IN_UNMOUNT, IN_IGNORED) comes named after it.
    if (dir === this.#options.rootDir && name?.toString() === path.basename(dir)) this.#checkRootOnce();
    if (this.#options.ignored?.(file) === true) return;
    this.#options.onChange(file);
    if (file !== dir) void this.#follow(file);
  }

  /** The burst threshold lowered to `maxQueuedEvents`, else to the kernel's setting, when that is lower. */
  async #readMaxQueuedEvents(): Promise<void> {
    let value = this.#options.maxQueuedEvents;
    if (value === undefined) {
      const text = await this.#options.fs.readFile?.(MAX_QUEUED_EVENTS_FILE, 'utf8').catch(() => '');
      value = Number.parseInt(String(text), 10);
    }
    if (Number.isInteger(value) && value > 0) this.#burstEvents = Math.min(BURST_EVENTS, value);
  }

  /** Counts the events of this turn (ignored names too: they fill the kernel's queue all the same). */
  #countBurst(): void {
    if (this.#burst === 0) setImmediate(() => (this.#burst = 0));
    this.#burst += 1;
    if (this.#burst === this.#burstEvents) this.#options.onBurst?.(this.#burst);
  }

  /**
   * `#checkRoot` in the background, one at a time: never awaited by a pass (an lstat of rootDir on a hung mount
   * must not hold polls up), and not started again while one runs (each would hold a thread of the pool).
   */
  #checkRootOnce(): void {
    if (this.#checkingRoot) return;
    this.#checkingRoot = true;
    this.#checkRoot()
      .catch((error: unknown) => this.#options.onError(error))
      .finally(() => {
        this.#checkingRoot = false;
      });
  }

  /**
   * Watches rootDir anew when it is another directory than the one watched: a filesystem unmounted from it (the
   * kernel ends every watch on it, and libuv says so only as an event named after the directory) or mounted on
   * it (its root is another directory, maybe of the same inode). Nothing else would ever be seen there again:
   * a card swapped or a share mounted anew, emptied, or changed by hand stayed so until the next full pass. All
   * below is watched again and rootDir reported, so the caller judges every file under it. A rootDir left
   * unwatched (its watch refused, or ended by an error) is tried again by each check until it is watched.
   */
  async #checkRoot(): Promise<void> {
    const rootDir = this.#options.rootDir;
    const stats = await this.#options.fs.lstat(rootDir).catch(() => undefined);
    if (this.#closed || stats?.isDirectory() !== true) return;
    const watched = this.#watched.get(rootDir)?.ino === stats.ino;
    if (watched && this.#rootId?.dev === stats.dev && this.#rootId.ino === stats.ino) return;
    this.#unwatch(rootDir);
    // Its identity is recorded only once its watch is set: a watch refused (the kernel's inotify limits, ENOSPC or
    // EMFILE) is tried again by the next check, rather than the new filesystem going unwatched until a restart.
    this.#add(rootDir, stats.ino);
    if (this.#closed || this.#watched.get(rootDir)?.ino !== stats.ino) return;
    this.#rootId = { dev: stats.dev, ino: stats.ino };
    await this.#watchPriority(false);
    await this.#watchBelow(rootDir);
    if (!this.#closed) this.#options.onChange(rootDir);
  }

  /** A name that changed may be a directory that appeared, went away or was replaced: watch what is there now. */
  async #follow(file: string): Promise<void> {
    if (this.#mayHang(file)) return;
    const stats = await this.#options.fs.lstat(file).catch(() => undefined);
    if (this.#closed) return;
    if (stats?.isDirectory() !== true) {
      if (this.#watched.has(file)) this.#unwatch(file);
      return;
    }
    const known = this.#watched.get(file);
    if (known !== undefined && known.ino === stats.ino) return;
    if (!this.#add(file, stats.ino)) return;
    await this.#watchBelow(file);
    // Entries made in it before its watch was set: tell them now (the caller judges what is there).
    if (!this.#closed) this.#options.onChange(file);
  }

  /**
   * A mount point below rootDir of a filesystem that may hang (FsPort.mountsThatMayHangBelow): never looked up, as
   * a lookup of a dead server's mount waits in the kernel for good; inotify does not see its server's changes anyway.
   */
  #mayHang(dir: string): boolean {
    const { fs, rootDir } = this.#options;
    const below = fs.mountsThatMayHangBelow?.(rootDir);
    if (below === undefined || below.size === 0) return false;
    return below.has(path.relative(rootDir, dir).split(path.sep).join('/'));
  }

  /** Stops watching `dir` and every directory below it. */
  #unwatch(dir: string): void {
    const prefix = dir + path.sep;
    for (const [watchedDir, { watcher }] of this.#watched) {
      if (watchedDir === dir || watchedDir.startsWith(prefix)) {
        watcher.close();
        this.#watched.delete(watchedDir);
        this.#others.delete(watchedDir);
        this.#limitTold = false;
        this.#kernelFull = false;
      }
    }
    // A watch freed: room for a priority directory the kernel's limit kept unwatched.
    if (this.#priorityMissed) void this.#watchPriority(true);
  }
}

function isVanished(error: unknown): boolean {
  const code = (error as NodeJS.ErrnoException | undefined)?.code;
  return code === 'ENOENT' || code === 'ENOTDIR';
}
