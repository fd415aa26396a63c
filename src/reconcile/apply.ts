// The step handlers: one per step kind, each doing its disk effect (if any) and returning what happened.
import { constants } from 'node:fs';
import path from 'node:path';
import { AgentError, errorMessage } from '../lib/errors.js';
import type { FsPort } from '../lib/fs-port.js';
import type { Logger } from '../lib/logger.js';
import { type ContentCache, holdOffText } from '../store/content-cache.js';
import {
  hashRegularFile,
  publishFile,
  type RegularFile,
  readRegularFile,
  removeManagedFile,
  renewDroppedOnTheWay,
  syncDirectories,
  syncRegularFileIf,
  unsettledEntry,
} from '../store/durable-writer.js';
import {
  type DiskError,
  PathRejectedError,
  permissionDenied,
  refusedEntryChange,
  rootConditionOf,
  WriteNotDeclaredError,
} from '../store/errors.js';
import { EntryCheck, foldKey } from '../store/path-aliases.js';
import { VerifiedDirectories } from '../store/path-guard.js';
import type { RootMountWatch } from '../store/root-mount.js';
import type { ManagedFile } from '../store/state.js';
import { aliasConflictMessage, type RemoveStep, type Step, type StepKind, type WriteStep } from './plan.js';
import { swapObstacle } from './swap-way.js';

/** Plain writes in flight at once: enough to overlap the fsyncs and the thread pool's round trips. */
export const WRITE_CONCURRENCY = 16;
/** At most this many steps per batch; a batch's directories are fsynced once, before any result is recorded. */
export const BATCH_STEPS = 256;
/**
 * Bytes set aside by the pull (spill.ts) that a batch reads back from the content cache and holds until written,
 * at most, at once: a batch of large files would otherwise hold WRITE_CONCURRENCY of them (16 × 3 MiB). A file
 * larger than this is written alone. Bytes held in memory since the pull cost nothing more and are not counted.
 */
export const SET_ASIDE_BYTES_IN_FLIGHT = 8 * 1024 * 1024;

export interface ApplyContext {
  fs: FsPort;
  logger: Logger;
  rootDir: string;
  fileMode: number;
  dirMode: number;
  /** The files the agent recorded writing, as of this step: ownership checks and rollback read them. */
  files: ReadonlyMap<string, ManagedFile>;
  cache: ContentCache;
  /**
   * Default true: each file written is also copied into the content cache, for the drift watcher's local
   * restores. False (`--once`: no watcher runs) skips the copy; bytes the pull set aside are read back all the same.
   */
  cacheWrittenFiles?: boolean;
  /** Set-aside bytes read back and held at once (default SET_ASIDE_BYTES_IN_FLIGHT). */
  setAsideBytesInFlight?: number;
  /**
   * Makes the batch's writes durable as intents before any of them is renamed into place (the state directory's
   * write journal): what proves a file the agent's after a crash between its rename and state.json. When it
   * fails none of the batch's writes is made (`WriteNotDeclaredError`: the device's condition, never an attempt).
   */
  declareWrites?: (intents: readonly { path: string; instanceId: string; sha256: string }[]) => Promise<void>;
  /**
   * Marks, durably, the declared writes not yet recorded at the paths a removal or swap is about to remove (the
   * write journal's `declareRemovals`): a crash after the removal still tells the hooks. When it fails the step is
   * not made (`WriteNotDeclaredError`, as for writes).
   */
  declareRemovals?: (paths: readonly string[]) => Promise<void>;
  /** Steps per batch (default BATCH_STEPS). */
  batchSteps?: number;
  /**
   * rootDir's mount, asked before each batch: while it is gone (root-mount.ts) the batch's writes and removals
   * fail with its error (the device's condition, record.ts) and touch nothing.
   */
  rootMount?: RootMountWatch;
  /** The agent's effective uid (default `process.geteuid()`): whose files a sticky directory lets it replace. */
  euid?: number;
  signal?: AbortSignal;
}

/**
 * What refused a rename over, or an unlink of, the file at `path`: it belongs to `uid`, another user, in the sticky
 * directory `directory` (mode `directoryMode`), which is not the agent's user's either (judgeStickyRefusal).
 */
export interface StickyHolder {
  path: string;
  uid: number;
  directory: string;
  directoryMode: number;
}

/** What one effect did. Handlers never touch local state or the outbox: `record.ts` does, from these. */
export type EffectResult =
  /**
   * `metadata`: the bytes were right, only mode or group changed in place (no rewrite). `keptMode`: the file
   * kept these permission bits instead of the mode asked for (a filesystem without them: exFAT, vfat).
   */
  | {
      kind: 'written' | 'unchanged' | 'metadata';
      sha256: string;
      createdDirs: readonly string[];
      keptMode?: number;
    }
  /** `rollbackLost`: a swap's displaced file that could not be put back after its replacement failed. */
  | { kind: 'removed'; rollbackLost?: true }
  /** The file was left in place (changed by someone else, or no longer a regular file we wrote). */
  | { kind: 'kept'; message: string }
  /** A write not done: its path names the file another instance's write put in place earlier in this pass. */
  | { kind: 'refused'; message: string }
  /** A swap's displaced file put back after its replacement could not be written. */
  | { kind: 'restored' }
  /**
   * `neverFits`: a write that failed for a full disk with more bytes than the whole filesystem holds: it can
   * never be written there, so it counts attempts (record.ts); other full-disk failures wait for space.
   */
  | {
      kind: 'failed';
      error: unknown;
      operation: 'write' | 'remove';
      neverFits?: true;
      rootRefuses?: true;
      heldBy?: StickyHolder;
    }
  /** The step has no disk effect. */
  | { kind: 'none' };

export interface AppliedStep {
  step: Step;
  result: EffectResult;
  /** For a swap: what became of each file removed to make room for this write. */
  displaced: { step: RemoveStep; result: EffectResult }[];
}

