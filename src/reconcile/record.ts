// Turns what each step did into local-state changes and due status reports: the only writer of both in a pass.
import type { InvalidListItem, SkippedListItem } from '../api/pager.js';
import type { ConfigInstanceHead, StatusReport } from '../api/schemas.js';
import { fullJitterMs } from '../lib/backoff.js';
import type { Clock } from '../lib/clock.js';
import { errorMessage, isAgentError } from '../lib/errors.js';
import type { Logger } from '../lib/logger.js';
import {
  DiskError,
  isAgentResourceError,
  quotaExceeded,
  type RootCondition,
  rootConditionOf,
} from '../store/errors.js';
import type { StatusOutbox } from '../store/outbox.js';
import { MAX_PATH_BYTES } from '../store/path-guard.js';
import type { LocalState } from '../store/state.js';
import type { AppliedStep, EffectResult, StickyHolder } from './apply.js';
import type { InstanceAction, InstanceOutcome, RetryPolicy } from './pass-runner.js';
import {
  dueReport,
  errorReport,
  type RemoveStep,
  type ReportLookup,
  removedReport,
  statusMessage,
} from './plan.js';

export interface RecordContext {
  state: LocalState;
  outbox: StatusOutbox;
  clock: Clock;
  random: () => number;
  logger: Logger;
  fileMode: number;
  retry: RetryPolicy;
  /** Record written and removed paths in `state.pendingHookPaths` (the daemon has hooks to run). */
  trackHookPaths: boolean;
  /** The instance's `updated_at` in the listing its report is made from: kept with the report (outbox.ts `listed`). */
  listedUpdatedAt?: (instanceId: string) => string | undefined;
  /**
   * The mount point below rootDir holding a file's path (absolute), when one does (store/root-mount.ts): a read-only
   * condition there is that mount's, not rootDir's.
   */
  mountHolding?: (relative: string) => string | undefined;
  /**
   * How many recorded files lie below each directory, made at the first removal recorded with this context (one
   * per pass) and kept up to date by this module's changes to `state.files` (see `handDownCreatedDirs`).
   */
  filesBelow?: Map<string, number>;
}

/** Records one applied step; returns what happened to each instance it concerned. */
export function recordStep(applied: AppliedStep, ctx: RecordContext): InstanceOutcome[] {
  let outcomes: InstanceOutcome[];
  try {
    outcomes = outcomesOf(applied, ctx);
  } catch (error) {
    // A bug met while recording one step still costs only that instance an attempt; the pass goes on.
    const operation = applied.step.kind === 'remove' ? 'remove' : 'write';
    outcomes = [recordFailure(ctx, applied.step.instance, { kind: 'failed', error, operation })];
  }
  if (ctx.trackHookPaths) {
    for (const outcome of outcomes) {
      if (outcome.action === 'written' || outcome.action === 'removed')
        ctx.state.pendingHookPaths.add(outcome.path);
    }
  }
  return outcomes;
}

