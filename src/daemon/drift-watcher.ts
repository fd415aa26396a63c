// Watches rootDir for changes to managed files made by someone else; restores them from the content cache.
import path from 'node:path';
import type { DriftPolicy } from '../config/schema.js';
import type { Clock } from '../lib/clock.js';
import { errnoCode } from '../lib/errors.js';
import type { FsPort } from '../lib/fs-port.js';
import type { Logger } from '../lib/logger.js';
import { ContentCache } from '../store/content-cache.js';
import { hashRegularFile, publishFile } from '../store/durable-writer.js';
import { lstatOrUndefined, TEMP_PREFIX } from '../store/path-guard.js';
import type { ManagedFile } from '../store/state.js';
import { DirectoryWatcher, type DirectoryWatcherOptions, directoriesHolding } from './directory-watcher.js';

/** What the watcher reads of the daemon's `SingleFlight`. */
export interface PassActivity {
  readonly busy: boolean;
  readonly generation: number;
  idle(): Promise<void>;
  /** Runs `job` while no pass runs, holding passes off until it ends. */
  exclusive<R>(job: () => Promise<R>): Promise<R>;
}

/**
 * Local restores (policy `restore`): a drifted file is written back from the content cache, the bytes the
 * agent last published, without a pass — so a process rewriting a managed file every 500 ms costs the service
 * nothing (each restore used to be a full pass that pulled). One file is restored at once, then held off for
 * `minHoldOffMs`, doubling while the fight goes on, up to `maxHoldOffMs`; a file quiet for twice that starts
 * over. Without cached bytes (or with its directory gone) the watcher falls back to `onDrift`, a pass, under
 * the same hold-off.
 */
export interface LocalRestore {
  stateDir: string;
  dirMode: number;
  clock: Pick<Clock, 'monotonic' | 'sleep'>;
  minHoldOffMs: number;
  maxHoldOffMs: number;
  /** The paths written back (for the repairs metric). */
  onRestored: (paths: string[]) => void;
  /** The group `files.rules` give a path: a restored file gets it, as a pass's write does. */
  fileMeta?: (path: string) => { gid: number } | undefined;
  /**
   * Whether rootDir's mount, or one below it holding `relative`, is gone (store/root-mount.ts): then that path is
   * not restored, a pass judges it instead.
   */
  rootMountGone?: (relative: string) => Promise<boolean>;
  /**
   * The same for a batch, taken before `rootMountGone` when given: the mounts checked once, then each path judged
   * (a burst of 10,000 drifted files read the mount table 10,000 times: fix36).
   */
  rootMountsGone?: () => Promise<(relative: string) => boolean>;
}

/** How long the watcher waits for a file's events to stop before judging it (on its clock). */
export const DRIFT_DEBOUNCE_MS = 300;

/** What the watcher is given; one of `clock` and `restore` (whose clock it then uses) is required. */
export type DriftWatcherOptions = DriftWatcherFields &
  ({ clock: Pick<Clock, 'sleep'> } | { restore: LocalRestore });

interface DriftWatcherFields {
  fs: FsPort;
  rootDir: string;
  policy: Exclude<DriftPolicy, 'off'>;
  logger: Logger;
  /** The files the agent manages now, by relative path. */
  managedFiles: () => ReadonlyMap<string, ManagedFile>;
  /**
   * The daemon's pass runner: a file is judged only while no pass runs (the agent's own writes are never
   * drift), and a verdict reached while a pass started is judged again after it.
   */
  passes: PassActivity;
  /** Called with the drifted paths a local restore cannot handle (or all of them without `restore`). */
  onDrift: (paths: string[]) => void;
  restore?: LocalRestore;
  /**
   * The debounce's clock (deps.clock; without it, restore's): events are judged once `debounceMs` passed on it
   * without another, so a test moves it instead of waiting on the wall clock.
   */
  clock?: Pick<Clock, 'sleep'>;
  debounceMs?: number;
  /**
   * How often the managed files on a mount that may hang (FsPort.mayHangAt: no `fs.watch` is set there) are judged:
   * the poll interval. Without it (or without `fs.mayHangAt`) they are left to the passes.
   */
  pollMs?: number;
  /** The directory watcher's cap and node:fs `watch` (tests: a small cap, watches counted, ENOSPC). */
  directories?: Pick<DirectoryWatcherOptions, 'maxDirectories' | 'watch' | 'maxQueuedEvents'>;
}

