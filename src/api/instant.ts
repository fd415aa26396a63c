// Timestamps from the service compared as the instants they name: one instant written two ways is equal
// (`Z` or `+00:00`, `.000` or none), and digits past the millisecond, which Date.parse drops, still count.

/**
 * Positive when `a` is the later instant, negative when `b` is, 0 when they are the same instant; undefined
 * when either is not a date-time (the schema lets none through, so only a caller's own data can be).
 */
export function compareInstants(a: string, b: string): number | undefined {
  if (a === b) return 0;
  const ms = Date.parse(a) - Date.parse(b);
  if (Number.isNaN(ms)) return undefined;
  if (ms !== 0) return Math.sign(ms);
  const finerA = finerThanMs(a);
  const finerB = finerThanMs(b);
  const width = Math.max(finerA.length, finerB.length);
  // Digit strings of one length order as the numbers they spell.
  const paddedA = finerA.padEnd(width, '0');
  const paddedB = finerB.padEnd(width, '0');
  return paddedA === paddedB ? 0 : paddedA > paddedB ? 1 : -1;
}

/** Whether `a` and `b` name the same instant; two texts that are not date-times are the same only as text. */
export function sameInstant(a: string, b: string): boolean {
  return compareInstants(a, b) === 0;
}

/** Newest first for a sort: an unreadable time sorts as equal, so a comparator never returns NaN. */
export function newestFirst(a: string, b: string): number {
  return compareInstants(b, a) ?? 0;
}

/** The fraction's digits after the millisecond, trailing zeros dropped (`.1234500Z` → `45`). */
function finerThanMs(text: string): string {
  // The date part has no `.`: the first one starts the seconds' fraction.
  const fraction = /\.(\d+)/.exec(text)?.[1] ?? '';
  return fraction.slice(3).replace(/0+$/, '');
}