function outcomesOf({ step, result, displaced }: AppliedStep, ctx: RecordContext): InstanceOutcome[] {
  const { instance } = step;
  switch (step.kind) {
    case 'write': {
      const recordSwapped = () => displaced.map((entry) => recordDisplaced(entry.step, entry.result, ctx));
      if (result.kind !== 'written' && result.kind !== 'unchanged' && result.kind !== 'metadata') {
        const swapped = recordSwapped();
        const waiting = step.supersedes.map(({ instance: superseded }) =>
          awaitingOwner(superseded, instance.id),
        );
        if (result.kind === 'refused') {
          ctx.logger.warn({ instanceId: instance.id, path: step.path }, result.message);
          recordError(ctx, instance, 'retrying', result.message, 0);
          return [
            ...swapped,
            ...waiting,
            outcomeFor(instance, 'refused', false, { message: result.message }),
          ];
        }
        return [...swapped, ...waiting, recordFailure(ctx, instance, result)];
      }
      const previous = ctx.state.files.get(step.path);
      const writtenSize = step.data?.length ?? step.size;
      if (previous === undefined) countBelow(ctx.filesBelow, step.path, 1);
      ctx.state.files.set(step.path, {
        instanceId: instance.id,
        sha256: result.sha256,
        mode: step.mode ?? ctx.fileMode,
        createdDirs: [
          ...new Set([...(previous?.createdDirs ?? []), ...slicesOf(step.path, result.createdDirs)]),
        ],
        writtenAt: new Date(ctx.clock.now()).toISOString(),
        ...(result.keptMode === undefined ? {} : { keptMode: result.keptMode }),
        ...(writtenSize === undefined ? {} : { size: writtenSize }),
      });
      markSucceeded(ctx, instance, 'deployed', step.report);
      const swapped = recordSwapped();
      const replaced = step.supersedes.map(({ instance: superseded, report }) => {
        markSucceeded(ctx, superseded, 'removed', report);
        return outcomeFor(superseded, 'replaced', true, {
          message: `its file now belongs to ${instance.id}`,
        });
      });
      // A metadata-only change is still a change of the file for hooks and the summary.
      const action = result.kind === 'unchanged' ? 'unchanged' : 'written';
      return [...swapped, ...replaced, outcomeFor(instance, action, true, { reason: step.reason })];
    }
    case 'remove':
      return [recordRemoval(step, result, ctx)];
    case 'report': {
      if (result.kind !== 'none') return [notConfirmed(ctx, instance, result)];
      const activity = step.reason === 'already_in_place' ? 'deployed' : 'removed';
      markSucceeded(ctx, instance, activity, step.report);
      const outcome = outcomeFor(instance, activity === 'deployed' ? 'reported' : 'archived', true);
      const note = activity === 'removed' ? removedReport(step.reason).message : undefined;
      return [note === undefined ? outcome : Object.assign(outcome, { message: note })];
    }
    case 'confirm': {
      if (result.kind !== 'none') return [notConfirmed(ctx, instance, result)];
      const file = ctx.state.files.get(instance.relative_filepath);
      if (step.recordSize !== undefined && file?.instanceId === instance.id && file.size === undefined) {
        ctx.state.files.set(instance.relative_filepath, { ...file, size: step.recordSize });
      }
      markSucceeded(ctx, instance, 'deployed', step.report);
      return [outcomeFor(instance, 'unchanged', true)];
    }
    case 'keep':
      if (step.reason === 'awaiting_owner') return [awaitingOwner(instance)];
      return [
        outcomeFor(instance, 'unchanged', true, {
          message: 'changed on disk by someone else: kept (drift policy is not "restore")',
        }),
      ];
    case 'skip':
      ctx.state.cooldowns.delete(instance.id);
      return [outcomeFor(instance, 'untouched', false, { message: 'failed on the service: left alone' })];
    case 'fail':
      ctx.logger.error({ instanceId: instance.id, path: instance.relative_filepath }, step.message);
      recordError(ctx, instance, 'failed', step.message, 0);
      return [outcomeFor(instance, 'failed', false, { message: step.message })];
    case 'refuse':
      if (step.forgetFile !== undefined && ctx.state.files.get(step.forgetFile)?.instanceId === instance.id) {
        forgetFile(ctx, step.forgetFile);
      }
      // At warn when the refusal begins or its reason changes, then at debug while its record says the same: a
      // file left in a former rootDir was one warning every pass for as long as it stayed (small32).
      ctx.logger[refusalLasts(ctx, instance, step.message) ? 'debug' : 'warn'](
        { instanceId: instance.id, path: instance.relative_filepath },
        step.message,
      );
      recordError(ctx, instance, 'retrying', step.message, 0);
      return [outcomeFor(instance, 'refused', false, { message: step.message })];
    case 'wait': {
      const seconds = Math.max(0, Math.ceil((step.until - ctx.clock.monotonic()) / 1000));
      return [outcomeFor(instance, 'waiting', false, { message: `next attempt in ${seconds}s` })];
    }
  }
}

/** Whether the instance's record already holds this refusal (the same message, retrying): it was told before. */
function refusalLasts(ctx: RecordContext, instance: ConfigInstanceHead, message: string): boolean {
  const before = ctx.state.instances.get(instance.id);
  return before?.error === 'retrying' && before.message === statusMessage(message);
}

/**
 * A file in place that could not be made durable before its `deployed` report (apply.ts syncInPlace): nothing is
 * reported. Its bytes changed meanwhile (`kept`): the next pass sees what is there, no attempt counted; an fsync
 * failed: as a write's fsync would.
 */
function notConfirmed(
  ctx: RecordContext,
  instance: ConfigInstanceHead,
  result: EffectResult,
): InstanceOutcome {
  if (result.kind !== 'kept') return recordFailure(ctx, instance, result);
  ctx.logger.warn({ instanceId: instance.id, path: instance.relative_filepath }, result.message);
  return outcomeFor(instance, 'waiting', false, { message: result.message });
}

