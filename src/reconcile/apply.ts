// The step handlers: one per step kind, each turning a planned step into disk changes and queued reports.
import type { ConfigInstance, StatusReport } from '../api/schemas.js';
import type { Clock } from '../lib/clock.js';
import { errorMessage, isAgentError } from '../lib/errors.js';
import type { FsPort } from '../lib/fs-port.js';
import type { Logger } from '../lib/logger.js';
import type { ContentCache } from '../store/content-cache.js';
import { publishFile, readRegularFile, removeManagedFile } from '../store/durable-writer.js';
import { PathRejectedError } from '../store/errors.js';
import type { StatusOutbox } from '../store/outbox.js';
import type { LocalState } from '../store/state.js';
import type { InstanceAction, InstanceOutcome, RetryPolicy } from './pass-runner.js';
import {
  deployedReport,
  errorReport,
  type RemoveStep,
  removedReport,
  type Step,
  type StepKind,
  type WriteStep,
} from './plan.js';

export interface ApplyContext {
  fs: FsPort;
  clock: Clock;
  random: () => number;
  logger: Logger;
  rootDir: string;
  fileMode: number;
  dirMode: number;
  retry: RetryPolicy;
  state: LocalState;
  cache: ContentCache;
  outbox: StatusOutbox;
  signal?: AbortSignal;
  /** Record written and removed paths in `state.pendingHookPaths` (the daemon has hooks to run). */
  trackHookPaths?: boolean;
}

type StepHandler<K extends StepKind> = (
  step: Extract<Step, { kind: K }>,
  ctx: ApplyContext,
) => Promise<InstanceOutcome[]>;

const handlers: { [K in StepKind]: StepHandler<K> } = {
  write: applyWrite,
  remove: async (step, ctx) => [await applyRemove(step, ctx)],
  report: async (step, ctx) => {
    queueReport(ctx, step.instance, step.report);
    const { activity_status: activity, error_status: error } = step.report;
    // The instance is where the service wants it: earlier attempts and cooldowns no longer apply.
    if (error === 'none' && (activity === 'deployed' || activity === 'removed')) {
      markSucceeded(ctx, step.instance, activity);
    }
    const archived =
      step.reason === 'archive' || step.reason === 'not_ours' || step.reason === 'replaced_by_owner';
    const outcome = outcomeFor(step.instance, archived ? 'archived' : 'reported', true);
    return [step.report.message === undefined ? outcome : { ...outcome, message: step.report.message }];
  },
  fail: async (step, ctx) => {
    ctx.logger.error({ instanceId: step.instance.id, path: step.instance.relative_filepath }, step.message);
    queueReport(ctx, step.instance, errorReport(step.instance.activity_status, 'failed', step.message));
    recordError(ctx, step.instance, 'failed', step.message, 0);
    return [{ ...outcomeFor(step.instance, 'failed', false), message: step.message }];
  },
  refuse: async (step, ctx) => {
    ctx.logger.warn({ instanceId: step.instance.id, path: step.instance.relative_filepath }, step.message);
    queueReport(ctx, step.instance, errorReport(step.instance.activity_status, 'retrying', step.message));
    recordError(ctx, step.instance, 'retrying', step.message, 0);
    return [{ ...outcomeFor(step.instance, 'refused', false), message: step.message }];
  },
  wait: async (step, ctx) => {
    const seconds = Math.max(0, Math.ceil((step.until - ctx.clock.monotonic()) / 1000));
    return [{ ...outcomeFor(step.instance, 'waiting', false), message: `next attempt in ${seconds}s` }];
  },
  untouched: async (step, ctx) => {
    if (step.reason === 'awaiting_owner') return [awaitingOwner(step.instance)];
    if (step.reason === 'failed') {
      ctx.state.cooldowns.delete(step.instance.id);
      return [
        { ...outcomeFor(step.instance, 'untouched', false), message: 'failed on the service: left alone' },
      ];
    }
    if (step.reason === 'drift_kept') {
      const message = 'changed on disk by someone else: kept (drift policy is not "restore")';
      return [{ ...outcomeFor(step.instance, 'unchanged', true), message }];
    }
    // In place: a stale undelivered error report (from a failed repair) must be superseded, not delivered.
    queueReport(ctx, step.instance, deployedReport());
    markSucceeded(ctx, step.instance, 'deployed');
    return [outcomeFor(step.instance, 'unchanged', true)];
  },
};

