// The head of a report's answer over server.maxResponseBytes, read by a bounded scan that holds none of its content.
import {
  BACKSLASH,
  CLOSE_ARRAY,
  CLOSE_OBJECT,
  COLON,
  COMMA,
  isWhitespace,
  OPEN_ARRAY,
  OPEN_OBJECT,
  QUOTE,
  UTF8_BOM,
} from './json-bytes.js';

/**
 * Bytes of a top-level key or string value kept as sent; a longer one is no field the agent reads (the longest,
 * an id, has at most 512 characters: 3,072 bytes written as `\uXXXX` escapes).
 */
export const TOKEN_MAX_BYTES = 4096;
/** The skeleton's own bound: a body of a million short top-level fields still costs no more than this. */
const SKELETON_MAX_BYTES = 64 * 1024;

/**
 * How many bytes of an answer over the cap are scanned for its head, at most: twice the cap (what the operator
 * accepted one response to cost, once more), so an answer whose `updated_at` follows a content up to the cap's
 * size is still read, and a larger one costs a bounded transfer. The dispatcher's own limit (undici's
 * maxResponseSize, per connection pool) is set to this: every other body is cut at the cap by the client itself.
 */
export function answerScanLimit(maxResponseBytes: number): number {
  return 2 * maxResponseBytes;
}

/**
 * Reads a JSON object's bytes as they arrive and keeps only its skeleton: each top-level key and each short
 * top-level string value as sent (escapes and all), every other value (a nested object or array, a number, a
 * literal, a string over TOKEN_MAX_BYTES) as `0`, a key over that bound as `""`. `peekStrings` reads the same
 * strings of the skeleton as of the whole text (its own keys only, each given once), so the answer's id,
 * statuses and `updated_at` are found wherever they come, while the content's bytes are counted and dropped.
 * Memory: the skeleton (at most SKELETON_MAX_BYTES) and one token.
 */
export class AnswerScanner {
  #depth = 0;
  #inString = false;
  #escaped = false;
  /** The top-level string being read: its bytes, or undefined past TOKEN_MAX_BYTES or below the top level. */
  #token: number[] | undefined;
  #tokenIsKey = false;
  #expectKey = false;
  /** A top-level number or literal is being read (already written as `0`). */
  #inScalar = false;
  #skeleton: Buffer[] = [];
  #skeletonBytes = 0;
  #done = false;
  #broken = false;
  /** Bytes read before the object opened, and how many of them were a leading byte order mark's. */
  #leading = 0;
  #bomBytes = 0;

  /** The object ended (or the bytes are not one): nothing more to read. */
  get finished(): boolean {
    return this.#done || this.#broken;
  }

  /** The skeleton so far: a prefix of it when the object never ended within the bytes fed. */
  skeleton(): Buffer {
    return Buffer.concat(this.#skeleton, this.#skeletonBytes);
  }

  #emit(bytes: Buffer | string): void {
    const buffer = typeof bytes === 'string' ? Buffer.from(bytes, 'latin1') : bytes;
    if (this.#skeletonBytes + buffer.length > SKELETON_MAX_BYTES) {
      // The fields past it are read as a cut-short text is: the skeleton ends here.
      this.#broken = true;
      return;
    }
    this.#skeleton.push(buffer);
    this.#skeletonBytes += buffer.length;
  }

