// The step handlers: one per step kind, each doing its disk effect (if any) and returning what happened.

import type { FsPort } from '../lib/fs-port.js';
import type { Logger } from '../lib/logger.js';
import type { ContentCache } from '../store/content-cache.js';
import { publishFile, readRegularFile, removeManagedFile } from '../store/durable-writer.js';
import { PathRejectedError } from '../store/errors.js';
import type { ManagedFile } from '../store/state.js';
import type { RemoveStep, Step, StepKind, WriteStep } from './plan.js';

export interface ApplyContext {
  fs: FsPort;
  logger: Logger;
  rootDir: string;
  fileMode: number;
  dirMode: number;
  /** The files the agent recorded writing, as of this step: ownership checks and rollback read them. */
  files: ReadonlyMap<string, ManagedFile>;
  cache: ContentCache;
  signal?: AbortSignal;
}

/** What one effect did. Handlers never touch local state or the outbox: `record.ts` does, from these. */
export type EffectResult =
  /** `metadata`: the bytes were right, only mode or group changed in place (no rewrite). */
  | { kind: 'written' | 'unchanged' | 'metadata'; sha256: string; createdDirs: readonly string[] }
  /** `rollbackLost`: a swap's displaced file that could not be put back after its replacement failed. */
  | { kind: 'removed'; rollbackLost?: true }
  /** The file was left in place (changed by someone else, or no longer a regular file we wrote). */
  | { kind: 'kept'; message: string }
  /** A swap's displaced file put back after its replacement could not be written. */
  | { kind: 'restored' }
  | { kind: 'failed'; error: unknown; operation: 'write' | 'remove' }
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

type StepHandler<K extends StepKind> = (
  step: Extract<Step, { kind: K }>,
  ctx: ApplyContext,
) => Promise<Omit<AppliedStep, 'step'>>;

const noEffect = async (): Promise<Omit<AppliedStep, 'step'>> => ({
  result: { kind: 'none' },
  displaced: [],
});

const handlers: { [K in StepKind]: StepHandler<K> } = {
  write: applyWrite,
  remove: async (step, ctx) => ({ result: await removeFile(step, ctx), displaced: [] }),
  report: noEffect,
  confirm: noEffect,
  keep: noEffect,
  skip: noEffect,
  fail: noEffect,
  refuse: noEffect,
  wait: noEffect,
};

/**
 * Applies the steps in order, handing each result to `onApplied` as soon as it lands (so local state follows
 * the disk step by step). A failure of one instance never stops the others; an abort stops between steps.
 */
export async function applySteps(
  steps: readonly Step[],
  ctx: ApplyContext,
  onApplied: (applied: AppliedStep) => void,
): Promise<ApplyOutcome> {
  const applied: AppliedStep[] = [];
  for (const step of steps) {
    if (ctx.signal?.aborted) return { applied, aborted: true };
    const handler = handlers[step.kind] as StepHandler<typeof step.kind>;
    let done: AppliedStep;
    try {
      done = { step, ...(await handler(step as never, ctx)) };
    } catch (error) {
      if (ctx.signal?.aborted) return { applied, aborted: true };
      // Handlers classify the failures they expect; anything else still costs only this instance an attempt.
      const operation = step.kind === 'remove' ? 'remove' : 'write';
      done = { step, result: { kind: 'failed', error, operation }, displaced: [] };
    }
    applied.push(done);
    onApplied(done);
  }
  return { applied, aborted: ctx.signal?.aborted ?? false };
}

/** A swap (a write with displaced files) is the one compound handler: the removals are rolled back on failure. */
async function applyWrite(step: WriteStep, ctx: ApplyContext): Promise<Omit<AppliedStep, 'step'>> {
  const displaced: AppliedStep['displaced'] = [];
  for (const remove of step.displaces)
    displaced.push({ step: remove, result: await removeFile(remove, ctx) });
  try {
    const published = await publishFile(ctx.fs, {
      rootDir: ctx.rootDir,
      relativePath: step.path,
      data: step.data,
      mode: step.mode ?? ctx.fileMode,
      ...(step.gid === undefined ? {} : { gid: step.gid }),
      dirMode: ctx.dirMode,
      // The planner writes only what it has no durable record of: bytes already there (an adopted file, or
      // the leftover of a write whose fsync failed) are fsynced before anyone is told they are in place.
      ensureDurable: true,
      ...(ctx.signal === undefined ? {} : { signal: ctx.signal }),
    });
    await cacheForRollback(ctx, step);
    if (published.outcome === 'written' && step.reason === 'drift') {
      ctx.logger.warn(
        { instanceId: step.instance.id, path: step.path },
        'restored a managed file changed by someone else',
      );
    }
    const result = { kind: published.outcome, sha256: published.sha256, createdDirs: published.createdDirs };
    return { result, displaced };
  } catch (error) {
    // The swap failed half-way: put back what was removed for it, so the device keeps a working config.
    const rolledBack: AppliedStep['displaced'] = [];
    for (const entry of displaced) {
      rolledBack.push(
        entry.result.kind === 'removed'
          ? { step: entry.step, result: await restoreDisplaced(entry.step, ctx) }
          : entry,
      );
    }
    if (ctx.signal?.aborted) throw error;
    return { result: { kind: 'failed', error, operation: 'write' }, displaced: rolledBack };
  }
}

/** Removes a file only while it is still the one this agent recorded writing. */
async function removeFile(step: RemoveStep, ctx: ApplyContext): Promise<EffectResult> {
  const owned = ctx.files.get(step.path);
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
      return { kind: 'kept', message };
    }
    const removed = await removeManagedFile(ctx.fs, {
      rootDir: ctx.rootDir,
      relativePath: step.path,
      pruneDirs: owned?.createdDirs ?? [],
    });
    if (removed === 'refused') {
      return {
        kind: 'kept',
        message: 'file left in place: the path is no longer a regular file written by this agent',
      };
    }
    return { kind: 'removed' };
  } catch (error) {
    if (ctx.signal?.aborted) throw error;
    return { kind: 'failed', error, operation: 'remove' };
  }
}

async function restoreDisplaced(remove: RemoveStep, ctx: ApplyContext): Promise<EffectResult> {
  const owned = ctx.files.get(remove.path);
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

async function cacheForRollback(ctx: ApplyContext, step: WriteStep): Promise<void> {
  try {
    await ctx.cache.put(step.data);
  } catch (error) {
    // The file itself is in place; only a later rollback of it would be impossible.
    ctx.logger.warn({ err: error, path: step.path }, 'could not cache content for rollback');
  }
}
