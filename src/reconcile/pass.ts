// One reconcile pass: pull → observe → plan → apply → record → persist → report.
import type { ServiceClient } from '../api/client.js';
import { HttpStatusError, isCertificateClockError } from '../api/errors.js';
import { type ItemWire, itemKey, judgeConfigInstance } from '../api/list-page.js';
import type { InvalidListItem } from '../api/pager.js';
import type { RequestRetryOptions } from '../api/retry.js';
import type { ConfigInstance, ConfigInstanceHead } from '../api/schemas.js';
import { laterTurn } from '../lib/clock.js';
import type { Deps } from '../lib/deps.js';
import { errorMessage, isAgentError } from '../lib/errors.js';
import type { Logger } from '../lib/logger.js';
import { remakeMissingRoot } from '../store/durable-writer.js';
import { formerRootLeftovers } from '../store/former-root.js';
import type { OutboxEntry } from '../store/outbox.js';
import { findPathAliases, type ObservedIdentity } from '../store/path-aliases.js';
import type { RootMountWatch } from '../store/root-mount.js';
import type { StateDir } from '../store/state-dir.js';
import { type ApplyContext, applySteps, BATCH_STEPS } from './apply.js';
import { ObservationAhead, observeDisk, wantedSizes } from './observe.js';
import type { PassError, PassOptions, PassResult, ReconcilerSettings } from './pass-runner.js';
import {
  type DiskObservation,
  type PlanInput,
  type PlanInstance,
  planSteps,
  type Step,
  withFile,
} from './plan.js';
import { type PullContext, type Pulled, pullInstances } from './pull.js';
import {
  dropElapsedCooldowns,
  forgetUnseen,
  pendingReports,
  type RecordContext,
  recordInvalid,
  recordStep,
  skippedOutcomes,
} from './record.js';
import {
  DELIVERIES_WHILE_WRITING,
  listedVersion,
  PassReports,
  type ReportContext,
  reportBackoff,
  resolveAwaitedEchoes,
  type UnrecordedReports,
} from './report.js';
import { FileSpill } from './spill.js';
import type { ToldItems } from './told-items.js';

/** Everything a pass works with; `lastSeenUpdatedAt` lives as long as the reconciler (report echoes). */
export interface PassContext {
  deps: Deps;
  settings: ReconcilerSettings;
  client: ServiceClient;
  dir: StateDir;
  lastSeenUpdatedAt: Map<string, string>;
  /** The listed versions (report.ts `listedVersion`) of instances whose reports were still queued after a pass. */
  listedVersions: Map<string, string>;
  logger: Logger;
  /** rootDir's mount as this process saw it (root-mount.ts); one per reconciler, so per process. */
  rootMount?: RootMountWatch;
  /** Unusable listed items already logged (told-items.ts); one per reconciler. */
  toldItems?: ToldItems;
  /** Reports answered without an echo, judged by the next listing (report.ts); one per reconciler. */
  unrecorded?: UnrecordedReports;
  /**
   * Set when a report's answer showed its instance placed otherwise than listed (report.ts `placeChanged`): the
   * next pass is a full one (Reconciler `hasDueRetries`), which clears it.
   */
  followUp?: {
    fullPassDue: boolean;
    /** The pass due was made so by such an answer: one meeting another is not followed at once (`supersededBy`). */
    supersededDue?: boolean;
    /** Instances whose answers such a follow-up met again: not followed at once until one places it as listed. */
    doubted?: Set<string>;
  };
}

export async function runPass(ctx: PassContext, options: PassOptions): Promise<PassResult> {
  // A full pass clears the follow-up it runs as it begins (its answers may make the next one due): when it does
  // not get as far as recording what it applied (it threw, or returned early), that follow-up stays due.
  const due = { ...ctx.followUp };
  const progress = { recorded: false };
  try {
    return await passOnce(ctx, options, progress);
  } finally {
    if (ctx.followUp !== undefined && due.fullPassDue === true && !progress.recorded) {
      ctx.followUp.fullPassDue = true;
      ctx.followUp.supersededDue = ctx.followUp.supersededDue === true || due.supersededDue === true;
    }
  }
}

