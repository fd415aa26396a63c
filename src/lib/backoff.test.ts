// The one retry-timing policy: full jitter under an exponential ceiling, and Retry-After clamped by one cap.
import { describe, expect, it } from 'vitest';
import {
  type Backoff,
  backoffCeilingMs,
  clampRetryAfterMs,
  fullJitterMs,
  honourRetryAfter,
  MAX_RETRY_AFTER_MS,
} from './backoff.js';

const MINUTE = 60_000;

describe('fullJitterMs', () => {
  const backoff: Backoff = { baseMs: 15_000, maxMs: 300_000 };
  it.each([
    // attempt, random, expected ms: uniform in [0, min(max, base × 2^(attempt-1))].
    [1, 0, 0],
    [1, 0.5, 7_500],
    [1, 0.999_999, 15_000],
    [2, 0.5, 15_000],
    [3, 0.5, 30_000],
    [5, 0.999_999, 240_000],
    [6, 0.999_999, 300_000],
    [6, 0.5, 150_000],
    [40, 0.999_999, 300_000],
    [0, 0.5, 7_500],
    [-3, 0.5, 7_500],
  ])('attempt %i with random %d → %i ms', (attempt, random, expected) => {
    expect(fullJitterMs(backoff, attempt, () => random)).toBe(expected);
  });

  it('never exceeds the ceiling nor goes below zero, for any attempt, even absurd ones', () => {
    for (const attempt of [1, 2, 10, 31, 64, 65, 1024, Number.MAX_SAFE_INTEGER]) {
      const ceiling = backoffCeilingMs(backoff, attempt);
      expect(ceiling).toBeLessThanOrEqual(backoff.maxMs);
      for (const random of [0, 0.25, 0.75, 0.999_999]) {
        const delay = fullJitterMs(backoff, attempt, () => random);
        expect(Number.isFinite(delay)).toBe(true);
        expect(delay).toBeGreaterThanOrEqual(0);
        expect(delay).toBeLessThanOrEqual(ceiling);
      }
    }
  });

  it('a zero base stays zero (no NaN from 0 × a huge power of two)', () => {
    expect(fullJitterMs({ baseMs: 0, maxMs: 1000 }, 5000, () => 0.9)).toBe(0);
  });
});

describe('backoffCeilingMs', () => {
  it('doubles from the base per attempt and stops at the maximum', () => {
    const ceilings = [1, 2, 3, 4, 5, 6].map((attempt) =>
      backoffCeilingMs({ baseMs: 60_000, maxMs: 15 * MINUTE }, attempt),
    );
    expect(ceilings).toEqual([60_000, 120_000, 240_000, 480_000, 900_000, 900_000]);
  });
});

describe('Retry-After', () => {
  it('is clamped to [0, 30 min], the one cap every retry site uses', () => {
    expect(MAX_RETRY_AFTER_MS).toBe(30 * MINUTE);
    expect(clampRetryAfterMs(undefined)).toBeUndefined();
    expect(clampRetryAfterMs(Number.NaN)).toBeUndefined();
    expect(clampRetryAfterMs(-5)).toBe(0);
    expect(clampRetryAfterMs(7_000)).toBe(7_000);
    expect(clampRetryAfterMs(10 * 60 * MINUTE)).toBe(MAX_RETRY_AFTER_MS);
    expect(clampRetryAfterMs(Number.POSITIVE_INFINITY)).toBe(MAX_RETRY_AFTER_MS);
  });

  it('lengthens a shorter backoff, never shortens a longer one', () => {
    expect(honourRetryAfter(1_000, undefined)).toBe(1_000);
    expect(honourRetryAfter(1_000, 3_000)).toBe(3_000);
    expect(honourRetryAfter(8_000, 3_000)).toBe(8_000);
    expect(honourRetryAfter(1_000, 24 * 60 * MINUTE)).toBe(MAX_RETRY_AFTER_MS);
    expect(honourRetryAfter(1_000, -1)).toBe(1_000);
  });
});
