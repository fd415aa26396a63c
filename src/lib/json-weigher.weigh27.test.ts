// JsonWeigher against a byte-at-a-time count (mem35's): the same verdict on any bytes cut anywhere into chunks.
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { JsonWeigher, type Overweight } from './json-weigher.js';

/** The plain count: every byte in order, strings and escapes tracked a byte at a time. */
function reference(bytes: Uint8Array, maxTokens: number, maxDepth: number): Overweight | undefined {
  let tokens = 0;
  let depth = 0;
  let inString = false;
  let escaped = false;
  for (const byte of bytes) {
    if (inString) {
      if (escaped) escaped = false;
      else if (byte === 0x5c) escaped = true;
      else if (byte === 0x22) inString = false;
      continue;
    }
    if (byte === 0x22) inString = true;
    else if (byte === 0x7b || byte === 0x5b) {
      tokens++;
      if (++depth > maxDepth) return { over: 'depth', bound: maxDepth };
    } else if (byte === 0x7d || byte === 0x5d) depth--;
    else if (byte === 0x2c || byte === 0x3a) tokens++;
    else continue;
    if (tokens > maxTokens) return { over: 'tokens', bound: maxTokens };
  }
  return undefined;
}

function weighed(
  bytes: Uint8Array,
  cuts: number[],
  maxTokens: number,
  maxDepth: number,
): Overweight | undefined {
  const weigher = new JsonWeigher({ maxTokens, maxDepth });
  const ends = [...new Set(cuts.map((cut) => cut % (bytes.length + 1)))].sort((a, b) => a - b);
  let start = 0;
  for (const end of [...ends, bytes.length]) {
    const over = weigher.add(Buffer.from(bytes.subarray(start, Math.max(start, end))));
    if (over !== undefined) return over;
    start = Math.max(start, end);
  }
  return undefined;
}

// Bytes that matter (quotes, runs of backslashes, every structural byte) and a two-byte UTF-8 character.
const PIECES = ['{', '}', '[', ']', ',', ':', '"', '\\', '\\\\', 'a', 'é', ' '];

describe('JsonWeigher', () => {
  it('gives the byte-at-a-time verdict on any text, however it is cut into chunks', () => {
    fc.assert(
      fc.property(
        fc.array(fc.constantFrom(...PIECES), { maxLength: 200 }),
        fc.array(fc.nat(), { maxLength: 8 }),
        fc.integer({ min: 0, max: 60 }),
        fc.integer({ min: 0, max: 6 }),
        (pieces, cuts, maxTokens, maxDepth) => {
          const bytes = Buffer.from(pieces.join(''));
          expect(weighed(bytes, cuts, maxTokens, maxDepth)).toEqual(reference(bytes, maxTokens, maxDepth));
        },
      ),
      { numRuns: 2000 },
    );
  });

  it('reads a quote after an odd run of backslashes as inside the string, after an even run as its end', () => {
    // `"a\"[[["`: one string (the escaped quote and the brackets in it); `"a\\"[[[`: a string, then three levels.
    expect(new JsonWeigher({ maxTokens: 10, maxDepth: 2 }).add(Buffer.from('"a\\"[[["'))).toBeUndefined();
    expect(new JsonWeigher({ maxTokens: 10, maxDepth: 2 }).add(Buffer.from('"a\\\\"[[['))).toEqual({
      over: 'depth',
      bound: 2,
    });
    // The same, a backslash ending one chunk and the quote beginning the next.
    const split = new JsonWeigher({ maxTokens: 10, maxDepth: 2 });
    expect(split.add(Buffer.from('"a\\'))).toBeUndefined();
    expect(split.add(Buffer.from('"[[["'))).toBeUndefined();
  });
});