/** Applies the steps in order; a failure of one instance never stops the others. */
export async function applySteps(steps: readonly Step[], ctx: ApplyContext): Promise<InstanceOutcome[]> {
  const outcomes: InstanceOutcome[] = [];
  for (const step of steps) {
    ctx.signal?.throwIfAborted();
    const handler = handlers[step.kind] as StepHandler<typeof step.kind>;
    let stepOutcomes: InstanceOutcome[];
    try {
      stepOutcomes = await handler(step as never, ctx);
    } catch (error) {
      // Handlers classify the failures they expect; anything else still costs only this instance an attempt.
      if (ctx.signal?.aborted) throw error;
      stepOutcomes = [recordFailure(ctx, step.instance, error, step.kind)];
    }
    outcomes.push(...stepOutcomes);
    if (ctx.trackHookPaths) {
      // Recorded as each step lands, so a pass cut short still hands its changes to the hooks.
      for (const outcome of stepOutcomes) {
        if (outcome.action === 'written' || outcome.action === 'removed')
          ctx.state.pendingHookPaths.add(outcome.path);
      }
    }
  }
  return outcomes;
}

async function applyWrite(step: WriteStep, ctx: ApplyContext): Promise<InstanceOutcome[]> {
  const outcomes: InstanceOutcome[] = [];
  const displaced: RemoveStep[] = [];
  for (const remove of step.displaces) {
    const outcome = await applyRemove(remove, ctx, { deferReport: true });
    if (outcome.action === 'removed') displaced.push(remove);
    else outcomes.push(outcome);
  }

  const previous = ctx.state.files.get(step.path);
  try {
    const result = await publishFile(ctx.fs, {
      rootDir: ctx.rootDir,
      relativePath: step.path,
      data: step.data,
      mode: ctx.fileMode,
      dirMode: ctx.dirMode,
      ...(ctx.signal === undefined ? {} : { signal: ctx.signal }),
    });
    ctx.state.files.set(step.path, {
      instanceId: step.instance.id,
      sha256: result.sha256,
      mode: ctx.fileMode,
      createdDirs: mergeDirs(previous?.createdDirs ?? [], result.createdDirs),
      writtenAt: new Date(ctx.clock.now()).toISOString(),
    });
    await cacheForRollback(ctx, step);
    markSucceeded(ctx, step.instance, 'deployed');
    if (step.reportOnSuccess)
      queueReport(ctx, step.instance, { activity_status: 'deployed', error_status: 'none' });
    for (const remove of displaced) {
      if (ctx.state.files.get(remove.path)?.instanceId === remove.instance.id) {
        ctx.state.files.delete(remove.path);
      }
      queueReport(ctx, remove.instance, removedReport());
      markSucceeded(ctx, remove.instance, 'removed');
    }
    for (const superseded of step.supersedes) {
      queueReport(ctx, superseded, removedReport());
      markSucceeded(ctx, superseded, 'removed');
    }
    if (result.outcome === 'written' && step.reason === 'drift') {
      ctx.logger.warn(
        { instanceId: step.instance.id, path: step.path },
        'restored a managed file changed by someone else',
      );
    }
    outcomes.push(
      ...displaced.map((remove) => outcomeFor(remove.instance, 'removed', true)),
      ...step.supersedes.map((superseded) => ({
        ...outcomeFor(superseded, 'replaced', true),
        message: `its file now belongs to ${step.instance.id}`,
      })),
      {
        ...outcomeFor(step.instance, result.outcome === 'written' ? 'written' : 'unchanged', true),
        reason: step.reason,
      },
    );
    return outcomes;
  } catch (error) {
    // The swap failed half-way: put back what was removed for it, so the device keeps a working config.
    for (const remove of displaced) outcomes.push(await restoreDisplaced(remove, ctx));
    // Stopping is not a failure of the instance: nothing is counted or reported, the next start goes on.
    if (ctx.signal?.aborted) throw error;
    for (const superseded of step.supersedes) outcomes.push(awaitingOwner(superseded, step.instance.id));
    outcomes.push(recordFailure(ctx, step.instance, error, 'write'));
    return outcomes;
  }
}

