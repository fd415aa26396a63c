// Ownership declared before a rename: what proves, after a run died between a publish and state.json recording
// it, that the file at a path holding exactly those bytes is the agent's (and so may be deleted when retired).
import path from 'node:path';
import * as z from 'zod';
import type { WallClock } from '../lib/clock.js';
import { errnoCode } from '../lib/errors.js';
import type { FsPort } from '../lib/fs-port.js';
import type { JsonWeight } from '../lib/json-weigher.js';
import type { Logger } from '../lib/logger.js';
import { syncRegularFileIf, writeDurableJson } from './durable-writer.js';
import { PathRejectedError } from './errors.js';
import { inspectPath, lstatOrUndefined, validateRelativePath } from './path-guard.js';
import { sameRoot } from './same-root.js';
import {
  COMPACT_DIRS_OVER,
  type LocalState,
  MAX_STATE_FILE_DEPTH,
  type ManagedFile,
  parseStateFile,
  readStateDirFileOrSetAside,
  WEIGHED_INSTANCES,
} from './state.js';

export const INTENT_FILE = 'intent.json';

function intentKey(intent: WriteIntent): string {
  return `${intent.path}\n${intent.instanceId}\n${intent.sha256}`;
}

/** A write about to be published: the file at `path` will hold bytes hashing to `sha256`, for `instanceId`. */
export interface WriteIntent {
  path: string;
  instanceId: string;
  sha256: string;
}

/** A declared write as the journal keeps it: with the parent directories missing when it was declared. */
interface DeclaredWrite extends WriteIntent {
  /** Parent-first; the write's publish (or another of its batch) will make them. Absent in older journals. */
  dirs?: string[];
  /**
   * A removal of its path was about to be made while no durable state.json recorded the write (`declareRemovals`):
   * its file found absent at adoption was removed, and the hooks are owed the path. Absent in journals before intent27.
   */
  removed?: true;
}

/** What intent.json holds of a declared write. */
type JournalEntry = WriteIntent & { dirs?: string[]; dirsFrom?: number; removed?: true };

/**
 * A declared write as intent.json holds it: its missing parents (always the chain from one depth down to the
 * file's parent) as `dirsFrom`, that first depth, instead of `dirs` when their paths add up to more than
 * COMPACT_DIRS_OVER characters: a path per level cost the square of the depth (a batch of files 2,000 levels deep
 * made a journal of 4 MB a file, state24). An older agent ignores `dirsFrom`: it then prunes none of them.
 */
function journalEntry(intent: DeclaredWrite): JournalEntry {
  const { dirs } = intent;
  if (dirs === undefined || dirs.length === 0) return intent;
  let length = 0;
  for (const dir of dirs) length += dir.length;
  if (length <= COMPACT_DIRS_OVER) return intent;
  // Judged once per declared write (each declaration rewrites every pending one; the check reads every path).
  let entry = journalEntries.get(intent);
  if (entry === undefined) {
    const from = chainStart(intent.path, dirs);
    const { dirs: _dirs, ...write } = intent;
    entry = from === undefined ? intent : { ...write, dirsFrom: from };
    journalEntries.set(intent, entry);
  }
  return entry;
}

const journalEntries = new WeakMap<DeclaredWrite, JournalEntry>();

/** The depth of `dirs[0]` when `dirs` are the ancestors of `relative` from it down to its parent, else undefined. */
function chainStart(relative: string, dirs: readonly string[]): number | undefined {
  const ends = slashes(relative);
  const from = ends.length - dirs.length + 1;
  if (from < 1) return undefined;
  for (let index = 0; index < dirs.length; index += 1) {
    const end = ends[from - 1 + index]!;
    const dir = dirs[index]!;
    if (dir.length !== end || !relative.startsWith(dir)) return undefined;
  }
  return from;
}

/** `dirsFrom` read back (the schema checked it names a directory): the ancestors of `relative` from that depth down to its parent, slices of it. */
function chainFrom(relative: string, from: number): string[] {
  return slashes(relative)
    .slice(from - 1)
    .map((end) => relative.slice(0, end));
}

