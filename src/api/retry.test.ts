// withRequestRetry: which errors are retried, how long it sleeps between tries, and when it hands the error up.
import { describe, expect, it } from 'vitest';
import { MAX_RETRY_AFTER_MS } from '../lib/backoff.js';
import type { Clock } from '../lib/clock.js';
import { silentLogger } from '../lib/logger.js';
import { HttpStatusError, InvalidResponseError, NetworkError } from './errors.js';
import { retryDelayMs, withRequestRetry } from './retry.js';

function recordingClock(): Clock & { slept: number[] } {
  const slept: number[] = [];
  return { slept, now: () => 0, monotonic: () => 0, sleep: async (ms) => void slept.push(ms) };
}

const target = { method: 'GET', route: '/v1/config_instances' };

function options(clock: Clock, retries = 2) {
  return {
    retries,
    baseDelayMs: 100,
    maxDelayMs: 1000,
    clock,
    random: () => 1,
    logger: silentLogger(),
  };
}

describe('withRequestRetry', () => {
  it('retries retryable errors, then succeeds', async () => {
    const clock = recordingClock();
    let calls = 0;
    const value = await withRequestRetry(
      'list',
      async () => {
        calls += 1;
        if (calls < 3) throw new NetworkError(target, 'ECONNRESET');
        return 'ok';
      },
      options(clock),
    );
    expect([value, calls, clock.slept]).toEqual(['ok', 3, [100, 200]]);
  });

  it('never retries a schema violation', async () => {
    const clock = recordingClock();
    let calls = 0;
    await expect(
      withRequestRetry(
        'list',
        async () => {
          calls += 1;
          throw new InvalidResponseError(target, [{ path: 'data[0].id', problem: 'expected string' }]);
        },
        options(clock),
      ),
    ).rejects.toBeInstanceOf(InvalidResponseError);
    expect(calls).toBe(1);
  });

  it('gives up after the configured retries with the last error', async () => {
    const clock = recordingClock();
    let calls = 0;
    const failing = async () => {
      calls += 1;
      throw new HttpStatusError(target, 503, undefined, undefined);
    };
    await expect(withRequestRetry('list', failing, options(clock, 1))).rejects.toMatchObject({ status: 503 });
    expect(calls).toBe(2);
  });

  it('honours Retry-After when it asks for longer than the backoff, clamped to the one cap', () => {
    const opts = { baseDelayMs: 100, maxDelayMs: 1000, random: () => 0.5 };
    expect(retryDelayMs(new HttpStatusError(target, 429, undefined, 3000), 1, opts)).toBe(3000);
    expect(retryDelayMs(new HttpStatusError(target, 429, undefined, 10), 3, opts)).toBe(200);
    expect(retryDelayMs(new HttpStatusError(target, 429, undefined, 86_400_000), 1, opts)).toBe(
      MAX_RETRY_AFTER_MS,
    );
    expect(retryDelayMs(new NetworkError(target, 'x'), 3, opts)).toBe(200);
    expect(retryDelayMs(new NetworkError(target, 'x'), 10, opts)).toBe(500);
  });

  it('waits out a Retry-After within maxDelayMs, then retries', async () => {
    const clock = recordingClock();
    let calls = 0;
    const value = await withRequestRetry(
      'report',
      async () => {
        calls += 1;
        if (calls === 1) throw new HttpStatusError(target, 429, undefined, 800);
        return 'ok';
      },
      options(clock),
    );
    expect([value, calls, clock.slept]).toEqual(['ok', 2, [800]]);
  });

  it('never retries sooner than a Retry-After asks: one longer than maxDelayMs goes up at once', async () => {
    const clock = recordingClock();
    let calls = 0;
    const failing = async () => {
      calls += 1;
      throw new HttpStatusError(target, 503, undefined, 5_000);
    };
    await expect(withRequestRetry('list', failing, options(clock))).rejects.toMatchObject({
      status: 503,
      retryAfterMs: 5_000,
    });
    expect([calls, clock.slept]).toEqual([1, []]);
  });

  it('a stop ends it: before a try, while one runs (its answer is not handed on) and while it waits', async () => {
    const reason = new Error('stopped');
    const stopped = AbortSignal.abort(reason);
    let calls = 0;
    const ok = async () => {
      calls += 1;
      return 'ok';
    };
    await expect(
      withRequestRetry('list', ok, { ...options(recordingClock()), signal: stopped }),
    ).rejects.toBe(reason);
    expect(calls).toBe(0);

    const stop = new AbortController();
    const answeredAfterStop = async () => {
      calls += 1;
      stop.abort(reason);
      return 'late';
    };
    await expect(
      withRequestRetry('list', answeredAfterStop, { ...options(recordingClock()), signal: stop.signal }),
    ).rejects.toBe(reason);
    expect(calls).toBe(1);

    const during = new AbortController();
    const sleepingClock: Clock = {
      now: () => 0,
      monotonic: () => 0,
      sleep: async (_ms, signal) => {
        during.abort(reason);
        signal?.throwIfAborted();
      },
    };
    let tries = 0;
    const failing = async () => {
      tries += 1;
      throw new NetworkError(target, 'ECONNRESET');
    };
    await expect(
      withRequestRetry('list', failing, { ...options(sleepingClock), signal: during.signal }),
    ).rejects.toBe(reason);
    expect(tries).toBe(1);
  });

  it('hands up a thrown non-error as an Error, without retrying it', async () => {
    const clock = recordingClock();
    let calls = 0;
    const throwing = async () => {
      calls += 1;
      throw 'boom';
    };
    await expect(withRequestRetry('list', throwing, options(clock))).rejects.toBeInstanceOf(TypeError);
    expect([calls, clock.slept]).toEqual([1, []]);
  });
});
