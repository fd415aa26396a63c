// The state directory: its lock, the sweep of temp files a crash left, and loading and persisting what is in it.
import path from 'node:path';
import type { Clock, WallClock } from '../lib/clock.js';
import { errnoCode } from '../lib/errors.js';
import type { FsPort } from '../lib/fs-port.js';
import type { Logger } from '../lib/logger.js';
import { type CleanExitScope, cleanExitScope, leaveCleanExit, takeCleanExit } from './clean-exit.js';
import { CACHE_DIR, ContentCache, holdOffText } from './content-cache.js';
import { DirectoryAsides } from './directory-asides.js';
import { type SweepSkip, sweepTempFiles } from './durable-writer.js';
import { DiskError, rootConditionOf, StateDirError } from './errors.js';
import { FileFingerprints } from './fingerprints.js';
import { IntentJournal, type WriteIntent } from './intent-journal.js';
import {
  acquireRootLock,
  acquireStateLock,
  HOLDER_EVIDENCE_MS,
  LEGACY_HELPER_PERL,
  type StateLock,
} from './lock.js';
import { StatusOutbox } from './outbox.js';
import {
  emptyState,
  type LocalState,
  loadLocalState,
  renameAsideUnique,
  STATE_FILE,
  saveLocalState,
} from './state.js';
import { type StateSnapshot, sameAsSnapshot, snapshotState } from './state-snapshot.js';

/** A junk tree of unreadable directories must not make one log line of megabytes. */
const MAX_SWEEP_SKIPS_LOGGED = 20;

export interface StateDirSettings {
  stateDir: string;
  rootDir: string;
  deviceId: string;
}

export class StateDir {
  readonly state: LocalState;
  readonly outbox: StatusOutbox;
  readonly cache: ContentCache;
  /** Identities of managed files whose bytes were hashed: observation skips reading those unchanged. */
  readonly fingerprints: FileFingerprints;
  /** Writes declared before their renames and not yet recorded by a durable state.json (intent-journal.ts). */
  readonly intents: IntentJournal;
  /** True for dry runs: nothing is locked, swept or persisted. */
  readonly readOnly: boolean;
  readonly #fs: FsPort;
  readonly #settings: StateDirSettings;
  readonly #logger: Logger;
  #lock: StateLock | undefined;
  /**
   * Whether the outbox was made durable by this process: until then (and after any failed persist) unchanged
   * bytes are fsynced anyway, since an earlier run may have died before its fsync.
   */
  #durable = false;
  /** What state.json holds, when known (loaded, or written by this process); undefined after a failed save. */
  #persisted: StateSnapshot | undefined;
  /** Whether state.json was made durable by this process (as `#durable`, for state.json alone). */
  #stateDurable = false;
  /** Temp files swept from the root at open, handed to the first pass's result once. */
  #sweptTempFiles: string[];
  /**
   * rootDir held no temp file of this agent at open (swept with nothing left over, or skipped on a clean-exit
   * marker): the scope and last real sweep a clean end's marker carries.
   */
  readonly #cleanAtOpen: { scope: CleanExitScope; sweptAt: number } | undefined;

  private constructor(
    fs: FsPort,
    settings: StateDirSettings,
    logger: Logger,
    parts: {
      state: LocalState;
      outbox: StatusOutbox;
      fingerprints: FileFingerprints;
      intents: IntentJournal;
      readOnly: boolean;
      swept: string[];
      lock?: StateLock;
      persisted?: StateSnapshot;
      cleanAtOpen?: { scope: CleanExitScope; sweptAt: number };
      /** What the content cache times its hold-off of copies by (ContentCache.holdOffCopies). */
      clock?: Pick<Clock, 'monotonic'>;
    },
  ) {
    this.#fs = fs;
    this.#settings = settings;
    this.#logger = logger;
    this.state = parts.state;
    this.outbox = parts.outbox;
    this.fingerprints = parts.fingerprints;
    this.intents = parts.intents;
    this.cache = new ContentCache(fs, settings.stateDir, parts.clock);
    this.readOnly = parts.readOnly;
    this.#sweptTempFiles = parts.swept;
    this.#lock = parts.lock;
    this.#persisted = parts.persisted;
    this.#cleanAtOpen = parts.cleanAtOpen;
  }