/** The outcome of `applySteps`: the steps done, in order; `aborted` when the signal stopped it between steps. */
export interface ApplyOutcome {
  applied: AppliedStep[];
  aborted: boolean;
}

/**
 * `batched`: the write joins a batch whose directories the batch fsyncs, once each, after its writes.
 * `verified`: the batch's directories that nobody but the agent's user or root can change (path-guard.ts).
 */
interface HandlerOptions {
  batched: boolean;
  /** The pass's landed writes by fold key (store/path-aliases.ts), for `aliasedWrite`. */
  landed?: LandedWrites;
  verified?: VerifiedDirectories;
  /**
   * The directories the pass's batched writes made (PublishRequest.madeDirectories): their entries are made
   * durable by each batch's syncBatch, for the files of that batch under them.
   */
  madeDirectories?: Set<string>;
  /**
   * The directories whose entry in their parent this pass found durable (the parent fsynced after the entry was
   * there, by a syncBatch): no later batch of the pass fsyncs that parent for them again, unless the pass made them.
   */
  durableEntries?: Set<string>;
  /** The batch's directories being made (PublishRequest.makingDirectories). */
  makingDirectories?: Map<string, Promise<void>>;
  /** rootDir's mount is gone: no disk effect is attempted. */
  mountGone?: DiskError;
  /** The batch's writes could not be declared (intent.json): none is attempted. */
  undeclared?: WriteNotDeclaredError;
}

type StepHandler<K extends StepKind> = (
  step: Extract<Step, { kind: K }>,
  ctx: ApplyContext,
  options: HandlerOptions,
) => Promise<Omit<AppliedStep, 'step'>>;

const noEffect = async (): Promise<Omit<AppliedStep, 'step'>> => ({
  result: { kind: 'none' },
  displaced: [],
});

const handlers: { [K in StepKind]: StepHandler<K> } = {
  write: applyWrite,
  remove: async (step, ctx) => ({ result: (await removeFile(step, ctx)).result, displaced: [] }),
  report: (step, ctx) => (step.reason === 'already_in_place' ? syncInPlace(step, ctx) : noEffect()),
  confirm: syncInPlace,
  keep: noEffect,
  skip: noEffect,
  fail: noEffect,
  refuse: noEffect,
  wait: noEffect,
};

/**
 * A file found in place with the recorded bytes, about to be reported `deployed` (the service lags): the record
 * proves the agent's own write was durable, not that the file there now is that write (someone may have put the
 * same bytes there since, unsynced). Before the report the file (opened O_RDONLY|O_NOFOLLOW under the root, its
 * bytes checked against the record) and its directories up to the root are fsynced. Nothing when no report is
 * due (a steady pass costs what it did). `kept` (not reported, no attempt) when the bytes are no longer the
 * record's: the next pass sees what is there; `failed` when an fsync fails (record.ts, as a write's would).
 */
async function syncInPlace(
  step: Extract<Step, { kind: 'report' | 'confirm' }>,
  ctx: ApplyContext,
): Promise<Omit<AppliedStep, 'step'>> {
  const relativePath = step.instance.relative_filepath;
  const recorded = ctx.files.get(relativePath);
  if (step.report === undefined || recorded?.instanceId !== step.instance.id) return noEffect();
  const found = await syncRegularFileIf(ctx.fs, ctx.rootDir, relativePath, recorded.sha256);
  if (found !== undefined) return noEffect();
  const message = 'changed on disk since the pass read it: not reported, the next pass looks again';
  return { result: { kind: 'kept', message }, displaced: [] };
}

/** The paths of a batch's files in place that syncInPlace fsyncs before their report. */
function inPlacePaths(batch: readonly Step[]): string[] {
  return batch.flatMap((step) =>
    (step.kind === 'confirm' || (step.kind === 'report' && step.reason === 'already_in_place')) &&
    step.report !== undefined
      ? [step.instance.relative_filepath]
      : [],
  );
}

/**
 * Applies the steps in plan order, handing each result to `onApplied` (so local state follows the disk). Plain
 * writes (no file displaced) and steps without a disk effect run in batches, up to WRITE_CONCURRENCY at once,
 * and each batch's directories are fsynced once before any of its results is handed on: nothing is recorded,
 * and so nothing reported, before its file and its directory entry are durable. A batch's directory fsyncs
 * run while the next plain batch writes (its results are handed on after the batch before it, in plan order).
 * Removals and swaps run alone, after every batch before them has settled, because they prune and restore
 * directories other steps may use. A failure of one instance never stops the others; an abort stops starting
 * steps, and what already landed is still handed on.
 */
