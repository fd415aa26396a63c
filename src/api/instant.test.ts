// The service's timestamps compared as instants: spellings of one instant are equal, digits past the millisecond count.
import { describe, expect, it } from 'vitest';
import { compareInstants, newestFirst, sameInstant } from './instant.js';

describe('compareInstants', () => {
  it.each<[string, string, number | undefined]>([
    ['2026-01-01T00:00:00Z', '2026-01-01T00:00:00Z', 0],
    ['2026-01-01T00:00:00Z', '2026-01-01T00:00:00+00:00', 0],
    ['2026-01-01T00:00:00.000Z', '2026-01-01T00:00:00Z', 0],
    ['2026-01-01T00:00:00.120Z', '2026-01-01T00:00:00.12+00:00', 0],
    ['2026-01-01T01:00:00+01:00', '2026-01-01T00:00:00Z', 0],
    ['2026-01-01T00:00:00.123456000Z', '2026-01-01T00:00:00.123456Z', 0],
    // Past the millisecond: Date.parse gives both the same number.
    ['2026-01-01T00:00:00.123457Z', '2026-01-01T00:00:00.123456Z', 1],
    ['2026-01-01T00:00:00.1234561Z', '2026-01-01T00:00:00.123457Z', -1],
    ['2026-01-01T00:00:00.000000000001Z', '2026-01-01T00:00:00Z', 1],
    // As text `.5Z` sorts before `Z` (`.` < `Z`), and `+01:00` after `Z` whatever the instants.
    ['2026-01-01T00:00:00.5Z', '2026-01-01T00:00:00Z', 1],
    ['2026-01-01T00:30:00+01:00', '2026-01-01T00:00:00Z', -1],
    ['2026-01-02T00:00:00Z', '2026-01-01T23:59:59.999999Z', 1],
    ['not a time', '2026-01-01T00:00:00Z', undefined],
  ])('%s against %s: %s', (a, b, expected) => {
    expect(compareInstants(a, b)).toBe(expected);
    expect(compareInstants(b, a)).toBe(expected === undefined ? undefined : expected === 0 ? 0 : -expected);
    expect(sameInstant(a, b)).toBe(expected === 0);
  });

  it('a text is its own instant even when it is none', () => {
    expect(sameInstant('x', 'x')).toBe(true);
    expect(compareInstants('x', 'y')).toBeUndefined();
  });

  it('newestFirst sorts the later instant first and never returns NaN', () => {
    const times = ['2026-01-01T00:00:00.000001Z', '2026-01-01T00:00:00.000002+00:00', '2026-01-01T00:00:00Z'];
    expect([...times].sort(newestFirst)).toEqual([
      '2026-01-01T00:00:00.000002+00:00',
      '2026-01-01T00:00:00.000001Z',
      '2026-01-01T00:00:00Z',
    ]);
    expect(newestFirst('garbage', '2026-01-01T00:00:00Z')).toBe(0);
  });
});