  /**
   * Takes the lock, sweeps temp files a crash left in the root and the state directory (both must exist),
   * then loads state and outbox. `readOnly` (dry runs) does none of the first two and tolerates no state.
   */
  static async open(
    fs: FsPort,
    settings: StateDirSettings,
    logger: Logger,
    options: {
      clock: WallClock & Partial<Pick<Clock, 'sleep' | 'monotonic'>>;
      readOnly?: boolean;
      euid?: number;
      /** The daemon: on Node 20 also hold rootDir's lock name as agents before lock24 on Node 24 bound it (mut26). */
      legacyLockHelper?: boolean;
    },
  ): Promise<StateDir> {
    const { clock } = options;
    const readOnly = options.readOnly ?? false;
    let lock: StateLock | undefined;
    let asides: DirectoryAsides | undefined;
    // The running process's record (a reload): its names held until this open succeeds, then handed over.
    const running = fs.directorySyncs?.asides;
    const previous = !readOnly && running instanceof DirectoryAsides ? running : undefined;
    let swept: string[] = [];
    let cleanAtOpen: { scope: CleanExitScope; sweptAt: number } | undefined;
    if (!readOnly)
      await refuseRootInForeignStateDir(fs, settings.stateDir, options.euid ?? process.geteuid?.());
    try {
      if (!readOnly) {
        // Before the sweep: the temp files of another agent's write in progress are not leftovers.
        const stateLock = await acquireStateLock(fs, settings.stateDir);
        lock = stateLock;
        // And rootDir, whatever the other agent's stateDir (lock.ts): before the sweep, for the same reason.
        const rootLock = await lockRootDir(fs, settings, clock, options.legacyLockHelper === true);
        if (rootLock.unproven !== undefined) logger.warn({ rootDir: settings.rootDir }, rootLock.unproven);
        lock = {
          ensureHeld: () => stateLock.ensureHeld(),
          release: async () => {
            await rootLock.release();
            await stateLock.release();
          },
        };
        // Before any pass: a directory a renewal left renamed aside is put back before its files are written anew.
        // A reload to another stateDir carries the running process's records over, durably, before it forgets them.
        asides = await DirectoryAsides.open(
          fs,
          settings.stateDir,
          settings.rootDir,
          fs.directorySyncs,
          logger,
          {
            euid: options.euid ?? process.geteuid?.() ?? -1,
            clock,
            ...(previous === undefined ? {} : { from: previous }),
          },
        );
        const skipped: Array<SweepSkip & { under: 'rootDir' | 'stateDir' }> = [];
        const rootFs = fs.sweepPort?.(settings.rootDir) ?? fs;
        // The last run ended cleanly with no temp file of its own left in rootDir (store/clean-exit.ts): no sweep.
        const scope = await cleanExitScope(fs, rootFs, settings.stateDir, settings.rootDir);
        const sweptAt = await takeCleanExit(fs, settings.stateDir, scope, clock);
        try {
          if (sweptAt === undefined) {
            swept = await sweepTempFiles(rootFs, settings.rootDir, (skip) => {
              skipped.push({ ...skip, under: 'rootDir' });
            });
            const leftOver = skipped.some((skip) => skip.operation !== 'not entered');
            if (scope !== undefined && !leftOver) cleanAtOpen = { scope, sweptAt: clock.now() };
          } else if (scope !== undefined) {
            cleanAtOpen = { scope, sweptAt };
          }
        } catch (error) {
          // rootDir on a mount that did not answer in time (cli/mount-gate.ts): the agent starts without the sweep,
          // its files retried until the mount answers; the next start sweeps.
          if (!(error instanceof DiskError) || error.errno !== 'ETIMEDOUT') throw error;
          logger.warn(
            { err: error },
            'the start-up sweep of rootDir was skipped: its mount did not answer (a dead NFS server, a wedged FUSE ' +
              "daemon?); a temp file a crash left there stays until the next start's sweep",
          );
        }
        if (swept.length > 0)
          logger.warn({ files: swept }, 'removed temp files left by an interrupted write');
        await setAsideCacheUnlessDirectory(fs, settings.stateDir, logger, clock);
        const sweptState = await sweepTempFiles(fs, settings.stateDir, (skip) => {
          skipped.push({ ...skip, under: 'stateDir' });
        });
        // A mount it did not enter was skipped by design (FsPort.mountsThatMayHangBelow), not met as trouble.
        const mounts = skipped.filter((skip) => skip.operation === 'not entered').map((skip) => skip.path);
        if (mounts.length > 0) {
          logger.info(
            { mounts: mounts.slice(0, MAX_SWEEP_SKIPS_LOGGED), count: mounts.length },
            'the start-up sweep did not enter these mounts below rootDir, on purpose: a network or FUSE filesystem ' +
              'may hang, and a hung one would stop the agent from starting; a temp file a crash left inside one ' +
              'stays (it costs only its bytes)',
          );
        }
        const troubles = skipped.filter((skip) => skip.operation !== 'not entered');
        if (troubles.length > 0) {
          logger.warn(
            { skipped: troubles.slice(0, MAX_SWEEP_SKIPS_LOGGED), count: troubles.length },
            'the start-up sweep of temp files could not read or remove some entries: left as they are, started anyway',
          );
        }
        if (sweptState.length > 0) {
          logger.warn(
            { stateFiles: sweptState },
            'removed temp files of the state directory left by a crash',
          );
        }
      }
      const { state, outcome, persisted } = await loadLocalState(
        fs,
        settings.stateDir,
        settings.deviceId,
        logger,
        settings.rootDir,
      ).catch((error: unknown) => {
        if (!readOnly) throw error;
        return {
          state: emptyState(settings.deviceId, settings.rootDir),
          outcome: 'missing' as const,
          persisted: undefined,
        };
      });
      logger.debug({ outcome, managedFiles: state.files.size }, 'local state loaded');
      if (outcome === 'corrupt' && !readOnly) await keepCorruptState(fs, settings.stateDir, logger);
      const outbox = readOnly
        ? StatusOutbox.ephemeral(fs, settings.stateDir, logger)
        : await StatusOutbox.open(fs, settings.stateDir, logger, clock, options.euid ?? process.geteuid?.());
      const fingerprints = await FileFingerprints.load(fs, settings.stateDir, settings.rootDir, logger, {
        clock,
        setAside: !readOnly,
        sharingWith: state,
      });
      const intents = readOnly
        ? IntentJournal.empty(fs, settings.stateDir, settings.rootDir, logger)
        : await IntentJournal.open(fs, settings.stateDir, settings.rootDir, logger, clock);
      // Only now: the ledger outlives a reload (one per process), and an open that fails leaves the running
      // reconciler on it, whose record must still hold the names the start could not put back.
      if (asides !== undefined) {
        fs.directorySyncs?.keepAsidesIn(asides);
        await previous?.handOver(settings.stateDir);
      }
      return new StateDir(fs, settings, logger, {
        state,
        outbox,
        fingerprints,
        intents,
        readOnly,
        swept,
        ...(cleanAtOpen === undefined ? {} : { cleanAtOpen }),
        ...(lock === undefined ? {} : { lock }),
        ...(persisted === undefined ? {} : { persisted }),
        ...(clock.monotonic === undefined ? {} : { clock: clock as Pick<Clock, 'monotonic'> }),
      });
    } catch (error) {
      // The running record acts on its records again; this open's own tries nothing more, nor writes.
      asides?.discard();
      previous?.takeBack();
      await lock?.release();
      throw error;
    }
  }