export async function applySteps(
  steps: readonly Step[],
  ctx: ApplyContext,
  onApplied: (applied: AppliedStep) => void,
): Promise<ApplyOutcome> {
  const applied: AppliedStep[] = [];
  const landed: LandedWrites = {
    byFold: new Map(),
    entries: new EntryCheck(ctx.fs, path.resolve(ctx.rootDir)),
  };
  // The last batch's settling (directory fsyncs, then its results handed on): true when no step was cut off.
  let settling: Promise<boolean> = Promise.resolve(true);
  // The paths written by batches not known to have settled: a later write to one waits until it is recorded.
  const unsettledPaths = new Set<string>();
  // For the whole pass: a later batch may write into a directory an earlier one made, whose entry's fsync failed.
  const madeDirectories = new Set<string>();
  const durableEntries = new Set<string>();
  let index = 0;
  try {
    while (index < steps.length) {
      if (ctx.signal?.aborted) break;
      const batch = nextBatch(steps, index, ctx.batchSteps ?? BATCH_STEPS);
      index += batch.length;
      const plain = isPlain(batch);
      const paths = writtenPaths(batch);
      const overlaps = paths.some((written) => unsettledPaths.has(written));
      if (!plain || overlaps) {
        if (!(await settling)) return { applied, aborted: true };
        // Each batch's settling waits for the one before it: every batch so far has settled.
        unsettledPaths.clear();
      }
      for (const written of paths) unsettledPaths.add(written);
      const options = { ...handlerOptions(plain, madeDirectories, durableEntries), landed };
      const written = await writeBatch(batch, ctx, options);
      // Removals and swaps may have removed entries and directories the listings read so far hold.
      if (!plain) landed.entries.forget();
      const before = settling;
      settling = (async () => {
        const done = await judgeRootRefusal(
          await judgeStickyRefusal(
            await judgeFullDisk(await judgeMount(await syncBatch(written, ctx, options), ctx), ctx),
            ctx,
          ),
          ctx,
        );
        const complete = await before;
        for (const step of done) {
          applied.push(step);
          onApplied(step);
        }
        return complete && done.length === batch.length;
      })();
      // Awaited later (by the next batch's settling, or below); a rejection (onApplied threw) is not unhandled.
      settling.catch(() => undefined);
      // A removal or swap, or a batch cut off by an abort: nothing starts before it has settled.
      if ((!plain || written.length < batch.length) && !(await settling)) return { applied, aborted: true };
    }
  } catch (error) {
    // Never left running: an error thrown above still waits for the batch in flight.
    await settling.catch(() => undefined);
    throw error;
  }
  if (!(await settling)) return { applied, aborted: true };
  return { applied, aborted: ctx.signal?.aborted ?? false };
}

/**
 * The batch's writes, declared before any of them is renamed (ApplyContext.declareWrites); the error when the
 * declaration could not be made durable, and then none of them may be written.
 */
async function declareWrites(
  batch: readonly Step[],
  ctx: ApplyContext,
): Promise<WriteNotDeclaredError | undefined> {
  if (ctx.declareWrites === undefined || ctx.signal?.aborted) return undefined;
  const intents: { path: string; instanceId: string; sha256: string }[] = [];
  for (const step of batch) {
    if (step.kind === 'write')
      intents.push({ path: step.path, instanceId: step.instance.id, sha256: step.sha256 });
  }
  if (intents.length === 0) return undefined;
  try {
    await ctx.declareWrites(intents);
    return undefined;
  } catch (error) {
    ctx.logger.error(
      { err: error, writes: intents.length },
      'could not declare the writes of a batch (stateDir/intent.json): none of them written',
    );
    return new WriteNotDeclaredError(error);
  }
}

/**
 * The files a removal or swap (run alone) is about to remove, marked in the write journal first
 * (ApplyContext.declareRemovals); the error when that could not be made durable, and then none is removed.
 */
async function declareRemovals(
  batch: readonly Step[],
  ctx: ApplyContext,
): Promise<WriteNotDeclaredError | undefined> {
  if (ctx.declareRemovals === undefined || ctx.signal?.aborted) return undefined;
  const paths: string[] = [];
  for (const step of batch) {
    if (step.kind === 'remove') paths.push(step.path);
    else if (step.kind === 'write') for (const displaced of step.displaces) paths.push(displaced.path);
  }
  if (paths.length === 0) return undefined;
  try {
    await ctx.declareRemovals(paths);
    return undefined;
  } catch (error) {
    ctx.logger.error(
      { err: error, removals: paths.length },
      'could not mark the removals of declared writes (stateDir/intent.json): none of them removed',
    );
    return new WriteNotDeclaredError(error, 'removal');
  }
}

/**
 * rootDir's mount asked again once a batch has written, removed or confirmed a file in place (syncInPlace): gone by
 * now, what landed (or was found) may have been the bare mountpoint's filesystem, so none of it counts (`failed` with the mount's error, recorded as the
 * device's condition: retrying, never `deployed` nor `removed`); the next pass after the mount is back judges the
 * disk again. Swaps (with displaced files) are left as they are.
 */
async function judgeMount(done: AppliedStep[], ctx: ApplyContext): Promise<AppliedStep[]> {
  const landed = done.filter(
    ({ step, result, displaced }) =>
      displaced.length === 0 &&
      (result.kind === 'written' ||
        result.kind === 'metadata' ||
        result.kind === 'removed' ||
        // A file confirmed in place from its bytes, its report due (mount27); none due: no check added.
        (result.kind === 'none' &&
          (step.kind === 'confirm' || step.kind === 'report') &&
          step.report !== undefined &&
          judgedOnDisk(step) !== undefined)),
  );
  if (landed.length === 0 || ctx.rootMount === undefined) return done;
  const rootGone = await ctx.rootMount.check();
  for (const applied of landed) {
    // A mount below rootDir gone holds only the files under it (mount26).
    const onDisk = judgedOnDisk(applied.step);
    if (onDisk === undefined) continue;
    const gone = rootGone ?? ctx.rootMount.goneAt(onDisk.path);
    if (gone === undefined) continue;
    applied.result = { kind: 'failed', error: gone, operation: onDisk.operation };
  }
  return done;
}

/**
 * Marks the writes that failed for a full disk (ENOSPC, EDQUOT) with more bytes than the filesystem holding the
 * file has in all (statfs of its deepest existing directory, which may be a mount below rootDir): those can never
 * be written, and count attempts. Without statfs, when it fails or tells no size (0 blocks), nothing is marked: a
 * full disk is taken for the disk's condition, which ends when space returns. Judged by rootDir's filesystem
 * instead, a file larger than a small mount below the root waited for good, and one that fits a large mount below
 * a small root was `failed` for good (adv31).
 */
