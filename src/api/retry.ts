// The one retry layer for a service request: retryable errors only, full jitter, Retry-After honoured.
import pRetry from 'p-retry';
import type { Clock } from '../lib/clock.js';
import type { Logger } from '../lib/logger.js';
import { HttpStatusError, isRetryableError } from './errors.js';

export interface RequestRetryOptions {
  /** Retries after the first try; 0 disables this layer (the daemon's poll loop is then the retry layer). */
  retries: number;
  baseDelayMs: number;
  maxDelayMs: number;
  /** Upper bound on a server's Retry-After, so a hostile or buggy value cannot park the agent. */
  maxRetryAfterMs: number;
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
  return pRetry(request, {
    retries: options.retries,
    // Delays come from onFailedAttempt, through the injected clock and randomness.
    minTimeout: 0,
    maxTimeout: 0,
    randomize: false,
    ...(options.signal === undefined ? {} : { signal: options.signal }),
    shouldRetry: ({ error }) => isRetryableError(error),
    onFailedAttempt: async ({ error, attemptNumber, retriesLeft }) => {
      if (retriesLeft <= 0 || !isRetryableError(error)) return;
      const delayMs = retryDelayMs(error, attemptNumber, options);
      options.logger.warn(
        { err: error, attempt: attemptNumber, delayMs, request: what },
        'request failed; retrying',
      );
      await options.clock.sleep(delayMs, options.signal);
    },
  });
}

/** Full-jitter exponential delay, or the server's Retry-After (clamped) when it asks for longer. */
export function retryDelayMs(
  error: unknown,
  attempt: number,
  options: Pick<RequestRetryOptions, 'baseDelayMs' | 'maxDelayMs' | 'maxRetryAfterMs' | 'random'>,
): number {
  const ceiling = Math.min(options.maxDelayMs, options.baseDelayMs * 2 ** Math.max(0, attempt - 1));
  const jittered = Math.round(options.random() * ceiling);
  if (error instanceof HttpStatusError && error.retryAfterMs !== undefined) {
    return Math.max(jittered, Math.min(error.retryAfterMs, options.maxRetryAfterMs));
  }
  return jittered;
}