function recordRemoval(step: RemoveStep, result: EffectResult, ctx: RecordContext): InstanceOutcome {
  const { instance } = step;
  if (step.leftPath) return recordLeftPath(step, result, ctx);
  if (result.kind === 'removed') {
    handDownCreatedDirs(ctx, step.path);
    forgetFile(ctx, step.path);
    markSucceeded(ctx, instance, 'removed', step.report);
    return outcomeFor(instance, 'removed', true);
  }
  if (result.kind === 'kept') {
    forgetFile(ctx, step.path);
    markSucceeded(
      ctx,
      instance,
      'removed',
      dueReport(instance, { ...removedReport(), message: result.message }, known(ctx)),
    );
    return outcomeFor(instance, 'archived', true, { message: result.message });
  }
  return recordFailure(ctx, instance, result);
}

/**
 * A file at a path its instance left: the record goes once the file is gone or no longer ours; the instance's
 * status, attempts and reports are its current path's. A failure is logged and the next full pass tries again.
 */
function recordLeftPath(step: RemoveStep, result: EffectResult, ctx: RecordContext): InstanceOutcome {
  const outcome = (action: InstanceAction, converged: boolean, message: string): InstanceOutcome => ({
    instanceId: step.instance.id,
    path: step.path,
    action,
    converged,
    message,
  });
  if (result.kind === 'removed') {
    handDownCreatedDirs(ctx, step.path);
    forgetFile(ctx, step.path);
    const why =
      step.makesWayFor === undefined
        ? `a path it left (now at ${JSON.stringify(step.instance.relative_filepath)})`
        : `making way for ${step.makesWayFor.instanceId} at ${JSON.stringify(step.makesWayFor.path)} (nested path conflict)`;
    return outcome('removed', true, why);
  }
  if (result.kind === 'kept') {
    forgetFile(ctx, step.path);
    return outcome('archived', true, result.message);
  }
  const error = result.kind === 'failed' ? result.error : new Error(`unexpected ${result.kind}`);
  ctx.logger.warn(
    { err: error, instanceId: step.instance.id, path: step.path },
    'removal of a file at a path its instance left failed: tried again next full pass',
  );
  return outcome('waiting', false, `removal of a path it left failed: ${errorMessage(error)}`);
}

/** A file removed for a swap: it counts once the new file is in place, or rolls back with it. */
function recordDisplaced(step: RemoveStep, result: EffectResult, ctx: RecordContext): InstanceOutcome {
  if (result.kind === 'restored') {
    return outcomeFor(step.instance, 'unchanged', false, {
      message: 'kept: its replacement could not be written',
    });
  }
  const outcome = recordRemoval(step, result, ctx);
  return result.kind === 'removed' && result.rollbackLost
    ? Object.assign(outcome, { message: 'removed; rollback impossible (no cached copy)' })
    : outcome;
}

/**
 * Directories the agent created for a removed file that still hold other managed files were not pruned;
 * the first such file inherits them, so they are pruned when the last file in them goes. A directory holding
 * no other recorded file (counted: `filesBelow`) is not looked for: each removal scanned every recorded file for
 * each directory it made, so retiring 16,000 files in their own directories cost 47 s of CPU in one pass (adv23).
 */
function handDownCreatedDirs(ctx: RecordContext, removedPath: string): void {
  const { state } = ctx;
  const dirs = state.files.get(removedPath)?.createdDirs ?? [];
  if (dirs.length === 0) return;
  ctx.filesBelow ??= countFilesBelow(state.files.keys());
  for (const dir of dirs) {
    // The removed file is still recorded, so it counts: one is itself alone.
    if ((ctx.filesBelow.get(dir) ?? 0) <= 1) continue;
    for (const [path, file] of state.files) {
      if (path === removedPath || !path.startsWith(`${dir}/`)) continue;
      if (!file.createdDirs.includes(dir)) {
        state.files.set(path, { ...file, createdDirs: [dir, ...file.createdDirs].sort(byDepth) });
      }
      break;
    }
  }
}

/**
 * `dirs` above `path` as slices of it, which V8 keeps as views of `path` (no copy): the writer joins each
 * directory's path afresh, so a file 2,000 levels deep held ~4 MB of paths in its record until the next start
 * (which reads them back as slices: state.ts `withCreatedDepths`). Any other directory is kept as it is.
 */
