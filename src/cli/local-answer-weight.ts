// What parsing an answer from the agent's socket would build, counted on its bytes as they arrive (no tree).
import { JsonWeigher } from '../lib/json-weigher.js';

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
  readonly #weigher: JsonWeigher;

  constructor(maxTokens: number = MAX_ANSWER_TOKENS, maxDepth: number = MAX_ANSWER_DEPTH) {
    this.#weigher = new JsonWeigher({ maxTokens, maxDepth });
  }

  /** Reads the next bytes; a reason to refuse once the answer is past either bound (then read no further). */
  add(chunk: Buffer): string | undefined {
    const over = this.#weigher.add(chunk);
    if (over === undefined) return undefined;
    return over.over === 'depth'
      ? `its answer nests deeper than ${over.bound} levels: not parsed`
      : `its answer holds more than ${over.bound} values, more than any status of the agent: not parsed`;
  }
}