interface HoldOff {
  /** Monotonic time of the last restore (or repair pass asked for) of the file. */
  at: number;
  ms: number;
  /** A re-judgement is scheduled for when the hold-off ends. */
  waiting: boolean;
}

export class DriftWatcher {
  readonly #options: DriftWatcherOptions;
  readonly #pending = new Set<string>();
  readonly #holdOffs = new Map<string, HoldOff>();
  #judging: Promise<void> = Promise.resolve();
  readonly #closing = new AbortController();
  #watcher: DirectoryWatcher | undefined;
  /** Aborts the debounce's sleep in progress, if any: a new event starts the window again. */
  #debounce: AbortController | undefined;
  #refreshQueued = false;
  /** The pass generation when the managed set was last handed to the directory watcher. */
  #refreshedGeneration = -1;
  #closed = false;
  #burstTold = false;

  constructor(options: DriftWatcherOptions) {
    this.#options = options;
  }

  async start(): Promise<void> {
    const { fs, rootDir } = this.#options;
    // rootDir on a mount that may hang: no watch at all (DirectoryWatcher sets none there), its files are polled.
    if (fs.mayHangAt?.(rootDir) === true) {
      void this.#pollWhereUnwatched();
      return;
    }
    const watcher = new DirectoryWatcher({
      fs: this.#options.fs,
      rootDir: this.#options.rootDir,
      onChange: (file) => this.#onEvent(file),
      onError: (error) => this.#options.logger.warn({ err: error }, 'file watcher error'),
      onLimit: (watched) =>
        this.#options.logger.warn(
          { watched },
          'too many directories under rootDir to watch them all: a change below those left unwatched is repaired by the next full pass, not at once',
        ),
      // The agent's temp files appear and vanish on every write: they are never drift.
      ignored: (file) => path.basename(file).startsWith(TEMP_PREFIX),
      onBurst: (events) => this.#judgeAll(events),
      ...this.#options.directories,
    });
    // The managed files' directories are watched first and always; the cap applies to the rest.
    this.#refreshedGeneration = this.#options.passes.generation;
    await watcher.setPriority(directoriesHolding(this.#options.rootDir, this.#options.managedFiles().keys()));
    try {
      await watcher.start();
    } catch (error) {
      watcher.close();
      throw error;
    }
    this.#watcher = watcher;
    // Started once watching: a start that failed leaves nothing running (the daemon tries a new one later).
    void this.#pollWhereUnwatched();
  }

  /**
   * Every `pollMs`, the managed files on a mount that may hang (no `fs.watch` there: a synchronous lookup on a mount
   * that stops answering would hold the event loop) are judged as an event would have them judged, through the
   * mount gate: one that does not answer is no drift (left to the pass, which reports it `retrying`).
   */
  async #pollWhereUnwatched(): Promise<void> {
    const { fs, rootDir, pollMs } = this.#options;
    const mayHangAt = fs.mayHangAt;
    if (mayHangAt === undefined || pollMs === undefined || pollMs <= 0) return;
    const clock = this.#options.clock ?? (this.#options.restore as LocalRestore).clock;
    for (;;) {
      const slept = await clock.sleep(pollMs, this.#closing.signal).then(
        () => true,
        () => false,
      );
      if (!slept || this.#closed) return;
      let any = false;
      for (const relative of this.#options.managedFiles().keys()) {
        if (!mayHangAt(path.join(rootDir, relative))) continue;
        this.#pending.add(relative);
        any = true;
      }
      if (any) this.#schedule();
    }
  }

  async close(): Promise<void> {
    this.#closed = true;
    this.#closing.abort();
    this.#debounce?.abort();
    this.#watcher?.close();
  }

  /**
   * The managed files may have changed (after a pass): their directories are always watched, so one a pass made
   * (or one left unwatched for want of room) is watched now, whatever else exists under rootDir.
   */
  async managedFilesChanged(): Promise<void> {
    const watcher = this.#watcher;
    if (watcher === undefined || this.#closed) return;
    this.#refreshedGeneration = this.#options.passes.generation;
    // Also when the set is unchanged: one of its directories may have been left unwatched for want of room.
    await watcher.setPriority(directoriesHolding(this.#options.rootDir, this.#options.managedFiles().keys()));
  }

  /**
   * Hands the managed set to the directory watcher again once no pass runs, if a pass ran since it last was:
   * once per pass, however many foreign names a flood reports.
   */
  #refreshAfterPass(): void {
    const { passes } = this.#options;
    if (this.#closed) return;
    if (passes.busy) {
      if (this.#refreshQueued) return;
      this.#refreshQueued = true;
      void passes.idle().then(() => {
        this.#refreshQueued = false;
        this.#refreshAfterPass();
      });
      return;
    }
    if (passes.generation !== this.#refreshedGeneration) void this.managedFilesChanged();
  }

  /**
   * So many events at once that the kernel may have dropped some (its inotify queue overflowed while the agent was
   * busy): a change to a managed file may be among them, so every managed file is judged.
   */
  #judgeAll(events: number): void {
    if (this.#closed) return;
    const message =
      'a burst of file events under rootDir: some may have been lost (the kernel queue is bounded), so every managed file is judged';
    // A flood that lasts is told once, then at debug.
    if (this.#burstTold) this.#options.logger.debug({ events }, message);
    else this.#options.logger.warn({ events }, message);
    this.#burstTold = true;
    for (const managedPath of this.#options.managedFiles().keys()) this.#pending.add(managedPath);
    this.#schedule();
  }

  /** A change at `file` (absolute), as the file watcher reports it. */
  noticeChange(file: string): void {
    this.#onEvent(file);
  }

  /** Judges the changes noticed so far now, instead of after the debounce window. */
  async judgeNow(): Promise<void> {
    this.#debounce?.abort();
    await this.#evaluate();
  }

  /**
   * A managed file, or a directory above managed files (renamed, removed, replaced, made anew): each managed
   * file it names or holds is judged. The directory watcher reports names, not what they were.
   */
  #onEvent(file: string): void {
    const relative = path.relative(this.#options.rootDir, file).split(path.sep).join('/');
    if (relative.startsWith('..') || path.isAbsolute(relative)) return;
    const managed = this.#options.managedFiles();
    if (managed.has(relative)) {
      this.#pending.add(relative);
    } else {
      const prefix = relative === '' ? '' : `${relative}/`;
      let any = false;
      for (const managedPath of managed.keys()) {
        if (!managedPath.startsWith(prefix)) continue;
        this.#pending.add(managedPath);
        any = true;
      }
      if (!any) {
        // Perhaps a directory a running pass made for a file it is writing: once it ends, its files' directories are watched.
        this.#refreshAfterPass();
        return;
      }
    }
    this.#schedule();
  }

  #schedule(): void {
    if (this.#closed) return;
    this.#debounce?.abort();
    const debounce = new AbortController();
    this.#debounce = debounce;
    // `restore` when `clock` is absent: the options' type holds one of them.
    const clock = this.#options.clock ?? (this.#options.restore as LocalRestore).clock;
    clock.sleep(this.#options.debounceMs ?? DRIFT_DEBOUNCE_MS, debounce.signal).then(
      () => {
        if (this.#debounce === debounce) void this.#evaluate();
      },
      () => undefined,
    );
  }

  /**
   * One judgement at a time, in the order asked: a debounce timer's judgement and `judgeNow` would otherwise
   * run side by side, and `judgeNow` could return while the other still restores what it had taken.
   */
  #evaluate(): Promise<void> {
    this.#debounce = undefined;
    const judged = this.#judging.then(() => this.#judgeOnce());
    this.#judging = judged.catch(() => undefined);
    return judged;
  }

  /** A managed file drifted when its bytes or mode no longer match what the agent recorded writing. */
  async #judgeOnce(): Promise<void> {
    const { passes } = this.#options;
    // idle() resolves a turn later, and a pass may have started in that turn: wait until none runs.
    while (passes.busy) await passes.idle();
    if (this.#closed) return;
    const generation = passes.generation;
    const candidates = [...this.#pending];
    this.#pending.clear();
    const drifted: string[] = [];
    for (const relative of candidates) {
      const managed = this.#options.managedFiles().get(relative);
      if (managed === undefined) continue;
      // A file of another length than the one written is drift: not read to tell (NOT_HASHED).
      const onlySizes = managed.size === undefined ? {} : { onlySizes: new Set([managed.size]) };
      const current = await hashRegularFile(
        this.#options.fs,
        this.#options.rootDir,
        relative,
        onlySizes,
      ).catch((error: unknown) => (notAnswering(error) ? 'not answering' : null));
      // Its mount did not answer (the gate's ETIMEDOUT): nothing is known of it, so it is no drift; the pass
      // reports it `retrying`, and the next poll judges it again.
      if (current === 'not answering') continue;
      if (
        current !== undefined &&
        current !== null &&
        current.sha256 === managed.sha256 &&
        (current.mode === managed.mode || current.mode === managed.keptMode)
      ) {
        continue;
      }
      drifted.push(relative);
    }
    if (passes.generation !== generation) {
      // A pass started while we were reading: what we saw may be its own write. Judge again after it.
      for (const relative of candidates) this.#pending.add(relative);
      this.#schedule();
      return;
    }
    if (drifted.length === 0) return;
    const due = drifted.filter((relative) => this.#dueOrHeldOff(relative));
    if (due.length === 0) return;
    for (const relative of due) {
      this.#options.logger.warn(
        { path: relative, policy: this.#options.policy },
        this.#options.policy === 'restore'
          ? 'managed file changed by someone else: restoring it'
          : 'managed file changed by someone else (drift policy "report": left as it is)',
      );
    }
    const restore = this.#options.policy === 'restore' ? this.#options.restore : undefined;
    const needPass = restore === undefined ? due : await this.#restoreLocally(due, restore);
    if (needPass.length > 0) this.#options.onDrift(needPass);
  }

  /**
   * Whether `relative` may be acted on now. Only under a local restore: a file acted on less than its hold-off
   * ago is judged again when the hold-off ends (one re-judgement scheduled, however often it changes).
   */
  #dueOrHeldOff(relative: string): boolean {
    const restore = this.#options.restore;
    if (restore === undefined || this.#options.policy !== 'restore') return true;
    const now = restore.clock.monotonic();
    const last = this.#holdOffs.get(relative);
    if (last !== undefined && now < last.at + last.ms) {
      if (!last.waiting) {
        last.waiting = true;
        restore.clock.sleep(last.at + last.ms - now, this.#closing.signal).then(
          () => {
            last.waiting = false;
            this.#pending.add(relative);
            this.#schedule();
          },
          () => undefined,
        );
      }
      return false;
    }
    const fighting = last !== undefined && now - last.at < 2 * restore.maxHoldOffMs;
    const ms = fighting
      ? Math.min(Math.max(last.ms * 2, restore.minHoldOffMs), restore.maxHoldOffMs)
      : restore.minHoldOffMs;
    this.#holdOffs.set(relative, { at: now, ms, waiting: false });
    return true;
  }

  /** Writes each path back from the cache while no pass runs; returns the paths only a pass can repair. */
  async #restoreLocally(paths: readonly string[], restore: LocalRestore): Promise<string[]> {
    const { fs, rootDir, logger } = this.#options;
    const cache = new ContentCache(fs, restore.stateDir);
    const needPass: string[] = [];
    const restored: string[] = [];
    await this.#options.passes.exclusive(async () => {
      // The mounts checked once for the batch, each path judged after (fix36).
      const gone = await restore.rootMountsGone?.();
      for (const relative of paths) {
        if (this.#closed) return;
        // Into the bare mountpoint it would land on the filesystem underneath: the pass reports it retrying. Only
        // the mounts holding this path count: one gone elsewhere below rootDir holds nothing here back (fix34).
        if (gone !== undefined ? gone(relative) : await restore.rootMountGone?.(relative)) {
          needPass.push(relative);
          continue;
        }
        // Judged again inside the exclusive section: a pass that ran meanwhile may have changed the record.
        const managed = this.#options.managedFiles().get(relative);
        if (managed === undefined) continue;
        try {
          const parent = path.posix.dirname(relative);
          const data = await cache.get(managed.sha256, managed.size);
          const parentThere =
            parent === '.' ||
            (await lstatOrUndefined(fs, path.join(rootDir, parent), parent))?.isDirectory() === true;
          if (data === undefined || !parentThere) {
            needPass.push(relative);
            continue;
          }
          const gid = restore.fileMeta?.(relative)?.gid;
          const result = await publishFile(fs, {
            rootDir,
            relativePath: relative,
            data,
            mode: managed.mode,
            // A new inode gets the agent's group: without the rule's group, the file's readers lost it.
            ...(gid === undefined ? {} : { gid }),
            dirMode: restore.dirMode,
          });
          if (result.outcome !== 'unchanged') restored.push(relative);
        } catch (error) {
          logger.warn({ err: error, path: relative }, 'local restore failed: asking for a repair pass');
          needPass.push(relative);
        }
      }
    });
    if (restored.length > 0) restore.onRestored(restored);
    return needPass;
  }
}

/** A mount that did not answer in time (cli/mount-gate.ts: `ETIMEDOUT`), as itself or as the writer's DiskError. */
function notAnswering(error: unknown): boolean {
  return errnoCode(error) === 'ETIMEDOUT' || (error as { errno?: unknown } | null)?.errno === 'ETIMEDOUT';
}
