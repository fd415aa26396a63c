// Bytes of files by sha256: for the drift watcher's local restores, and a pass's large files set aside until apply.
import { constants } from 'node:fs';
import path from 'node:path';
import type { Clock } from '../lib/clock.js';
import { errnoCode } from '../lib/errors.js';
import type { FsPort } from '../lib/fs-port.js';
import { sha256Hex } from '../lib/hash.js';
import { publishFile } from './durable-writer.js';
import { DiskError, PathRejectedError, rootConditionOf } from './errors.js';

export const CACHE_DIR = 'cache';
/**
 * How long copies of written files stay off once the cache's disk was found full (giveWay, or a put failing
 * ENOSPC/EDQUOT): doubled each time it is found full again, up to COPIES_HOLD_OFF_MAX_MS. Then the next written
 * file is copied again: when space returned the cache fills again as files are written (a drift repair's pass
 * writes its file, so copies come back for drifting files first); on a disk still full that one put fails, warns
 * once and holds copies off again, longer. Where rootDir shares the full disk, the first files written after a
 * hold-off may race their copies for the room again (their writes `retrying` for one pass, adv29's fight): hours
 * apart, so that costs at most one pass a hold-off. They stayed off until a restart.
 */
export const COPIES_HOLD_OFF_MS = 60 * 60 * 1000;
export const COPIES_HOLD_OFF_MAX_MS = 24 * 60 * 60 * 1000;
const SHA256_HEX = /^[0-9a-f]{64}$/;
/** O_NONBLOCK: a FIFO planted at an entry's name must not hang a restore or a pass waiting for a writer. */
const ENTRY_READ_FLAGS = constants.O_RDONLY | constants.O_NOFOLLOW | constants.O_NONBLOCK;

/**
 * Entries are published by the one writer with `durable: false` (no fsync, no directory fsync): every read
 * checks the bytes against the name, so an entry a power cut tore or lost is simply absent: the drift watcher
 * then asks for a pass, which rewrites the file from the service, and a write whose bytes the pass had set aside
 * here (reconcile/spill.ts) fails retryably before it touches anything. Nothing is decided on the strength of an
 * entry existing: the durable record of a managed file is `state.json`, written
 * with the durable protocol. Each entry still goes through a temp file and a rename, so a reader never meets
 * one half-written, and an entry already holding the right bytes is not rewritten.
 */
export class ContentCache {
  readonly #fs: FsPort;
  readonly #dir: string;
  readonly #clock: Pick<Clock, 'monotonic'> | undefined;
  #made: Promise<unknown> | undefined;
  /** Monotonic time from which copies are kept again; undefined while they never stopped. */
  #copiesFrom: number | undefined;
  /** The next hold-off's length. */
  #holdOffMs = COPIES_HOLD_OFF_MS;

  /** Without `clock`, copies once stopped stay off for the process (nothing to time a hold-off by). */
  constructor(fs: FsPort, stateDir: string, clock?: Pick<Clock, 'monotonic'>) {
    this.#fs = fs;
    this.#dir = path.join(stateDir, CACHE_DIR);
    this.#clock = clock;
  }