async function passOnce(
  ctx: PassContext,
  options: PassOptions,
  progress: { recorded: boolean },
): Promise<PassResult> {
  const { deps, settings, dir, logger } = ctx;
  const { state, outbox } = dir;
  const { signal } = options;
  const started = deps.clock.monotonic();
  const result = emptyResult(ctx, options);
  const finish = () => finishResult(result, started, ctx);
  // Reports from an earlier pass go first, so the pull below sees the statuses they carry; but not `deployed` or
  // `failed` ones: made for the version then listed, which an operator may have replaced since, the service would
  // take them for the new one (not on disk yet; or failed, which is final: the agent would skip it for good).
  // Those go once this pass has planned, and written, what the service holds now.
  if (!result.dryRun && outbox.size > 0)
    await report(
      ctx,
      result,
      signal,
      new PassReports(reportContext(ctx, signal), undefined, claimsOfVersion),
    );

  let pulled: Pulled<PlanInstance>;
  // The listed paths' lstats run while the next page is awaited (observe.ts ObservationAhead).
  const fingerprints = { store: dir.fingerprints, now: () => deps.clock.now() };
  const ahead = new ObservationAhead(deps.fs, settings.rootDir, fingerprints, laterTurn(deps.clock), signal);
  try {
    pulled = await pullInstances(options.mode, pullContext(ctx, signal, result.dryRun, ahead));
  } catch (error) {
    ahead.stop();
    signal?.throwIfAborted();
    result.error = toPassError(error);
    logger.warn({ err: error }, 'could not pull config instances: files left as they are');
    return finish();
  }
  result.reachable = true;
  result.mode = pulled.mode;
  if (ctx.settings.holdsApiKey !== undefined) refuseKeyPaths(pulled, ctx.settings.holdsApiKey);
  for (const instance of pulled.instances) ctx.lastSeenUpdatedAt.set(instance.id, instance.updated_at);
  const judged = resolveAwaitedEchoes(state, pulled.instances);
  if (!result.dryRun)
    ctx.unrecorded?.judge(judged, outbox, reportBackoff(requestContext(ctx, signal).retry), logger);
  const listed = listedIn(pulled.instances);
  const version = versionIn(ctx, listed);
  keepQueuedVersions(ctx, version);
  let followsSuperseded = false;
  if (pulled.mode === 'full' && !result.dryRun && ctx.followUp !== undefined) {
    followsSuperseded = ctx.followUp.supersededDue === true;
    ctx.followUp.fullPassDue = false;
    ctx.followUp.supersededDue = false;
  }

  if (!result.dryRun) await adoptDeclaredWrites(ctx);
  const identities = new Map<string, ObservedIdentity>();
  const disk = await observeDisk(deps.fs, settings.rootDir, pulled.instances, {
    ...(signal === undefined ? {} : { signal }),
    fingerprints,
    identities,
    ahead,
    sizes: wantedSizes(pulled.instances),
  });
  let aliases: Map<string, string>;
  try {
    aliases = await findPathAliases(deps.fs, settings.rootDir, aliasCandidates(pulled, state), identities);
  } catch (error) {
    // Which paths name one file is unknown: any plan could unlink another instance's file or forget one of ours.
    result.error = toPassError(error);
    logger.warn(
      { err: error },
      'could not tell which paths name one file: nothing done this pass, tried again next',
    );
    return finish();
  }
  const formerRoot = await formerRootLeftovers(deps.fs, state, pulled.instances, {
    complete: listingComplete(pulled),
    dryRun: result.dryRun,
  });
  result.steps = planSteps(planInput(ctx, pulled, disk, aliases, formerRoot));
  const unmade = unmadeWrites(result.steps);
  if (unmade.size > 0) {
    // Known items whose file this pass writes after all: judged in full from their text, their bytes made, and
    // the plan made again with them (plan is pure; this happens only when something on disk must change).
    pulled = await makeKnownFiles(pulled, unmade, pullPrepare(ctx, result.dryRun));
    result.steps = planSteps(planInput(ctx, pulled, disk, aliases, formerRoot));
  }
  if (result.dryRun) return finish();
  handBytesToSteps(pulled.instances);
  dropElapsedCooldowns(state, pulled.instances, deps.clock.monotonic());

  if (result.steps.some((step) => step.kind === 'write')) await remakeRoot(ctx);
  const recording = recordContext(ctx);
  // An instance this pass writes: its queued report waits until the write is recorded (a `deployed` made before
  // is true only once these bytes are in place; a failure replaces it).
  const unwritten = new Set<string>();
  for (const step of result.steps) if (step.kind === 'write') unwritten.add(step.instance.id);
  const reports = reportsWhileWriting(
    ctx,
    result.steps.length,
    signal,
    version,
    listed,
    followsSuperseded,
    (entry) => unwritten.has(entry.instanceId),
  );
  await reports.around(() =>
    applySteps(result.steps, applyContext(ctx, signal), (applied) => {
      if (applied.step.kind === 'write') unwritten.delete(applied.step.instance.id);
      result.outcomes.push(...recordStep(applied, recording));
      releaseWrittenBytes(applied.step);
      reports.queued();
      // A written file's bytes are garbage now; a step that touched no file (an unchanged one's confirm) left
      // none worth a reading of the heap (~1 ms per 1,000 in an idle pass).
      if (applied.step.kind === 'write' || applied.step.kind === 'remove') deps.heapCheckpoint?.();
    }),
  );
  // A loop, not a spread: a listing may hold more invalid items than a call's argument list can take.
  for (const outcome of recordInvalid(pulled.invalid, recording)) result.outcomes.push(outcome);
  for (const outcome of skippedOutcomes(pulled.skipped)) result.outcomes.push(outcome);
  // Stopping is not a failure: what landed is recorded in memory, and the daemon's stop persists it.
  signal?.throwIfAborted();
  if (ctx.followUp !== undefined && leftBehind(result.steps, state.files)) {
    // A moved instance's new file is recorded now; its old one goes only then, in a complete pull (plan.ts
    // leftPathRemovals): the next pass is a full one, at once, not the next scheduled full pass.
    ctx.followUp.fullPassDue = true;
  }
  if (pulled.mode === 'full') {
    // A listing that may have left instances out (pager.ts `incomplete`), or holds an item whose id could not be
    // read (any instance's), cannot tell which ones the service deleted: forgetting them dropped the echo of the
    // agent's own reports, and a path conflict's loser then won the path (adv20).
    if (pulled.incomplete === undefined && pulled.invalid.every((item) => item.id !== undefined)) {
      forgetUnseen(state, pulled.instances, unusableIds(pulled));
      outbox.retainRefused(state.instances);
    }
    dir.fingerprints.retainSeenPages();
  }
  // Only now, what the service lists recorded: a gone mount below rootDir holding none of it is forgotten (review36).
  await ctx.rootMount?.forgetUnheld();
  progress.recorded = true;

  try {
    await dir.persist();
    if (pulled.mode === 'full') await dir.pruneCache();
    deps.heapCheckpoint?.();
  } catch (error) {
    // Files changed on disk all the same: the caller must still learn which (hooks), and reports still go.
    signal?.throwIfAborted();
    result.persistError = toPassError(error);
    logger.error({ err: error }, 'could not persist local state');
  }
  // Also when the outbox is empty: what the deliveries during apply did goes into the result.
  await report(ctx, result, signal, reports);
  if (keepQueuedVersions(ctx, version)) {
    await outbox.persist().catch((error: unknown) => {
      result.persistError = toPassError(error);
      logger.error({ err: error }, 'could not persist the status outbox');
    });
  }
  return finish();
}