  feed(chunk: Uint8Array): void {
    const length = chunk.length;
    let i = 0;
    while (i < length && !this.#done && !this.#broken) {
      if (this.#depth > 1) {
        i = this.#skipNested(chunk, i);
        continue;
      }
      const byte = chunk[i]!;
      i++;
      if (this.#inString) {
        this.#stringByte(byte);
        continue;
      }
      if (this.#depth === 0) {
        const at = this.#leading++;
        // RFC 8259 §8.1: a byte order mark at the very start is ignored, as the client ignores it (withoutBom).
        if (at === this.#bomBytes && at < UTF8_BOM.length && byte === UTF8_BOM[at]) {
          this.#bomBytes++;
          continue;
        }
        if (isWhitespace(byte) && this.#bomBytes !== 1 && this.#bomBytes !== 2) continue;
        if (byte !== OPEN_OBJECT || this.#bomBytes === 1 || this.#bomBytes === 2) {
          this.#broken = true;
          return;
        }
        this.#depth = 1;
        this.#expectKey = true;
        this.#emit('{');
        continue;
      }
      // The top level: the answer's own keys and values.
      if (byte === QUOTE) {
        this.#inScalar = false;
        this.#inString = true;
        this.#token = [];
        this.#tokenIsKey = this.#expectKey;
      } else if (byte === OPEN_OBJECT || byte === OPEN_ARRAY) {
        this.#inScalar = false;
        this.#emit('0');
        this.#depth = 2;
      } else if (byte === CLOSE_OBJECT) {
        this.#emit('}');
        this.#done = true;
      } else if (byte === CLOSE_ARRAY) {
        this.#broken = true;
      } else if (byte === COMMA) {
        this.#inScalar = false;
        this.#expectKey = true;
        this.#emit(',');
      } else if (byte === COLON) {
        this.#inScalar = false;
        this.#expectKey = false;
        this.#emit(':');
      } else if (isWhitespace(byte)) {
        this.#inScalar = false;
      } else if (!this.#inScalar) {
        this.#inScalar = true;
        this.#emit('0');
      }
    }
  }

  /**
   * Inside a nested value (depth > 1: the content), with the state in locals: only strings (their quotes and
   * escapes) and brackets count, and a string's bytes are skipped to its next quote or backslash. Returns where
   * it stopped: the chunk's end, or the byte after the value that brought the scan back to the top level.
   */
  #skipNested(chunk: Uint8Array, from: number): number {
    const length = chunk.length;
    let depth = this.#depth;
    let inString = this.#inString;
    let escaped = this.#escaped;
    let i = from;
    // The next backslash and quote at or after i (length: none in the chunk), each looked up again only once
    // passed: a chunk is searched for each about once, however many strings and escapes it holds.
    let backslash = -1;
    let quote = -1;
    while (i < length) {
      if (inString) {
        if (escaped) {
          escaped = false;
          i++;
          continue;
        }
        if (backslash < i) {
          backslash = chunk.indexOf(BACKSLASH, i);
          if (backslash === -1) backslash = length;
        }
        if (quote < i) {
          quote = chunk.indexOf(QUOTE, i);
          if (quote === -1) quote = length;
        }
        const next = Math.min(quote, backslash);
        if (next === length) {
          i = length;
          break;
        }
        i = next + 1;
        if (next === backslash) escaped = true;
        else inString = false;
        continue;
      }
      const byte = chunk[i++]!;
      if (byte === QUOTE) inString = true;
      else if (byte === OPEN_OBJECT || byte === OPEN_ARRAY) depth++;
      else if ((byte === CLOSE_OBJECT || byte === CLOSE_ARRAY) && --depth === 1) break;
    }
    this.#depth = depth;
    this.#inString = inString;
    this.#escaped = escaped;
    return i;
  }

  /** One byte of a top-level string. */
  #stringByte(byte: number): void {
    if (this.#escaped) {
      this.#escaped = false;
    } else if (byte === BACKSLASH) {
      this.#escaped = true;
    } else if (byte === QUOTE) {
      this.#inString = false;
      this.#endToken();
      return;
    }
    const token = this.#token;
    if (token === undefined) return;
    if (token.length < TOKEN_MAX_BYTES) token.push(byte);
    else this.#token = undefined;
  }

  #endToken(): void {
    const token = this.#token;
    this.#token = undefined;
    if (token !== undefined) {
      this.#emit('"');
      this.#emit(Buffer.from(token));
      this.#emit('"');
    } else {
      this.#emit(this.#tokenIsKey ? '""' : '0');
    }
  }
}