async function judgeFullDisk(done: AppliedStep[], ctx: ApplyContext): Promise<AppliedStep[]> {
  const full = done.filter(
    ({ step, result }) =>
      step.kind === 'write' && result.kind === 'failed' && rootConditionOf(result.error) === 'full',
  );
  if (full.length === 0) return done;
  const holders = new Map<string, Promise<string>>();
  const holderOf = (relative: string): Promise<string> => {
    const dir = path.dirname(relative);
    let found = holders.get(dir);
    if (found === undefined) {
      found = holdingDirectory(ctx, dir);
      holders.set(dir, found);
    }
    return found;
  };
  let emptied = 0;
  for (const dir of new Set(await Promise.all(full.map(({ step }) => holderOf((step as WriteStep).path))))) {
    emptied += await ctx.cache.makeRoomFor(dir);
  }
  if (emptied > 0) {
    // Retried after the hold-off like any full disk, now without the copies in its way.
    ctx.logger.warn(
      { cacheEntriesDeleted: emptied },
      'the disk holding rootDir is full and holds the content cache: emptied it, and copies no more written files ' +
        `there for ${holdOffText(ctx.cache.holdOffCopies())} (a drift is then repaired by a pass)`,
    );
  }
  const statfs = ctx.fs.statfs;
  if (statfs === undefined) return done;
  const capacities = new Map<string, Promise<number>>();
  const capacityOf = (dir: string): Promise<number> => {
    let capacity = capacities.get(dir);
    if (capacity === undefined) {
      capacity = statfs(dir).then(
        (stats) => stats.blocks * stats.bsize,
        () => 0,
      );
      capacities.set(dir, capacity);
    }
    return capacity;
  };
  for (const applied of full) {
    const step = applied.step as WriteStep;
    const capacity = await capacityOf(await holderOf(step.path));
    // No size told (0 blocks: libfuse's answer for a file system that implements no statfs): nothing never fits.
    if (!(capacity > 0)) continue;
    const bytes = step.data?.length ?? step.size;
    if (bytes !== undefined && bytes > capacity && applied.result.kind === 'failed')
      applied.result = { ...applied.result, neverFits: true };
  }
  return done;
}

/**
 * The deepest directory of `relative` (a path below rootDir) that is there as a directory, rootDir at the least:
 * the one whose filesystem a write below it lands on. A symlink on the way is not followed (the writer refuses
 * those): the directory above it is taken.
 */
async function holdingDirectory(ctx: ApplyContext, relative: string): Promise<string> {
  for (let dir = relative; dir !== '.' && dir !== '/' && dir !== ''; dir = path.dirname(dir)) {
    const absolute = path.join(ctx.rootDir, dir);
    const stats = await ctx.fs.lstat(absolute).catch(() => undefined);
    if (stats?.isDirectory() === true) return absolute;
  }
  return ctx.rootDir;
}

/**
 * Marks the steps a subdirectory refused (EACCES, EPERM) as the root's condition (`rootRefuses`) when rootDir
 * itself refuses the agent too (`access(W_OK|X_OK)`, asked once per batch): a tree chowned away whole (`chown -R`)
 * is the device's, not each instance's. A subdirectory that refuses under a root the agent may write is that
 * directory's (an operator locked it): nothing is marked, and the failure counts an attempt.
 */
async function judgeRootRefusal(done: AppliedStep[], ctx: ApplyContext): Promise<AppliedStep[]> {
  const denied = done.filter(
    ({ result }) =>
      result.kind === 'failed' &&
      result.heldBy === undefined &&
      rootConditionOf(result.error) === undefined &&
      permissionDenied(result.error),
  );
  if (denied.length === 0 || ctx.fs.access === undefined) return done;
  try {
    await ctx.fs.access(ctx.rootDir, constants.W_OK | constants.X_OK);
    return done;
  } catch (error) {
    if (!permissionDenied(error)) return done;
  }
  for (const applied of denied) {
    if (applied.result.kind === 'failed') applied.result = { ...applied.result, rootRefuses: true };
  }
  return done;
}

/** S_ISVTX, which node's fs.constants does not export. */
const STICKY_BIT = 0o1000;

/**
 * Marks the renames and unlinks refused (EPERM, EACCES) by a sticky directory (`heldBy`): the file at the path
 * belongs to another user, and the directory (mode 1777, or 1770 for a group) is not the agent's user's either, so
 * the kernel lets only that file's owner (or root) replace or remove it. Another user's doing, which no attempt of
 * the instance can get past, and one an unprivileged local user could otherwise use to make an instance `failed`
 * for good: the device's condition (record.ts), `retrying` until the file goes. Judged after the failure by lstat of
 * the file and its directory. Not marked: the agent running as root (the sticky bit never refuses it), a file or
 * directory of the agent's own, a directory without the sticky bit: there an EPERM is an attribute only root sets
 * (`chattr +i`, `+a`) or a directory an operator locked, which stays the instance's attempt.
 */
async function judgeStickyRefusal(done: AppliedStep[], ctx: ApplyContext): Promise<AppliedStep[]> {
  const euid = ctx.euid ?? process.geteuid?.();
  if (euid === undefined || euid === 0) return done;
  for (const applied of done) {
    const { result } = applied;
    if (result.kind !== 'failed') continue;
    const refused = refusedEntryChange(result.error);
    if (refused === undefined) continue;
    const heldBy = await stickyHolder(ctx, refused.path, euid);
    if (heldBy !== undefined) applied.result = { ...result, heldBy };
  }
  return done;
}