function slashes(relative: string): number[] {
  const ends: number[] = [];
  for (let slash = relative.indexOf('/'); slash !== -1; slash = relative.indexOf('/', slash + 1))
    ends.push(slash);
  return ends;
}

/**
 * `intent.json`'s bounds (state.ts `readStateDirFile`): per instance, a write declared with every member (`{`, five
 * members, `dirs`' array, the comma after it: 12) and two directories made (2).
 */
const INTENT_WEIGHT: JsonWeight = { maxTokens: 14 * WEIGHED_INSTANCES + 16, maxDepth: MAX_STATE_FILE_DEPTH };

/** `intent.json`'s schema, built the first time a journal is read: most starts find none (a clean stop leaves none). */
function buildIntentFile() {
  return z.object({
    version: z.literal(1),
    rootDir: z.string(),
    intents: z.array(
      z
        .object({
          path: z.string(),
          instanceId: z.string().min(1),
          sha256: z.string().regex(/^[0-9a-f]{64}$/),
          dirs: z.array(z.string()).optional(),
          dirsFrom: z.number().int().min(1).optional(),
          removed: z.literal(true).optional(),
        })
        .refine((intent) => intent.dirsFrom === undefined || intent.dirsFrom <= slashes(intent.path).length, {
          message: 'dirsFrom names no directory above the path',
        }),
    ),
  });
}
let builtIntentFile: ReturnType<typeof buildIntentFile> | undefined;
function intentFileSchema(): ReturnType<typeof buildIntentFile> {
  builtIntentFile ??= buildIntentFile();
  return builtIntentFile;
}

/**
 * `intent.json` in the state directory: every write declared and not yet recorded by a durable `state.json`.
 * A batch of writes is declared (the file published durably, one per batch, never one per file) before any of
 * its renames; after a persist of `state.json` that records them, they are settled and the file is unlinked.
 * The unlink needs no fsync: every later publish in the state directory (the next declaration, the next
 * `state.json`) fsyncs the directory, and a journal that outlives it holds only entries the `state.json` beside
 * it already records, which adoption leaves as they are.
 *
 * A declared entry proves nothing alone (the rename may never have happened): `adopt` records one only when
 * the file at its path holds exactly its bytes, after fsyncing the file and its directory, so a record never
 * stands for bytes a power cut could still take back.
 */
export class IntentJournal {
  readonly #fs: FsPort;
  readonly #stateDir: string;
  readonly #rootDir: string;
  readonly #logger: Logger;
  /**
   * Declared and not settled, by `intentKey`, in declaration order. One path may hold several: a run that died
   * after one rename leaves its declaration, and the next run may declare another write at that path and die
   * before its rename; the first declaration is still the only proof of the bytes there. (Keyed by path, the
   * second replaced the first, and the file stayed for good once its instance was retired: kill loop, 2026-11-23.)
   */
  readonly #pending = new Map<string, DeclaredWrite>();
  /**
   * Pending intents `adopt` recorded in the state: whatever becomes of their record afterwards (a removal, a
   * rewrite), the next durable state.json carries it, so they settle with it.
   */
  readonly #adopted = new Set<WriteIntent>();
  /** Whether intent.json may exist on disk. */
  #onDisk = false;
  /** The last disk operation queued (`#serially`). */
  #last: Promise<unknown> = Promise.resolve();

  private constructor(fs: FsPort, stateDir: string, rootDir: string, logger: Logger) {
    this.#fs = fs;
    this.#stateDir = stateDir;
    this.#rootDir = rootDir;
    this.#logger = logger;
  }

  /** A journal that declares nothing yet and found none (dry runs: nothing is read or written). */
  static empty(fs: FsPort, stateDir: string, rootDir: string, logger: Logger): IntentJournal {
    return new IntentJournal(fs, stateDir, rootDir, logger);
  }