function slicesOf(path: string, dirs: readonly string[]): string[] {
  return dirs.map((dir) =>
    dir.length < path.length && path.charCodeAt(dir.length) === 0x2f && path.startsWith(dir)
      ? path.slice(0, dir.length)
      : dir,
  );
}

/** The record of the file at `path` goes (and its count, when counted). */
function forgetFile(ctx: RecordContext, path: string): void {
  if (ctx.state.files.delete(path)) countBelow(ctx.filesBelow, path, -1);
}

/** Each directory's count of the files below it (a file counts in every directory above it). */
function countFilesBelow(paths: Iterable<string>): Map<string, number> {
  const counts = new Map<string, number>();
  for (const path of paths) countBelow(counts, path, 1);
  return counts;
}

function countBelow(counts: Map<string, number> | undefined, path: string, by: 1 | -1): void {
  if (counts === undefined) return;
  for (let slash = path.lastIndexOf('/'); slash > 0; slash = path.lastIndexOf('/', slash - 1)) {
    const dir = path.slice(0, slash);
    counts.set(dir, (counts.get(dir) ?? 0) + by);
  }
}

function byDepth(a: string, b: string): number {
  return a.split('/').length - b.split('/').length;
}

/**
 * A failed disk operation: hostile paths fail at once; other errors count an attempt, back off with full
 * jitter and turn `failed` after maxAttempts.
 */
function recordFailure(
  ctx: RecordContext,
  instance: ConfigInstanceHead,
  result: EffectResult,
): InstanceOutcome {
  const { error, operation } =
    result.kind === 'failed' ? result : { error: new Error(`unexpected ${result.kind}`), operation: 'write' };
  if (isAgentResourceError(error)) {
    // The agent ran out of descriptors or memory: not this instance's fault. No attempt, no cooldown, no
    // report (the service must not hear `failed` for the agent's own trouble); the next pass tries again.
    ctx.logger.warn(
      { err: error, instanceId: instance.id, path: instance.relative_filepath },
      `${operation} postponed: the agent is short of file descriptors or memory`,
    );
    return outcomeFor(instance, 'waiting', false, {
      message: `${operation} postponed: ${errorMessage(error)}; the agent's own resource limit, retried next pass`,
    });
  }
  if (isAgentError(error) && error.code === 'set_aside_bytes_lost') {
    // The content cache lost or tore the bytes the pull set aside (its entries are not durable, on purpose):
    // the agent's own state directory, not the instance. The bad entry is already deleted (ContentCache.get),
    // so the next pass pulls the content, sets it aside again and writes it. No attempt (with maxAttempts 1 an
    // attempt was `failed` for good), no cooldown, no report.
    ctx.logger.warn(
      { err: error, instanceId: instance.id, path: instance.relative_filepath },
      `${operation} postponed: its bytes were lost from the content cache`,
    );
    return outcomeFor(instance, 'waiting', false, {
      message: `${operation} postponed: ${errorMessage(error)}; retried next pass`,
    });
  }
  const heldBy = result.kind === 'failed' ? result.heldBy : undefined;
  const condition =
    result.kind !== 'failed' || result.neverFits === true
      ? undefined
      : heldBy !== undefined
        ? 'held_by_another_user'
        : result.rootRefuses === true
          ? 'not_writable'
          : rootConditionOf(error);
  if (condition !== undefined) return recordRootCondition(ctx, instance, operation, error, condition, heldBy);
  const message = `${operation} failed: ${errorMessage(error)}`;
  const permanent = isAgentError(error) && !error.retryable;
  const attempts = (ctx.state.instances.get(instance.id)?.attempts ?? 0) + 1;
  const exhausted = permanent || attempts >= ctx.retry.maxAttempts;
  const errorStatus = exhausted ? 'failed' : 'retrying';
  let nextAttemptAt: string | undefined;
  if (!exhausted) {
    const delayMs = backoffDelayMs(ctx.retry, attempts, ctx.random);
    ctx.state.cooldowns.set(instance.id, ctx.clock.monotonic() + delayMs);
    nextAttemptAt = new Date(ctx.clock.now() + delayMs).toISOString();
  }
  ctx.logger.error(
    { err: error, instanceId: instance.id, path: instance.relative_filepath, attempts, errorStatus },
    `${operation} failed`,
  );
  recordError(ctx, instance, errorStatus, message, attempts, nextAttemptAt);
  return outcomeFor(instance, errorStatus, false, { message });
}

