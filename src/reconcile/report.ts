// Report: delivers the outbox in order and judges each failed delivery (drop, stop or skip).
import type { ServiceClient } from '../api/client.js';
import { HttpStatusError, NetworkError, TimeoutError } from '../api/errors.js';
import { type RequestRetryOptions, withRequestRetry } from '../api/retry.js';
import type { ConfigInstance } from '../api/schemas.js';
import type { Logger } from '../lib/logger.js';
import type { DeliveryVerdict, StatusOutbox } from '../store/outbox.js';
import type { LocalState } from '../store/state.js';

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
  const flushed = await ctx.outbox.flush(async (entry) => {
    const updated = await withRequestRetry(
      'report status',
      () =>
        ctx.client.reportConfigInstanceStatus(
          entry.instanceId,
          entry.report,
          ctx.signal === undefined ? {} : { signal: ctx.signal },
        ),
      ctx.retry,
    );
    echoed = recordReportEcho(ctx, updated) || echoed;
  }, deliveryVerdict);
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
 * How a failed report is judged. `drop`: the service will never accept it (the instance is gone, the body is
 * invalid) — dropping it is the only way forward. `stop`: the service cannot take any report now (no
 * connection, a rejected key the operator will fix, overload): keep them all. `skip`: this one failed on its
 * own (a 500 for this instance): keep it and deliver the others.
 */
export function deliveryVerdict(error: unknown): DeliveryVerdict {
  if (error instanceof HttpStatusError) {
    if ([400, 404, 409, 410, 422].includes(error.status)) return 'drop';
    if ([401, 403, 408, 429, 502, 503, 504].includes(error.status)) return 'stop';
    return 'skip';
  }
  return error instanceof NetworkError || error instanceof TimeoutError ? 'stop' : 'skip';
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