/**
 * Files an earlier run renamed into place and died before state.json recorded (or whose directory fsync failed)
 * are the agent's by their declared bytes: recorded before planning, so a retired instance's file is removed.
 */
async function adoptDeclaredWrites(ctx: PassContext): Promise<void> {
  // Bytes found in the bare mountpoint prove nothing about the mount's files: the declarations wait for it, those
  // under a mount below rootDir that is gone for it alone (fix34).
  const watch = ctx.rootMount;
  if ((await watch?.check()) !== undefined) return;
  const adoptable =
    watch?.anyGoneBelow() === true ? (relative: string) => watch.goneAt(relative) === undefined : undefined;
  try {
    const tracked = ctx.settings.trackHookPaths === true;
    const adopted = await ctx.dir.adoptDeclaredWrites(
      new Date(ctx.deps.clock.now()).toISOString(),
      adoptable,
      // Removed after a rename no durable state.json recorded: the hooks may have heard of the write (intent27).
      tracked ? (removed) => ctx.dir.state.pendingHookPaths.add(removed) : undefined,
    );
    // Their hooks never heard of them: the run that wrote them died before state.json kept them pending (adv32).
    if (tracked) for (const written of adopted) ctx.dir.state.pendingHookPaths.add(written);
    if (adopted.length > 0)
      ctx.logger.warn({ paths: adopted }, 'recorded files an interrupted run wrote and did not record');
  } catch (error) {
    ctx.logger.warn({ err: error }, 'could not check the writes an interrupted run declared');
  }
}

/** A root removed since start-up is made again before writing into it (a failure is left to the writes). */
async function remakeRoot(ctx: PassContext): Promise<void> {
  const { rootDir, dirMode } = ctx.settings;
  try {
    if (await remakeMissingRoot(ctx.deps.fs, rootDir, dirMode))
      ctx.logger.warn({ rootDir }, 'rootDir was removed while the agent ran: made again');
  } catch (error) {
    ctx.logger.warn(
      { err: error, rootDir },
      'rootDir was removed while the agent ran and could not be made again',
    );
  }
}

