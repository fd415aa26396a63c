// What JSON.parse would build of a text, counted on its bytes as they arrive and before any parse (no tree).
import {
  BACKSLASH,
  CLOSE_ARRAY,
  CLOSE_OBJECT,
  COLON,
  COMMA,
  OPEN_ARRAY,
  OPEN_OBJECT,
  QUOTE,
} from '../api/json-bytes.js';

/**
 * The bounds of a text to parse. `maxTokens`: structural tokens (`{`, `[`, `,`, `:` outside strings); JSON.parse
 * builds about one value or key per token, so this bounds its tree whatever the bytes are (32 MiB of `[],` built
 * ~900 MB, of `[[[[` ~1.4 GB: docs/performance-history.md, mem35 and weigh27). `maxDepth`: how deep it nests.
 */
export interface JsonWeight {
  readonly maxTokens: number;
  readonly maxDepth: number;
}

/** Which bound a text went past. */
export interface Overweight {
  readonly over: 'tokens' | 'depth';
  readonly bound: number;
}

/** Counts tokens and depth over a text's bytes, a chunk at a time; says which bound it went past, once it does. */
export class JsonWeigher {
  #tokens = 0;
  #depth = 0;
  #inString = false;
  #escaped = false;

  constructor(private readonly weight: JsonWeight) {}

  /** Reads the next bytes; the bound passed once the text is past one (then read no further), else undefined. */
  add(chunk: Uint8Array): Overweight | undefined {
    const { maxTokens, maxDepth } = this.weight;
    const length = chunk.length;
    let tokens = this.#tokens;
    let depth = this.#depth;
    let inString = this.#inString;
    let escaped = this.#escaped;
    let i = 0;
    while (i < length) {
      if (inString) {
        // Most bytes of a real file are inside strings (paths, ids, digests): skipped by a native search for the
        // next `"`, which ends the string unless an odd run of `\` stands before it. `"` and `\` never occur
        // inside a UTF-8 sequence of several bytes.
        if (escaped) {
          escaped = false;
          i++;
          continue;
        }
        const quote = chunk.indexOf(QUOTE, i);
        const end = quote === -1 ? length : quote;
        let run = 0;
        for (let j = end - 1; j >= i && chunk[j] === BACKSLASH; j--) run++;
        if (quote === -1) {
          escaped = run % 2 === 1;
          break;
        }
        i = quote + 1;
        if (run % 2 === 0) inString = false;
        continue;
      }
      const byte = chunk[i++];
      if (byte === QUOTE) inString = true;
      else if (byte === OPEN_OBJECT || byte === OPEN_ARRAY) {
        tokens++;
        if (++depth > maxDepth) return { over: 'depth', bound: maxDepth };
      } else if (byte === CLOSE_OBJECT || byte === CLOSE_ARRAY) depth--;
      else if (byte === COMMA || byte === COLON) tokens++;
      else continue;
      if (tokens > maxTokens) return { over: 'tokens', bound: maxTokens };
    }
    this.#tokens = tokens;
    this.#depth = depth;
    this.#inString = inString;
    this.#escaped = escaped;
    return undefined;
  }
}
