// The temp names directory renewals rename directories to, recorded before the rename and put back at the next start or a retry.
import path from 'node:path';
import * as z from 'zod';
import type { WallClock } from '../lib/clock.js';
import { errnoCode } from '../lib/errors.js';
import type { FsPort } from '../lib/fs-port.js';
import type { JsonWeight } from '../lib/json-weigher.js';
import type { Logger } from '../lib/logger.js';
import type { DirectorySyncLedger, RenewalAside, RenewalAsides } from './directory-syncs.js';
import { restoreRenewedDirectory, writeDurableJson } from './durable-writer.js';
import { TEMP_PREFIX, validateRelativePath } from './path-guard.js';
import { sameRoot } from './same-root.js';
import {
  MAX_STATE_FILE_DEPTH,
  parseStateFile,
  readStateDirFileOrSetAside,
  WEIGHED_INSTANCES,
} from './state.js';

export const ASIDES_FILE = 'renewal-asides.json';

/** Its bounds (state.ts `readStateDirFile`): a record's four members and the comma after it (9) per instance. */
const ASIDES_WEIGHT: JsonWeight = { maxTokens: 9 * WEIGHED_INSTANCES + 16, maxDepth: MAX_STATE_FILE_DEPTH };

/** The only names a renewal gives a directory aside: the temp prefix and 24 hex digits. */
const ASIDE_NAME = new RegExp(`^${TEMP_PREFIX.replaceAll('.', '\\.')}[0-9a-f]{24}$`);

/** A directory renamed (or about to be) from `dir`/`name` to `dir`/`aside` under `rootDir` (absolute). */
export interface AsideEntry {
  rootDir: string;
  dir: string;
  name: string;
  aside: string;
}

const asidesFile = z.object({
  version: z.literal(1),
  asides: z.array(z.object({ rootDir: z.string(), dir: z.string(), name: z.string(), aside: z.string() })),
});

/** Whether `entry` names a temp name and a directory entry the agent could have renamed, and nothing else. */
function wellFormed(entry: AsideEntry): boolean {
  if (!path.isAbsolute(entry.rootDir) || !ASIDE_NAME.test(entry.aside)) return false;
  try {
    validateRelativePath(entry.dir === '' ? entry.name : `${entry.dir}/${entry.name}`);
    return !entry.name.includes('/');
  } catch {
    return false;
  }
}

/** What one try to put a recorded directory back answered (`failed`: it threw, e.g. the rename's EIO). */
type RestoreOutcome = 'restored' | 'gone' | 'occupied' | 'kept' | 'failed';

/**
 * The tries in progress by record (`entryKey`), shared by a DirectoryAsides and every one a reload hands its
 * records to: a record is tried by one of them at a time, and a try the one before started is joined, never
 * made twice (two renames of one directory at once; the loser's ENOENT read as a failure).
 */
type SharedTries = Map<string, Promise<RestoreOutcome>>;

function entryKey(entry: AsideEntry): string {
  return JSON.stringify([entry.rootDir, entry.dir, entry.name, entry.aside]);
}

/**
 * `renewal-asides.json` in the state directory: every directory a renewal renamed aside (or was about to),
 * written durably before the first rename. A record whose rename back a good fsync of its parent covered is
 * dropped at the next record (the ledger says so); the file is rewritten at start, after the restore. Records
 * the start could not put back are tried again by `retry` (the daemon: after a reload, when rootDir's mount
 * is seen anew, and with backoff while any remain) and by a write that would make a directory at their name.
 */
export class DirectoryAsides implements RenewalAsides {
  readonly #fs: FsPort;
  readonly #stateDir: string;
  /** The root directory this process writes (resolved): only its records are put back. */
  readonly #root: string;
  readonly #ledger: DirectorySyncLedger | undefined;
  readonly #logger: Logger;
  /** Records of this process, until their rename back is durable (or they never moved anything). */
  #recorded: Array<AsideEntry & RenewalAside> = [];
  /** Records not put back yet (something at the name, out of sight, another root): kept until one is. */
  #kept: AsideEntry[];
  /** Of those, the ones under this root that may still be aside (the restore failed, or was refused). */
  #held: AsideEntry[] = [];
  /** A record's try in progress: a retry and the writes below its name share it. */
  readonly #trying = new Map<AsideEntry, Promise<RestoreOutcome>>();
  /** Every try in progress, this one's and those of the records' earlier holders (a reload): see SharedTries. */
  readonly #tries: SharedTries;
  /**
   * A reload's open took the records over (`open`'s `from`): this one starts no try and writes no tidying of its
   * own until given them back (`takeBack`, that open failed) or handing them over for good (`handOver`).
   */
  #lent = false;
  /** The retry of every kept record in progress: one at a time. */
  #retrying: Promise<number> | undefined;
  /** Records whose failure was told at warn or error: a later retry's same answer goes to debug. */
  readonly #told = new Set<AsideEntry>();
  /** Handed over to the records of another state directory (a reload): writes nothing more. */
  #handedOver = false;
  readonly #euid: number;
  #last: Promise<unknown> = Promise.resolve();