  /** Stores `data` under its sha256 (replacing whatever else an entry of that name held); returns the sha256. */
  async put(data: Uint8Array): Promise<string> {
    const sha256 = sha256Hex(data);
    for (let attempt = 0; ; attempt += 1) {
      await this.#ensureDir();
      try {
        await publishFile(this.#fs, {
          rootDir: this.#dir,
          relativePath: sha256,
          data,
          mode: 0o600,
          dirMode: 0o700,
          durable: false,
        });
        return sha256;
      } catch (error) {
        // Its disk full: no more copies for a while (each would fail and warn alike); the caller warns of this one.
        if (rootConditionOf(error) === 'full') this.holdOffCopies();
        if (attempt > 0) throw error;
        if (error instanceof PathRejectedError) {
          // Something else than a file at the entry's name (a planted symlink): removed, not followed.
          await this.#fs.unlink(path.join(this.#dir, sha256));
          continue;
        }
        // The directory went away since it was made (removed by hand): made again, once.
        const errno = error instanceof DiskError ? error.errno : errnoCode(error);
        if (errno !== 'ENOENT') throw error;
        this.#made = undefined;
      }
    }
  }

  /** Once per cache: every put of a pass would otherwise pay a mkdir that fails with EEXIST. */
  async #ensureDir(): Promise<void> {
    this.#made ??= this.#fs.mkdir(this.#dir, { recursive: true, mode: 0o700 });
    try {
      await this.#made;
    } catch (error) {
      this.#made = undefined;
      throw error;
    }
  }

  /**
   * Whether an entry of this name is a regular file of `size` bytes: a check that costs one lstat, not a read,
   * for a caller that will verify the bytes on `get` anyway (a pass setting aside bytes it set aside before).
   */
  async holds(sha256: string, size: number): Promise<boolean> {
    if (!SHA256_HEX.test(sha256)) return false;
    try {
      const stats = await this.#fs.lstat(path.join(this.#dir, sha256));
      return stats.isFile() && stats.size === size;
    } catch (error) {
      const code = errnoCode(error);
      if (code === 'ENOENT' || code === 'ENOTDIR') return false;
      throw error;
    }
  }

  /**
   * The cached bytes, or undefined when absent or when they no longer hash to their name. An entry that no
   * longer hashes to its name (a power cut tore it, or it was edited) is deleted, so the next put writes it
   * again instead of a check by `holds` trusting it forever. `size`, when the caller knows the length it wants
   * (the managed file's record, the set-aside bytes'), bounds the read: an entry of another length holds other
   * bytes and is deleted unread, so a corrupt or planted entry of a terabyte costs no memory (adv30).
   */
  async get(sha256: string, size?: number): Promise<Buffer | undefined> {
    if (!SHA256_HEX.test(sha256)) return undefined;
    const entry = path.join(this.#dir, sha256);
    let handle: Awaited<ReturnType<FsPort['open']>>;
    try {
      handle = await this.#fs.open(entry, ENTRY_READ_FLAGS);
    } catch (error) {
      // ELOOP: a symlink at the entry's name is not an entry; it is never read through.
      const code = errnoCode(error);
      if (code === 'ENOENT' || code === 'ELOOP') return undefined;
      throw error;
    }
    let data: Buffer | undefined;
    try {
      const stats = await handle.stat();
      // A FIFO, socket or device is not an entry: reading one would wait for a writer, or never end.
      if (!stats.isFile() && !stats.isDirectory()) return undefined;
      if (size === undefined || !stats.isFile()) data = await handle.readFile();
      else if (stats.size === size) data = await readAtMost(handle, size);
    } finally {
      await handle.close().catch(() => undefined);
    }
    if (data !== undefined && sha256Hex(data) === sha256) return data;
    await this.#fs.unlink(entry).catch(() => undefined);
    return undefined;
  }

  /**
   * Empties the cache when it lies on the file system holding `dir` (rootDir, found full): the daemon's copy of
   * every file it wrote there doubles what those files take, so on one disk the copies alone kept a version that
   * fits out for good (adv29). Returns how many entries it deleted (0 on another file system, or when it cannot
   * tell). Never rejects.
   */
  async makeRoomFor(dir: string): Promise<number> {
    try {
      const [cache, other] = await Promise.all([this.#fs.stat(this.#dir), this.#fs.stat(dir)]);
      if (cache.dev !== other.dev) return 0;
      return await this.giveWay();
    } catch {
      return 0;
    }
  }

  /**
   * Empties the cache and keeps no more copies of written files for a while (holdOffCopies): its disk was found
   * full. Each write's copy is put alongside the write itself, so left on they would take the room again each
   * pass (and warn once per file). Rejects as prune does.
   */
  giveWay(): Promise<number> {
    this.holdOffCopies();
    return this.prune(new Set());
  }

  /**
   * Keeps no copies of written files for the next hold-off (COPIES_HOLD_OFF_MS, doubled at each call up to
   * COPIES_HOLD_OFF_MAX_MS; for good without a clock); returns its length in ms (Infinity for good). A call while
   * one runs (the other puts of a batch failing alike, the state write that failed beside them) keeps that one.
   */
  holdOffCopies(): number {
    const now = this.#clock?.monotonic();
    if (now === undefined) {
      this.#copiesFrom = Number.POSITIVE_INFINITY;
      return Number.POSITIVE_INFINITY;
    }
    if (this.#copiesFrom !== undefined && now < this.#copiesFrom) return this.#copiesFrom - now;
    const holdOff = this.#holdOffMs;
    this.#copiesFrom = now + holdOff;
    this.#holdOffMs = Math.min(holdOff * 2, COPIES_HOLD_OFF_MAX_MS);
    return holdOff;
  }

  /**
   * Whether copies of written files are wanted now: false while a hold-off runs, after the cache's disk was found
   * full (giveWay: stateDir's, or rootDir's holding the cache; a put failing for room). A drift restore then runs a
   * pass.
   */
  get keepsCopies(): boolean {
    const from = this.#copiesFrom;
    if (from === undefined) return true;
    const now = this.#clock?.monotonic();
    return now !== undefined && now >= from;
  }

  /**
   * Deletes every entry not in `keep`; returns how many it deleted. One that cannot be deleted (a directory at its
   * name, an unlink failing EIO) costs only itself: the rest are still deleted, then the first failure is thrown
   * (the caller warns). It stopped at the first, so every later name in readdir's order stayed for good (adv29).
   */
  async prune(keep: ReadonlySet<string>): Promise<number> {
    let names: string[];
    try {
      names = (await this.#fs.readdir(this.#dir)) as string[];
    } catch (error) {
      if (errnoCode(error) === 'ENOENT') return 0;
      throw error;
    }
    let deleted = 0;
    let failure: { error: unknown } | undefined;
    for (const name of names) {
      if (!SHA256_HEX.test(name) || keep.has(name)) continue;
      try {
        await this.#fs.unlink(path.join(this.#dir, name));
        deleted += 1;
      } catch (error) {
        // Gone meanwhile (removed by other hands): nothing left to delete.
        if (errnoCode(error) !== 'ENOENT') failure ??= { error };
      }
    }
    if (failure !== undefined) throw failure.error;
    return deleted;
  }
}

/** A hold-off of copies as the log says it: `1 h`, `45 min`, or `the rest of the process` (no clock to time it by). */
export function holdOffText(ms: number): string {
  if (!Number.isFinite(ms)) return 'the rest of the process';
  return ms >= 60 * 60_000
    ? `${Math.round(ms / (60 * 60_000))} h`
    : `${Math.max(1, Math.round(ms / 60_000))} min`;
}

/** Up to `size` bytes from the start (fewer when the entry shrank meanwhile): what grew meanwhile is not read. */
async function readAtMost(handle: Awaited<ReturnType<FsPort['open']>>, size: number): Promise<Buffer> {
  const buffer = Buffer.allocUnsafe(size);
  let filled = 0;
  while (filled < size) {
    const { bytesRead } = await handle.read(buffer, filled, size - filled, filled);
    if (bytesRead === 0) break;
    filled += bytesRead;
  }
  return buffer.subarray(0, filled);
}
