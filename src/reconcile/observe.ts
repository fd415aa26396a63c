// Disk observation before planning: what is at each path the pulled instances name.
import type { BigIntStats } from 'node:fs';
import path from 'node:path';
import type { ConfigInstance } from '../api/schemas.js';
import { errnoCode, errorMessage } from '../lib/errors.js';
import type { FsPort } from '../lib/fs-port.js';
import type { LstatFields, LstatFieldsSync } from '../lib/lstat-fields.js';
import { hashRegularFile, NOT_HASHED } from '../store/durable-writer.js';
import { DiskError, PathRejectedError } from '../store/errors.js';
import { type FileFingerprints, identityOf, sameIdentity } from '../store/fingerprints.js';
import type { ObservedIdentity } from '../store/path-aliases.js';
import { fitsUnderRoot, validateRelativePath } from '../store/path-guard.js';
import type { DiskObservation, PlanInstance } from './plan.js';

/** Paths observed at once: a pass with nothing to do is mostly these, each a few thread-pool round trips. */
const OBSERVE_CONCURRENCY = 16;

const PERMISSION_BITS = 0o7777;

export interface ObserveOptions {
  signal?: AbortSignal;
  /**
   * With fingerprints, a regular file whose identity (device, inode, size, mtime, ctime) is the recorded one
   * is not read: its recorded sha256 stands (see store/fingerprints.ts for what that guarantees). Every file
   * read is recorded. `now` is the wall clock (ms) the records are dated by.
   */
  fingerprints?: { store: FileFingerprints; now: () => number };
  /** Filled with the identity of each regular file observed (store/path-aliases.ts tells aliases by it). */
  identities?: Map<string, ObservedIdentity>;
  /**
   * The sizes of the bytes each path may be compared with (`wantedSizes`): a file of another size there is not
   * read (its sha256 is NOT_HASHED, which equals no digest). A path absent from the map is read whatever its size.
   */
  sizes?: ReadonlyMap<string, ReadonlySet<number>>;
  /** Paths observed while the listing arrived (ObservationAhead, made with the same `fingerprints`). */
  ahead?: ObservationAhead;
}

/** What a path observed ahead was found to be: its fingerprinted file, or nothing there. */
type AheadVerdict =
  | typeof ABSENT
  | { sha256: string; mode: number; gid: number; identity: ObservedIdentity }
  | undefined;

/** Paths a turn of ObservationAhead observes before it yields to the event loop (a page may have come). */
const AHEAD_TURN = 64;

/**
 * Observation of the paths the listing names while the rest of it is still on its way: the pager waits for each
 * next page, and an idle pass's lstats (~1,000 of them, the largest part of what follows the pull) run in those
 * waits instead of after the last page. Each path added is looked at in a later turn of the event loop (`defer`),
 * after the pager has asked for its next page. Only the two quick verdicts are kept: a regular file under real
 * directories whose identity is the fingerprinted one (its recorded sha256, as observeWithFingerprint would take
 * it, never where the filesystem keeps no change time), and a path known absent. Anything else (no fingerprint,
 * another identity, a symlink, an error) is
 * observed by observeDisk as before, with the sizes the whole listing wants. A file changed between its lstat
 * here and the plan is the race an observation made just before the plan has too: the next pass sees it.
 */
export class ObservationAhead {
  readonly #fs: FsPort;
  readonly #fingerprints: NonNullable<ObserveOptions['fingerprints']>;
  readonly #defer: (run: () => void) => void;
  readonly #signal: AbortSignal | undefined;
  readonly directories: DirectoryCheck;
  readonly #rootDir: string;
  readonly #queue: string[] = [];
  readonly #verdicts = new Map<string, AheadVerdict | Promise<AheadVerdict>>();
  #scheduled = false;
  #stopped = false;

  constructor(
    fs: FsPort,
    rootDir: string,
    fingerprints: NonNullable<ObserveOptions['fingerprints']>,
    defer: (run: () => void) => void,
    signal?: AbortSignal,
  ) {
    this.#fs = fs;
    this.#rootDir = rootDir;
    this.#fingerprints = fingerprints;
    this.#defer = defer;
    this.#signal = signal;
    this.directories = new DirectoryCheck(fs, rootDir);
  }