async function stickyHolder(
  ctx: ApplyContext,
  relative: string,
  euid: number,
): Promise<StickyHolder | undefined> {
  if (relative === '') return undefined;
  const absolute = path.join(ctx.rootDir, relative);
  try {
    const [directory, entry] = await Promise.all([
      ctx.fs.lstat(path.dirname(absolute)),
      ctx.fs.lstat(absolute),
    ]);
    const sticky = directory.isDirectory() && (directory.mode & STICKY_BIT) !== 0;
    if (!sticky || directory.uid === euid || entry.uid === euid) return undefined;
    const parent = path.posix.dirname(relative);
    return {
      path: relative,
      uid: entry.uid,
      directory: parent === '.' ? '' : parent,
      directoryMode: directory.mode & 0o7777,
    };
  } catch {
    // Gone meanwhile, or out of reach: nothing to tell, and the failure stays as it was judged.
    return undefined;
  }
}

function batchable(step: Step): boolean {
  return step.kind !== 'remove' && (step.kind !== 'write' || step.displaces.length === 0);
}

/** The steps from `start` that can share a batch: batchable, one write per path, at most `limit`. */
function nextBatch(steps: readonly Step[], start: number, limit: number): Step[] {
  const first = steps[start]!;
  if (!batchable(first)) return [first];
  const batch: Step[] = [];
  // Fold keys, not paths: two spellings of one name may be one file (a case-insensitive filesystem), and a write
  // is checked against the ones that landed before it (`aliasedWrite`), never raced with them.
  const paths = new Set<string>();
  for (let i = start; i < steps.length && batch.length < limit; i += 1) {
    const step = steps[i]!;
    if (!batchable(step)) break;
    if (step.kind === 'write') {
      const key = foldKey(step.path);
      if (paths.has(key)) break;
      paths.add(key);
    }
    batch.push(step);
  }
  return batch;
}

function writtenPaths(batch: readonly Step[]): string[] {
  return batch.flatMap((step) => (step.kind === 'write' ? [step.path] : []));
}

/** A batch of plain writes (or steps without a disk effect), as opposed to a removal or swap run alone. */
function isPlain(batch: readonly Step[]): boolean {
  return batch.length > 1 || batchable(batch[0]!);
}

function handlerOptions(
  plain: boolean,
  madeDirectories: Set<string>,
  durableEntries: Set<string>,
): HandlerOptions {
  // One per batch: removals and swaps, which can delete directories, run between batches.
  return plain
    ? {
        batched: true,
        verified: new VerifiedDirectories(process.geteuid?.() ?? -1),
        madeDirectories,
        durableEntries,
        makingDirectories: new Map(),
      }
    : { batched: false, durableEntries };
}

/**
 * Runs one batch's steps and returns them in plan order, before any directory fsync of the batch (syncBatch).
 * Steps cut off by an abort are left out.
 */
async function writeBatch(
  batch: readonly Step[],
  ctx: ApplyContext,
  options: HandlerOptions,
): Promise<AppliedStep[]> {
  const mountGone = await ctx.rootMount?.check();
  const undeclared =
    mountGone === undefined
      ? ((await declareWrites(batch, ctx)) ?? (await declareRemovals(batch, ctx)))
      : undefined;
  const stepOptions =
    mountGone !== undefined
      ? { ...options, mountGone }
      : undeclared !== undefined
        ? { ...options, undeclared }
        : options;
  if (stepOptions === options && options.verified !== undefined && options.madeDirectories !== undefined) {
    // After a failed directory fsync only (store/directory-syncs.ts), one at a time, before any write starts.
    // Files reported in place too (syncInPlace): their fsyncs prove nothing through a dropped entry, and with
    // no write to renew it they were never reported again.
    for (const written of [...writtenPaths(batch), ...inPlacePaths(batch)]) {
      if (ctx.fs.directorySyncs?.anyDropped !== true) break;
      await renewDroppedOnTheWay(ctx.fs, ctx.rootDir, written, options.verified, options.madeDirectories);
    }
  }
  const results: (AppliedStep | undefined)[] = new Array(batch.length);
  let next = 0;
  const gate = new ByteGate(ctx.setAsideBytesInFlight ?? SET_ASIDE_BYTES_IN_FLIGHT);
  const worker = async (): Promise<void> => {
    while (next < batch.length && !ctx.signal?.aborted) {
      const position = next++;
      const step = batch[position]!;
      const weight = step.kind === 'write' && step.data === undefined ? (step.size ?? 0) : 0;
      await gate.enter(weight);
      try {
        // An abort while this step waited for room: it is cut off, as a step not yet started is.
        if (ctx.signal?.aborted) return;
        results[position] = await applyOne(step, ctx, stepOptions);
      } finally {
        gate.leave(weight);
      }
    }
  };
  await Promise.all(Array.from({ length: Math.min(WRITE_CONCURRENCY, batch.length) }, worker));
  // Steps an abort cut off are missing; the others landed, and are handed on all the same.
  return results.filter((result): result is AppliedStep => result !== undefined);
}

/**
 * A batch's written steps once the directories of its files are fsynced (a directory that fails turns its writes
 * into failures: the bytes are in place, but a power cut could still undo the rename). Never rejects.
 */