type Prepare = (instance: ConfigInstance, wire?: ItemWire) => PlanInstance | Promise<PlanInstance>;

function pullContext(
  ctx: PassContext,
  signal: AbortSignal | undefined,
  dryRun: boolean,
  ahead: ObservationAhead,
): PullContext<PlanInstance> {
  const { maxResponseBytes } = ctx.settings;
  const { fingerprints } = ctx.dir;
  const spill = dryRun ? undefined : fileSpill(ctx);
  return {
    ...requestContext(ctx, signal),
    deviceId: ctx.settings.deviceId,
    files: ctx.dir.state.files,
    clock: ctx.deps.clock,
    ...(ctx.toldItems === undefined ? {} : { told: ctx.toldItems }),
    prepare: observedAhead(afterHeapCheckpoint(spill?.prepare ?? withFile, ctx.deps.heapCheckpoint), ahead),
    // An item whose exact text was judged and serialized before is not again (api/list-page.ts KnownItems), while
    // its text fits in the spill's budget. Not in a dry run, whose `withFile` would serialize unchecked content.
    ...(spill === undefined
      ? {}
      : {
          knownItems: {
            lookup: (id, key, length) => {
              const known = fingerprints.lookupItem(id, key);
              return known !== undefined && spill.admitKnown(length) ? known : undefined;
            },
            // Pages whose items' exact text was seen: their items' keys are not made again (full pulls only).
            pages: fingerprints,
          },
        }),
    ...(maxResponseBytes === undefined ? {} : { maxResponseBytes }),
  };
}

/**
 * Each instance is serialized as its page arrives and only the bytes are kept (plan.ts `withFile`), past a budget
 * in the content cache (spill.ts), which records them by the key of the item's text in the fingerprints. A dry
 * run writes nothing to the state directory: it holds them.
 */
function fileSpill(ctx: PassContext): FileSpill {
  const { cache, fingerprints } = ctx.dir;
  return new FileSpill(cache, ctx.logger, ctx.settings.inMemoryFileBytes, fingerprints);
}

function pullPrepare(ctx: PassContext, dryRun: boolean): Prepare {
  return dryRun ? withFile : fileSpill(ctx).prepare;
}

/** `prepare`, and the item's path observed ahead (ObservationAhead: in a later turn, while the next page comes). */
function observedAhead(prepare: Prepare, ahead: ObservationAhead): Prepare {
  return (instance, wire) => {
    ahead.add(instance.relative_filepath);
    return prepare(instance, wire);
  };
}

/**
 * `prepare`, after the heap checkpoint (deps.heapCheckpoint) before each item it judges and serializes: a page's
 * garbage is collected as it piles up. A known item (`wire.known`: its content neither checked nor serialized,
 * its file taken from the record) makes no garbage worth a reading of V8's heap spaces, which cost ~2 ms of CPU
 * per 1,000 items of an idle pass; the next item judged in full takes the reading as before.
 */
function afterHeapCheckpoint(prepare: Prepare, heapCheckpoint: (() => void) | undefined): Prepare {
  return (instance, wire) => {
    if (wire?.known === undefined) heapCheckpoint?.();
    return prepare(instance, wire);
  };
}

/**
 * From the plan on, a file's bytes are held by its write step alone: the pulled instances let theirs go (the
 * step keeps its own reference; nothing after the plan reads an instance's bytes). The `file` is replaced, not
 * its `data` deleted: a deleted property turns the object into a dictionary (~250 bytes more each).
 */
function handBytesToSteps(instances: readonly PlanInstance[]): void {
  for (const instance of instances) {
    if ('file' in instance && instance.file.data !== undefined)
      instance.file = { sha256: instance.file.sha256, size: instance.file.data.length };
  }
}

/**
 * A step's bytes let go once it is applied and recorded (written or not: a failed write is pulled again by the
 * next pass). Before, every file's bytes stayed until the pass ended: ~10 MiB at 10,000 × ~1 KiB, all of them at
 * the pass's peak (docs/performance-history.md "Memory, seventh round"). Assigned, not deleted (see above).
 */
function releaseWrittenBytes(step: Step): void {
  if (step.kind === 'write' && step.data !== undefined) step.data = undefined;
}

