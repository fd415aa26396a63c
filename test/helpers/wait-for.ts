// Bounded polling of the world for integration tests: wait until a probe holds, or fail naming what was awaited.
import { setTimeout as delay } from 'node:timers/promises';

/**
 * How long a test waits for something that should happen before it fails: generous, so a 2-core machine busy
 * with other work still passes. A deadline is never a promise about speed; the timing policy is pinned by
 * fake-clock unit tests. Where a wait must also tell right from wrong behaviour, wrong must take far longer.
 */
export const PATIENCE_MS = 30_000;

export interface WaitForOptions {
  /** Time between probes. Default 50 ms. */
  intervalMs?: number;
  /** What is awaited, for the timeout message. */
  what?: string;
}

/**
 * Calls `probe` until it returns a truthy value (which is returned) or `timeoutMs` has passed (which throws).
 * A probe that throws counts as "not yet": files appear, sockets start listening, JSON gets written.
 */
export async function waitFor<T>(
  probe: () => T | Promise<T>,
  timeoutMs: number,
  options: WaitForOptions = {},
): Promise<NonNullable<T>> {
  const intervalMs = options.intervalMs ?? 50;
  const deadline = performance.now() + timeoutMs;
  let lastError: unknown;
  for (;;) {
    try {
      const value = await probe();
      if (value) return value as NonNullable<T>;
      lastError = undefined;
    } catch (error) {
      lastError = error;
    }
    if (performance.now() >= deadline) {
      const why = lastError === undefined ? '' : ` (last probe threw: ${String(lastError)})`;
      throw new Error(`waitFor: ${options.what ?? 'condition'} not met within ${timeoutMs} ms${why}`);
    }
    await delay(Math.min(intervalMs, Math.max(1, deadline - performance.now())));
  }
}

/** Resolves after `ms`: for windows a test measures over, never to "let things settle". */
export function sleep(ms: number): Promise<void> {
  return delay(ms).then(() => undefined);
}
