// What parsing an answer from the agent's socket would build, counted on its bytes as they arrive (no tree).
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
 * Items the agent's status can list: its listing of instances is refused past 100,000 (ITERATOR_MAX_ITEMS,
 * src/api/client.ts), and each instance has at most one managed file and one error.
 */
const MAX_LISTED = 2 * 100_000;
/**
 * Structural tokens (`{`, `[`, `,`, `:` outside strings) a status of the agent can hold: a managed file's or an
 * error's entry is one object of at most five members (five `:`, four `,` inside and one between entries: 11),
 * and the rest of the status is a few dozen. JSON.parse builds about one value or key per token, so this bounds
 * the tree whatever the bytes are: 2.2 million tokens of `[],` cost ~120 MB of tree, about what a real status
 * of the byte cap costs (measured: docs/performance-history.md, "Memory, mem35").
 */
export const MAX_ANSWER_TOKENS = 11 * MAX_LISTED + 256;
/** How deep a status nests: its object, managedFiles, an entry (3); a few levels of room for a newer agent. */
export const MAX_ANSWER_DEPTH = 8;

/** Why an answer would cost more to parse than any answer of the agent can, or undefined while it would not. */
export class AnswerWeigher {
  #tokens = 0;
  #depth = 0;
  #inString = false;
  #escaped = false;

  constructor(
    private readonly maxTokens: number = MAX_ANSWER_TOKENS,
    private readonly maxDepth: number = MAX_ANSWER_DEPTH,
  ) {}

  /** Reads the next bytes; a reason to refuse once the answer is past either bound (then read no further). */
  add(chunk: Buffer): string | undefined {
    let tokens = this.#tokens;
    let depth = this.#depth;
    let inString = this.#inString;
    let escaped = this.#escaped;
    // `"` and `\` never occur inside a UTF-8 sequence of several bytes: a byte at a time reads strings right.
    for (let i = 0; i < chunk.length; i++) {
      const byte = chunk[i];
      if (inString) {
        if (escaped) escaped = false;
        else if (byte === BACKSLASH) escaped = true;
        else if (byte === QUOTE) inString = false;
        continue;
      }
      if (byte === QUOTE) inString = true;
      else if (byte === OPEN_OBJECT || byte === OPEN_ARRAY) {
        tokens++;
        if (++depth > this.maxDepth)
          return `its answer nests deeper than ${this.maxDepth} levels: not parsed`;
      } else if (byte === CLOSE_OBJECT || byte === CLOSE_ARRAY) depth--;
      else if (byte === COMMA || byte === COLON) tokens++;
      else continue;
      if (tokens > this.maxTokens)
        return `its answer holds more than ${this.maxTokens} values, more than any status of the agent: not parsed`;
    }
    this.#tokens = tokens;
    this.#depth = depth;
    this.#inString = inString;
    this.#escaped = escaped;
    return undefined;
  }
}