async function syncBatch(
  done: AppliedStep[],
  ctx: ApplyContext,
  options: HandlerOptions,
): Promise<AppliedStep[]> {
  // Every landed write, bytes already in place included: each publish ensures durability, and in a batch
  // the directory entry's part of that is this fsync.
  const landed = (applied: AppliedStep): applied is AppliedStep & { step: WriteStep } =>
    applied.step.kind === 'write' && LANDED.has(applied.result.kind);
  const made = options.madeDirectories ?? new Set<string>();
  const durable = options.durableEntries ?? new Set<string>();
  const dependencies = new Map<AppliedStep, string[]>();
  const directories = new Set<string>();
  for (const applied of done) {
    if (!landed(applied)) continue;
    const needed = directoriesToSync(applied.step.path, made, durable);
    dependencies.set(applied, needed);
    // Alone (a swap), the publish fsynced its own directory and its new directories' parents: the rest of the chain.
    for (const dir of options.batched ? needed : needed.slice(1)) directories.add(dir);
  }
  if (directories.size === 0) return done;
  const failures = await syncDirectories(
    ctx.fs,
    ctx.rootDir,
    directories,
    options.verified === undefined ? {} : { verified: options.verified },
  );
  for (const needed of dependencies.values()) {
    // needed[i + 1] is needed[i]'s parent: fsynced with needed[i] in it, and every one above it fsynced too
    // (the chain ends at the root or at a directory found durable so), needed[i] is durable where it is.
    for (let index = needed.length - 2; index >= 0; index -= 1) {
      if (failures.has(needed[index + 1]!)) break;
      durable.add(needed[index]!);
    }
  }
  // Once a directory fsync of the process failed, a later good one proves nothing about the entries it may have
  // dropped (store/directory-syncs.ts): a file whose entry, or one on its way up, is such is not handed on as
  // landed; the next pass publishes it (and renews such a directory) again.
  const anyDropped = ctx.fs.directorySyncs?.anyDropped === true;
  if (failures.size === 0 && !anyDropped) return done;
  return done.map((applied) => {
    const needed = dependencies.get(applied);
    if (needed === undefined) return applied;
    const error =
      needed.map((dir) => failures.get(dir)).find((failure) => failure !== undefined) ??
      (anyDropped ? unsettledEntry(ctx.fs, ctx.rootDir, (applied.step as WriteStep).path) : undefined);
    if (error === undefined) return applied;
    return { ...applied, result: { kind: 'failed', error, operation: 'write' } };
  });
}

/**
 * The directories whose fsync a landed file in a batch needs before it is handed on: its own, and the parent of
 * every directory on its way up to the root whose entry this pass has not yet found durable, or that the pass
 * made (that directory's entry, see PublishRequest.madeDirectories). A directory the pass did not make may still
 * be new: made by a run killed before its batch's fsyncs, or by a pass whose parent fsync failed (EIO) — so
 * whether the file was written now or found in place, its whole chain is fsynced once per pass.
 */
function directoriesToSync(
  relativePath: string,
  made: ReadonlySet<string>,
  durable: ReadonlySet<string>,
): string[] {
  let dir = directoryOf(relativePath);
  const needed = [dir];
  while (dir !== '' && (made.has(dir) || !durable.has(dir))) {
    dir = directoryOf(dir);
    needed.push(dir);
  }
  return needed;
}

/** Admits work, first come first served, while the bytes admitted stay within `limit`; more goes in alone. */
class ByteGate {
  readonly #limit: number;
  #admitted = 0;
  readonly #waiting: { bytes: number; admit: () => void }[] = [];

  constructor(limit: number) {
    this.#limit = limit;
  }

  async enter(bytes: number): Promise<void> {
    if (bytes === 0) return;
    if (this.#waiting.length === 0 && this.#fits(bytes)) {
      this.#admitted += bytes;
      return;
    }
    await new Promise<void>((admit) => this.#waiting.push({ bytes, admit }));
  }

  leave(bytes: number): void {
    if (bytes === 0) return;
    this.#admitted -= bytes;
    for (
      let first = this.#waiting[0];
      first !== undefined && this.#fits(first.bytes);
      first = this.#waiting[0]
    ) {
      this.#waiting.shift();
      this.#admitted += first.bytes;
      first.admit();
    }
  }

  #fits(bytes: number): boolean {
    return this.#admitted === 0 || this.#admitted + bytes <= this.#limit;
  }
}

const LANDED: ReadonlySet<EffectResult['kind']> = new Set(['written', 'unchanged', 'metadata']);

function directoryOf(relativePath: string): string {
  const dir = path.posix.dirname(relativePath);
  return dir === '.' ? '' : dir;
}

/**
 * The path a step writes or removes, or whose `deployed`/`removed` it judges from what is on disk there (a file
 * confirmed in place; one gone from the former root): such a step means nothing while the mount holding the path is
 * gone. Undefined for the steps that touch no file and judge none.
 */
function judgedOnDisk(step: Step): { path: string; operation: 'write' | 'remove' } | undefined {
  switch (step.kind) {
    case 'write':
      return { path: step.path, operation: 'write' };
    case 'remove':
      return { path: step.path, operation: 'remove' };
    case 'confirm':
      return { path: step.instance.relative_filepath, operation: 'write' };
    case 'report':
      if (step.reason === 'already_in_place')
        return { path: step.instance.relative_filepath, operation: 'write' };
      if (step.reason === 'gone_from_former_root')
        return { path: step.instance.relative_filepath, operation: 'remove' };
      return undefined;
    default:
      return undefined;
  }
}

/** One step through its handler; undefined when an abort cut it short. */
async function applyOne(
  step: Step,
  ctx: ApplyContext,
  options: HandlerOptions,
): Promise<AppliedStep | undefined> {
  const handler = handlers[step.kind] as StepHandler<typeof step.kind>;
  const onDisk = judgedOnDisk(step);
  if (onDisk !== undefined) {
    // rootDir's mount gone, or the one below it holding this path (mount26): nothing into the bare directory, and
    // nothing judged from what lies there (mount27: a stale copy with the recorded bytes is not the mount's file).
    const mountGone = options.mountGone ?? ctx.rootMount?.goneAt(onDisk.path);
    if (mountGone !== undefined)
      return {
        step,
        result: { kind: 'failed', error: mountGone, operation: onDisk.operation },
        displaced: [],
      };
  }
  if (options.undeclared !== undefined && (step.kind === 'write' || step.kind === 'remove')) {
    const operation = step.kind === 'remove' ? 'remove' : 'write';
    return { step, result: { kind: 'failed', error: options.undeclared, operation }, displaced: [] };
  }
  try {
    return { step, ...(await handler(step as never, ctx, options)) };
  } catch (error) {
    if (ctx.signal?.aborted) return undefined;
    // Handlers classify the failures they expect; anything else still costs only this instance an attempt.
    const operation = step.kind === 'remove' ? 'remove' : 'write';
    return { step, result: { kind: 'failed', error, operation }, displaced: [] };
  }
}