  private constructor(
    fs: FsPort,
    stateDir: string,
    root: string,
    ledger: DirectorySyncLedger | undefined,
    logger: Logger,
    kept: AsideEntry[],
    euid: number,
    tries: SharedTries,
  ) {
    this.#tries = tries;
    this.#euid = euid;
    this.#fs = fs;
    this.#stateDir = stateDir;
    this.#root = root;
    this.#ledger = ledger;
    this.#logger = logger;
    this.#kept = kept;
  }

  /**
   * Puts back every directory a run that died between a renewal's two renames left aside under `rootDir`,
   * then returns the record for this process's renewals. See `restoreRenewedDirectory` for what is put back.
   * `carried`: the records of the state directory a reload leaves (`handOver`); they are written durably into
   * this one before it is used (a failure to write them fails the open, and so the reload). `from`: the running
   * process's record that a reload replaces: from now on it tries and tidies nothing (`takeBack` if this open, or
   * the rest of the reload, fails), its writes in progress end before the record file is read, its records are
   * `carried` (unless given), and a try of its still in progress (a background `retry`) is not made again here:
   * that record stays held and kept, and is settled here by that try's answer when it comes (the reload does not
   * wait for it: a try that hangs on a mount holds no reload).
   */
  static async open(
    fs: FsPort,
    stateDir: string,
    rootDir: string,
    ledger: DirectorySyncLedger | undefined,
    logger: Logger,
    options: { euid: number; clock: WallClock; carried?: readonly AsideEntry[]; from?: DirectoryAsides },
  ): Promise<DirectoryAsides> {
    const { from } = options;
    if (from === undefined) return DirectoryAsides.#open(fs, stateDir, rootDir, ledger, logger, options);
    from.#lent = true;
    try {
      // Its record file as it last wrote it (a write in progress ends first; none starts after).
      await from.#last;
      return await DirectoryAsides.#open(fs, stateDir, rootDir, ledger, logger, {
        ...options,
        carried: options.carried ?? from.records(),
        tries: from.#tries,
      });
    } catch (error) {
      from.takeBack();
      throw error;
    }
  }

  static async #open(
    fs: FsPort,
    stateDir: string,
    rootDir: string,
    ledger: DirectorySyncLedger | undefined,
    logger: Logger,
    options: { euid: number; clock: WallClock; carried?: readonly AsideEntry[]; tries?: SharedTries },
  ): Promise<DirectoryAsides> {
    const { euid, clock } = options;
    const root = path.resolve(rootDir);
    const found = await spelledAs(fs, root, await readAsides(fs, stateDir, logger, clock));
    const carried = (
      await spelledAs(
        fs,
        root,
        (options.carried ?? []).filter((entry) => wellFormed(entry)),
      )
    ).filter((entry) => !found.some((other) => sameEntry(other, entry)));
    const records = [...found, ...carried];
    for (const entry of records) {
      if (entry.rootDir !== root)
        logger.warn({ ...entry }, 'a directory renamed aside under another root directory is left as it is');
    }
    const asides = new DirectoryAsides(
      fs,
      stateDir,
      root,
      ledger,
      logger,
      records,
      euid,
      options.tries ?? new Map(),
    );
    // Nothing is written below these names before the restore ends (no pass runs yet): all held meanwhile.
    asides.#held = records.filter((entry) => entry.rootDir === root);
    const dropped = await asides.#restoreKept();
    if (carried.length > 0) {
      // The records of the state directory left behind: durable here before that one forgets them.
      await asides.#write();
    } else if (dropped > 0) {
      // Only tidying: a record left on disk names an aside that is gone, which the next start drops again.
      await asides.#write().catch((error: unknown) => {
        logger.warn({ err: error, file: ASIDES_FILE }, 'could not rewrite the renewal record');
      });
    }
    return asides;
  }

  /** Records not put back yet under this process's root directory (retried while any remain). */
  get pending(): number {
    return this.#kept.filter((entry) => entry.rootDir === this.#root).length;
  }

  /**
   * Tries once more to put back every record of this root not put back yet (in rounds, as at start), then
   * rewrites the record file if any was dropped; answers how many remain. One retry at a time: a call while one
   * runs shares it. Never rejects.
   */
  retry(): Promise<number> {
    if (this.#retrying === undefined) {
      this.#retrying = this.#retryNow().finally(() => {
        this.#retrying = undefined;
      });
    }
    return this.#retrying;
  }

  async #retryNow(): Promise<number> {
    if (this.pending > 0 && !this.#lent) {
      const dropped = await this.#restoreKept();
      if (dropped > 0) {
        await this.#write(true).catch((error: unknown) => {
          this.#logger.warn({ err: error, file: ASIDES_FILE }, 'could not rewrite the renewal record');
        });
      }
    }
    // Answered once the record file says what this one holds (a try settled meanwhile may have rewritten it).
    await this.#last;
    return this.pending;
  }

  /**
   * `open`'s failed (or the reload after it did): the records are this one's again, tried and tidied as before.
   * Records the failed open put back are found back at their names by the next retry, and dropped.
   */
  takeBack(): void {
    if (!this.#handedOver) this.#lent = false;
  }

  /** A record of an open that failed (its reload did): it tries nothing more and writes nothing. */
  discard(): void {
    this.#lent = true;
    this.#handedOver = true;
  }

  /**
   * Every record of this root tried once (a record inside a directory aside is found once that one is back:
   * rounds until none is), then dropped when back, or gone with something at its name; answers how many were.
   * Lent to a reload's open meanwhile: no further try (answers 0). A record whose try an earlier holder started
   * (only an open meets one: none starts once lent) is not waited for (see `open`), but settled by its answer.
   */
  async #restoreKept(): Promise<number> {
    let pending = this.#kept.filter((entry) => entry.rootDir === this.#root);
    const dropped = new Set<AsideEntry>();
    for (let restored = true; restored && pending.length > 0; ) {
      restored = false;
      const gone: AsideEntry[] = [];
      for (const entry of pending) {
        if (this.#lent) return 0;
        if (this.#tries.has(entryKey(entry)) && !this.#trying.has(entry)) {
          this.#settleLater(entry);
          continue;
        }
        const outcome = await this.#tryRestore(entry);
        if (outcome === 'gone') gone.push(entry);
        else if (outcome === 'restored') {
          restored = true;
          dropped.add(entry);
        }
      }
      pending = gone;
    }
    if (this.#lent) return 0;
    // Neither at its aside name nor at its name (its file system not mounted yet, a directory on the way
    // renamed): out of sight, not back; kept for a later try that sees it. Something at the name: it is back.
    const back: AsideEntry[] = [];
    for (const entry of pending) {
      const at = path.join(entry.rootDir, entry.dir, entry.name);
      const found = await this.#fs.lstat(at).then(
        () => true,
        (error: unknown) => !['ENOENT', 'ENOTDIR'].includes(errnoCode(error) ?? ''),
      );
      if (found) back.push(entry);
      else {
        // Info, not a warning: also what a directory removed (pruned) since its renewal leaves, till made anew.
        this.#tell(
          'info',
          entry,
          'a directory renamed aside is neither at its name nor aside (not mounted?): its record is kept for a later try',
        );
      }
    }
    // Not found because a directory on its way is itself still aside (not put back): out of sight, not gone.
    const outOfSight = (entry: AsideEntry) =>
      this.#kept.some(
        (outer) => outer !== entry && !dropped.has(outer) && !back.includes(outer) && isBelow(entry, outer),
      );
    for (let moved = true; moved; ) {
      moved = false;
      for (const entry of back) {
        if (outOfSight(entry)) {
          back.splice(back.indexOf(entry), 1);
          moved = true;
        }
      }
    }
    for (const entry of back) dropped.add(entry);
    this.#kept = this.#kept.filter((entry) => !dropped.has(entry));
    this.#held = this.#held.filter((entry) => !dropped.has(entry));
    for (const entry of dropped) this.#told.delete(entry);
    return dropped.size;
  }

  /**
   * One try to put `entry` back (shared by whoever asks meanwhile, in this one or in the one a reload handed its
   * records to), its record's hold updated by the answer. Its answer is told once, by the one that started it.
   */
  #tryRestore(entry: AsideEntry): Promise<RestoreOutcome> {
    let trying = this.#trying.get(entry);
    if (trying === undefined) {
      const key = entryKey(entry);
      let shared = this.#tries.get(key);
      if (shared === undefined) {
        const started = restoreRenewedDirectory(this.#fs, entry, this.#euid)
          .catch((error: unknown) => {
            this.#tell(
              'warn',
              entry,
              'could not put back a directory renamed aside: tried again later',
              error,
            );
            return 'failed' as const;
          })
          .then((outcome) => {
            this.#tellOutcome(entry, outcome);
            return outcome;
          });
        this.#tries.set(key, started);
        void started.finally(() => {
          if (this.#tries.get(key) === started) this.#tries.delete(key);
        });
        shared = started;
      }
      trying = shared
        .then((outcome) => {
          this.#settle(entry, outcome);
          return outcome;
        })
        .finally(() => this.#trying.delete(entry));
      this.#trying.set(entry, trying);
    }
    return trying;
  }

  /** The answer of a try an earlier holder of the records started, settled here when it comes (rewritten if back). */
  #settleLater(entry: AsideEntry): void {
    void this.#tryRestore(entry).then(async (outcome) => {
      if (outcome === 'restored') await this.#write(true).catch(() => undefined);
    });
  }

  #settle(entry: AsideEntry, outcome: RestoreOutcome): void {
    const held = this.#held.includes(entry);
    if (outcome === 'kept' || outcome === 'failed') {
      if (!held) this.#held.push(entry);
    } else if (held) this.#held.splice(this.#held.indexOf(entry), 1);
    if (outcome === 'restored') {
      const at = this.#kept.indexOf(entry);
      if (at >= 0) this.#kept.splice(at, 1);
      this.#told.delete(entry);
    }
  }

  #tellOutcome(entry: AsideEntry, outcome: RestoreOutcome): void {
    if (outcome === 'restored')
      this.#logger.warn({ ...entry }, 'put back a directory a crash left renamed aside');
    if (outcome === 'occupied') {
      this.#tell(
        'error',
        entry,
        'a directory renamed aside cannot be put back: something else is at its name; both are left as they are (merge them by hand)',
      );
    }
    if (outcome === 'kept') {
      this.#tell(
        'warn',
        entry,
        'a directory renamed aside is not put back: its parent may be changed by another user, or the aside is no real directory',
      );
    }
  }

  /** Logs `message` about `entry` at `level` the first time, at debug when a later try answers the same. */
  #tell(level: 'info' | 'warn' | 'error', entry: AsideEntry, message: string, error?: unknown): void {
    const fields = { ...entry, ...(error === undefined ? {} : { err: error }) };
    if (this.#told.has(entry)) this.#logger.debug(fields, message);
    else this.#logger[level](fields, message);
    this.#told.add(entry);
  }

  /** Every record this one holds (kept, and this process's renewals not settled), for a reload's next state directory. */
  records(): AsideEntry[] {
    return [
      ...this.#kept,
      ...this.#recorded
        .filter((entry) => entry.state !== 'unmoved')
        .map(({ rootDir, dir, name, aside }) => ({ rootDir, dir, name, aside })),
    ];
  }

  /**
   * The records went to the state directory a reload moved to (`records`, written there durably): this one
   * writes nothing more and, when its directory is another than `nextStateDir`, empties its record file there (a
   * failure is only logged: its records name asides a start there would find back, or gone, and drop).
   */
  async handOver(nextStateDir: string): Promise<void> {
    if (this.#handedOver) return;
    this.#lent = true;
    const others = this.#stateDir !== nextStateDir;
    this.#kept = [];
    this.#held = [];
    this.#recorded = [];
    if (others) {
      await this.#write().catch((error: unknown) => {
        this.#logger.warn(
          { err: error, file: path.join(this.#stateDir, ASIDES_FILE) },
          'could not empty the renewal record of the state directory left behind',
        );
      });
    }
    this.#handedOver = true;
  }

  async record(rootDir: string, dir: string, name: string, aside: string): Promise<RenewalAside> {
    this.#recorded = this.#recorded.filter(
      (entry) =>
        entry.state === 'renaming' ||
        entry.state === 'aside' ||
        (entry.state === 'back' &&
          (this.#ledger?.unsettled(path.join(entry.rootDir, entry.dir), entry.name) ?? true)),
    );
    const entry: AsideEntry & RenewalAside = { rootDir, dir, name, aside, state: 'renaming' };
    this.#recorded.push(entry);
    try {
      await this.#write();
    } catch (error) {
      this.#recorded = this.#recorded.filter((recorded) => recorded !== entry);
      throw error;
    }
    return entry;
  }

  get holding(): boolean {
    return this.#held.length > 0 || this.#recorded.some((entry) => entry.state === 'aside');
  }

  holds(parent: string, name: string): boolean {
    if (this.asideAt(parent, name) !== undefined) return true;
    return this.#held.some((entry) => entry.name === name && path.join(entry.rootDir, entry.dir) === parent);
  }

  async stillHolds(parent: string, name: string): Promise<boolean> {
    if (this.asideAt(parent, name) !== undefined) return true;
    const entry = this.#held.find(
      (held) => held.name === name && path.join(held.rootDir, held.dir) === parent,
    );
    if (entry === undefined) return false;
    const outcome = await this.#tryRestore(entry);
    if (outcome === 'kept' || outcome === 'failed') return true;
    // Only tidying: a record left names an aside that is gone, which the next start drops.
    if (outcome === 'restored') await this.#write(true).catch(() => undefined);
    return false;
  }

  beforeMaking(parent: string, name: string): Promise<void> | undefined {
    const entry = this.#kept.find(
      (kept) =>
        kept.rootDir === this.#root &&
        kept.name === name &&
        path.join(kept.rootDir, kept.dir) === parent &&
        !this.#held.includes(kept),
    );
    if (entry === undefined) return undefined;
    return this.#tryRestore(entry).then(async (outcome) => {
      if (outcome === 'restored') await this.#write(true).catch(() => undefined);
    });
  }

  asideAt(parent: string, name: string): RenewalAside | undefined {
    return this.#recorded.find(
      (entry) =>
        entry.state === 'aside' && entry.name === name && path.join(entry.rootDir, entry.dir) === parent,
    );
  }

  /**
   * The records durably (none: the file unlinked; a stale record only names a temp name that is not there).
   * `tidying` (a record dropped once back): not while lent to a reload's open, which reads and writes the file.
   */
  async #write(tidying = false): Promise<void> {
    const run = this.#last.then(async () => {
      if (this.#handedOver || (tidying && this.#lent)) return;
      const asides = [
        ...this.#kept,
        ...this.#recorded.map(({ rootDir, dir, name, aside }) => ({ rootDir, dir, name, aside })),
      ];
      if (asides.length > 0) {
        await writeDurableJson(this.#fs, this.#stateDir, ASIDES_FILE, { version: 1, asides });
        return;
      }
      await this.#fs.unlink(path.join(this.#stateDir, ASIDES_FILE)).catch((error: unknown) => {
        if (errnoCode(error) !== 'ENOENT') throw error;
      });
    });
    this.#last = run.catch(() => undefined);
    await run;
  }
}

