// The one retry layer for a service request: retryable errors only, full jitter, Retry-After honoured.
import pRetry from 'p-retry';
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
  const willRetry = (error: unknown) =>
    isRetryableError(error) && (retryAfterOf(error) ?? 0) <= options.maxDelayMs;
  return pRetry(request, {
    retries: options.retries,
    // Delays come from onFailedAttempt, through the injected clock and randomness.
    minTimeout: 0,
    maxTimeout: 0,
    randomize: false,
    ...(options.signal === undefined ? {} : { signal: options.signal }),
    shouldRetry: ({ error }) => willRetry(error),
    onFailedAttempt: async ({ error, attemptNumber, retriesLeft }) => {
      if (retriesLeft <= 0 || !willRetry(error)) return;
      const delayMs = retryDelayMs(error, attemptNumber, options);
      options.logger.warn(
        { err: error, attempt: attemptNumber, delayMs, request: what },
        'request failed; retrying',
      );
      await options.clock.sleep(delayMs, options.signal);
    },
  });
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
