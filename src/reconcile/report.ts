// Report: delivers the outbox in order; each failed delivery is judged by the one status classifier.
import { hash } from 'node:crypto';
import type * as z from 'zod';
import type { ReportAnswer, ServiceClient } from '../api/client.js';
import { deliveryVerdict, HttpStatusError, ReportContradictedError } from '../api/errors.js';
import { sameInstant } from '../api/instant.js';
import { type RequestRetryOptions, withRequestRetry } from '../api/retry.js';
import {
  ConfigInstance,
  type ConfigInstanceHead,
  INSTANCE_PLACE_FIELDS,
  type StatusReport,
} from '../api/schemas.js';
import { type Backoff, backoffCeilingMs, clampRetryAfterMs, honourRetryAfter } from '../lib/backoff.js';
import type { Logger } from '../lib/logger.js';
import {
  type DeliveryBackoff,
  type ListedBefore,
  type OutboxEntry,
  SharedSends,
  type StatusOutbox,
} from '../store/outbox.js';
import { validateRelativePath } from '../store/path-guard.js';
import type { LocalState } from '../store/state.js';

/**
 * Reports in flight at once, over kept-alive connections. The outbox holds one report per instance, so
 * concurrency never reorders an instance's reports.
 */
export const REPORT_CONCURRENCY = 8;
/**
 * A pass with many reports delivers them in about this many parts while it still writes, and the rest at its
 * end. Each part costs a persist of state.json first, whose size grows with the device, so the parts are few.
 */
export const DELIVERIES_WHILE_WRITING = 4;
/**
 * Deliveries of one pass in flight at once while it writes: the next one's persist and sends start while the
 * one before still awaits its last answers (they were a backlog after the last write), REPORT_CONCURRENCY sends
 * in flight in all (16 cost CPU on a loaded machine). Each is still sent only after the persist that makes its
 * reports durable, and the outbox keeps an instance's reports one at a time, in order.
 */
export const DELIVERIES_IN_FLIGHT = 2;
/**
 * A report that failed on its own (a 500 for it, an answer the client cannot use) waits before it is sent
 * again: 30 s after its first failure, doubling per failure up to an hour, each wait between half and all of
 * that (so a fleet does not retry in step), longer when the service's Retry-After asks. Without it such a
 * report was sent again at the start and the end of every pass, with the request retries each time.
 */
export const REPORT_BACKOFF: Backoff = { baseMs: 30_000, maxMs: 60 * 60 * 1000 };
/** Failures of one report after which each further one is logged as an error: someone must look. */
export const REPORT_ATTEMPTS_ALARM = 5;

export interface ReportContext {
  client: ServiceClient;
  outbox: StatusOutbox;
  state: LocalState;
  /** The `updated_at` of each instance as last pulled (or as our last report left it). */
  lastSeenUpdatedAt: Map<string, string>;
  /**
   * The `listedVersion` of an instance in the same listing as its `lastSeenUpdatedAt` (reconcile/pass.ts): an
   * answer without an echo records it, and only a listing of that very version can give the echo.
   */
  listedVersion?: (instanceId: string) => string | undefined;
  retry: RequestRetryOptions;
  logger: Logger;
  signal?: AbortSignal;
  /** Reports answered without an echo, for the next listing to judge (`UnrecordedReports`); one per reconciler. */
  unrecorded?: UnrecordedReports;
  /** The instance as listed by this pass (its reports were made from it), when it was. */
  listedHead?: (instanceId: string) => ConfigInstanceHead | undefined;
  /**
   * A report's answer showed the instance placed otherwise than listed (`placeChanged`: the fields named): the
   * report landed on another version. It settles (it cannot be taken back), records no echo, and the caller
   * makes a full pass due.
   */
  superseded?: (instanceId: string, fields: readonly string[]) => void;
  /** A report's answer showed the instance placed as listed: the caller's doubt of its answers ends. */
  placedAsListed?: (instanceId: string) => void;
}