async function applyRemove(
  step: RemoveStep,
  ctx: ApplyContext,
  options: { deferReport?: boolean } = {},
): Promise<InstanceOutcome> {
  const owned = ctx.state.files.get(step.path);
  try {
    // A symlink or other non-regular file at the path is judged (and refused) by the remover below.
    const current = await readRegularFile(ctx.fs, ctx.rootDir, step.path).catch((error: unknown) => {
      if (error instanceof PathRejectedError) return undefined;
      throw error;
    });
    if (current !== undefined && owned !== undefined && current.sha256 !== owned.sha256) {
      // Someone changed the file since we wrote it (an operator's edit kept under drift "report", another
      // tool): it is no longer what we wrote, so it is not ours to delete.
      const message = 'file left in place: changed by someone else since this agent wrote it';
      ctx.logger.warn({ instanceId: step.instance.id, path: step.path }, message);
      ctx.state.files.delete(step.path);
      markSucceeded(ctx, step.instance, 'removed');
      queueReport(ctx, step.instance, { ...removedReport(), message });
      return { ...outcomeFor(step.instance, 'archived', true), message };
    }
    const result = await removeManagedFile(ctx.fs, {
      rootDir: ctx.rootDir,
      relativePath: step.path,
      pruneDirs: owned?.createdDirs ?? [],
    });
    if (result !== 'refused') handDownCreatedDirs(ctx, step.path, owned?.createdDirs ?? []);
    if (result === 'refused') {
      const message = 'file left in place: the path is no longer a regular file written by this agent';
      ctx.state.files.delete(step.path);
      markSucceeded(ctx, step.instance, 'removed');
      queueReport(ctx, step.instance, { ...removedReport(), message });
      return { ...outcomeFor(step.instance, 'archived', true), message };
    }
    if (!options.deferReport) {
      ctx.state.files.delete(step.path);
      markSucceeded(ctx, step.instance, 'removed');
      queueReport(ctx, step.instance, removedReport());
    }
    return outcomeFor(step.instance, 'removed', true);
  } catch (error) {
    if (ctx.signal?.aborted) throw error;
    return recordFailure(ctx, step.instance, error, 'remove');
  }
}

/**
 * Directories the agent created for a removed file that still hold other managed files were not pruned;
 * the first such file inherits them, so they are pruned when the last file in them goes.
 */
function handDownCreatedDirs(ctx: ApplyContext, removedPath: string, createdDirs: readonly string[]): void {
  for (const dir of createdDirs) {
    for (const [path, file] of ctx.state.files) {
      if (path === removedPath || !path.startsWith(`${dir}/`)) continue;
      if (!file.createdDirs.includes(dir)) {
        ctx.state.files.set(path, { ...file, createdDirs: [dir, ...file.createdDirs].sort(byDepth) });
      }
      break;
    }
  }
}

function byDepth(a: string, b: string): number {
  return a.split('/').length - b.split('/').length;
}

async function restoreDisplaced(remove: RemoveStep, ctx: ApplyContext): Promise<InstanceOutcome> {
  const owned = ctx.state.files.get(remove.path);
  const data = owned === undefined ? undefined : await ctx.cache.get(owned.sha256).catch(() => undefined);
  if (owned !== undefined && data !== undefined) {
    try {
      await publishFile(ctx.fs, {
        rootDir: ctx.rootDir,
        relativePath: remove.path,
        data,
        mode: owned.mode,
        dirMode: ctx.dirMode,
      });
      ctx.logger.warn(
        { instanceId: remove.instance.id, path: remove.path },
        'swap failed: restored the removed file',
      );
      return {
        ...outcomeFor(remove.instance, 'unchanged', false),
        message: 'kept: its replacement could not be written',
      };
    } catch (error) {
      ctx.logger.error(
        { err: error, path: remove.path },
        'swap failed and the removed file could not be restored',
      );
    }
  }
  ctx.state.files.delete(remove.path);
  markSucceeded(ctx, remove.instance, 'removed');
  queueReport(ctx, remove.instance, removedReport());
  return {
    ...outcomeFor(remove.instance, 'removed', true),
    message: 'removed; rollback impossible (no cached copy)',
  };
}

async function cacheForRollback(ctx: ApplyContext, step: WriteStep): Promise<void> {
  try {
    await ctx.cache.put(step.data);
  } catch (error) {
    // The file itself is in place; only a later rollback of it would be impossible.
    ctx.logger.warn({ err: error, path: step.path }, 'could not cache content for rollback');
  }
}

/**
 * A failed disk operation: hostile paths fail at once; other errors count an attempt, back off with full
 * jitter and turn `failed` after maxAttempts.
 */
