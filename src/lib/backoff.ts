// Retry timing, one policy for every retry site: full-jitter exponential backoff, and Retry-After honoured.

/**
 * The longest Retry-After the agent believes (30 min): a buggy or hostile header must not park a fleet for a
 * day. The one cap on Retry-After; every retry site clamps with it.
 */
export const MAX_RETRY_AFTER_MS = 30 * 60 * 1000;

/** The exponent stops growing here: 2^64 is finite, so `baseMs × 2^n` never turns into Infinity or NaN. */
const MAX_EXPONENT = 64;

/** An exponential ceiling: `baseMs` for the first retry, doubling per attempt, never above `maxMs`. */
export interface Backoff {
  baseMs: number;
  maxMs: number;
}

/**
 * Full jitter: uniform in [0, min(maxMs, baseMs × 2^(attempt − 1))], rounded to whole ms, so a fleet that
 * failed together retries spread out. `attempt` counts from 1 (0 is read as 1); `random` is uniform in [0, 1).
 */
export function fullJitterMs(backoff: Backoff, attempt: number, random: () => number): number {
  return Math.round(random() * backoffCeilingMs(backoff, attempt));
}

/** The upper bound of `fullJitterMs` for an attempt. */
export function backoffCeilingMs(backoff: Backoff, attempt: number): number {
  const exponent = Math.min(MAX_EXPONENT, Math.max(0, attempt - 1));
  return Math.min(backoff.maxMs, backoff.baseMs * 2 ** exponent);
}

/** A server's Retry-After as the agent honours it: clamped to [0, MAX_RETRY_AFTER_MS]; undefined stays undefined. */
export function clampRetryAfterMs(retryAfterMs: number | undefined): number | undefined {
  if (retryAfterMs === undefined || Number.isNaN(retryAfterMs)) return undefined;
  return Math.min(MAX_RETRY_AFTER_MS, Math.max(0, retryAfterMs));
}

/** The wait before the next try: `delayMs`, or the server's Retry-After (clamped) when it asks for longer. */
export function honourRetryAfter(delayMs: number, retryAfterMs: number | undefined): number {
  return Math.max(delayMs, clampRetryAfterMs(retryAfterMs) ?? 0);
}