  /** The journal a crashed run left, if any (entries of another root directory are dropped). */
  static async open(
    fs: FsPort,
    stateDir: string,
    rootDir: string,
    logger: Logger,
    clock: WallClock,
  ): Promise<IntentJournal> {
    const journal = new IntentJournal(fs, stateDir, rootDir, logger);
    const raw = await readStateDirFileOrSetAside(fs, stateDir, INTENT_FILE, logger, {
      clock,
      weight: INTENT_WEIGHT,
    });
    if (raw === undefined) return journal;
    journal.#onDisk = true;
    try {
      const parsed = intentFileSchema().parse(parseStateFile(raw));
      if (!(await sameRoot(fs, parsed.rootDir, rootDir))) return journal;
      for (const intent of parsed.intents) {
        validateRelativePath(intent.path);
        for (const dir of intent.dirs ?? []) validateRelativePath(dir);
        const { dirs: listed, dirsFrom, removed, ...write } = intent;
        const dirs =
          dirsFrom === undefined ? listed : [...(listed ?? []), ...chainFrom(intent.path, dirsFrom)];
        const declared: DeclaredWrite = dirs === undefined ? write : { ...write, dirs };
        journal.#pending.set(intentKey(intent), removed === true ? { ...declared, removed } : declared);
      }
    } catch (error) {
      // Torn it cannot be (published whole); edited or of another version: it proves nothing.
      journal.#pending.clear();
      logger.warn({ err: error, file: INTENT_FILE }, 'unreadable write journal ignored');
    }
    return journal;
  }

  get size(): number {
    return this.#pending.size;
  }

  /** Whether a pending intent's path passes `test` (a mount below rootDir holding a declared write: fix34). */
  declares(test: (path: string) => boolean): boolean {
    for (const intent of this.#pending.values()) if (test(intent.path)) return true;
    return false;
  }

  /** Makes the intents durable, with every earlier one not settled yet; call before any of their renames. */
  async declare(intents: readonly WriteIntent[]): Promise<void> {
    const missing = new Map<string, boolean>();
    const added: string[] = [];
    for (const intent of intents) {
      const dirs = await this.#missingParents(intent.path, missing);
      const key = intentKey(intent);
      // Declared again: it moves to the end, after any other write declared at its path since.
      if (!this.#pending.delete(key)) added.push(key);
      this.#pending.set(key, dirs.length === 0 ? intent : { ...intent, dirs });
    }
    try {
      await this.#publish();
    } catch (error) {
      // Not durable, so not declared: the caller writes none of them (apply.ts), and nothing would settle them.
      for (const key of added) this.#pending.delete(key);
      throw error;
    }
  }

  /**
   * Marks the pending declarations at `paths` as about to be removed, durably, before the removals: a declared
   * write no durable state.json records yet (its persist failed: EIO, ENOSPC) that a removal then takes away
   * leaves nothing but its declaration, and a file absent at its declared path proves no removal (the rename may
   * never have happened). With the mark, adoption after a crash or power cut owes the removed path to the hooks
   * (intent27). Paths without a pending declaration cost nothing: their record, or none, is state.json's.
   */
  async declareRemovals(paths: readonly string[]): Promise<void> {
    if (this.#pending.size === 0 || paths.length === 0) return;
    const removing = new Set(paths);
    const marked = new Map<string, DeclaredWrite>();
    for (const [key, intent] of this.#pending)
      if (intent.removed !== true && removing.has(intent.path)) marked.set(key, intent);
    if (marked.size === 0) return;
    for (const [key, intent] of marked) this.#pending.set(key, { ...intent, removed: true });
    try {
      await this.#publish();
    } catch (error) {
      // Not durable: the caller removes none of them (apply.ts). Those settled meanwhile stay settled.
      for (const [key, intent] of marked)
        if (this.#pending.get(key)?.removed === true) this.#pending.set(key, intent);
      throw error;
    }
  }

  /** Publishes every pending declaration, durably, after the journal's disk operations queued before. */
  #publish(): Promise<void> {
    return this.#serially(async () => {
      this.#onDisk = true;
      await writeDurableJson(this.#fs, this.#stateDir, INTENT_FILE, {
        version: 1,
        rootDir: this.#rootDir,
        intents: [...this.#pending.values()].map(journalEntry),
      });
    });
  }

  /**
   * The parents of `relativePath` under the root that do not exist now, parent-first (`missing` caches the
   * answers of one declaration). A directory that cannot be checked counts as existing: it is never claimed.
   */
  async #missingParents(relativePath: string, missing: Map<string, boolean>): Promise<string[]> {
    const dirs: string[] = [];
    for (let dir = path.posix.dirname(relativePath); dir !== '.'; dir = path.posix.dirname(dir)) {
      let absent = missing.get(dir);
      if (absent === undefined) {
        absent = await this.#absent(path.join(this.#rootDir, dir), dir);
        missing.set(dir, absent);
      }
      if (!absent) break;
      dirs.unshift(dir);
    }
    return dirs;
  }

  /** Whether nothing is at `absolute`; a failure to tell counts as something there. */
  async #absent(absolute: string, relative: string): Promise<boolean> {
    const { lstatSync } = this.#fs;
    if (lstatSync !== undefined) {
      // Offered only where rootDir's mounts cannot hang (cli/hang-safe-fs.ts): one syscall, no thread-pool trip.
      try {
        return lstatSync(absolute, { bigint: true, throwIfNoEntry: false }) === undefined;
      } catch {
        return false;
      }
    }
    return lstatOrUndefined(this.#fs, absolute, relative).then(
      (stats) => stats === undefined,
      () => false,
    );
  }