function recordFailure(
  ctx: ApplyContext,
  instance: ConfigInstance,
  error: unknown,
  operation: string,
): InstanceOutcome {
  const message = `${operation} failed: ${errorMessage(error)}`;
  const permanent = isAgentError(error) && !error.retryable;
  const record = ctx.state.instances.get(instance.id);
  const attempts = (record?.attempts ?? 0) + 1;
  const exhausted = permanent || attempts >= ctx.retry.maxAttempts;
  const errorStatus = exhausted ? 'failed' : 'retrying';
  let nextAttemptAt: string | undefined;
  if (exhausted) {
    ctx.state.cooldowns.delete(instance.id);
  } else {
    const delayMs = backoffDelayMs(ctx.retry, attempts, ctx.random);
    ctx.state.cooldowns.set(instance.id, ctx.clock.monotonic() + delayMs);
    nextAttemptAt = new Date(ctx.clock.now() + delayMs).toISOString();
  }
  ctx.logger.error(
    { err: error, instanceId: instance.id, path: instance.relative_filepath, attempts, errorStatus },
    `${operation} failed`,
  );
  queueReport(ctx, instance, errorReport(instance.activity_status, errorStatus, message));
  recordError(ctx, instance, errorStatus, message, attempts, nextAttemptAt);
  return { ...outcomeFor(instance, errorStatus, false), message };
}

/** Full jitter: uniform in [0, min(max, base × 2^(attempt-1))], so a fleet's retries spread out. */
export function backoffDelayMs(policy: RetryPolicy, attempt: number, random: () => number): number {
  const ceiling =
    Math.min(policy.maxDelaySeconds, policy.baseDelaySeconds * 2 ** Math.max(0, attempt - 1)) * 1000;
  return Math.round(random() * ceiling);
}

/** An instance whose path a newer instance takes over, while the newer one's file is not in place yet. */
function awaitingOwner(instance: ConfigInstance, ownerId?: string): InstanceOutcome {
  const owner = ownerId === undefined ? 'its replacement' : ownerId;
  return {
    ...outcomeFor(instance, 'waiting', false),
    message: `kept until ${owner} is written in its place`,
  };
}

function recordError(
  ctx: ApplyContext,
  instance: ConfigInstance,
  error: 'failed' | 'retrying',
  message: string,
  attempts: number,
  nextAttemptAt?: string,
): void {
  if (nextAttemptAt === undefined) ctx.state.cooldowns.delete(instance.id);
  ctx.state.instances.set(instance.id, {
    relativePath: instance.relative_filepath,
    activity: instance.activity_status,
    error,
    message,
    attempts,
    ...(nextAttemptAt === undefined ? {} : { nextAttemptAt }),
    ...keptEcho(ctx, instance),
  });
}

/** The echo of the agent's own last report outlives record updates: see `PlanInput.reportEchoes`. */
function keptEcho(ctx: ApplyContext, instance: ConfigInstance) {
  const echo = ctx.state.instances.get(instance.id)?.reportEcho;
  return echo === undefined ? {} : { reportEcho: echo };
}

function markSucceeded(ctx: ApplyContext, instance: ConfigInstance, activity: 'deployed' | 'removed'): void {
  ctx.state.cooldowns.delete(instance.id);
  ctx.state.instances.set(instance.id, {
    relativePath: instance.relative_filepath,
    activity,
    error: 'none',
    attempts: 0,
    ...keptEcho(ctx, instance),
  });
}

/**
 * Call before updating the instance's record: the record holds the message last reported.
 * Queues a report unless the service already holds that status and no report for the instance is pending
 * (a pending one must be superseded, or the older status would be delivered last).
 */
function queueReport(ctx: ApplyContext, instance: ConfigInstance, report: StatusReport): void {
  const pending = ctx.outbox.pendingFor(instance.id);
  const serverHasIt =
    instance.activity_status === report.activity_status &&
    instance.error_status === report.error_status &&
    (report.error_status === 'none' || ctx.state.instances.get(instance.id)?.message === report.message);
  if (serverHasIt && pending === undefined) return;
  if (pending !== undefined && sameReport(pending.report, report)) return;
  ctx.outbox.enqueue(instance.id, report, new Date(ctx.clock.now()));
}

function sameReport(a: StatusReport, b: StatusReport): boolean {
  return (
    a.activity_status === b.activity_status && a.error_status === b.error_status && a.message === b.message
  );
}

function outcomeFor(instance: ConfigInstance, action: InstanceAction, converged: boolean): InstanceOutcome {
  return { instanceId: instance.id, path: instance.relative_filepath, action, converged };
}

function mergeDirs(previous: readonly string[], created: readonly string[]): string[] {
  return [...new Set([...previous, ...created])];
}