/**
 * A swap (a write with displaced files) is the one compound handler: the removals are rolled back on failure,
 * from the bytes read just before each removal (no copy of every file is kept anywhere for this).
 */
async function applyWrite(
  step: WriteStep,
  ctx: ApplyContext,
  options: HandlerOptions,
): Promise<Omit<AppliedStep, 'step'>> {
  const aliased = await aliasedWrite(step, options.landed);
  if (aliased !== undefined) return { result: { kind: 'refused', message: aliased }, displaced: [] };
  // First, so that bytes lost from the cache cost this write only, never a displaced file.
  const data = step.data ?? (await setAsideBytes(ctx, step));
  if (step.displaces.length > 0) {
    // Displaced files are removed only when that clears the write's way: else it waits, nothing removed.
    const obstacle = await swapObstacle(ctx.fs, ctx.rootDir, step.path, step.displaces, ctx.files);
    if (obstacle !== undefined)
      return { result: { kind: 'failed', error: obstacle, operation: 'write' }, displaced: [] };
  }
  const displaced: (AppliedStep['displaced'][number] & { previous: RegularFile | undefined })[] = [];
  for (const remove of step.displaces) {
    const { result, previous } = await removeFile(remove, ctx);
    displaced.push({ step: remove, result, previous });
  }
  // Alongside the publish: the copy is not durable (see content-cache.ts), so it waits for nothing. Bytes
  // set aside by the pull are in the cache already.
  const caching =
    step.data === undefined || ctx.cacheWrittenFiles === false || !ctx.cache.keepsCopies
      ? Promise.resolve()
      : cacheContent(ctx, step, step.data);
  try {
    const published = await publishFile(ctx.fs, {
      rootDir: ctx.rootDir,
      relativePath: step.path,
      data,
      mode: step.mode ?? ctx.fileMode,
      ...(step.gid === undefined ? {} : { gid: step.gid }),
      dirMode: ctx.dirMode,
      // The planner writes only what it has no durable record of: bytes already there (an adopted file, or
      // the leftover of a write whose fsync failed) are fsynced before anyone is told they are in place.
      ensureDurable: true,
      syncDirectory: !options.batched,
      ...(options.verified === undefined ? {} : { verified: options.verified }),
      ...(options.madeDirectories === undefined ? {} : { madeDirectories: options.madeDirectories }),
      ...(options.makingDirectories === undefined ? {} : { makingDirectories: options.makingDirectories }),
      ...(ctx.signal === undefined ? {} : { signal: ctx.signal }),
    });
    await caching;
    if (published.outcome === 'written' && step.reason === 'drift') {
      ctx.logger.warn(
        { instanceId: step.instance.id, path: step.path },
        'restored a managed file changed by someone else',
      );
    }
    const result = {
      kind: published.outcome,
      sha256: published.sha256,
      createdDirs: published.createdDirs,
      ...(published.keptMode === undefined ? {} : { keptMode: published.keptMode }),
    };
    if (options.landed !== undefined) {
      await options.landed.entries.written(step.path);
      const key = foldKey(step.path);
      const entry = { path: step.path, instanceId: step.instance.id };
      const same = options.landed.byFold.get(key);
      if (same === undefined) options.landed.byFold.set(key, [entry]);
      else same.push(entry);
    }
    return {
      result,
      displaced: displaced.map(({ step: remove, result: removal }) => ({ step: remove, result: removal })),
    };
  } catch (error) {
    await caching;
    // The swap failed half-way: put back what was removed for it, so the device keeps a working config.
    const rolledBack: AppliedStep['displaced'] = [];
    for (const entry of displaced) {
      rolledBack.push({
        step: entry.step,
        result:
          entry.result.kind === 'removed'
            ? await restoreDisplaced(entry.step, entry.previous, ctx)
            : entry.result,
      });
    }
    if (ctx.signal?.aborted) throw error;
    return { result: { kind: 'failed', error, operation: 'write' }, displaced: rolledBack };
  }
}

/**
 * Writes that landed in this pass, by the fold key of their path (path and instance), and the directory
 * listings that tell their aliases: read once per directory per pass and kept up to date with the pass's writes.
 */
interface LandedWrites {
  byFold: Map<string, { path: string; instanceId: string }[]>;
  entries: EntryCheck;
}

/**
 * Why a write must not be done, if it must not: its path names the file another instance's write of this pass
 * put in place (two spellings of one name on a case-insensitive filesystem, neither on disk when the pass was
 * planned). Replacing it would leave that instance reported `deployed` over this one's bytes, and the two would
 * take turns every pass. The plan writes the winner of such a pair first (plan.ts `winnersFirst`); the next
 * pass sees the alias on disk and refuses the loser there.
 */
async function aliasedWrite(step: WriteStep, landed: LandedWrites | undefined): Promise<string | undefined> {
  if (landed === undefined) return undefined;
  const earlier = landed.byFold
    .get(foldKey(step.path))
    ?.filter((write) => write.path !== step.path && write.instanceId !== step.instance.id);
  if (earlier !== undefined && earlier.length > 0) {
    // Once per write, however many spellings of its name landed before it (a hostile service may send thousands).
    let entry: string | undefined;
    try {
      entry = await landed.entries.canonical(step.path);
    } catch {
      // A directory that cannot be listed tells nothing: not written this pass, the side that overwrites nothing.
      const first = earlier[0]!;
      return aliasConflictMessage(step.instance, first.path, first.instanceId);
    }
    if (entry !== undefined) {
      for (const write of earlier) {
        const same = await landed.entries.canonical(write.path).then(
          (other) => other === entry,
          () => true,
        );
        if (same) return aliasConflictMessage(step.instance, write.path, write.instanceId);
      }
    }
  }
  await landed.entries.beforeWrite(step.path);
  return undefined;
}