export interface Delivery {
  delivered: number;
  rejected: number;
  /** Why delivery stopped early: the service could not take reports now; the rest stay queued. */
  deferredBy?: unknown;
  /** The outbox could not be rewritten after delivery (memory is right; a crash resends harmlessly). */
  persistError?: unknown;
  /** Some report moved an instance's `updated_at`: state.json holds the echo and must be saved. */
  echoed: boolean;
}

/** How one delivery picks its reports and whether it rewrites the outbox file after them (see `StatusOutbox.flush`). */
export interface DeliveryOptions {
  select?: (entry: OutboxEntry) => boolean;
  persist?: boolean;
  /** Shared by deliveries side by side: REPORT_CONCURRENCY sends in flight in all, and a `stop` in one ends them all. */
  shared?: SharedSends;
}

/** Delivers every queued report it can (those `select` picks); never throws for a failed delivery. */
export async function deliverReports(ctx: ReportContext, options: DeliveryOptions = {}): Promise<Delivery> {
  let echoed = false;
  const flushed = await ctx.outbox.flush(
    async (entry) => {
      const send = (report: StatusReport) =>
        withRequestRetry(
          'report status',
          () =>
            ctx.client.reportConfigInstanceStatus(
              entry.instanceId,
              report,
              ctx.signal === undefined ? {} : { signal: ctx.signal },
            ),
          ctx.retry,
        );
      const updated = await send(entry.report).catch((error: unknown) => {
        const { message, ...bare } = entry.report;
        // Refused for its size (413): the status is what matters, so it goes once more without the message;
        // refused again, it is dropped (http-status.ts `too_large`) instead of being retried on every pass.
        if (!(error instanceof HttpStatusError && error.status === 413) || message === undefined) throw error;
        ctx.logger.warn(
          { instanceId: entry.instanceId, status: error.status },
          'status report refused for its size: sent again without its message',
        );
        return send(bare);
      });
      // The reported instance returned in other statuses: the service did not take the report, whatever its
      // status code. Taken as delivered, the same report went out again on every poll, each pass "converged".
      if (
        updated?.id === entry.instanceId &&
        (updated.activity_status !== entry.report.activity_status ||
          updated.error_status !== entry.report.error_status)
      ) {
        const status = (r: { activity_status: string; error_status: string }) =>
          `${r.activity_status}/${r.error_status}`;
        throw new ReportContradictedError(entry.instanceId, status(entry.report), status(updated));
      }
      // A 2xx without a body settles the report too; only the reported instance, returned, can carry an echo
      // (another one in the answer is a service bug, and taken for its echo it would lose a path it wins).
      if (updated?.id === entry.instanceId) {
        ctx.unrecorded?.recorded(entry.instanceId);
        // Landed on another version than the one reported (moved or retired between the listing and the
        // report): not the echo of a report of what is on disk, and a full pass must write what the service holds.
        const listed = ctx.listedHead?.(entry.instanceId);
        const moved = listed === undefined ? undefined : placeChanged(listed, updated.fields);
        if (moved !== undefined) {
          ctx.superseded?.(entry.instanceId, moved);
          return;
        }
        if (listed !== undefined && updated.fields !== undefined) ctx.placedAsListed?.(entry.instanceId);
      }
      echoed =
        (updated?.id === entry.instanceId
          ? recordReportEcho(ctx, updated, listedBefore(entry))
          : recordAwaitedEcho(ctx, entry.instanceId, entry.report, listedBefore(entry))) || echoed;
    },
    // A stop aborts the requests in flight with the stop itself, which is no verdict on a report: delivery
    // ends there (every report not acknowledged stays queued) and the pass ends with the stop.
    (error) => (ctx.signal?.aborted === true ? 'stop' : deliveryVerdict(error)),
    { concurrency: REPORT_CONCURRENCY, backoff: reportBackoff(ctx.retry), ...options },
  );
  // Never dropped: a report lost here may never be derived again (a `failed` the state already records). One
  // line per delivery, naming the first report and how many failed (ux23; each report's own line is at debug): a
  // line per report put 1,048 warn lines (633 KB) in the journal in 150 s for 300 reports a service answered 500.
  const skipped = flushed.skipped;
  for (const { entry, error } of skipped) {
    const fields = { err: error, instanceId: entry.instanceId, attempts: entry.attempts ?? 0 };
    ctx.logger.debug(fields, 'status report failed: kept, sent again after a backoff');
  }
  const alarmed = skipped.filter(({ entry }) => (entry.attempts ?? 0) >= REPORT_ATTEMPTS_ALARM);
  const first = alarmed[0] ?? skipped[0];
  if (first !== undefined) {
    const fields = {
      err: first.error,
      instanceId: first.entry.instanceId,
      attempts: first.entry.attempts ?? 0,
      failed: skipped.length,
      stillNotAccepted: alarmed.length,
      pending: ctx.outbox.size,
    };
    if (alarmed.length > 0)
      ctx.logger.error(fields, 'status report still not accepted by the service: kept, sent again later');
    else ctx.logger.warn(fields, 'status report failed: kept, sent again after a backoff');
  }
  if (
    flushed.deferredBy !== undefined &&
    ctx.signal?.aborted === true &&
    flushed.deferredBy === ctx.signal.reason
  ) {
    // The agent's own stop (Ctrl-C, SIGTERM) is no failure of the service's: said, not warned of.
    ctx.logger.info(
      { stop: String(flushed.deferredBy), pending: ctx.outbox.size },
      'stopped: status reports kept',
    );
  } else if (flushed.deferredBy !== undefined) {
    ctx.logger.warn({ err: flushed.deferredBy, pending: ctx.outbox.size }, 'status reports kept for later');
  }
  return {
    delivered: flushed.delivered.length,
    rejected: flushed.rejected.length,
    ...(flushed.deferredBy === undefined ? {} : { deferredBy: flushed.deferredBy }),
    ...(flushed.persistError === undefined ? {} : { persistError: flushed.persistError }),
    echoed,
  };
}

