// YAML for content that is still JSON text (a large item's bytes, api/json-file.ts): one walk over the text that
// writes what yaml-text.ts writes for the parsed content, byte for byte, without building the content's tree.
import {
  BACKSLASH,
  CLOSE_ARRAY,
  CLOSE_OBJECT,
  COMMA,
  isWhitespace,
  LOWER_F,
  LOWER_N,
  LOWER_T,
  OPEN_ARRAY,
  OPEN_OBJECT,
  QUOTE,
} from '../api/json-bytes.js';
import { type MemberPlan, type MemberPlans, skipValueAt, walkMembers } from '../api/json-file.js';
import { INDENT_STEP, stringText, Utf8Chunks, writeKey, yamlNumberText } from './yaml-text.js';

/**
 * The YAML file (ending in a line break) for the content value whose JSON text is `src[start, end)`. The text
 * must have been checked by json-file.ts `checkContent`: JSON, an object, no key JSON.parse would move
 * (integer-like) or drop (`__proto__`, a repeated key), nothing nested 64 deep. What it holds at once beyond the
 * text and the output is one string or key (yaml-text.ts needs a scalar whole to choose its style); a
 * collection's block or flow style needs only its next non-blank byte (flow only when empty).
 */
export function yamlBytesFromJson(src: Buffer, start: number, end: number, plans?: MemberPlans): Buffer {
  const walk = new JsonToYaml(src, start, plans);
  walk.node('', '', '');
  if (walk.i !== end) throw new Error('content text ends elsewhere than it was checked to');
  walk.out.write('\n');
  return walk.out.bytes();
}

class JsonToYaml {
  readonly src: Buffer;
  readonly out = new Utf8Chunks();
  readonly plans: MemberPlans | undefined;
  i: number;

  constructor(src: Buffer, start: number, plans: MemberPlans | undefined) {
    this.src = src;
    this.i = start;
    this.plans = plans;
  }

  /** yaml-text.ts writeNode, for the value at `i`. */
  node(indent: string, beforeScalar: string, beforeBlock: string): void {
    this.skipWhitespace();
    const { src, out } = this;
    const code = src[this.i];
    if (code === OPEN_OBJECT || code === OPEN_ARRAY) {
      const isObject = code === OPEN_OBJECT;
      const open = this.i;
      this.i += 1;
      this.skipWhitespace();
      if (src[this.i] === (isObject ? CLOSE_OBJECT : CLOSE_ARRAY)) {
        this.i += 1;
        out.write(`${beforeScalar}${isObject ? '{}' : '[]'}`);
        return;
      }
      out.write(beforeBlock);
      if (isObject) this.mapping(indent, open);
      else this.sequence(indent);
    } else if (code === QUOTE) {
      out.write(beforeScalar + stringText(this.string(), indent, false));
    } else if (code === LOWER_T || code === LOWER_F || code === LOWER_N) {
      const word = code === LOWER_T ? 'true' : code === LOWER_F ? 'false' : 'null';
      this.i += word.length;
      out.write(beforeScalar + word);
    } else {
      out.write(beforeScalar + yamlNumberText(this.number()));
    }
  }

  /**
   * yaml-text.ts writeMapping, after the `{` (at `open`) of a non-empty object: its members in the parse's order
   * (json-file.ts MemberPlan: array-index keys first, a repeated key in its first place with its last value).
   */
  mapping(indent: string, open: number): void {
    const plan = this.plans?.get(open);
    walkMembers(
      this,
      plan,
      (at, written) => this.member(at, plan, indent, written),
      () => this.afterMember(CLOSE_OBJECT),
    );
  }

  /** The member whose key is at `at` (with its last value if repeated); leaves `i` after its own value. */
  member(at: number, plan: MemberPlan | undefined, indent: string, written: number): void {
    this.i = at;
    const key = this.string();
    this.skipWhitespace();
    this.i += 1; // the colon
    if (written > 0) this.out.write(`\n${indent}`);
    const last = plan?.lastValue.get(at);
    const beforeBlock = writeKey(this.out, key, indent);
    if (last === undefined) {
      this.node(indent + INDENT_STEP, ' ', beforeBlock);
    } else {
      const own = this.i;
      this.i = last;
      this.node(indent + INDENT_STEP, ' ', beforeBlock);
      this.i = skipValueAt(this.src, own);
    }
  }

  /** yaml-text.ts writeSequence, after the `[` of a non-empty array. */
  sequence(indent: string): void {
    const inner = indent + INDENT_STEP;
    for (let first = true; ; first = false) {
      this.out.write(first ? '- ' : `\n${indent}- `);
      this.node(inner, '', '');
      if (this.afterMember(CLOSE_ARRAY)) return;
    }
  }

  /** Past the comma (false) or the closing bracket (true) after a member. */
  afterMember(close: number): boolean {
    this.skipWhitespace();
    const code = this.src[this.i];
    this.i += 1;
    if (code === COMMA) return false;
    if (code === close) return true;
    throw new Error(`unchecked content text at byte ${this.i - 1}`);
  }

  /** The string at `i`, as JSON.parse reads it (lone surrogates kept). */
  string(): string {
    const { src } = this;
    const open = this.i;
    let at = open + 1;
    let escaped = false;
    for (let code = src[at]; code !== QUOTE; code = src[at]) {
      if (code === undefined) throw new Error(`unchecked content text at byte ${open}`);
      if (code === BACKSLASH) {
        escaped = true;
        at += 2;
      } else {
        at += 1;
      }
    }
    this.i = at + 1;
    return escaped
      ? (JSON.parse(src.toString('utf8', open, at + 1)) as string)
      : src.toString('utf8', open + 1, at);
  }

  /** The number's text at `i`, as sent: a parse keeps each number's text (json.ts parseNumber). */
  number(): string {
    const { src } = this;
    const start = this.i;
    let at = start;
    for (let code = src[at]; code !== undefined; code = src[at]) {
      if (code === COMMA || code === CLOSE_ARRAY || code === CLOSE_OBJECT || isWhitespace(code)) break;
      at += 1;
    }
    this.i = at;
    return src.toString('latin1', start, at);
  }

  skipWhitespace(): void {
    const { src } = this;
    while (isWhitespace(src[this.i])) this.i += 1;
  }
}