/** Ids of the instances a step writes whose bytes were not made (known items: plan.ts InstanceFile `wire`). */
function unmadeWrites(steps: readonly Step[]): Set<string> {
  const ids = new Set<string>();
  for (const step of steps) {
    if (step.kind === 'write' && step.data === undefined && unmade(step.instance) !== undefined) {
      ids.add(step.instance.id);
    }
  }
  return ids;
}

function unmade(instance: ConfigInstanceHead | PlanInstance): string | undefined {
  return 'file' in instance && instance.file.data === undefined ? instance.file.wire : undefined;
}

/**
 * The pull with the instances of `ids` judged in full from their text and prepared as any other (their files
 * recorded for their text again). One the
 * judge refuses now (its text passed before: only a change of the rules without ITEM_RULES_VERSION could do
 * that) becomes an invalid item, as in the pull.
 */
async function makeKnownFiles(
  pulled: Pulled<PlanInstance>,
  ids: ReadonlySet<string>,
  prepare: Prepare,
): Promise<Pulled<PlanInstance>> {
  const instances: PlanInstance[] = [];
  const invalid: InvalidListItem[] = [...pulled.invalid];
  for (const instance of pulled.instances) {
    const wire = ids.has(instance.id) ? unmade(instance) : undefined;
    if (wire === undefined) {
      instances.push(instance);
      continue;
    }
    const judged = judgeConfigInstance(wire);
    // With its text (not known now): what it serializes to is recorded afresh, so a record of other bytes under
    // its key (a torn or corrupt fingerprints.json) heals instead of sending it through here on every pass.
    if (judged.kind === 'valid' && judged.instance.id === instance.id)
      instances.push(await prepare(judged.instance, { text: wire, key: itemKey(wire) }));
    else {
      invalid.push({
        id: instance.id,
        deviceId: instance.device_id,
        activityStatus: instance.activity_status,
        errorStatus: instance.error_status,
        problem: judged.kind === 'invalid' ? judged.problem : 'its listed text changed meaning',
      });
    }
  }
  return { ...pulled, instances, invalid };
}

/** Ids listed but not usable (invalid or skipped items): still the service's instances. */
function unusableIds(pulled: Pulled<PlanInstance>): string[] {
  return [...pulled.invalid.flatMap((item) => item.id ?? []), ...pulled.skipped.map((item) => item.id)];
}

/** Every path the plan may write or remove: the instances' and the recorded files'. */
function* aliasCandidates(
  pulled: Pulled<PlanInstance>,
  state: PassContext['dir']['state'],
): Generator<string> {
  for (const instance of pulled.instances) yield instance.relative_filepath;
  yield* state.files.keys();
}

function planInput(
  ctx: PassContext,
  pulled: Pulled<PlanInstance>,
  disk: Map<string, DiskObservation>,
  aliases: ReadonlyMap<string, string>,
  formerRoot: PlanInput['formerRoot'],
): PlanInput {
  const { settings, dir } = ctx;
  return {
    instances: pulled.instances,
    local: dir.state,
    disk,
    pendingReports: pendingReports(dir.outbox),
    now: ctx.deps.clock.monotonic(),
    fileMode: settings.fileMode,
    ...(settings.fileMeta === undefined ? {} : { fileMeta: settings.fileMeta }),
    restoreDrift: settings.restoreDrift ?? true,
    // An item that could not be used may want any path: only a listing without one tells that nobody does.
    // A listing that ended before its total_count may have left out the instance that wants a path.
    complete: listingComplete(pulled),
    reportEchoes: reportEchoes(dir.state.instances),
    ...(aliases.size === 0 ? {} : { aliases }),
    ...(formerRoot === undefined || formerRoot.size === 0 ? {} : { formerRoot }),
  };
}

function listingComplete(pulled: Pulled<PlanInstance>): boolean {
  return (
    pulled.mode === 'full' &&
    pulled.invalid.length === 0 &&
    pulled.skipped.length === 0 &&
    pulled.incomplete === undefined
  );
}

function applyContext(ctx: PassContext, signal: AbortSignal | undefined): ApplyContext {
  const { settings, dir } = ctx;
  return {
    fs: ctx.deps.fs,
    logger: ctx.logger,
    rootDir: settings.rootDir,
    fileMode: settings.fileMode,
    dirMode: settings.dirMode,
    files: dir.state.files,
    cache: dir.cache,
    declareWrites: (intents) => dir.declareWrites(intents),
    declareRemovals: (paths) => dir.declareRemovals(paths),
    ...(ctx.rootMount === undefined ? {} : { rootMount: ctx.rootMount }),
    ...(settings.batchSteps === undefined ? {} : { batchSteps: settings.batchSteps }),
    ...(settings.cacheWrittenFiles === undefined ? {} : { cacheWrittenFiles: settings.cacheWrittenFiles }),
    ...(signal === undefined ? {} : { signal }),
  };
}