/**
 * Removes a file only while it is still the one this agent recorded writing; returns what was there before
 * (bytes and mode), which a failed swap puts back. A path that names another instance's file (`aliasOf`) is
 * never touched: only its record goes.
 */
async function removeFile(
  step: RemoveStep,
  ctx: ApplyContext,
): Promise<{ result: EffectResult; previous?: RegularFile }> {
  if (step.aliasOf !== undefined) {
    const message = `file left in place: ${JSON.stringify(step.path)} names the same file on this device as ${JSON.stringify(step.aliasOf.path)}, ${step.aliasOf.instanceId}'s`;
    return { result: { kind: 'kept', message } };
  }
  const owned = ctx.files.get(step.path);
  try {
    // A symlink or other non-regular file at the path is judged (and refused) by the remover below.
    const unlessRejected = (error: unknown) => {
      if (error instanceof PathRejectedError) return undefined;
      throw error;
    };
    // Hashed in chunks first: a file someone replaced (with gigabytes, say) is never read whole, only one that
    // is still ours, whose bytes a failed swap puts back — and no further than the size hashed: a file grown
    // since reads as changed.
    // A file of another length than the one recorded is not ours: taken as changed unread (NOT_HASHED).
    const onlySizes = owned?.size === undefined ? undefined : new Set([owned.size]);
    const hashed = await hashRegularFile(
      ctx.fs,
      ctx.rootDir,
      step.path,
      onlySizes === undefined ? {} : { onlySizes },
    ).catch(unlessRejected);
    const changed = (file: { sha256: string } | undefined) =>
      file !== undefined && owned !== undefined && file.sha256 !== owned.sha256;
    const current = changed(hashed)
      ? undefined
      : await readRegularFile(ctx.fs, ctx.rootDir, step.path, hashed?.size ?? 0).catch(unlessRejected);
    if (changed(hashed) || changed(current)) {
      // Someone changed the file since we wrote it (an operator's edit kept under drift "report", another
      // tool): it is no longer what we wrote, so it is not ours to delete.
      const message = 'file left in place: changed by someone else since this agent wrote it';
      ctx.logger.warn({ instanceId: step.instance.id, path: step.path }, message);
      return { result: { kind: 'kept', message } };
    }
    const removed = await removeManagedFile(ctx.fs, {
      rootDir: ctx.rootDir,
      relativePath: step.path,
      pruneDirs: [...(owned?.createdDirs ?? []), ...(step.pruneWith ?? [])],
      // Only the file just checked: one a local user renamed into place since is theirs.
      ...(current === undefined ? {} : { expected: current.identity }),
    });
    if (removed === 'refused') {
      const message = 'file left in place: the path is no longer a regular file written by this agent';
      return { result: { kind: 'kept', message } };
    }
    return { result: { kind: 'removed' }, ...(current === undefined ? {} : { previous: current }) };
  } catch (error) {
    if (ctx.signal?.aborted) throw error;
    return { result: { kind: 'failed', error, operation: 'remove' } };
  }
}

async function restoreDisplaced(
  remove: RemoveStep,
  previous: RegularFile | undefined,
  ctx: ApplyContext,
): Promise<EffectResult> {
  if (previous !== undefined) {
    try {
      await publishFile(ctx.fs, {
        rootDir: ctx.rootDir,
        relativePath: remove.path,
        data: previous.data,
        mode: previous.mode,
        // A new inode: without it the file would change hands to the agent's group, away from its readers.
        gid: previous.gid,
        dirMode: ctx.dirMode,
      });
      ctx.logger.warn(
        { instanceId: remove.instance.id, path: remove.path },
        'swap failed: restored the removed file',
      );
      return { kind: 'restored' };
    } catch (error) {
      ctx.logger.error(
        { err: error, path: remove.path },
        'swap failed and the removed file could not be restored',
      );
    }
  }
  return { kind: 'removed', rollbackLost: true };
}

/**
 * The drift watcher restores a drifted file from these bytes without a pass (see drift-watcher.ts). Never
 * rejects: a missing copy only sends a later restore of the file through a pass.
 */
async function cacheContent(ctx: ApplyContext, step: WriteStep, data: Buffer): Promise<void> {
  try {
    await ctx.cache.put(data);
  } catch (error) {
    // The file itself is in place; only a local restore of it would fall back to a pass.
    ctx.logger.warn({ err: error, path: step.path }, 'could not cache content for local restores');
  }
}

/** The bytes of a write the pull set aside in the content cache (spill.ts), checked against their sha256. */
async function setAsideBytes(ctx: ApplyContext, step: WriteStep): Promise<Buffer> {
  let data: Buffer | undefined;
  try {
    data = await ctx.cache.get(step.sha256, step.size);
  } catch (error) {
    // The state directory's trouble (EIO, EACCES on the entry), not the instance's: lost like a torn entry.
    throw new SetAsideBytesLostError(step.sha256, error);
  }
  if (data === undefined) throw new SetAsideBytesLostError(step.sha256);
  return data;
}

/**
 * The bytes the pull set aside for a write were gone from the content cache, or no longer hashed to their name,
 * when the write came: the write fails (and is retried by a later pass, which pulls the content again).
 */
export class SetAsideBytesLostError extends AgentError {
  constructor(sha256: string, cause?: unknown) {
    super(
      'set_aside_bytes_lost',
      `the file's bytes, set aside in the state directory's content cache during this pass (${sha256}), were ${cause === undefined ? 'missing or changed' : `unreadable (${errorMessage(cause)})`} when it was written`,
      { retryable: true, ...(cause === undefined ? {} : { cause }) },
    );
  }
}