const ROOT_CONDITION_WHY: Record<RootCondition, string> = {
  full: 'the disk holding rootDir is full: retried until space returns, not counted as an attempt',
  read_only: 'rootDir is on a read-only filesystem: retried until it is writable, not counted as an attempt',
  not_a_directory:
    'rootDir is not a directory any more (replaced or removed with its parent): retried until it is one again, not counted as an attempt',
  not_writable:
    "rootDir refuses the agent's user (its owner, mode or an immutable attribute): retried until the agent may write it, not counted as an attempt",
  mount_gone:
    'the filesystem mounted on rootDir is gone (unmounted, its device removed): nothing written to the bare mountpoint; retried until it is mounted again, not counted as an attempt',
  moved:
    'rootDir (or a directory above it) was replaced by a symlink to another directory while the agent ran: nothing written or removed there; retried until rootDir is the directory it was again (or the agent is restarted), not counted as an attempt',
  not_declared:
    'the state directory could not record the write before it (full, failing or read-only): nothing written until it can, so that a crash never leaves a file the agent cannot prove it wrote; retried, not counted as an attempt',
  failing:
    'the disk holding rootDir fails (an I/O error, its device or filesystem gone, or its network or FUSE mount not answering: ETIMEDOUT): retried until it works again, not counted as an attempt',
  obstructed:
    'something on the device is in the way of the path (a symlink, a directory, a FIFO, socket or device, or a file where a directory goes): nothing written or removed through it; retried until it is cleared, not counted as an attempt',
  renamed_aside:
    "a directory on the path is at the temp name a renewal of the agent's renamed it to (its rename back, or the start's, failed): nothing is made at its name; retried, each time putting it back first, not counted as an attempt",
  held_by_another_user:
    "the file at the path belongs to another user in a sticky directory that is not the agent's user's either: only its owner or root may replace or remove it; retried until it goes, not counted as an attempt",
  busy: "the file at the path, or its filesystem, answered 'try again' (EAGAIN: a lease another process holds on the file; EINTR: a call a network or FUSE filesystem interrupted): retried, not counted as an attempt",
};
const ROOT_CONDITION_LOG: Record<RootCondition, string> = {
  full: 'disk full',
  read_only: 'read-only filesystem',
  not_a_directory: 'rootDir is not a directory',
  not_writable: 'rootDir not writable by the agent',
  mount_gone: "rootDir's mount is gone",
  moved: 'rootDir resolves to another directory',
  not_declared: 'write journal could not be written',
  failing: 'disk failing',
  obstructed: 'path obstructed on the device',
  renamed_aside: 'a directory on the path is renamed aside',
  held_by_another_user: "another user's file in a sticky directory is in the way",
  busy: "the file or its filesystem said 'try again'",
};

/**
 * A read-only filesystem or a mount gone that is a mount's below rootDir, not rootDir's own (mount26): named. Before,
 * a read-only mount at `rootDir/ro` was reported as "rootDir is on a read-only filesystem".
 */
function belowWhy(
  ctx: RecordContext,
  relative: string,
  condition: RootCondition,
  error: unknown,
): string | undefined {
  if (condition === 'mount_gone') {
    return error instanceof DiskError && error.mountGone !== undefined && error.path !== ''
      ? 'the filesystem mounted there is gone (unmounted, its device removed): nothing written to or removed from the bare directory; retried until it is mounted again, not counted as an attempt'
      : undefined;
  }
  if (condition !== 'read_only') return undefined;
  const mount = ctx.mountHolding?.(relative);
  return mount === undefined
    ? undefined
    : `the filesystem mounted at ${mount} (below rootDir) is read-only: retried until it is writable, not counted as an attempt`;
}

/** The longest hold-off between two attempts on a full or read-only root (as the start-up's disk wait). */
const DISK_WAIT_MAX_SECONDS = 300;
/**
 * The shortest, in the daemon: its poll interval when shorter (the default poll). A longer poll still has the
 * condition looked at again within this, not at the poll an hour away.
 */
const DEVICE_WAIT_MIN_SECONDS = 30;

/**
 * A failure the root's own condition caused (the disk holding it full, or mounted read-only): reported
 * `retrying` with a message naming the condition, held off like an attempt (full jitter over
 * `baseDelaySeconds × 2^(n-1)` for the n-th such failure in a row, capped at `maxDelaySeconds` and at 5
 * minutes, and in the daemon never shorter than its poll interval or 30 s, whichever is less), but never an
 * attempt: however long the disk stays full, the instance is not `failed` for good (final at the service),
 * and is written once space returns. The wait grows with these failures, the attempts keep their count.
 */