function recordContext(ctx: PassContext): RecordContext {
  const { settings, dir } = ctx;
  return {
    ...ctx.deps,
    state: dir.state,
    outbox: dir.outbox,
    logger: ctx.logger,
    fileMode: settings.fileMode,
    retry: settings.retry,
    trackHookPaths: settings.trackHookPaths ?? false,
    listedUpdatedAt: (id) => ctx.lastSeenUpdatedAt.get(id),
    ...(ctx.rootMount === undefined
      ? {}
      : { mountHolding: (relative) => ctx.rootMount?.mountHolding(relative) }),
  };
}

/**
 * A pass's reports: with many of them, deliveries start while apply still writes (report.ts `PassReports`), each
 * after state.json and the outbox are made durable, at most DELIVERIES_WHILE_WRITING of them, each of at least
 * a batch's worth (a pass with fewer reports delivers them all at its end, as one delivery).
 */
function reportsWhileWriting(
  ctx: PassContext,
  steps: number,
  signal: AbortSignal | undefined,
  version: (instanceId: string) => string | undefined,
  listed: (instanceId: string) => PlanInstance | undefined,
  followsSuperseded: boolean,
  held: (entry: OutboxEntry) => boolean,
): PassReports {
  return new PassReports(
    {
      ...reportContext(ctx, signal, version),
      listedHead: listed,
      superseded: supersededBy(ctx, followsSuperseded),
      // The service's answers agree with its listing again: a later answer placing it otherwise is followed.
      placedAsListed: (instanceId) => ctx.followUp?.doubted?.delete(instanceId),
    },
    {
      persistRecords: () => ctx.dir.persistRecords(),
      every: Math.max(ctx.settings.batchSteps ?? BATCH_STEPS, Math.ceil(steps / DELIVERIES_WHILE_WRITING)),
    },
    held,
  );
}

/**
 * Whether this pass recorded a file at an instance's new path while its file at a path it left is still recorded:
 * plan.ts removes such a file only once the new one is in place (never before it is durable), so not in the pass
 * that writes it. Before, that removal waited for the next full pass (up to poll.fullResyncSeconds), and the pass
 * said converged with the old file there (list21). Only passes that write look.
 */
function leftBehind(steps: readonly Step[], files: PassContext['dir']['state']['files']): boolean {
  let moved: Map<string, string> | undefined;
  for (const step of steps) {
    if (step.kind !== 'write') continue;
    const { id, relative_filepath: path } = step.instance;
    if (files.get(path)?.instanceId !== id) continue;
    moved ??= new Map();
    moved.set(id, path);
  }
  if (moved === undefined) return false;
  for (const [path, file] of files) {
    const to = moved.get(file.instanceId);
    if (to !== undefined && to !== path) return true;
  }
  return false;
}

/** A report the service must not apply to another version than it was made for: the file is in place, or never will be. */
function claimsOfVersion(entry: OutboxEntry): boolean {
  return entry.report.activity_status === 'deployed' || entry.report.error_status === 'failed';
}

function reportContext(
  ctx: PassContext,
  signal: AbortSignal | undefined,
  version: (instanceId: string) => string | undefined = (id) => ctx.listedVersions.get(id),
): ReportContext {
  const { dir } = ctx;
  return {
    ...requestContext(ctx, signal),
    outbox: dir.outbox,
    state: dir.state,
    lastSeenUpdatedAt: ctx.lastSeenUpdatedAt,
    listedVersion: version,
    ...(ctx.unrecorded === undefined ? {} : { unrecorded: ctx.unrecorded }),
  };
}

/** This pass's listed instances by id, indexed on first use: only a report's delivery asks. */
function listedIn(instances: readonly PlanInstance[]): (instanceId: string) => PlanInstance | undefined {
  let index: Map<string, PlanInstance> | undefined;
  return (id) => {
    index ??= new Map(instances.map((instance) => [instance.id, instance]));
    return index.get(id);
  };
}

/**
 * An instance's listed version (report.ts `listedVersion`) in this pass's listing, else as kept from an earlier
 * one: the listing its `lastSeenUpdatedAt` came from. Only an answer without an echo, or a report still queued,
 * asks.
 */
function versionIn(
  ctx: PassContext,
  listed: (instanceId: string) => PlanInstance | undefined,
): (instanceId: string) => string | undefined {
  return (id) => {
    const instance = listed(id);
    return instance === undefined ? ctx.listedVersions.get(id) : listedVersion(instance);
  };
}

