// The one retry layer for a service request: retryable errors only, full jitter, Retry-After honoured.
import { clampRetryAfterMs, fullJitterMs, honourRetryAfter } from '../lib/backoff.js';
import type { Clock } from '../lib/clock.js';
import type { Logger } from '../lib/logger.js';
import { HttpStatusError, isRetryableError } from './errors.js';

export interface RequestRetryOptions {
  /** Retries after the first try; 0 disables this layer (the daemon's poll loop is then the retry layer). */
  retries: number;
  /** The backoff ceiling of the first retry; it doubles per retry up to `maxDelayMs`. */
  baseDelayMs: number;
  /**
   * The longest this layer sleeps between tries. A server whose Retry-After asks for longer ends the retries
   * here: the error goes up, with its Retry-After, to a layer that can wait (the daemon's poll loop), since
   * retrying sooner than the server asked is what Retry-After forbids.
   */
  maxDelayMs: number;
  clock: Clock;
  random: () => number;
  logger: Logger;
  signal?: AbortSignal;
}

export async function withRequestRetry<T>(
  what: string,
  request: () => Promise<T>,
  options: RequestRetryOptions,
): Promise<T> {
  // A loop of its own (p-retry before): one closure and one options object fewer per request, no option
  // validation on every call; ~1,000 status reports of a first sync each go through here.
  const { signal } = options;
  for (let attempt = 1; ; attempt += 1) {
    signal?.throwIfAborted();
    let result: T;
    try {
      result = await request();
    } catch (thrown) {
      // The stop itself (its reason: the signal's name compose aborts with) goes up unchanged, so every caller
      // knows it for the stop; wrapped, it was logged as a failure ("non-error thrown: SIGINT").
      if (signal?.aborted === true && thrown === signal.reason) throw thrown;
      const error = thrown instanceof Error ? thrown : new TypeError(`non-error thrown: ${String(thrown)}`);
      // `retries` retries after the first try; only retryable errors, and only a Retry-After this layer may honour.
      if (attempt > options.retries || !isRetryableError(error)) throw error;
      if ((retryAfterOf(error) ?? 0) > options.maxDelayMs) throw error;
      const delayMs = retryDelayMs(error, attempt, options);
      options.logger.warn({ err: error, attempt, delayMs, request: what }, 'request failed; retrying');
      await options.clock.sleep(delayMs, signal);
      continue;
    }
    // An answer that arrives after a stop is not handed on: the stop wins, as it does before a try.
    signal?.throwIfAborted();
    return result;
  }
}

/** Full-jitter exponential delay (lib/backoff.ts), or the server's Retry-After when it asks for longer. */
export function retryDelayMs(
  error: unknown,
  attempt: number,
  options: Pick<RequestRetryOptions, 'baseDelayMs' | 'maxDelayMs' | 'random'>,
): number {
  const jittered = fullJitterMs(
    { baseMs: options.baseDelayMs, maxMs: options.maxDelayMs },
    attempt,
    options.random,
  );
  return honourRetryAfter(jittered, retryAfterOf(error));
}

function retryAfterOf(error: unknown): number | undefined {
  return error instanceof HttpStatusError ? clampRetryAfterMs(error.retryAfterMs) : undefined;
}