function recordRootCondition(
  ctx: RecordContext,
  instance: ConfigInstanceHead,
  operation: string,
  error: unknown,
  condition: RootCondition,
  heldBy?: StickyHolder,
): InstanceOutcome {
  if (ctx.state.diskWaits === undefined) ctx.state.diskWaits = new Map();
  const waits = ctx.state.diskWaits;
  const count = (waits.get(instance.id) ?? 0) + 1;
  waits.set(instance.id, count);
  const before = ctx.state.instances.get(instance.id);
  const attempts = before?.attempts ?? 0;
  // At most DISK_WAIT_MAX_SECONDS apart: the wait is for space to return, and a device whose disk was full for
  // hours should not then wait up to maxDelaySeconds (an hour by default) more before writing.
  const policy = {
    ...ctx.retry,
    maxDelaySeconds: Math.min(ctx.retry.maxDelaySeconds, DISK_WAIT_MAX_SECONDS),
  };
  // Never sooner than the next poll: with a tiny baseDelaySeconds (any value above 0 is accepted) a read-only
  // disk, or a FIFO a local user put at a path, made a full listing a second for as long as it lasted.
  const pollMs = Math.min(ctx.retry.pollIntervalSeconds ?? 0, DEVICE_WAIT_MIN_SECONDS) * 1000;
  const delayMs = Math.max(backoffDelayMs(policy, attempts + count, ctx.random), pollMs);
  ctx.state.cooldowns.set(instance.id, ctx.clock.monotonic() + delayMs);
  const nextAttemptAt = new Date(ctx.clock.now() + delayMs).toISOString();
  const quota = condition === 'full' && quotaExceeded(error);
  const rival =
    condition === 'obstructed'
      ? nestedRival(ctx.state.files, instance.id, instance.relative_filepath)
      : undefined;
  const why =
    heldBy !== undefined
      ? heldByWhy(heldBy)
      : quota
        ? "the agent's disk quota on rootDir's filesystem is used up: retried until it has room (raise the quota if this file is larger than it), not counted as an attempt"
        : rival !== undefined
          ? `path conflict: the way is taken by the file of ${rival.instanceId} at ${JSON.stringify(rival.path)}, which the service also targets (a file where the other needs a directory): one of the two paths must change; retried until then, not counted as an attempt`
          : (belowWhy(ctx, instance.relative_filepath, condition, error) ?? ROOT_CONDITION_WHY[condition]);
  const message = `${operation} failed: ${errorMessage(error)}; ${why}`;
  const logged = quota
    ? 'disk quota exceeded'
    : rival !== undefined
      ? 'path conflict with another instance'
      : ROOT_CONDITION_LOG[condition];
  // At error when the wait begins or its reason changes, then at debug while it lasts: a full disk with 1,000
  // files waiting logged 1,000 error lines every retry (5 minutes apart at most: ~290,000 a day) (adv29).
  const lasting = count > 1 && before?.error === 'retrying' && before.message?.endsWith(`; ${why}`) === true;
  ctx.logger[lasting ? 'debug' : 'error'](
    {
      err: error,
      instanceId: instance.id,
      path: instance.relative_filepath,
      attempts,
      condition,
      ...(heldBy === undefined ? {} : { owner: heldBy.uid }),
    },
    `${operation} failed: ${logged}`,
  );
  recordError(ctx, instance, 'retrying', message, attempts, nextAttemptAt);
  return outcomeFor(instance, 'retrying', false, { message });
}

/** The wait's reason for a file of another user in a sticky directory: the path, its owner and the directory. */
function heldByWhy(heldBy: StickyHolder): string {
  const directory = heldBy.directory === '' ? 'rootDir' : `the directory ${JSON.stringify(heldBy.directory)}`;
  return `${JSON.stringify(heldBy.path)} belongs to uid ${heldBy.uid}, another user, and ${directory} is sticky (mode ${heldBy.directoryMode.toString(8).padStart(4, '0')}) and not the agent's user's either: only that file's owner or root may replace or remove it; retried until it goes (or is given to the agent's user), not counted as an attempt`;
}

/**
 * Another instance's managed file in the way of `path`: at a directory of it (`path` needs a directory where that
 * file is) or under it (`path` is that file's directory). Not the device's obstruction but the service's: it gives
 * both paths. The agent's own records only: a local user's file there stays `obstructed`.
 */