  /** A path the listing names: observed in a later turn. */
  add(relative: string): void {
    if (this.#stopped) return;
    this.#queue.push(relative);
    this.#schedule();
  }

  /** Stops observing ahead (the listing is whole): what was observed, by path. */
  stop(): ReadonlyMap<string, AheadVerdict | Promise<AheadVerdict>> {
    this.#stopped = true;
    this.#queue.length = 0;
    return this.#verdicts;
  }

  #schedule(): void {
    if (this.#scheduled) return;
    this.#scheduled = true;
    this.#defer(() => this.#turn());
  }

  #turn(): void {
    this.#scheduled = false;
    if (this.#stopped || this.#signal?.aborted === true) return;
    for (const relative of this.#queue.splice(0, AHEAD_TURN)) {
      if (this.#verdicts.has(relative)) continue;
      // Without a promise where the lstat is synchronous and the path's directories are judged already.
      try {
        const readFrom = this.#fingerprints.now();
        const now = regularFileStatsNow(this.#fs, this.#rootDir, relative, this.directories);
        this.#verdicts.set(
          relative,
          now === NOT_YET ? this.#observe(relative) : this.#verdict(now, relative, readFrom),
        );
      } catch {
        this.#verdicts.set(relative, undefined);
      }
    }
    if (this.#queue.length > 0) this.#schedule();
  }

  async #observe(relative: string): Promise<AheadVerdict> {
    try {
      const readFrom = this.#fingerprints.now();
      const before = await regularFileStats(this.#fs, this.#rootDir, relative, this.directories);
      return this.#verdict(before, relative, readFrom);
    } catch {
      return undefined;
    }
  }

  /** What `before` (the path's lstat, or why there is none) says with the fingerprints; `readFrom`: before it. */
  #verdict(
    before: LstatFields | typeof ABSENT | undefined,
    relative: string,
    readFrom: number,
  ): AheadVerdict {
    if (before === ABSENT || before === undefined) return before;
    // Where ctime is no change time (FAT, exFAT, FUSE) an identity proves nothing: observeDisk reads the bytes.
    if (this.#fs.keepsNoChangeTimeAt?.(`${this.#rootDir}/${relative}`) === true) return undefined;
    const sha256 = this.#fingerprints.store.lookup(relative, identityOf(before), readFrom);
    if (sha256 === undefined) return undefined;
    return {
      sha256,
      mode: Number(before.mode) & PERMISSION_BITS,
      gid: Number(before.gid),
      identity: { dev: before.dev, ino: before.ino, nlink: before.nlink },
    };
  }
}

/**
 * For each path, the sizes of the files the pulled instances targeting `deployed` want there: the plan compares
 * an observed file only with those (a write is skipped only when the bytes are equal, so of equal size); a path
 * only retired instances name gets none (a removal checks its file itself). A path with an instance whose size
 * is not known yet (content not serialized) is left out: read as before.
 */
export function wantedSizes(instances: readonly PlanInstance[]): Map<string, Set<number>> {
  const sizes = new Map<string, Set<number>>();
  const unknown = new Set<string>();
  for (const instance of instances) {
    const at = instance.relative_filepath;
    if (!sizes.has(at)) sizes.set(at, new Set());
    if (instance.target_status !== 'deployed') continue;
    const size = 'file' in instance ? (instance.file.data?.length ?? instance.file.size) : undefined;
    if (size === undefined) {
      unknown.add(at);
      continue;
    }
    sizes.get(at)?.add(size);
  }
  for (const at of unknown) sizes.delete(at);
  return sizes;
}

/** Observes each distinct path once; a path that cannot be judged is `rejected` or `unreadable`, never thrown. */
export async function observeDisk(
  fs: FsPort,
  rootDir: string,
  instances: readonly Pick<ConfigInstance, 'relative_filepath'>[],
  options: ObserveOptions = {},
): Promise<Map<string, DiskObservation>> {
  const { signal, fingerprints, identities, sizes, ahead } = options;
  const paths = [...new Set(instances.map((instance) => instance.relative_filepath))];
  const observed = new Array<DiskObservation>(paths.length);
  const directories = ahead?.directories ?? new DirectoryCheck(fs, rootDir);
  const verdicts = ahead?.stop();
  let next = 0;
  const worker = async (): Promise<void> => {
    while (next < paths.length) {
      signal?.throwIfAborted();
      const index = next++;
      const relative = paths[index]!;
      const onlySizes = sizes?.get(relative);
      const early = fingerprints === undefined ? undefined : verdicts?.get(relative);
      const verdict = early instanceof Promise ? await early : early;
      if (verdict === ABSENT) {
        fingerprints?.store.forget(relative);
        observed[index] = { kind: 'absent' };
        continue;
      }
      if (verdict !== undefined) {
        identities?.set(relative, verdict.identity);
        observed[index] = { kind: 'file', sha256: verdict.sha256, mode: verdict.mode, gid: verdict.gid };
        continue;
      }
      observed[index] =
        fingerprints === undefined
          ? await observePath(fs, rootDir, relative, identities, onlySizes)
          : await observeWithFingerprint(
              fs,
              rootDir,
              relative,
              directories,
              fingerprints,
              identities,
              onlySizes,
            );
    }
  };
  await Promise.all(Array.from({ length: Math.min(OBSERVE_CONCURRENCY, paths.length) }, worker));
  return new Map(paths.map((relative, index) => [relative, observed[index]!]));
}

export async function observePath(
  fs: FsPort,
  rootDir: string,
  relative: string,
  identities?: Map<string, ObservedIdentity>,
  onlySizes?: ReadonlySet<number>,
): Promise<DiskObservation> {
  try {
    const file = await hashRegularFile(fs, rootDir, relative, onlySizes === undefined ? {} : { onlySizes });
    if (file !== undefined) identities?.set(relative, { ...file.identity, nlink: file.links });
    return file === undefined
      ? { kind: 'absent' }
      : { kind: 'file', sha256: file.sha256, mode: file.mode, gid: file.gid };
  } catch (error) {
    if (error instanceof PathRejectedError) return { kind: 'rejected', reason: error.message };
    // A root that does not exist yet (first dry run) holds no file at all.
    if (error instanceof DiskError && error.errno === 'ENOENT') return { kind: 'absent' };
    return { kind: 'unreadable', reason: errorMessage(error) };
  }
}

/**
 * One lstat when the path is valid, its parents are real directories (checked once per directory per pass)
 * and the file's identity is the fingerprinted one. A path known absent here — its directory chain real up to
 * a missing directory, or its directory real and the file missing — is `absent` at once, as `observePath` would
 * judge it: a first sync's every path is that, and walking each again cost a stat of the root and an lstat per
 * directory. Anything else — a new or changed file, a symlink, an error — goes through `observePath`, whose
 * verdict stands, and a file read there is fingerprinted when its identity did not change while it was read.
 */
async function observeWithFingerprint(
  fs: FsPort,
  rootDir: string,
  relative: string,
  directories: DirectoryCheck,
  fingerprints: NonNullable<ObserveOptions['fingerprints']>,
  identities: Map<string, ObservedIdentity> | undefined,
  onlySizes: ReadonlySet<number> | undefined,
): Promise<DiskObservation> {
  const { store, now } = fingerprints;
  const readFrom = now();
  const before = await regularFileStats(fs, rootDir, relative, directories);
  if (before === ABSENT) {
    store.forget(relative);
    return { kind: 'absent' };
  }
  // Where ctime is no change time (FAT, exFAT, FUSE) an identity proves nothing: the bytes are read every pass.
  const trusted = fs.keepsNoChangeTimeAt?.(`${rootDir}/${relative}`) !== true;
  if (before !== undefined && trusted) {
    const sha256 = store.lookup(relative, identityOf(before), readFrom);
    if (sha256 !== undefined) {
      identities?.set(relative, { dev: before.dev, ino: before.ino, nlink: before.nlink });
      return { kind: 'file', sha256, mode: Number(before.mode) & PERMISSION_BITS, gid: Number(before.gid) };
    }
  }
  const observation = await observePath(fs, rootDir, relative, identities, onlySizes);
  if (!trusted || observation.kind !== 'file' || before === undefined || observation.sha256 === NOT_HASHED) {
    store.forget(relative);
    return observation;
  }
  const after = await regularFileStats(fs, rootDir, relative, directories);
  if (after !== undefined && after !== ABSENT && sameIdentity(identityOf(before), identityOf(after))) {
    store.record(relative, identityOf(after), observation.sha256, readFrom);
  } else {
    store.forget(relative);
  }
  return observation;
}

/** Nothing at the path, found without an error: a real directory chain from the root up to a missing entry. */
const ABSENT = 'absent';

/**
 * The lstat of a regular file at a valid path under real directories; ABSENT when the path or one of its
 * directories is missing under real directories; undefined for anything else (observePath judges it).
 */
async function regularFileStats(
  fs: FsPort,
  rootDir: string,
  relative: string,
  directories: DirectoryCheck,
): Promise<BigIntStats | typeof ABSENT | undefined> {
  try {
    validateRelativePath(relative);
  } catch {
    return undefined;
  }
  const parent = path.posix.dirname(relative);
  const chain = await directories.state(parent === '.' ? '' : parent);
  if (chain === ABSENT) return fitsUnderRoot(path.resolve(rootDir), relative) ? ABSENT : undefined;
  if (chain !== 'directory') return undefined;
  const stats = await lstatOrAbsent(fs, directories.absolute(relative));
  if (stats === ABSENT) return fitsUnderRoot(path.resolve(rootDir), relative) ? ABSENT : undefined;
  return stats?.isFile() ? stats : undefined;
}

/**
 * The port's synchronous lstat of the fields observation reads (no Stats built: lib/lstat-fields.ts), else its
 * lstatSync (a BigIntStats has those fields); undefined without a synchronous lstat.
 */
function fieldsLstat(fs: FsPort): LstatFieldsSync | undefined {
  const fields = fs.lstatFieldsSync;
  if (fields !== undefined) return fields;
  const lstatSync = fs.lstatSync;
  return lstatSync === undefined
    ? undefined
    : (file) => lstatSync(file, { bigint: true, throwIfNoEntry: false });
}

/** Not known without waiting: the root not judged yet, or no synchronous lstat. */
const NOT_YET = 'not yet';

/** regularFileStats when it needs no wait (the root judged, a synchronous lstat), else NOT_YET. */
function regularFileStatsNow(
  fs: FsPort,
  rootDir: string,
  relative: string,
  directories: DirectoryCheck,
): LstatFields | typeof ABSENT | undefined | typeof NOT_YET {
  const lstatSync = fieldsLstat(fs);
  if (lstatSync === undefined) return NOT_YET;
  try {
    validateRelativePath(relative);
  } catch {
    return undefined;
  }
  const parent = path.posix.dirname(relative);
  const chain = directories.judgedNow(parent === '.' ? '' : parent);
  if (chain === undefined) return NOT_YET;
  if (chain === ABSENT) return fitsUnderRoot(path.resolve(rootDir), relative) ? ABSENT : undefined;
  if (chain !== 'directory') return undefined;
  let stats: LstatFields | typeof ABSENT | undefined;
  try {
    stats = lstatSync(directories.absolute(relative)) ?? ABSENT;
  } catch (error) {
    stats = errnoCode(error) === 'ENOENT' ? ABSENT : undefined;
  }
  if (stats === ABSENT) return fitsUnderRoot(path.resolve(rootDir), relative) ? ABSENT : undefined;
  return stats?.isFile() ? stats : undefined;
}

/**
 * lstat, never following a symlink; ABSENT for ENOENT, undefined when it fails otherwise. Synchronous where the
 * port offers it: a pass with nothing to do is mostly these, and a thread-pool round trip costs several
 * syscalls and two thread switches.
 */
async function lstatOrAbsent(fs: FsPort, absolute: string): Promise<BigIntStats | typeof ABSENT | undefined> {
  try {
    if (fs.lstatSync !== undefined) {
      return fs.lstatSync(absolute, { bigint: true, throwIfNoEntry: false }) ?? ABSENT;
    }
    return await fs.lstat(absolute, { bigint: true });
  } catch (error) {
    return errnoCode(error) === 'ENOENT' ? ABSENT : undefined;
  }
}

type DirectoryState = 'directory' | typeof ABSENT | 'other';

/**
 * `path.join(root, relative)` for a resolved `root` and a canonical `relative` (no empty, `.` or `..` segment, no
 * leading or trailing slash: what validateRelativePath accepts), by concatenation: observation joins one per
 * managed file and directory each pass, and `path.join`'s normalisation of each cost ~5 µs cold (1,000 joins:
 * 4.6–7.5 ms against 0.2 ms in a fresh process).
 */
export function underRoot(root: string, relative: string): string {
  return root.endsWith('/') ? root + relative : `${root}/${relative}`;
}

/**
 * What each directory under the root is, asked once per pass: a real directory (no symlink on the way), ABSENT
 * (missing, every directory above it real), or 'other' (a symlink, a file, an error: left to observePath).
 */
class DirectoryCheck {
  readonly #fs: FsPort;
  readonly #root: string;
  readonly #known = new Map<string, Promise<DirectoryState>>();
  /** The states settled so far (ObservationAhead judges a path without waiting once its directory is here). */
  readonly #judged = new Map<string, DirectoryState>();

  constructor(fs: FsPort, rootDir: string) {
    this.#fs = fs;
    this.#root = path.resolve(rootDir);
  }

  /** `relative` (canonical: validated, or a directory of a validated path) under the root. */
  absolute(relative: string): string {
    return underRoot(this.#root, relative);
  }

  state(relative: string): Promise<DirectoryState> {
    let known = this.#known.get(relative);
    if (known === undefined) {
      known = this.#check(relative).then((state) => {
        this.#judged.set(relative, state);
        return state;
      });
      this.#known.set(relative, known);
    }
    return known;
  }

  /**
   * The state of `relative` without waiting: settled already, or judged now by a synchronous lstat once its
   * parent's is (the root is only ever asked through `state`, once); undefined when it cannot be told yet.
   */
  judgedNow(relative: string): DirectoryState | undefined {
    const judged = this.#judged.get(relative);
    if (judged !== undefined || relative === '' || this.#known.has(relative)) return judged;
    const lstatSync = fieldsLstat(this.#fs);
    if (lstatSync === undefined) return undefined;
    const parent = path.posix.dirname(relative);
    const above = this.judgedNow(parent === '.' ? '' : parent);
    if (above === undefined) return undefined;
    let state: DirectoryState = above;
    if (above === 'directory') {
      // As #check judges it: ABSENT for ENOENT, a real directory, or 'other' (anything else, an error).
      try {
        const stats = lstatSync(this.absolute(relative));
        state = stats === undefined ? ABSENT : stats.isDirectory() ? 'directory' : 'other';
      } catch (error) {
        state = errnoCode(error) === 'ENOENT' ? ABSENT : 'other';
      }
    }
    this.#judged.set(relative, state);
    this.#known.set(relative, Promise.resolve(state));
    return state;
  }

  async #check(relative: string): Promise<DirectoryState> {
    try {
      if (relative === '') {
        // The root is the trust anchor: reached through symlinks on purpose, as path-guard's checkRoot does.
        return (await this.#fs.stat(this.#root)).isDirectory() ? 'directory' : 'other';
      }
      const parent = path.posix.dirname(relative);
      const above = await this.state(parent === '.' ? '' : parent);
      if (above !== 'directory') return above;
      const stats = await lstatOrAbsent(this.#fs, this.absolute(relative));
      if (stats === ABSENT) return ABSENT;
      return stats?.isDirectory() ? 'directory' : 'other';
    } catch (error) {
      // A missing root holds no file at all (observePath: `absent`); any other failure is judged there.
      return relative === '' && errnoCode(error) === 'ENOENT' ? ABSENT : 'other';
    }
  }
}