  get settings(): Readonly<StateDirSettings> {
    return this.#settings;
  }

  /** The temp files swept at open, once: the first pass reports them. */
  takeSweptTempFiles(): string[] {
    const swept = this.#sweptTempFiles;
    this.#sweptTempFiles = [];
    return swept;
  }

  /** Makes state and queued reports durable (unchanged bytes are not rewritten), then saves the fingerprints. */
  async persist(): Promise<void> {
    if (this.readOnly) return;
    await this.persistRecords();
    await this.#saveFingerprints();
  }

  /**
   * State and queued reports, durably, in that order; not the fingerprints (a cache, saved at the end of a
   * pass). A pass that reports while it still writes calls this before each delivery: the service never hears
   * of a file that state.json does not record as the agent's.
   */
  async persistRecords(): Promise<void> {
    if (this.readOnly) return;
    await this.#saveState();
    await this.#durably((ensureDurable) =>
      this.#withRoom('outbox.json', () => this.outbox.persist({ ensureDurable })),
    );
  }

  /**
   * `save` of a state file, once more after emptying the content cache when the disk holding stateDir is full
   * (ENOSPC, EDQUOT). The daemon copies every file it writes into the cache, so on a stateDir smaller than
   * rootDir's disk the copies took the last free bytes and no state.json, outbox.json or intent.json could be
   * written again (the copies of managed files are kept by the prune): no pass converged and no new version was
   * written, for good (adv29). The cache is only a shortcut: a drift restore without its copy runs a pass, and a
   * write whose set-aside bytes went is postponed to the next pass (content-cache.ts).
   */
  async #withRoom<T>(file: string, save: () => Promise<T>): Promise<T> {
    try {
      return await save();
    } catch (error) {
      if (rootConditionOf(error) !== 'full') throw error;
      let emptied = 0;
      let failure: unknown;
      const holdOff = this.cache.holdOffCopies();
      await this.cache.giveWay().then(
        (deleted) => {
          emptied = deleted;
        },
        (pruneError: unknown) => {
          failure = pruneError;
        },
      );
      this.#logger.warn(
        {
          err: error,
          file,
          cacheEntriesDeleted: emptied,
          ...(failure === undefined ? {} : { pruneError: failure }),
        },
        `the disk holding stateDir is full: emptied the content cache to make room for the state files, and copies no more written files there for ${holdOffText(holdOff)}`,
      );
      return save();
    }
  }

  /** A cache: written only when it changed, and a failure costs the next pass some reads, nothing more. */
  async #saveFingerprints(): Promise<void> {
    this.fingerprints.retain(this.state.files);
    this.fingerprints.retainItems(this.state.instances);
    await this.fingerprints.save(this.#fs, this.#settings.stateDir).catch((error: unknown) => {
      this.#logger.warn({ err: error }, 'could not save the file fingerprints');
    });
  }

  async persistState(): Promise<void> {
    if (this.readOnly) return;
    await this.#saveState();
  }

  /**
   * state.json, durably, unless it already holds this state: then there is nothing to serialise, read back or
   * write (an idle pass of 1,000 instances spent ~20 ms of CPU on that). An equal state.json that an earlier
   * process wrote may not be durable yet (it may have died before its fsync): that matters only once a report
   * can follow, so while reports are queued it is fsynced as before, by the first save of this process. With
   * none queued, nothing this process told the service depends on it, and a report queued later comes with a
   * persist of its own before its delivery.
   */
  async #saveState(): Promise<void> {
    const persisted = this.#persisted;
    // The declared writes this state records (intent-journal.ts), taken before it is serialised: settled once
    // a durable state.json holds them. A batch landing during the save stays declared.
    const recorded = this.intents.recordedIn(this.state.files);
    if (persisted !== undefined && sameAsSnapshot(this.state, persisted)) {
      if (this.#stateDurable) return this.intents.settle(recorded);
      if (this.outbox.size === 0) return;
    }
    const ensureDurable = !this.#stateDurable;
    // This process wrote `persisted` durably (a state loaded at open may equal it): the bytes in place are that
    // snapshot's, which this state is not, so nothing is read back (a first sync of 1,000 read ~200 KB back and
    // serialised it twice in each of its later persists).
    const changed = persisted !== undefined && this.#stateDurable;
    this.#persisted = undefined;
    this.#stateDurable = false;
    // Taken in the same synchronous step as saveLocalState serialises the state.
    const snapshot = snapshotState(this.state);
    await this.#withRoom('state.json', () =>
      saveLocalState(this.#fs, this.#settings.stateDir, this.state, { ensureDurable, compare: !changed }),
    );
    this.#persisted = snapshot;
    this.#stateDurable = true;
    await this.intents.settle(recorded);
  }

  async #durably(persist: (ensureDurable: boolean) => Promise<unknown>): Promise<void> {
    const ensureDurable = !this.#durable;
    this.#durable = false;
    await persist(ensureDurable);
    this.#durable = true;
  }

  /**
   * Declares writes about to be renamed into the root (intent-journal.ts): durable before any of their renames,
   * so a run that dies before state.json records them leaves the proof that their bytes are the agent's.
   */
  async declareWrites(intents: readonly WriteIntent[]): Promise<void> {
    if (this.readOnly || intents.length === 0) return;
    await this.#withRoom('intent.json', () => this.intents.declare(intents));
  }

  /**
   * Records the declared writes whose exact bytes are at their paths and that state.json does not record yet
   * (a run died between a rename and the persist), each fsynced first; before a pass plans. Returns the paths.
   * Those whose path fails `adoptable` (a mount below rootDir gone holds them: fix34) wait, still declared.
   */
  async adoptDeclaredWrites(
    now: string,
    adoptable?: (path: string) => boolean,
    removed?: (path: string) => void,
  ): Promise<string[]> {
    if (this.readOnly || this.intents.size === 0) return [];
    return this.intents.adopt(this.state, now, adoptable, removed);
  }

  /**
   * Marks the declared writes at `paths` not yet recorded by a durable state.json as about to be removed, durably,
   * before their removals (intent-journal.ts `declareRemovals`): nothing written when none is declared there.
   */
  async declareRemovals(paths: readonly string[]): Promise<void> {
    if (this.readOnly || paths.length === 0) return;
    await this.#withRoom('intent.json', () => this.intents.declareRemovals(paths));
  }

  /**
   * Whether a managed file, an instance's recorded path or a declared write lies at or below `mountPoint`
   * (relative to rootDir, compared segment by segment): a mount below rootDir that is gone and holds none of them
   * is forgotten (root-mount.ts `holdsManaged`, fix34).
   */
  holdsUnder(mountPoint: string): boolean {
    const under = (relative: string) => relative === mountPoint || relative.startsWith(`${mountPoint}/`);
    for (const relative of this.state.files.keys()) if (under(relative)) return true;
    for (const record of this.state.instances.values()) if (under(record.relativePath)) return true;
    return this.intents.declares(under);
  }

  /** Drops cached contents no managed file references any more (after a full pass). */
  async pruneCache(): Promise<void> {
    const keep = new Set([...this.state.files.values()].map((file) => file.sha256));
    await this.cache.prune(keep).catch((error: unknown) => {
      this.#logger.warn({ err: error }, 'could not prune the content cache');
    });
  }

  /**
   * Before a pass writes: the lock taken at open must still be this agent's (StateLock.ensureHeld). A lock
   * removed under the running agent is taken again, logged; one another live agent took meanwhile throws
   * StateLockedError, so this agent writes nothing beside it.
   */
  async holdLock(): Promise<void> {
    if (this.#lock === undefined) return;
    if (await this.#lock.ensureHeld()) {
      // Removed with the lock, state.json would never come back while the state stays what it holds: a restart
      // would then start empty and own none of the files the agent wrote. The next persist writes them afresh.
      this.#persisted = undefined;
      this.#stateDurable = false;
      this.#durable = false;
      this.#logger.warn(
        { stateDir: this.#settings.stateDir },
        'agent.lock was gone from the state directory (removed under the running agent): taken again, state.json and outbox.json written again',
      );
    }
  }

  /**
   * Releases the directory for another agent; nothing may be persisted afterwards. `clean`: this process wrote
   * nothing into rootDir (`--once`: its pass planned no write nor removal and converged), so no temp file of its
   * own can be there; with none there at open either, the next start may skip rootDir's sweep (clean-exit.ts).
   */
  async close(options: { clean?: boolean } = {}): Promise<void> {
    const clean = this.#cleanAtOpen;
    if (options.clean === true && clean !== undefined && this.#lock !== undefined)
      await leaveCleanExit(this.#fs, clean.scope, clean.sweptAt);
    await this.#lock?.release();
    this.#lock = undefined;
  }
}

/**
 * Root may not write into a stateDir another user owns (the service's `config-agent`): an operator's `sudo
 * config-agent --once` left state.json and outbox.json as root's 0600 files, and the service then exited 78 on
 * every start (EACCES reading them) until someone chowned them back; directories it made in rootDir stayed
 * root's too. Refused before anything is written. A stateDir root owns, and every other user, are not judged.
 */
async function refuseRootInForeignStateDir(
  fs: FsPort,
  stateDir: string,
  euid: number | undefined,
): Promise<void> {
  if (euid !== 0) return;
  let owner: number;
  try {
    owner = (await fs.stat(stateDir)).uid;
  } catch (error) {
    // Missing or unreadable: the lock that follows names the problem.
    if (errnoCode(error) !== undefined) return;
    throw error;
  }
  if (owner === 0) return;
  throw new StateDirError(
    stateDir,
    'refusing to run as root',
    undefined,
    `it belongs to uid ${owner}, the agent's user: run the command as that user (sudo -u '#${owner}' ...), or ` +
      "ask the running agent with 'config-agent sync'; as root, state.json and outbox.json would become root's " +
      'and the agent would no longer start',
  );
}

/** Where an unreadable state.json is kept for an operator: the last one only, so it never accumulates. */
export const CORRUPT_STATE_FILE = `${STATE_FILE}.corrupt`;

/**
 * A state.json that cannot be parsed is renamed aside before the first persist replaces it: it is the only
 * record of which files the agent wrote, so the files of instances retired later (which the agent, starting
 * empty, will not delete) can still be found by someone. It was overwritten by the first pass.
 */
async function keepCorruptState(fs: FsPort, stateDir: string, logger: Logger): Promise<void> {
  const kept = path.join(stateDir, CORRUPT_STATE_FILE);
  try {
    await fs.rename(path.join(stateDir, STATE_FILE), kept);
    logger.error({ kept }, 'the unreadable local state was kept aside for inspection');
  } catch (error) {
    logger.warn({ err: error }, 'could not keep the unreadable local state aside');
  }
}

/**
 * `cache` that is not a real directory (a file, FIFO, or a symlink, which the cache's writes would follow) is
 * renamed aside to `cache.not-a-directory-<ms>` (`-<n>` added when taken: renameAsideUnique): every put and prune failed (a warning each full pass) and a
 * symlink took the entries wherever it pointed. A cache costs a pass when lost, so a failure here only warns.
 */
async function setAsideCacheUnlessDirectory(
  fs: FsPort,
  stateDir: string,
  logger: Logger,
  clock: WallClock,
): Promise<void> {
  const at = path.join(stateDir, CACHE_DIR);
  const stats = await fs.lstat(at).catch(() => undefined);
  if (stats === undefined || stats.isDirectory()) return;
  try {
    const aside = await renameAsideUnique(fs, at, `${at}.not-a-directory-${clock.now()}`);
    if (aside === undefined) {
      logger.warn(
        { file: CACHE_DIR },
        'could not move the content cache aside (not a directory): no free name',
      );
      return;
    }
    logger.warn({ file: CACHE_DIR, aside }, 'the content cache was not a directory: moved aside');
  } catch (error) {
    logger.warn({ err: error }, 'could not move the content cache aside (not a directory)');
  }
}

/**
 * rootDir's lock (acquireRootLock), keyed by its device and inode; none when rootDir cannot be stat()ed (a mount
 * that does not answer: the sweep, which follows, says so).
 */
async function lockRootDir(
  fs: FsPort,
  settings: StateDirSettings,
  clock: Partial<Pick<Clock, 'sleep'>>,
  legacyLockHelper = false,
): Promise<{ release(): Promise<void>; unproven?: string }> {
  const keyOf = async (dir: string) => {
    try {
      const stats = await (fs.sweepPort?.(dir) ?? fs).stat(dir);
      return { key: `${stats.dev}:${stats.ino}`, uid: stats.uid, gid: stats.gid, mode: stats.mode };
    } catch {
      return undefined;
    }
  };
  // The holder's paths answer within HOLDER_EVIDENCE_MS or trust nothing (fix33); a stand-in clock without sleep: unbounded.
  const sleep = clock.sleep?.bind(clock);
  const bound = sleep === undefined ? undefined : { sleep, ms: HOLDER_EVIDENCE_MS };
  return await acquireRootLock(
    settings.rootDir,
    keyOf,
    settings.stateDir,
    bound,
    legacyLockHelper ? LEGACY_HELPER_PERL : undefined,
  );
}
