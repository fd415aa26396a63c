// The temp names directory renewals rename directories to, recorded before the rename and put back at the next start.
import path from 'node:path';
import * as z from 'zod';
import type { WallClock } from '../lib/clock.js';
import { errnoCode } from '../lib/errors.js';
import type { FsPort } from '../lib/fs-port.js';
import type { Logger } from '../lib/logger.js';
import type { DirectorySyncLedger, RenewalAside, RenewalAsides } from './directory-syncs.js';
import { restoreRenewedDirectory, writeDurableJson } from './durable-writer.js';
import { TEMP_PREFIX, validateRelativePath } from './path-guard.js';
import { readStateDirFileOrSetAside } from './state.js';

export const ASIDES_FILE = 'renewal-asides.json';

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

/**
 * `renewal-asides.json` in the state directory: every directory a renewal renamed aside (or was about to),
 * written durably before the first rename. A record whose rename back a good fsync of its parent covered is
 * dropped at the next record (the ledger says so); the file is rewritten at start, after the restore.
 */
export class DirectoryAsides implements RenewalAsides {
  readonly #fs: FsPort;
  readonly #stateDir: string;
  readonly #ledger: DirectorySyncLedger | undefined;
  /** Records of this process, until their rename back is durable (or they never moved anything). */
  #recorded: Array<AsideEntry & RenewalAside> = [];
  /** Records the start could not restore (something at the name, another root): kept until a start does. */
  readonly #kept: AsideEntry[];
  /** Of those, the ones under this root that may still be aside (the restore failed, or was refused). */
  readonly #held: AsideEntry[];
  /** A held record's retry in progress: concurrent writes below its name share it. */
  readonly #retrying = new Map<AsideEntry, Promise<boolean>>();
  readonly #euid: number;
  #last: Promise<unknown> = Promise.resolve();

  private constructor(
    fs: FsPort,
    stateDir: string,
    ledger: DirectorySyncLedger | undefined,
    kept: AsideEntry[],
    held: AsideEntry[],
    euid: number,
  ) {
    this.#euid = euid;
    this.#fs = fs;
    this.#stateDir = stateDir;
    this.#ledger = ledger;
    this.#kept = kept;
    this.#held = held;
  }

  /**
   * Puts back every directory a run that died between a renewal's two renames left aside under `rootDir`,
   * then returns the record for this process's renewals. See `restoreRenewedDirectory` for what is put back.
   */
  static async open(
    fs: FsPort,
    stateDir: string,
    rootDir: string,
    ledger: DirectorySyncLedger | undefined,
    logger: Logger,
    options: { euid: number; clock: WallClock },
  ): Promise<DirectoryAsides> {
    const { euid, clock } = options;
    const found = await readAsides(fs, stateDir, logger, clock);
    const root = path.resolve(rootDir);
    const kept: AsideEntry[] = [];
    const held: AsideEntry[] = [];
    let pending: AsideEntry[] = [];
    for (const entry of found) {
      if (entry.rootDir === root) pending.push(entry);
      else {
        kept.push(entry);
        logger.warn({ ...entry }, 'a directory renamed aside under another root directory is left as it is');
      }
    }
    // An aside inside another directory at its aside name is found once that one is back: rounds until none is.
    for (let restored = true; restored && pending.length > 0; ) {
      restored = false;
      const gone: AsideEntry[] = [];
      for (const entry of pending) {
        const outcome = await restoreRenewedDirectory(fs, entry, euid).catch((error: unknown) => {
          logger.warn(
            { err: error, ...entry },
            'could not put back a directory renamed aside: tried again at the next start',
          );
          return 'failed' as const;
        });
        if (outcome === 'gone') gone.push(entry);
        else if (outcome === 'restored') {
          restored = true;
          logger.warn({ ...entry }, 'put back a directory a crash left renamed aside');
        } else {
          kept.push(entry);
          if (outcome !== 'occupied') held.push(entry);
        }
        if (outcome === 'occupied') {
          logger.error(
            { ...entry },
            'a directory a crash left renamed aside cannot be put back: something else is at its name; both are left as they are (merge them by hand)',
          );
        }
        if (outcome === 'kept') {
          logger.warn(
            { ...entry },
            'a directory renamed aside is not put back: its parent may be changed by another user, or the aside is no real directory',
          );
        }
      }
      pending = gone;
    }
    // Neither at its aside name nor at its name (its file system not mounted yet, a directory on the way
    // renamed): out of sight, not back; kept for a start that sees it. Something at the name: it is back.
    for (const entry of pending) {
      const at = path.join(entry.rootDir, entry.dir, entry.name);
      const found = await fs.lstat(at).then(
        () => true,
        (error: unknown) => !['ENOENT', 'ENOTDIR'].includes(errnoCode(error) ?? ''),
      );
      if (!found) {
        kept.push(entry);
        // Info, not a warning: also what a directory removed (pruned) since its renewal leaves, till made anew.
        logger.info(
          { ...entry },
          'a directory renamed aside is neither at its name nor aside (not mounted?): its record is kept for a later start',
        );
      }
    }
    // Not found because a directory on its way is itself still aside (not put back): out of sight, not gone.
    for (let added = true; added; ) {
      added = false;
      for (const entry of pending) {
        if (!kept.includes(entry) && kept.some((outer) => isBelow(entry, outer))) {
          kept.push(entry);
          added = true;
        }
      }
    }
    const asides = new DirectoryAsides(fs, stateDir, ledger, kept, held, euid);
    if (found.length > kept.length) {
      // Only tidying: a record left on disk names an aside that is gone, which the next start drops again.
      await asides.#write().catch((error: unknown) => {
        logger.warn({ err: error, file: ASIDES_FILE }, 'could not rewrite the renewal record');
      });
    }
    return asides;
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
    let retry = this.#retrying.get(entry);
    if (retry === undefined) {
      retry = this.#retry(entry).finally(() => this.#retrying.delete(entry));
      this.#retrying.set(entry, retry);
    }
    return retry;
  }

  async #retry(entry: AsideEntry): Promise<boolean> {
    const outcome = await restoreRenewedDirectory(this.#fs, entry, this.#euid).catch(() => 'failed' as const);
    if (outcome === 'kept' || outcome === 'failed') return true;
    // Back, gone (an operator removed it) or something else at the name (left to an operator, as at start).
    this.#held.splice(this.#held.indexOf(entry), 1);
    if (outcome === 'restored') {
      this.#kept.splice(this.#kept.indexOf(entry), 1);
      // Only tidying: a record left names an aside that is gone, which the next start drops.
      await this.#write().catch(() => undefined);
    }
    return false;
  }

  asideAt(parent: string, name: string): RenewalAside | undefined {
    return this.#recorded.find(
      (entry) =>
        entry.state === 'aside' && entry.name === name && path.join(entry.rootDir, entry.dir) === parent,
    );
  }

  /** The records durably (none: the file unlinked; a stale record only names a temp name that is not there). */
  async #write(): Promise<void> {
    const run = this.#last.then(async () => {
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
  const raw = await readStateDirFileOrSetAside(fs, stateDir, ASIDES_FILE, logger, { clock });
  if (raw === undefined) return [];
  try {
    const entries = asidesFile.parse(JSON.parse(raw)).asides;
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