/**
 * An instance whose `relative_filepath` holds the agent's API key is refused as an invalid item (reported `failed`,
 * no file written): its file's name would show the key to every local user who can list rootDir (adv25). The
 * problem names the field, never the key. One whose `id` holds it is refused too, and counted `failed` without a
 * report or a record: the outbox (until sent) and state.json would keep the id, and a hook's changed paths the
 * file's (misc25). Content holding it is written as any other (an operator's decision).
 */
function refuseKeyPaths(pulled: Pulled<PlanInstance>, holdsApiKey: (text: string) => boolean): void {
  keylessProblems(pulled.invalid, holdsApiKey);
  const refused = (instance: PlanInstance) =>
    holdsApiKey(instance.id) || holdsApiKey(instance.relative_filepath);
  if (!pulled.instances.some(refused)) return;
  const kept: PlanInstance[] = [];
  for (const instance of pulled.instances) {
    if (!refused(instance)) {
      kept.push(instance);
      continue;
    }
    if (holdsApiKey(instance.id)) {
      pulled.invalid.push({
        id: instance.id,
        idHoldsKey: true,
        problem:
          "its id holds the agent's API key: no file is written and nothing reported or recorded (stateDir would keep the key)",
      });
      continue;
    }
    pulled.invalid.push({
      id: instance.id,
      deviceId: instance.device_id,
      activityStatus: instance.activity_status,
      errorStatus: instance.error_status,
      problem:
        "relative_filepath holds the agent's API key: no file is written (its name would show the key to any local user who can list rootDir)",
    });
  }
  pulled.instances = kept;
}

/**
 * Invalid items whose id or problem holds the agent's API key. A problem names the field at fault, and a content
 * key spelling the API key (`{"<key>": 1e400}` from a service that echoes it) was named in the `failed` report the
 * service stores and shows, and in state.json (adv33): such a problem is said without the field. An id holding it
 * (an id listed twice, an item the schema refused) is neither reported nor recorded, as refuseKeyPaths does.
 */
function keylessProblems(invalid: InvalidListItem[], holdsApiKey: (text: string) => boolean): void {
  for (const item of invalid) {
    if (item.idHoldsKey === true) continue;
    if (item.id !== undefined && holdsApiKey(item.id)) {
      item.idHoldsKey = true;
      item.problem =
        "its id holds the agent's API key: no file is written and nothing reported or recorded (stateDir would keep the key)";
    } else if (holdsApiKey(item.problem)) {
      item.problem =
        "a field's name or value holds the agent's API key (a service echoing it): not valid, and not named here";
    }
  }
}

/** Instances remembered as answering placed otherwise than listed, again (`supersededBy`); past it, forgotten. */
const MAX_DOUBTED = 10_000;

/**
 * A report that landed on another version than the one it was made for (moved or retired between the listing
 * and the report): the service now holds that version with the reported statuses, while the disk holds the one
 * listed. A full pass is made due at once (the daemon runs it within a second, docs/reliability.md), which lists
 * the instance whatever its statuses (an incremental one would not: it shows `deployed`) and writes, removes and
 * reports what the service holds; until then this pass is not converged.
 */
function supersededBy(
  ctx: PassContext,
  followsSuperseded: boolean,
): (instanceId: string, fields: readonly string[]) => void {
  return (instanceId, fields) => {
    // In the full pass such an answer made due, another one is the service's answers disagreeing with its own
    // listing (made seconds ago), not a move: followed at once, each pass made the next due, a full listing and a
    // report every second for as long as it answered so (review29). The poll's own schedule runs the next.
    const followUp = ctx.followUp;
    if (followUp !== undefined && (followsSuperseded || followUp.doubted?.has(instanceId) === true)) {
      followUp.doubted ??= new Set();
      if (followUp.doubted.size >= MAX_DOUBTED) followUp.doubted.clear();
      if (!followUp.doubted.has(instanceId))
        ctx.logger.warn(
          { instanceId, changed: fields },
          "the service's answers to this instance's reports place it otherwise than its listings do: no full pass follows them at once any more",
        );
      followUp.doubted.add(instanceId);
      return;
    }
    if (followUp !== undefined) {
      followUp.fullPassDue = true;
      followUp.supersededDue = true;
    }
    ctx.logger.warn(
      { instanceId, changed: fields },
      'a status report landed on the instance changed since it was listed: a full pass follows to write what the service holds',
    );
  };
}

