// Timestamps from the service compared as the instants they name: one instant written two ways is equal
// (`Z` or `+00:00`, `.000` or none), and digits past the millisecond, which Date.parse drops, still count.

/** A calendar date `YYYY-MM-DD` that exists (zod's own date pattern: months' lengths, leap years). */
const DATE_SOURCE =
  '(?:(?:\\d\\d[2468][048]|\\d\\d[13579][26]|\\d\\d0[48]|[02468][048]00|[13579][26]00)-02-29|\\d{4}-(?:(?:0[13578]|1[02])-(?:0[1-9]|[12]\\d|3[01])|(?:0[469]|11)-(?:0[1-9]|[12]\\d|30)|(?:02)-(?:0[1-9]|1\\d|2[0-8])))';

/**
 * A date-time as the interface promises it ("date-time format (ISO 8601)") and as services write it: the date,
 * `T` (`t` or a space, which RFC 3339 allows), hours and minutes, seconds (`60`: a leap second) with any fraction,
 * then `Z` (`z`), an offset `±hh:mm`, `±hhmm` or `±hh` (PostgreSQL's `+00`), or none (Python's `isoformat()` of a
 * naive time, Java's `LocalDateTime`: read as UTC). Groups: date, hours, minutes, seconds, fraction, offset.
 */
export const ISO_DATE_TIME = new RegExp(
  `^(${DATE_SOURCE})[Tt ]([01]\\d|2[0-3]):([0-5]\\d)(?::([0-5]\\d|60)(?:\\.(\\d+))?)?([Zz]|[+-](?:[01]\\d|2[0-3])(?::?[0-5]\\d)?)?$`,
);

/** 400 Gregorian years, in ms: a whole number of weeks, so a date 400 years on is the same day of the cycle. */
const FOUR_CENTURIES_MS = 146_097 * 86_400_000;

/** The instant `text` names, in ms (UTC), and its fraction's digits after the millisecond; undefined when none. */
function instantOf(text: string): { ms: number; finer: string } | undefined {
  const match = ISO_DATE_TIME.exec(text);
  if (match === null) return undefined;
  const [, date = '', hours = '0', minutes = '0', seconds = '0', fraction = '', offset = 'Z'] = match;
  const year = Number(date.slice(0, 4));
  // Date.UTC reads years 0-99 as 1900-1999: counted 400 years on and taken back.
  const ms =
    Date.UTC(
      year + 400,
      Number(date.slice(5, 7)) - 1,
      Number(date.slice(8, 10)),
      Number(hours),
      Number(minutes),
      Number(seconds),
      Number(fraction.slice(0, 3).padEnd(3, '0')),
    ) -
    FOUR_CENTURIES_MS -
    offsetMs(offset);
  return { ms, finer: fraction.slice(3).replace(/0+$/, '') };
}

/** `Z`, `±hh`, `±hhmm` or `±hh:mm` in ms east of UTC. */
function offsetMs(offset: string): number {
  if (offset === 'Z' || offset === 'z') return 0;
  const digits = offset.slice(1).replace(':', '');
  const ms = (Number(digits.slice(0, 2)) * 60 + Number(digits.slice(2, 4) || '0')) * 60_000;
  return offset.startsWith('-') ? -ms : ms;
}

/**
 * Positive when `a` is the later instant, negative when `b` is, 0 when they are the same instant; undefined
 * when either is not a date-time (the schema lets none through, so only a caller's own data can be).
 */
export function compareInstants(a: string, b: string): number | undefined {
  if (a === b) return 0;
  const at = instantOf(a);
  const bt = instantOf(b);
  if (at === undefined || bt === undefined) return undefined;
  const ms = at.ms - bt.ms;
  if (ms !== 0) return Math.sign(ms);
  const width = Math.max(at.finer.length, bt.finer.length);
  // Digit strings of one length order as the numbers they spell.
  const paddedA = at.finer.padEnd(width, '0');
  const paddedB = bt.finer.padEnd(width, '0');
  return paddedA === paddedB ? 0 : paddedA > paddedB ? 1 : -1;
}

/** Whether `a` and `b` name the same instant; two texts that are not date-times are the same only as text. */
export function sameInstant(a: string, b: string): boolean {
  return compareInstants(a, b) === 0;
}

/**
 * A text whose order as a string is the order of the instants (`compareInstants`): a fixed-width count of ms, then
 * the digits past the ms. For a sort by a timestamp (the mock's lists); a text that is no date-time sorts last.
 */
export function instantSortKey(text: string): string {
  const instant = instantOf(text);
  if (instant === undefined) return `~${text}`;
  // Years 0000-9999 lie within ±3e14 ms of 1970: shifted by 1e15, a positive number of at most 16 digits.
  return `${String(instant.ms + 1e15).padStart(16, '0')}.${instant.finer}`;
}

/** Newest first for a sort: an unreadable time sorts as equal, so a comparator never returns NaN. */
export function newestFirst(a: string, b: string): number {
  return compareInstants(b, a) ?? 0;
}