function nestedRival(
  files: ReadonlyMap<string, { instanceId: string }>,
  instanceId: string,
  path: string,
): { instanceId: string; path: string } | undefined {
  const segments = path.split('/');
  for (let end = 1; end < segments.length; end += 1) {
    const directory = segments.slice(0, end).join('/');
    const file = files.get(directory);
    if (file !== undefined && file.instanceId !== instanceId)
      return { instanceId: file.instanceId, path: directory };
  }
  const below = `${path}/`;
  for (const [filePath, file] of files) {
    if (file.instanceId !== instanceId && filePath.startsWith(below))
      return { instanceId: file.instanceId, path: filePath };
  }
  return undefined;
}

/** The per-instance cooldown: full jitter over `baseDelaySeconds × 2^(attempt-1)`, capped at `maxDelaySeconds`. */
export function backoffDelayMs(policy: RetryPolicy, attempt: number, random: () => number): number {
  return fullJitterMs(
    { baseMs: policy.baseDelaySeconds * 1000, maxMs: policy.maxDelaySeconds * 1000 },
    attempt,
    random,
  );
}

/** An instance whose path a newer instance takes over, while the newer one's file is not in place yet. */
function awaitingOwner(instance: ConfigInstanceHead, ownerId?: string): InstanceOutcome {
  const owner = ownerId === undefined ? 'its replacement' : ownerId;
  return outcomeFor(instance, 'waiting', false, { message: `kept until ${owner} is written in its place` });
}

/** Queues the failure report if due (compared with the record's last message), then updates the record. */
function recordError(
  ctx: RecordContext,
  instance: ConfigInstanceHead,
  error: 'failed' | 'retrying',
  message: string,
  attempts: number,
  nextAttemptAt?: string,
): void {
  queue(
    ctx,
    instance,
    dueReport(instance, errorReport(instance.activity_status, error, message), known(ctx)),
  );
  if (nextAttemptAt === undefined) ctx.state.cooldowns.delete(instance.id);
  ctx.state.instances.set(instance.id, {
    // A path longer than any valid one (rejected, so no file stands for it) is not kept: a hostile service listing
    // instances at paths of a megabyte made state.json (rewritten whole by every persist) a megabyte each.
    relativePath: instance.relative_filepath.length > MAX_PATH_BYTES ? '' : instance.relative_filepath,
    activity: instance.activity_status,
    error,
    // As the report carries it: the next pass compares the two to tell whether the service already has it.
    message: statusMessage(message),
    attempts,
    ...(nextAttemptAt === undefined ? {} : { nextAttemptAt }),
    ...keptEcho(ctx, instance),
  });
}

/** The instance is where the service wants it: earlier attempts and cooldowns no longer apply. */
function markSucceeded(
  ctx: RecordContext,
  instance: ConfigInstanceHead,
  activity: 'deployed' | 'removed',
  report: StatusReport | undefined,
): void {
  queue(ctx, instance, report);
  ctx.state.cooldowns.delete(instance.id);
  ctx.state.diskWaits?.delete(instance.id);
  ctx.state.instances.set(instance.id, {
    relativePath: instance.relative_filepath,
    activity,
    error: 'none',
    attempts: 0,
    ...keptEcho(ctx, instance),
  });
}

function queue(ctx: RecordContext, instance: ConfigInstanceHead, report: StatusReport | undefined): void {
  if (report !== undefined)
    ctx.outbox.enqueue(instance.id, report, new Date(ctx.clock.now()), ctx.listedUpdatedAt?.(instance.id));
}

/** What `dueReport` compares with: the reports still queued and the messages last recorded. */
function known(ctx: RecordContext) {
  return { pendingReports: pendingReports(ctx.outbox), local: { instances: ctx.state.instances } };
}

/** The queued report of each instance, as the planner and `dueReport` see them. */
export function pendingReports(outbox: StatusOutbox): ReportLookup {
  return { get: (instanceId) => outbox.pendingFor(instanceId)?.report };
}

/** The echo of the agent's own last report outlives record updates: see `PlanInput.reportEchoes`. */
function keptEcho(ctx: RecordContext, instance: ConfigInstanceHead) {
  const echo = ctx.state.instances.get(instance.id)?.reportEcho;
  return echo === undefined ? {} : { reportEcho: echo };
}

/**
 * The note is assigned, not spread: V8 (Node 20) gives each `{ ...outcome, message }` a hidden class of its own
 * once its inline cache is warm, ~300 bytes per instance (docs/performance-history.md "Memory, fourth round").
 */