/**
 * Keeps the listed versions of the instances whose reports are still queued: the next pass delivers them first.
 * Each queued report gets them too, with the `updated_at` they were listed with (outbox.ts `listed`): the next
 * process (a `--once`, a restart) sends it before its own first listing, and its echo needs them. True when any
 * report got other ones than it had (the outbox file must then be rewritten).
 */
function keepQueuedVersions(ctx: PassContext, version: (instanceId: string) => string | undefined): boolean {
  if (ctx.listedVersions.size === 0 && ctx.dir.outbox.size === 0) return false;
  const kept = new Map<string, string>();
  for (const entry of ctx.dir.outbox.pending()) {
    const listed = version(entry.instanceId);
    if (listed !== undefined) kept.set(entry.instanceId, listed);
  }
  ctx.listedVersions.clear();
  for (const [id, listed] of kept) ctx.listedVersions.set(id, listed);
  return ctx.dir.outbox.relist((id) => {
    const updatedAt = ctx.lastSeenUpdatedAt.get(id);
    const listed = kept.get(id);
    if (updatedAt === undefined) return undefined;
    return listed === undefined ? { updatedAt } : { updatedAt, version: listed };
  });
}

/** The last delivery of `reports` (the outbox made durable first); adds what all of its deliveries did. */
async function report(
  ctx: PassContext,
  result: PassResult,
  signal: AbortSignal | undefined,
  reports = new PassReports(reportContext(ctx, signal)),
): Promise<void> {
  const { dir, logger } = ctx;
  const delivery = await reports.finish();
  result.reports.delivered += delivery.delivered;
  result.reports.rejected += delivery.rejected;
  if (delivery.persistError !== undefined) {
    result.persistError = toPassError(delivery.persistError);
    logger.error({ err: delivery.persistError }, 'could not rewrite the status outbox');
  }
  if (delivery.echoed) {
    await dir.persistState().catch((error: unknown) => {
      result.persistError = toPassError(error);
      logger.error({ err: error }, 'could not persist local state');
    });
  }
  if (delivery.deferredBy !== undefined) {
    signal?.throwIfAborted();
    result.reports.deliveryError = toPassError(delivery.deferredBy);
  }
}

function requestContext(ctx: PassContext, signal: AbortSignal | undefined) {
  const retry: RequestRetryOptions = {
    retries: ctx.settings.requestRetries,
    baseDelayMs: ctx.settings.requestRetryBaseMs ?? 500,
    maxDelayMs: 10_000,
    clock: ctx.deps.clock,
    random: ctx.deps.random,
    logger: ctx.logger,
    ...(signal === undefined ? {} : { signal }),
  };
  return { client: ctx.client, retry, logger: ctx.logger, ...(signal === undefined ? {} : { signal }) };
}

function reportEchoes(instances: PassContext['dir']['state']['instances']) {
  return new Map(
    [...instances].flatMap(([id, record]) =>
      record.reportEcho === undefined ? [] : [[id, record.reportEcho] as const],
    ),
  );
}

function emptyResult(ctx: PassContext, options: PassOptions): PassResult {
  return {
    mode: options.mode,
    dryRun: options.dryRun ?? false,
    startedAt: new Date(ctx.deps.clock.now()).toISOString(),
    durationMs: 0,
    reachable: false,
    steps: [],
    outcomes: [],
    reports: { delivered: 0, rejected: 0, pending: ctx.dir.outbox.size },
    sweptTempFiles: ctx.dir.takeSweptTempFiles(),
    converged: false,
  };
}

function finishResult(result: PassResult, started: number, ctx: PassContext): PassResult {
  result.durationMs = Math.round(ctx.deps.clock.monotonic() - started);
  result.reports.pending = ctx.dir.outbox.size;
  result.converged =
    result.reachable &&
    result.outcomes.every((outcome) => outcome.converged) &&
    result.reports.pending === 0 &&
    result.reports.rejected === 0 &&
    result.persistError === undefined &&
    ctx.followUp?.fullPassDue !== true &&
    !result.dryRun;
  return result;
}

export function toPassError(error: unknown): PassError {
  if (error instanceof HttpStatusError) {
    return {
      code: error.code,
      message: error.message,
      retryable: error.retryable,
      status: error.status,
      ...(error.retryAfterMs === undefined ? {} : { retryAfterMs: error.retryAfterMs }),
    };
  }
  if (isCertificateClockError(error)) {
    return { code: 'network_error', message: errorMessage(error), retryable: true, certificateClock: true };
  }
  if (isAgentError(error)) return { code: error.code, message: error.message, retryable: error.retryable };
  return { code: 'internal', message: errorMessage(error), retryable: false };
}
