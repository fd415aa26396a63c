// The service's timestamps in every ISO 8601 form services write (no offset, `+0000`, `+00`, `t`/`z`, a space): read as the instants they name (adv33).
import { describe, expect, it } from 'vitest';
import { compareInstants } from './instant.js';
import { Timestamp } from './schemas.js';

describe('timestamps a service writes otherwise than RFC 3339 strictly (adv33)', () => {
  it.each<[string, string, number]>([
    // Python's isoformat() of a naive time, Java's LocalDateTime: no offset, read as UTC.
    ['2026-01-01T00:00:00.123456', '2026-01-01T00:00:00.123456Z', 0],
    ['2026-01-01T00:00:00', '2026-01-01T00:00:01Z', -1],
    // PostgreSQL's text: a space and an offset of hours alone.
    ['2026-01-01 01:00:00.5+01', '2026-01-01T00:00:00.5Z', 0],
    ['2026-01-01T01:00:00+0100', '2026-01-01T00:00:00Z', 0],
    ['2026-01-01T00:00:00-0230', '2026-01-01T02:30:00Z', 0],
    ['2026-01-01t00:00:00z', '2026-01-01T00:00:00Z', 0],
    // Minutes alone, a leap second.
    ['2026-01-01T00:00Z', '2026-01-01T00:00:00Z', 0],
    ['2026-12-31T23:59:60Z', '2026-12-31T23:59:59.999Z', 1],
    // Years before 100: not read as the 1900s.
    ['0050-01-01T00:00:00Z', '1950-01-01T00:00:00Z', -1],
    ['0001-01-01T00:00:00Z', '0000-12-31T23:59:59Z', 1],
  ])('%s against %s: %s', (a, b, expected) => {
    expect(Timestamp.safeParse(a).success).toBe(true);
    expect(compareInstants(a, b)).toBe(expected);
    expect(compareInstants(b, a)).toBe(expected === 0 ? 0 : -expected);
  });

  it.each([
    '2026-13-01T00:00:00Z',
    '2026-02-29T00:00:00Z',
    '2026-01-01T24:00:00Z',
    '2026-01-01T00:00:00+24:00',
    '2026-01-01',
    '2026-01-01T00',
    '20260101T000000Z',
    'yesterday',
    '2026-01-01T00:00:00Z ',
  ])('%s is still no date-time', (text) => {
    expect(Timestamp.safeParse(text).success).toBe(false);
    expect(compareInstants(text, '2026-01-01T00:00:00Z')).toBeUndefined();
  });
});
