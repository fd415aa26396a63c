// Report: delivers the outbox in order; each failed delivery is judged by the one status classifier.
import type { ServiceClient } from '../api/client.js';
import { deliveryVerdict, HttpStatusError } from '../api/errors.js';
import { type RequestRetryOptions, withRequestRetry } from '../api/retry.js';
import type { ConfigInstance, StatusReport } from '../api/schemas.js';
import type { Logger } from '../lib/logger.js';
import type { StatusOutbox } from '../store/outbox.js';
import type { LocalState } from '../store/state.js';

/**
 * Reports in flight at once, over kept-alive connections. The outbox holds one report per instance, so
 * concurrency never reorders an instance's reports.
 */
export const REPORT_CONCURRENCY = 8;

export interface ReportContext {
  client: ServiceClient;
  outbox: StatusOutbox;
  state: LocalState;
  /** The `updated_at` of each instance as last pulled (or as our last report left it). */
  lastSeenUpdatedAt: Map<string, string>;
  retry: RequestRetryOptions;
  logger: Logger;
  signal?: AbortSignal;
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

/** Delivers every queued report it can; never throws for a failed delivery. */
export async function deliverReports(ctx: ReportContext): Promise<Delivery> {
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
      // A 2xx without a body settles the report too; only the reported instance, returned, can carry an echo
      // (another one in the answer is a service bug, and taken for its echo it would lose a path it wins).
      echoed = (updated?.id === entry.instanceId && recordReportEcho(ctx, updated)) || echoed;
    },
    // A stop aborts the requests in flight with the stop itself, which is no verdict on a report: delivery
    // ends there (every report not acknowledged stays queued) and the pass ends with the stop.
    (error) => (ctx.signal?.aborted === true ? 'stop' : deliveryVerdict(error)),
    { concurrency: REPORT_CONCURRENCY },
  );
  if (flushed.deferredBy !== undefined) {
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
 * Remembers the `updated_at` our own report gave an instance, with the one it had before: a report is not
 * an operator's update, so it must not change which of two instances at one path was "updated last".
 */
function recordReportEcho(ctx: ReportContext, updated: ConfigInstance): boolean {
  const record = ctx.state.instances.get(updated.id);
  const before = ctx.lastSeenUpdatedAt.get(updated.id);
  if (record === undefined || before === undefined || before === updated.updated_at) return false;
  const operatorUpdatedAt =
    record.reportEcho?.updatedAt === before ? record.reportEcho.operatorUpdatedAt : before;
  ctx.state.instances.set(updated.id, {
    ...record,
    reportEcho: { updatedAt: updated.updated_at, operatorUpdatedAt },
  });
  ctx.lastSeenUpdatedAt.set(updated.id, updated.updated_at);
  return true;
}