/**
 * The outbox's backoff on the request layer's clock and randomness: for reports that failed on their own, and
 * the hold of every report after a stop whose answer carries a Retry-After (a 503 or 429: measured against the
 * service's Date header by the client, capped at MAX_RETRY_AFTER_MS). Without the hold the reports went again
 * with the next pass, sooner than asked when the poll is shorter, later than needed when it is longer.
 */
export function reportBackoff(retry: Pick<RequestRetryOptions, 'clock' | 'random'>): DeliveryBackoff {
  const retryAfterOf = (error: unknown) =>
    error instanceof HttpStatusError ? clampRetryAfterMs(error.retryAfterMs) : undefined;
  return {
    now: () => retry.clock.monotonic(),
    delayMs: (attempts, error) => {
      const ceiling = backoffCeilingMs(REPORT_BACKOFF, attempts);
      const jittered = Math.round(ceiling / 2 + (retry.random() * ceiling) / 2);
      return honourRetryAfter(jittered, retryAfterOf(error));
    },
    holdMs: retryAfterOf,
  };
}

export interface WhileWriting {
  /** Makes state.json and the outbox durable: before each delivery that starts while the pass still writes. */
  persistRecords: () => Promise<void>;
  /** Reports queued since the last delivery started that start the next one. */
  every: number;
}

/**
 * The status reports of one pass, delivered by up to DELIVERIES_IN_FLIGHT deliveries at a time. With
 * `whileWriting`, deliveries start while apply still writes: `record` queues a batch's reports only once the
 * batch's files and directory entries are fsynced, so they may leave while the next batch is written instead of
 * all of them after the last write. Before each such delivery state.json and the outbox are made durable (the
 * service never hears of a file the state does not record as the agent's, nor of a report the outbox could
 * lose); persists run one at a time, and the next may run while an earlier delivery still sends. A persist that
 * fails leaves the rest to the end of the pass, as before. `finish` is the pass's last delivery, after every
 * other has settled. A `stop` verdict (the service cannot take reports now, or the pass was stopped) ends
 * delivery for the whole pass, the deliveries beside it included; each queued report goes into one of its
 * deliveries at most (a report that failed on its own, `skip`, waits for the next pass). Reports of one instance
 * are never in flight together (`StatusOutbox.flush`).
 */