function outcomeFor(
  instance: ConfigInstanceHead,
  action: InstanceAction,
  converged: boolean,
  note?: { message: string } | { reason: string },
): InstanceOutcome {
  const outcome: InstanceOutcome = {
    instanceId: instance.id,
    path: instance.relative_filepath,
    action,
    converged,
  };
  return note === undefined ? outcome : Object.assign(outcome, note);
}

/**
 * Items of the listing the agent cannot accept (api/pager.ts): one with a readable id is reported `failed` with
 * the problem named, once (not when the service already shows it failed, nor again with the same message);
 * its file, if any, is left as it is. One without an id can only be logged and counted.
 */
export function recordInvalid(items: readonly InvalidListItem[], ctx: RecordContext): InstanceOutcome[] {
  return items.map((item) => {
    const message = statusMessage(`invalid instance from the service: ${item.problem}`);
    // An id holding the API key is neither reported nor recorded (reconcile/pass.ts refuseKeyPaths), nor shown.
    if (item.id === undefined || item.idHoldsKey === true)
      return { instanceId: '', path: '', action: 'failed', converged: false, message };
    const record = ctx.state.instances.get(item.id);
    // A fault of the listing (an id listed twice) is not final: the instance converges once it is listed right.
    const error = item.listingFault === true ? 'retrying' : 'failed';
    const report: StatusReport = {
      activity_status: item.activityStatus ?? record?.activity ?? 'queued',
      error_status: error,
      message,
    };
    const pending = ctx.outbox.pendingFor(item.id)?.report;
    // The service's own error status, when the listing shows it, says whether it has the report: the record says
    // only that one was queued, and a report lost since (a cut between state.json's save and the outbox's, an
    // operator's redeploy resetting the status) was never sent again. The record answers for an item whose
    // statuses could not be read (too large by itself, its content first).
    const known =
      item.errorStatus !== undefined
        ? item.errorStatus === error
        : record?.error === error && record.message === message;
    const queued = pending?.error_status === error && pending.message === message;
    if (!known && !queued) ctx.outbox.enqueue(item.id, report, new Date(ctx.clock.now()));
    // Recorded even for an instance the agent never knew: an item too large by itself whose statuses come after
    // its content (past the bytes read of it) tells nothing of what the service holds, and only this record
    // keeps its report from going out again on every pass.
    ctx.state.instances.set(
      item.id,
      record === undefined
        ? { relativePath: '', activity: report.activity_status, error, message, attempts: 0 }
        : { ...record, error, message },
    );
    const path = record?.relativePath ?? '';
    const action = error === 'failed' ? 'failed' : 'retrying';
    return { instanceId: item.id, path, action, converged: item.errorStatus === 'failed', message };
  });
}

/**
 * Instances left alone for a status value this agent does not know: nothing is recorded or reported for them,
 * but a pass that left them cannot be said to have converged.
 */
export function skippedOutcomes(items: readonly SkippedListItem[]): InstanceOutcome[] {
  return items.map((item) => ({
    instanceId: item.id,
    path: item.relativeFilepath,
    action: 'untouched',
    converged: false,
    message: `left alone: its ${item.unknown.field} ${JSON.stringify(item.unknown.value)} is not a value this agent knows`,
  }));
}

/** A cooldown whose time has come has done its job once planned past: the pass acts, a new failure sets a new one. */
export function dropElapsedCooldowns(
  state: LocalState,
  planned: readonly ConfigInstanceHead[],
  now: number,
): void {
  for (const instance of planned) {
    const until = state.cooldowns.get(instance.id);
    if (until !== undefined && until <= now) state.cooldowns.delete(instance.id);
  }
}

/**
 * After a full pass, records of instances the service no longer lists and that own no file are dropped.
 * `alsoListed`: ids listed but not usable (invalid or skipped items): still the service's, so kept.
 */
export function forgetUnseen(
  state: LocalState,
  instances: readonly ConfigInstanceHead[],
  alsoListed: readonly string[] = [],
): void {
  const seen = new Set([...instances.map((instance) => instance.id), ...alsoListed]);
  const owners = new Set([...state.files.values()].map((file) => file.instanceId));
  for (const id of state.instances.keys()) {
    if (!seen.has(id)) {
      state.cooldowns.delete(id);
      state.diskWaits?.delete(id);
    }
    if (!seen.has(id) && !owners.has(id)) state.instances.delete(id);
  }
}