function sameEntry(one: AsideEntry, other: AsideEntry): boolean {
  return (
    one.rootDir === other.rootDir &&
    one.dir === other.dir &&
    one.name === other.name &&
    one.aside === other.aside
  );
}

/**
 * `entries` with each `rootDir` that names `root` another way (a symlink to it, a bind mount of it: `sameRoot`)
 * spelled as `root`, so every later comparison with this root (a plain `===`) counts them as its own. Before,
 * a record of a rootDir respelled in config.json was left aside for good ("another root directory"). One
 * `sameRoot` per distinct spelling.
 */
async function spelledAs(fs: FsPort, root: string, entries: readonly AsideEntry[]): Promise<AsideEntry[]> {
  const same = new Map<string, boolean>();
  const out: AsideEntry[] = [];
  for (const entry of entries) {
    let isRoot = same.get(entry.rootDir);
    if (isRoot === undefined) {
      isRoot = await sameRoot(fs, entry.rootDir, root);
      same.set(entry.rootDir, isRoot);
    }
    out.push(isRoot && entry.rootDir !== root ? { ...entry, rootDir: root } : entry);
  }
  return out;
}

/** Whether `entry`'s parent is `outer`'s directory or lies below it, under the same root. */
function isBelow(entry: AsideEntry, outer: AsideEntry): boolean {
  const at = outer.dir === '' ? outer.name : `${outer.dir}/${outer.name}`;
  return entry.rootDir === outer.rootDir && (entry.dir === at || entry.dir.startsWith(`${at}/`));
}

/** The records a run left; an unreadable file (edited, of another version) is logged and read as none. */
async function readAsides(
  fs: FsPort,
  stateDir: string,
  logger: Logger,
  clock: WallClock,
): Promise<AsideEntry[]> {
  const raw = await readStateDirFileOrSetAside(fs, stateDir, ASIDES_FILE, logger, {
    clock,
    weight: ASIDES_WEIGHT,
  });
  if (raw === undefined) return [];
  try {
    const entries = asidesFile.parse(parseStateFile(raw)).asides;
    const formed = entries.filter(wellFormed);
    if (formed.length < entries.length) {
      logger.warn(
        { file: ASIDES_FILE, ignored: entries.length - formed.length },
        'malformed renewal records ignored',
      );
    }
    return formed;
  } catch (error) {
    logger.warn({ err: error, file: ASIDES_FILE }, 'unreadable renewal record ignored');
    return [];
  }
}