export class PassReports {
  readonly #ctx: ReportContext;
  readonly #whileWriting: WhileWriting | undefined;
  readonly #sent = new Set<number>();
  readonly #total: Delivery = { delivered: 0, rejected: 0, echoed: false };
  readonly #shared = new SharedSends(REPORT_CONCURRENCY);
  /** `outbox.queuedEver` when the last delivery started. */
  #queuedBefore: number;
  #running: Promise<void> | undefined;
  /** Wakes the running loop when reports were queued while it waits for a delivery. */
  #wake: (() => void) | undefined;
  #persistFailed = false;
  /** Reports this object's deliveries leave queued for now (see the constructor). */
  readonly #held: ((entry: OutboxEntry) => boolean) | undefined;

  /**
   * `held`: reports none of these deliveries sends while it says so (they stay queued): a `deployed` report made
   * for a version the service may have replaced since, until the pass has written what the service holds now.
   */
  constructor(ctx: ReportContext, whileWriting?: WhileWriting, held?: (entry: OutboxEntry) => boolean) {
    this.#ctx = ctx;
    this.#whileWriting = whileWriting;
    this.#queuedBefore = ctx.outbox.queuedEver;
    this.#held = held;
  }

  /** Reports were queued (their files durable): once `every` have gathered, a delivery starts. */
  queued(): void {
    if (this.#running !== undefined) {
      this.#wake?.();
      return;
    }
    if (this.#due())
      this.#running = this.#deliverWhileWriting().finally(() => {
        this.#running = undefined;
      });
  }

  /** Runs `work`, which queues reports, and waits for the deliveries it started: none outlives it. */
  async around<T>(work: () => Promise<T>): Promise<T> {
    try {
      return await work();
    } finally {
      await this.#running;
    }
  }

  /**
   * The pass's last delivery, unless a `stop` ended delivery or nothing is queued: the outbox made durable, then
   * every queued report not sent yet in this pass. Returns what all deliveries did; `echoed` only for this last
   * one (the state the pass persisted before it holds the echoes of the others).
   */
  async finish(): Promise<Delivery> {
    await this.#running;
    this.#total.echoed = false;
    if (this.#total.deferredBy !== undefined || this.#ctx.outbox.size === 0) return this.#total;
    try {
      await this.#ctx.outbox.persist();
    } catch (error) {
      this.#ctx.logger.error({ err: error }, 'could not persist the status outbox; delivering from memory');
    }
    await this.#deliver(true);
    return this.#total;
  }

  #due(): boolean {
    return (
      this.#whileWriting !== undefined &&
      !this.#persistFailed &&
      !this.#shared.stopped &&
      this.#total.deferredBy === undefined &&
      this.#ctx.outbox.queuedEver - this.#queuedBefore >= this.#whileWriting.every
    );
  }

  async #deliverWhileWriting(): Promise<void> {
    const deliveries = new Set<Promise<void>>();
    // A delivery that throws (not a failed report: deliverReports judges those) ends the loop once all settled.
    let failure: { error: unknown } | undefined;
    // Record takes a batch's steps one after another without awaiting: start after the last of them.
    await Promise.resolve();
    for (;;) {
      if (this.#due() && deliveries.size < DELIVERIES_IN_FLIGHT) {
        // Reports queued while state.json is written may be of files it does not record yet: they wait.
        const persisted = this.#ctx.outbox.queuedEver;
        this.#queuedBefore = persisted;
        try {
          await this.#whileWriting!.persistRecords();
        } catch (error) {
          this.#persistFailed = true;
          this.#ctx.logger.error(
            { err: error },
            'could not persist local state: reports wait for the end of the pass',
          );
          break;
        }
        // The outbox file is rewritten by the next persist, not after each delivery.
        const delivery: Promise<void> = this.#deliver(false, persisted)
          .catch((error: unknown) => {
            failure ??= { error };
          })
          .finally(() => deliveries.delete(delivery));
        deliveries.add(delivery);
        continue;
      }
      if (deliveries.size === 0 || failure !== undefined) break;
      const woken = new Promise<void>((resolve) => {
        this.#wake = resolve;
      });
      await Promise.race([woken, ...deliveries]);
      this.#wake = undefined;
    }
    await Promise.all(deliveries);
    if (failure !== undefined) throw failure.error;
  }

  /** One delivery of the reports not sent yet, of those queued before `queuedBefore` when given. */
  async #deliver(persist: boolean, queuedBefore = Number.POSITIVE_INFINITY): Promise<void> {
    const select = (entry: OutboxEntry) => {
      if (entry.seq >= queuedBefore || this.#sent.has(entry.seq)) return false;
      if (this.#held?.(entry) === true) return false;
      this.#sent.add(entry.seq);
      return true;
    };
    const delivery = await deliverReports(this.#ctx, { select, persist, shared: this.#shared });
    const total = this.#total;
    total.delivered += delivery.delivered;
    total.rejected += delivery.rejected;
    total.echoed ||= delivery.echoed;
    if (delivery.deferredBy !== undefined) total.deferredBy = delivery.deferredBy;
    if (delivery.persistError !== undefined) total.persistError = delivery.persistError;
  }
}

/** The instance as listed before `entry` was made, kept with it (outbox.ts `listedUpdatedAt`), if it was. */
function listedBefore(entry: OutboxEntry): ListedBefore | undefined {
  const { listedUpdatedAt: updatedAt, listedVersion: version } = entry;
  if (updatedAt === undefined) return undefined;
  return version === undefined ? { updatedAt } : { updatedAt, version };
}

/**
 * A report settled by an answer that carries no echo (a 204, an empty or unreadable body, another instance):
 * the `updated_at` it gave is not known yet, and without it the next listing took the agent's own report for
 * an operator's update (at a path conflict the two instances took turns, every pass). The operator's time is
 * kept, with the instance's version as listed before the report (`listedVersion`), and the next listing that
 * shows the instance in exactly the reported statuses and that version gives the echo (`resolveAwaitedEchoes`).
 */
function recordAwaitedEcho(
  ctx: ReportContext,
  instanceId: string,
  report: StatusReport,
  listed: ListedBefore | undefined,
): boolean {
  const record = ctx.state.instances.get(instanceId);
  const seen = ctx.lastSeenUpdatedAt.get(instanceId);
  const before = seen ?? listed?.updatedAt;
  if (record === undefined || before === undefined) return false;
  const echo = record.reportEcho;
  const operatorUpdatedAt =
    echo !== undefined && sameInstant(echo.updatedAt, before) ? echo.operatorUpdatedAt : before;
  const awaiting = `${report.activity_status}/${report.error_status}`;
  const version = seen === undefined ? listed?.version : ctx.listedVersion?.(instanceId);
  ctx.unrecorded?.sent(instanceId, report);
  ctx.state.instances.set(instanceId, {
    ...record,
    reportEcho: {
      updatedAt: before,
      operatorUpdatedAt,
      awaiting,
      ...(version === undefined ? {} : { version }),
    },
  });
  return true;
}

/**
 * What of a listed instance only an operator changes, as one key: everything but its statuses (which the agent's
 * reports set) and `updated_at` (which every change moves), the content by the sha256 of the file it makes (or
 * of its JSON, for an instance listed with its content). A report changes none of it, so a listing of another
 * version is an operator's change, whatever its statuses.
 */
export function listedVersion(
  instance: ConfigInstanceHead & { file?: { sha256: string }; content?: unknown },
): string {
  const content =
    instance.file !== undefined
      ? instance.file.sha256
      : hash('sha256', JSON.stringify(instance.content ?? null));
  return hash(
    'sha256',
    JSON.stringify([
      instance.target_status,
      instance.relative_filepath,
      instance.device_id,
      instance.config_schema_id,
      instance.config_type_id,
      instance.created_at,
      content,
    ]),
    'base64',
  );
}

/** What a listing told of the reports answered without an echo (`resolveAwaitedEchoes`). */
export interface AwaitedJudgement {
  /** Shown in the reported statuses (and version): the service recorded those reports (their instances). */
  recorded: string[];
  /** Shown as before the report (its statuses, version and `updated_at`): the service answered 2xx and recorded nothing. */
  unrecorded: string[];
}

/**
 * Settles the echoes a report's answer did not give, from a fresh listing: an instance shown in exactly the
 * statuses the agent reported, and of the version it had when reported (`listedVersion`), takes its
 * `updated_at` as the echo; in other statuses or another version (an operator's redeploy, a content edit
 * without one) the listing is not the echo, and its `updated_at` counts as the operator's. An echo awaited
 * without a version (recorded by an agent before versions were kept) goes by the statuses alone. An instance
 * shown exactly as before the report (other statuses, the same version and `updated_at`) tells a service that
 * answered 2xx and recorded nothing (`AwaitedJudgement.unrecorded`).
 */
export function resolveAwaitedEchoes(
  state: LocalState,
  instances: readonly (ConfigInstanceHead & { file?: { sha256: string }; content?: unknown })[],
): AwaitedJudgement {
  const judged: AwaitedJudgement = { recorded: [], unrecorded: [] };
  for (const instance of instances) {
    const record = state.instances.get(instance.id);
    const echo = record?.reportEcho;
    if (record === undefined || echo?.awaiting === undefined) continue;
    const { updatedAt, operatorUpdatedAt } = echo;
    const shown = `${instance.activity_status}/${instance.error_status}`;
    const sameVersion = echo.version === undefined || echo.version === listedVersion(instance);
    const echoed = shown === echo.awaiting && sameVersion;
    if (echoed) judged.recorded.push(instance.id);
    else if (sameVersion && sameInstant(instance.updated_at, updatedAt)) judged.unrecorded.push(instance.id);
    state.instances.set(instance.id, {
      ...record,
      reportEcho: echoed
        ? { updatedAt: instance.updated_at, operatorUpdatedAt }
        : { updatedAt, operatorUpdatedAt },
    });
  }
  return judged;
}

type PlaceField = (typeof INSTANCE_PLACE_FIELDS)[number];
let answerPlace: z.ZodType | undefined;
/** The place's fields as the wire schema (ConfigInstance) takes them in a listing, built on first use. */
function answerPlaceSchema(): z.ZodType {
  answerPlace ??= ConfigInstance.unwrap().pick(
    Object.fromEntries(INSTANCE_PLACE_FIELDS.map((field) => [field, true])) as Record<PlaceField, true>,
  );
  return answerPlace;
}

/**
 * The fields of its place in which a report's answer shows the instance otherwise than `listed`, or undefined:
 * the same place, or an answer that would not pass as a listing's item (the wire schema, and the path guard for
 * its path: an answer is trusted no further than a listing) or gives no place. Compared as they come (a string
 * comparison each); judged only when one differs.
 */
export function placeChanged(
  listed: ConfigInstanceHead,
  fields: Readonly<Record<string, unknown>> | undefined,
): string[] | undefined {
  if (fields === undefined) return undefined;
  let changed: string[] | undefined;
  for (const field of INSTANCE_PLACE_FIELDS) {
    const shown = fields[field];
    if (shown === listed[field]) continue;
    if (field === 'created_at' && typeof shown === 'string' && sameInstant(shown, listed.created_at))
      continue;
    changed ??= [];
    changed.push(field);
  }
  if (changed === undefined || !answerPlaceSchema().safeParse(fields).success) return undefined;
  try {
    validateRelativePath(fields.relative_filepath as string);
  } catch {
    return undefined;
  }
  return changed;
}

/** Instances remembered by `UnrecordedReports`; past it the least recently sent is forgotten (sent again at once). */
const MAX_UNRECORDED_REMEMBERED = 100_000;

/**
 * The reports a service answered 2xx without an echo (a 204, an empty or unreadable body), until the next listing
 * judges them (`resolveAwaitedEchoes`). One the listing shows exactly as before it (the service recorded nothing)
 * is held back when derived again, as a refused report is (`StatusOutbox.holdBack`, REPORT_BACKOFF, doubling while
 * the service keeps recording nothing): such a service got every queued report again on every poll, for as long as
 * it did. Queued, never dropped; a restart sends them at once. Logged once per episode: from the first such
 * report until a listing shows one recorded.
 */
export class UnrecordedReports {
  /** `warned`: its episode (unrecorded since it was last recorded) was warned of: once per instance. */
  readonly #sent = new Map<string, { report: StatusReport; times: number; warned: boolean }>();

  /** How many instances' last reports are remembered (held back again should a listing show them unrecorded). */
  get remembered(): number {
    return this.#sent.size;
  }

  sent(instanceId: string, report: StatusReport): void {
    const before = this.#sent.get(instanceId);
    this.#sent.delete(instanceId);
    const times = before !== undefined && sameReport(before.report, report) ? before.times : 0;
    this.#sent.set(instanceId, { report, times, warned: before?.warned === true });
    if (this.#sent.size > MAX_UNRECORDED_REMEMBERED) {
      const oldest = this.#sent.keys().next().value;
      if (oldest !== undefined) this.#sent.delete(oldest);
    }
  }

  /** A report's answer showed the instance in the reported statuses: its episode (if any) is over. */
  recorded(instanceId: string): void {
    this.#sent.delete(instanceId);
  }

  /** Holds back the reports `judged` found unrecorded, for `backoff`'s delay after how often in a row. */
  judge(judged: AwaitedJudgement, outbox: StatusOutbox, backoff: DeliveryBackoff, logger: Logger): void {
    // Recorded: nothing of theirs to hold back any more (kept, they stayed until 100,000 others were sent).
    for (const instanceId of judged.recorded) this.#sent.delete(instanceId);
    if (judged.unrecorded.length === 0) return;
    let longestMs = 0;
    const held: string[] = [];
    let unwarned = false;
    for (const instanceId of judged.unrecorded) {
      const sent = this.#sent.get(instanceId);
      if (sent === undefined) continue;
      sent.times++;
      const delayMs = backoff.delayMs(sent.times, undefined);
      longestMs = Math.max(longestMs, delayMs);
      outbox.holdBack(instanceId, sent.report, sent.times, backoff.now() + delayMs);
      held.push(instanceId);
      unwarned ||= !sent.warned;
      sent.warned = true;
    }
    // None held (not sent by this process: a restart keeps the awaited echo, not this memory): nothing to say.
    if (held.length === 0) return;
    const fields = { reports: held.length, instanceId: held[0], heldMs: longestMs };
    const message =
      'the service answered status reports 2xx and recorded none of them: each is kept and sent again after a backoff';
    // Once per instance's episode: another instance recorded meanwhile ends none but its own (fix30).
    if (unwarned) logger.warn(fields, message);
    else logger.debug(fields, message);
  }
}

function sameReport(a: StatusReport, b: StatusReport): boolean {
  return (
    a.activity_status === b.activity_status && a.error_status === b.error_status && a.message === b.message
  );
}

/**
 * Remembers the `updated_at` our own report gave an instance, with the one it had before: a report is not
 * an operator's update, so it must not change which of two instances at one path was "updated last".
 */
function recordReportEcho(
  ctx: ReportContext,
  updated: ReportAnswer,
  listed: ListedBefore | undefined,
): boolean {
  const record = ctx.state.instances.get(updated.id);
  const before = ctx.lastSeenUpdatedAt.get(updated.id) ?? listed?.updatedAt;
  if (record === undefined || before === undefined || sameInstant(before, updated.updated_at)) return false;
  const echo = record.reportEcho;
  const operatorUpdatedAt =
    echo !== undefined && sameInstant(echo.updatedAt, before) ? echo.operatorUpdatedAt : before;
  ctx.state.instances.set(updated.id, {
    ...record,
    reportEcho: { updatedAt: updated.updated_at, operatorUpdatedAt },
  });
  ctx.lastSeenUpdatedAt.set(updated.id, updated.updated_at);
  return true;
}