  /**
   * The directories `intent` declared missing that its write made: each still a real directory on a chain
   * without symlinks, owned by the agent's user. A directory another user made meanwhile (in a directory they
   * can write, between the declaration and the write's mkdir) is theirs: never claimed, so never pruned.
   */
  async #madeFor(intent: DeclaredWrite): Promise<string[]> {
    const uid = process.geteuid?.() ?? -1;
    const made: string[] = [];
    for (const dir of intent.dirs ?? []) {
      const stats = await inspectPath(this.#fs, this.#rootDir, dir).then(
        (inspection) => inspection.final,
        () => undefined,
      );
      if (stats === undefined || !stats.isDirectory() || stats.uid !== uid) break;
      made.push(dir);
    }
    return made;
  }

  /**
   * The journal's disk operations one at a time: a settle's unlink (after a persist that runs beside the next
   * batch, report.ts PassReports) must never land after the next declaration's rename and take it away.
   */
  #serially(operation: () => Promise<void>): Promise<void> {
    const run = this.#last.then(operation, operation);
    this.#last = run.catch(() => undefined);
    return run;
  }

  /**
   * The pending intents `files` records as written, or that `adopt` recorded, or marked removed: taken just before
   * `state.json` is serialized, they are settled once that persist succeeded (`settle`). Intents declared or
   * recorded later stay pending. A removal marked before this state was taken is in it: either its file is still
   * recorded (the removal not yet recorded: the next start removes it again, and tells), or its record is gone and
   * its path pending for the hooks (or told already).
   */
  recordedIn(files: ReadonlyMap<string, ManagedFile>): WriteIntent[] {
    if (this.#pending.size === 0) return [];
    const recorded: WriteIntent[] = [];
    for (const intent of this.#pending.values()) {
      const file = files.get(intent.path);
      const inFiles = file?.instanceId === intent.instanceId && file.sha256 === intent.sha256;
      if (inFiles || intent.removed === true || this.#adopted.has(intent)) recorded.push(intent);
    }
    return recorded;
  }

  /** After a durable persist of `state.json` holding `recorded`: those are proven there now. */
  async settle(recorded: readonly WriteIntent[]): Promise<void> {
    for (const intent of recorded) {
      const key = intentKey(intent);
      if (this.#pending.get(key) === intent) {
        // The writes declared at its path before it were replaced by its rename (one path's writes are never
        // in flight at once): with it recorded in a durable state.json, they prove nothing any more.
        for (const [otherKey, other] of this.#pending) {
          if (otherKey === key) break;
          if (other.path === intent.path) this.#pending.delete(otherKey);
        }
        this.#pending.delete(key);
      }
      this.#adopted.delete(intent);
    }
    await this.#serially(async () => {
      // Judged when its turn comes: a declaration queued before it keeps the journal.
      if (this.#pending.size > 0 || !this.#onDisk) return;
      try {
        await this.#fs.unlink(path.join(this.#stateDir, INTENT_FILE));
        this.#onDisk = false;
      } catch (error) {
        if (errnoCode(error) === 'ENOENT') this.#onDisk = false;
        else this.#logger.warn({ err: error }, 'could not remove the settled write journal');
      }
    });
  }

  /**
   * Records in `state` every pending intent it does not record yet whose file holds exactly the declared bytes
   * (fsynced first, with its directory): a run died after the rename and before `state.json` recorded it, or
   * the write's directory fsync failed. An intent whose file is absent or holds other bytes is dropped: its
   * rename never happened, or the file changed since. One that cannot be checked (EIO) stays for the next pass.
   * Run before a pass plans, never while writes are in flight. Returns the paths adopted. One whose path fails
   * `adoptable` (under a mount below rootDir that is gone: fix34) stays pending, unjudged. One marked removed
   * (`declareRemovals`) whose path is absent was removed after its rename: `removed` is told its path, once per
   * process (the mark settles with the next durable state.json); present, it is judged as any other.
   */
  async adopt(
    state: LocalState,
    now: string,
    adoptable?: (path: string) => boolean,
    removed?: (path: string) => void,
  ): Promise<string[]> {
    const adopted: string[] = [];
    for (const intent of [...this.#pending.values()]) {
      if (adoptable?.(intent.path) === false) continue;
      const file = state.files.get(intent.path);
      if (file?.instanceId === intent.instanceId && file.sha256 === intent.sha256) continue;
      if (intent.removed === true) {
        if (this.#adopted.has(intent)) continue;
        const absent = await this.#absentUnderRoot(intent.path);
        if (absent === undefined) continue;
        if (absent) {
          this.#adopted.add(intent);
          removed?.(intent.path);
          continue;
        }
      }
      let found: { mode: number } | undefined;
      try {
        found = await syncRegularFileIf(this.#fs, this.#rootDir, intent.path, intent.sha256);
      } catch (error) {
        // A symlink or directory there now: not a file the agent wrote. A disk error: checked next pass.
        if (!(error instanceof PathRejectedError)) {
          this.#logger.warn({ err: error, path: intent.path }, 'could not check a declared write');
          continue;
        }
      }
      if (found === undefined) {
        this.#pending.delete(intentKey(intent));
        continue;
      }
      const made = await this.#madeFor(intent);
      state.files.set(intent.path, {
        instanceId: intent.instanceId,
        sha256: intent.sha256,
        mode: found.mode,
        // What a removal prunes once empty, as for a write recorded in the same run.
        createdDirs: [...new Set([...(file?.createdDirs ?? []), ...made])].sort(byDepth),
        writtenAt: now,
      });
      this.#adopted.add(intent);
      adopted.push(intent.path);
    }
    return adopted;
  }

  /** Whether nothing is at `relative` under the root (a parent gone too); undefined when that cannot be told (EIO). */
  async #absentUnderRoot(relative: string): Promise<boolean | undefined> {
    try {
      return (await inspectPath(this.#fs, this.#rootDir, relative)).final === undefined;
    } catch (error) {
      // A symlink or other non-regular entry on the way: something is there, not the removed file's absence.
      if (error instanceof PathRejectedError) return false;
      this.#logger.warn({ err: error, path: relative }, 'could not check a declared write');
      return undefined;
    }
  }
}

function byDepth(a: string, b: string): number {
  return a.split('/').length - b.split('/').length;
}
