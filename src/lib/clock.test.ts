// The system clock's sleep: a delay past setTimeout's limit (2^31 - 1 ms, about 24.8 days) must not fire at once.
import { describe, expect, it } from 'vitest';
import { MAX_TIMER_MS, systemClock } from './clock.js';

describe('systemClock.sleep', () => {
  // Node fires a timer of more than 2^31 - 1 ms after 1 ms (a TimeoutOverflowWarning): a wait computed as
  // "days" from a service's answer or a corrupt record would turn into a busy loop.
  it.each([MAX_TIMER_MS + 1, 2 ** 40, 1e308, Number.POSITIVE_INFINITY])(
    'a delay of %d ms is still waiting when an abort 50 ms later ends it',
    async (ms) => {
      const abort = new AbortController();
      const timer = setTimeout(() => abort.abort(new Error('aborted')), 50);
      const outcome = await systemClock.sleep(ms, abort.signal).then(
        () => 'resolved',
        () => 'aborted',
      );
      clearTimeout(timer);
      expect(outcome).toBe('aborted');
    },
  );

  it('a short delay, zero, a negative one and NaN resolve', async () => {
    for (const ms of [1, 0, -5, Number.NaN]) await systemClock.sleep(ms);
  });
});
