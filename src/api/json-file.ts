// A large item's content turned from its JSON text into the bytes of its file without a parsed tree: the very bytes
// parseJson and then serialize.ts give (JSON.stringify's layout with 2 spaces, numbers as sent, a newline).
import { SHOWN_KEY_CHARS } from '../lib/field-path.js';
import { byteStringEnd, JsonTextError, JsonTooDeepError, MAX_PARSE_DEPTH } from './json.js';
import {
  BACKSLASH,
  CLOSE_ARRAY,
  CLOSE_OBJECT,
  COLON,
  COMMA,
  DIGIT_0,
  DIGIT_1,
  DIGIT_9,
  DOT,
  isWhitespace,
  LOWER_E,
  LOWER_F,
  LOWER_N,
  LOWER_T,
  LOWER_U,
  MINUS,
  NEWLINE,
  OPEN_ARRAY,
  OPEN_OBJECT,
  PLUS,
  QUOTE,
  SLASH,
  SPACE,
  UPPER_E,
} from './json-bytes.js';
import type { ConfigContent } from './schemas.js';

/**
 * Content that arrived as text, checked (`checkContent`), and written into the bytes of its JSON file (or, by
 * serialize.ts, its YAML file) when they are first asked for: it stands in an instance's `content` from the moment its item is judged until
 * serialize.ts takes `data` as the file's bytes, and nothing else reads content in between. Until then it holds
 * the item's bytes (no copy); an instance whose file is never written (a report's answer) never writes them.
 * Not a JSON tree: it is never validated or printed.
 */
export class JsonContentFile {
  #src: Buffer | undefined;
  #checked: CheckedContent;
  #data: Buffer | undefined;

  constructor(src: Buffer, checked: CheckedContent) {
    this.#src = src;
    this.#checked = checked;
  }

  /** The bytes of the file: JSON.stringify's layout of the content with 2 spaces, numbers as sent, a newline. */
  get data(): Buffer {
    if (this.#data === undefined) {
      this.#data = writeContentFile(this.#src!, this.#checked);
      this.#src = undefined;
    }
    return this.#data;
  }

  /**
   * The bytes of its file in another format, written by `write` from the content's checked JSON text (serialize.ts:
   * a YAML path). Not kept: the instance drops its content once its file's bytes are made.
   */
  writtenAs(write: (src: Buffer, start: number, end: number, plans?: MemberPlans) => Buffer): Buffer {
    // Once written as JSON, that file is the same content's JSON text in the parse's order: it needs no plans.
    if (this.#src === undefined) return write(this.data, 0, this.data.length - 1);
    return write(this.#src, this.#checked.start, this.#checked.end, this.#checked.plans);
  }

  /** As an instance's content (its type is the tree's; serialize.ts is the one reader that tells them apart). */
  asContent(): ConfigContent {
    return this as unknown as ConfigContent;
  }
}

export function isJsonContentFile(value: unknown): value is JsonContentFile {
  return value instanceof JsonContentFile;
}

/** The same limit as schemas.ts MAX_CONTENT_DEPTH: an object or array at this depth or deeper is refused. */
const MAX_DEPTH = 64;
/** A number with more integer digits than this may be beyond a double's range: it is then checked. */
const SAFE_NUMBER_DIGITS = 300;

const HEX = '0123456789abcdef';
const TRUE = Buffer.from('true', 'latin1');
const FALSE = Buffer.from('false', 'latin1');
const NULL = Buffer.from('null', 'latin1');

/** What a short escape (`\n`) stands for, by the letter after the backslash; 0 for none. */
const SHORT_ESCAPES = new Uint8Array(128);
SHORT_ESCAPES[0x62] = 0x08; // b
SHORT_ESCAPES[0x66] = 0x0c; // f
SHORT_ESCAPES[0x6e] = 0x0a; // n
SHORT_ESCAPES[0x72] = 0x0d; // r
SHORT_ESCAPES[0x74] = 0x09; // t
/** The letter JSON.stringify escapes a control character with, if it has a short escape; 0 otherwise. */
const SHORT_ESCAPE_LETTERS = new Uint8Array(32);
SHORT_ESCAPE_LETTERS[0x08] = 0x62;
SHORT_ESCAPE_LETTERS[0x09] = 0x74;
SHORT_ESCAPE_LETTERS[0x0a] = 0x6e;
SHORT_ESCAPE_LETTERS[0x0c] = 0x66;
SHORT_ESCAPE_LETTERS[0x0d] = 0x72;

function hexValue(code: number | undefined): number {
  if (code === undefined) return -1;
  if (code >= DIGIT_0 && code <= DIGIT_9) return code - DIGIT_0;
  const lower = code | 0x20;
  return lower >= 0x61 && lower <= 0x66 ? lower - 0x61 + 10 : -1;
}

/** Thrown inside a walk for text that is not JSON; the caller then names the problem from the text. */
class NotJson extends Error {}
const NOT_JSON = new NotJson();

/** The first thing in the content that is not content, as schemas.ts locateContentProblem names it. */
class ProblemFound extends Error {
  readonly path: (string | number)[];
  readonly problem: string;
  constructor(path: (string | number)[], problem: string) {
    super(problem);
    this.path = path;
    this.problem = problem;
  }
}

/** The largest array index (2^32 - 2): a key of it or below, in canonical decimal, JSON.parse puts first. */
const MAX_ARRAY_INDEX = 4294967294;

/**
 * Where a parse puts an object's members other than in the order of its text: an array-index key (`"7"`) goes
 * first, in numeric order, and a repeated key keeps its first place with its last value. Kept only for the
 * objects that have such keys, so its size is bounded by their count.
 */
export interface MemberPlan {
  /** The key offsets (of their opening quote) of the first occurrence of each array-index key, and the index. */
  indexKeys: number[];
  indexes: number[];
  /** Key offsets of the later occurrences of a repeated key: not written. */
  later: Set<number>;
  /** Key offset of a repeated key's first occurrence → the value offset of its last occurrence. */
  lastValue: Map<number, number>;
}
/** Plans by the offset of their object's `{`. */
export type MemberPlans = Map<number, MemberPlan>;

/**
 * A walk over a content value's JSON text. `check` (no `out`): in the order of the text, checks it is JSON,
 * counts the bytes of its file as if no member moved, records the objects whose members a parse moves
 * (`plans`) and flags what might not be content (`deep`, `outOfRange`). `ordered`: in the parse's member order,
 * throws ProblemFound for the first thing that is not content (without `out`), or writes the file (with it).
 */
class Walk {
  readonly src: Buffer;
  readonly out: Buffer | undefined;
  readonly ordered: boolean;
  i: number;
  o = 0;
  plans: MemberPlans | undefined;
  /** Something nested 64 deep, a number beyond a double, content that is not an object (check walk). */
  deep = false;
  outOfRange = false;
  /** Keys of the object open at each depth, by a hash of their file bytes (check walk only). */
  readonly keyTables: KeyTable[] = [];
  /** The path to the value being walked (ordered walk): an array index, or the offset of a key (negated - 1). */
  readonly path: number[] = [];
  // The key being read: two FNV-1a hashes of its file bytes, its length, whether all digits.
  inKey = false;
  h1 = 0;
  h2 = 0;
  keyLength = 0;
  keyDigits = true;

  constructor(src: Buffer, start: number, out: Buffer | undefined, ordered: boolean, plans?: MemberPlans) {
    this.src = src;
    this.i = start;
    this.out = out;
    this.ordered = ordered;
    this.plans = plans;
  }

  /** The content value at `i` (check walk), in the order of its text; leaves `i` just after it. */
  content(): void {
    const { src } = this;
    /** Per open container: an object (true) or an array (false). */
    const kinds: boolean[] = [];
    /** Per open container: the offset of its `{`, or -1 for an array. */
    const opens: number[] = [];
    this.skipWhitespace();
    if (src[this.i] !== OPEN_OBJECT) this.deep = true;
    for (;;) {
      // A value starts at i.
      let code = src[this.i];
      if (code === OPEN_OBJECT || code === OPEN_ARRAY) {
        const isObject = code === OPEN_OBJECT;
        if (kinds.length >= MAX_DEPTH) this.deep = true;
        const open = this.i;
        this.i += 1;
        this.skipWhitespace();
        if (src[this.i] === (isObject ? CLOSE_OBJECT : CLOSE_ARRAY)) {
          this.i += 1;
          this.byte(code);
          this.byte(isObject ? CLOSE_OBJECT : CLOSE_ARRAY);
        } else {
          kinds.push(isObject);
          opens.push(isObject ? open : -1);
          this.byte(code);
          this.lineAndIndent(kinds.length);
          if (isObject) {
            this.keyTableAt(kinds.length).clear();
            this.key(kinds.length, open);
          }
          continue;
        }
      } else if (code === QUOTE) {
        this.string();
      } else if (code === MINUS || (code !== undefined && code >= DIGIT_0 && code <= DIGIT_9)) {
        this.number();
      } else if (code === LOWER_T) {
        this.literal(TRUE);
      } else if (code === LOWER_F) {
        this.literal(FALSE);
      } else if (code === LOWER_N) {
        this.literal(NULL);
      } else {
        throw NOT_JSON;
      }
      // After a value: a comma, or the end of the containers it closes.
      for (;;) {
        if (kinds.length === 0) return;
        this.skipWhitespace();
        code = src[this.i];
        const isObject = kinds[kinds.length - 1];
        if (code === COMMA) {
          this.i += 1;
          this.byte(COMMA);
          this.lineAndIndent(kinds.length);
          this.skipWhitespace();
          if (isObject) this.key(kinds.length, opens[opens.length - 1]!);
          break;
        }
        if (code !== (isObject ? CLOSE_OBJECT : CLOSE_ARRAY)) throw NOT_JSON;
        this.i += 1;
        kinds.pop();
        opens.pop();
        this.lineAndIndent(kinds.length);
        this.byte(code);
      }
      this.skipWhitespace();
    }
  }

  keyTableAt(depth: number): KeyTable {
    let table = this.keyTables[depth];
    if (table === undefined) {
      table = new KeyTable();
      this.keyTables[depth] = table;
    }
    return table;
  }

  planFor(open: number): MemberPlan {
    this.plans ??= new Map();
    let plan = this.plans.get(open);
    if (plan === undefined) {
      plan = { indexKeys: [], indexes: [], later: new Set(), lastValue: new Map() };
      this.plans.set(open, plan);
    }
    return plan;
  }

  /** A member's key at i, its colon, and whitespace up to its value; its place recorded (check walk). */
  key(depth: number, open: number): void {
    const at = this.i;
    if (this.src[at] !== QUOTE) throw NOT_JSON;
    if (this.out !== undefined) {
      // Writing text already checked: its keys were recorded then.
      this.string();
      this.skipWhitespace();
      this.i += 1;
      this.byte(COLON);
      this.byte(SPACE);
      this.skipWhitespace();
      return;
    }
    this.inKey = true;
    this.h1 = 0x811c9dc5;
    this.h2 = 0x2f2a1e3b;
    this.keyLength = 0;
    this.keyDigits = true;
    this.string();
    this.inKey = false;
    this.skipWhitespace();
    if (this.src[this.i] !== COLON) throw NOT_JSON;
    this.i += 1;
    this.byte(COLON);
    this.byte(SPACE);
    this.skipWhitespace();
    // The key's bytes in the file are `"…"`: the quotes are counted in keyLength.
    const length = this.keyLength - 2;
    const hash = this.h1 ^ Math.imul(this.h2, 0x9e3779b1);
    const keys = this.keyTableAt(depth);
    const repeated = keys.find(hash, this.src, at);
    if (repeated !== undefined) {
      const plan = this.planFor(open);
      // Both parsers keep a repeated key in its first place with its last value (lossless-json too: with its
      // onDuplicateKey json.ts gives it, it sets the new value whether or not it holds the two equal).
      plan.lastValue.set(repeated, this.i);
      plan.later.add(at);
      return;
    }
    keys.add(hash, at);
    if (this.keyDigits && length > 0 && length <= 10 && isIndexKey(this.src, at)) {
      const plan = this.planFor(open);
      plan.indexKeys.push(at);
      plan.indexes.push(Number(keyText(this.src, at)));
    }
  }

  skipWhitespace(): void {
    const { src } = this;
    while (isWhitespace(src[this.i])) this.i += 1;
  }

  lineAndIndent(depth: number): void {
    const { out } = this;
    if (out !== undefined) {
      out[this.o] = NEWLINE;
      out.fill(SPACE, this.o + 1, this.o + 1 + 2 * depth);
    }
    this.o += 1 + 2 * depth;
  }

  byte(code: number): void {
    if (this.out !== undefined) this.out[this.o] = code;
    else if (this.inKey) this.keyByte(code);
    this.o += 1;
  }

  /** One byte of the key being read, in its file form (its quotes included). */
  keyByte(code: number): void {
    const at = this.keyLength - 1;
    if (at >= 0 && code !== QUOTE) {
      if (code < DIGIT_0 || code > DIGIT_9) this.keyDigits = false;
    }
    this.keyLength += 1;
    this.h1 = Math.imul(this.h1 ^ code, 0x01000193);
    this.h2 = Math.imul(this.h2 ^ code, 0x5bd1e995) ^ (this.h2 >>> 15);
  }

  literal(word: Buffer): void {
    const { src } = this;
    for (let k = 0; k < word.length; k++) if (src[this.i + k] !== word[k]) throw NOT_JSON;
    const { out } = this;
    if (out !== undefined) for (let k = 0; k < word.length; k++) out[this.o + k] = word[k]!;
    this.i += word.length;
    this.o += word.length;
  }

  /** A number, written as sent: the usual path keeps every number's text (json.ts parseNumber). */
  number(): void {
    const { src, out } = this;
    const start = this.i;
    let at = start;
    if (src[at] === MINUS) at += 1;
    const code = src[at];
    if (code === DIGIT_0) at += 1;
    else if (code !== undefined && code >= DIGIT_1 && code <= DIGIT_9) at = this.digits(at);
    else throw NOT_JSON;
    let checkRange = at - start > SAFE_NUMBER_DIGITS;
    if (src[at] === DOT) {
      const fraction = at + 1;
      at = this.digits(fraction);
      if (at === fraction) throw NOT_JSON;
    }
    if (src[at] === LOWER_E || src[at] === UPPER_E) {
      at += 1;
      if (src[at] === PLUS || src[at] === MINUS) at += 1;
      const exponent = at;
      at = this.digits(exponent);
      if (at === exponent) throw NOT_JSON;
      checkRange = true;
    }
    // Beyond a double's range is not content (schemas.ts contentProblem).
    if (out === undefined && checkRange) {
      const text = src.toString('latin1', start, at);
      if (!Number.isFinite(Number(text))) {
        // schemas.ts names a number written in more than SHOWN_KEY_CHARS characters by its length.
        const shown = text.length > SHOWN_KEY_CHARS ? `<written in ${text.length} characters>` : text;
        if (this.ordered) this.found(`number ${shown} is out of range (beyond ±1.8e308)`);
        this.outOfRange = true;
      }
    }
    if (out !== undefined) for (let k = start; k < at; k++) out[this.o + k - start] = src[k]!;
    this.o += at - start;
    this.i = at;
  }

  /** Just past the decimal digits from `from`. */
  digits(from: number): number {
    const { src } = this;
    let at = from;
    for (let code = src[at]; code !== undefined && code >= DIGIT_0 && code <= DIGIT_9; code = src[at])
      at += 1;
    return at;
  }

  /** A string at i, written as JSON.stringify writes the string it stands for. */
  string(): void {
    const { src, out } = this;
    this.byte(QUOTE);
    let at = this.i + 1;
    for (;;) {
      // A run of bytes written as they are: everything but the quote, a backslash and control characters.
      const run = at;
      let code = src[at];
      if (out === undefined && this.inKey) {
        while (code !== undefined && code !== QUOTE && code !== BACKSLASH && code >= SPACE) {
          this.keyByte(code);
          code = src[++at];
        }
        this.o += at - run;
      } else {
        // Copied byte by byte as it is read: Buffer#copy of a range makes a view object per call.
        if (out !== undefined) {
          let o = this.o;
          while (code !== undefined && code !== QUOTE && code !== BACKSLASH && code >= SPACE) {
            out[o++] = code;
            code = src[++at];
          }
        } else {
          while (code !== undefined && code !== QUOTE && code !== BACKSLASH && code >= SPACE)
            code = src[++at];
        }
        this.o += at - run;
      }
      if (code === QUOTE) break;
      if (code !== BACKSLASH) throw NOT_JSON; // the end of the text, or a raw control character
      const letter = src[at + 1];
      if (letter === QUOTE || letter === BACKSLASH) {
        this.byte(BACKSLASH);
        this.byte(letter);
        at += 2;
      } else if (letter === SLASH) {
        this.byte(SLASH);
        at += 2;
      } else if (letter === LOWER_U) {
        const unit = this.hex4(at + 2);
        at += 6;
        if (unit >= 0xd800 && unit <= 0xdbff && src[at] === BACKSLASH && src[at + 1] === LOWER_U) {
          const low = this.hex4(at + 2);
          if (low >= 0xdc00 && low <= 0xdfff) {
            this.codePoint(0x10000 + ((unit - 0xd800) << 10) + (low - 0xdc00));
            at += 6;
            continue;
          }
        }
        this.codeUnit(unit);
      } else if (letter !== undefined && letter < 128 && SHORT_ESCAPES[letter] !== 0) {
        this.byte(BACKSLASH);
        this.byte(letter);
        at += 2;
      } else {
        throw NOT_JSON;
      }
    }
    this.i = at + 1;
    this.byte(QUOTE);
  }

  hex4(at: number): number {
    const { src } = this;
    const a = hexValue(src[at]);
    const b = hexValue(src[at + 1]);
    const c = hexValue(src[at + 2]);
    const d = hexValue(src[at + 3]);
    if (a < 0 || b < 0 || c < 0 || d < 0) throw NOT_JSON;
    return (a << 12) | (b << 8) | (c << 4) | d;
  }

  /** One UTF-16 code unit that is not half of a pair, as JSON.stringify writes it. */
  codeUnit(unit: number): void {
    if (unit < SPACE) {
      const letter = SHORT_ESCAPE_LETTERS[unit]!;
      this.byte(BACKSLASH);
      if (letter !== 0) {
        this.byte(letter);
        return;
      }
      this.escapeHex(unit);
    } else if (unit === QUOTE || unit === BACKSLASH) {
      this.byte(BACKSLASH);
      this.byte(unit);
    } else if (unit >= 0xd800 && unit <= 0xdfff) {
      // A lone surrogate: JSON.stringify escapes it (well-formed JSON.stringify), in lower case.
      this.byte(BACKSLASH);
      this.escapeHex(unit);
    } else {
      this.codePoint(unit);
    }
  }

  /** `u` and four lower-case hex digits. */
  escapeHex(unit: number): void {
    this.byte(LOWER_U);
    for (let shift = 12; shift >= 0; shift -= 4) this.byte(HEX.charCodeAt((unit >> shift) & 0xf));
  }

  codePoint(point: number): void {
    if (point < 0x80) {
      this.byte(point);
    } else if (point < 0x800) {
      this.byte(0xc0 | (point >> 6));
      this.byte(0x80 | (point & 0x3f));
    } else if (point < 0x10000) {
      this.byte(0xe0 | (point >> 12));
      this.byte(0x80 | ((point >> 6) & 0x3f));
      this.byte(0x80 | (point & 0x3f));
    } else {
      this.byte(0xf0 | (point >> 18));
      this.byte(0x80 | ((point >> 12) & 0x3f));
      this.byte(0x80 | ((point >> 6) & 0x3f));
      this.byte(0x80 | (point & 0x3f));
    }
  }

  // ---- the ordered walk: text already checked, members in the parse's order ----

  /** Throws ProblemFound at the value being walked, with its path. */
  found(problem: string): never {
    const path = this.path.map((step) => (step >= 0 ? step : keyText(this.src, -step - 1)));
    throw new ProblemFound(path, problem);
  }

  /** The value at `i` (after whitespace), `depth` containers deep (the content itself is 0). */
  value(depth: number): void {
    this.skipWhitespace();
    const { src } = this;
    const code = src[this.i];
    if (code === OPEN_OBJECT || code === OPEN_ARRAY) {
      if (depth >= MAX_DEPTH && this.out === undefined) {
        this.found(`nested deeper than ${MAX_DEPTH} levels`);
      }
      const open = this.i;
      const isObject = code === OPEN_OBJECT;
      const close = isObject ? CLOSE_OBJECT : CLOSE_ARRAY;
      this.i += 1;
      this.skipWhitespace();
      this.byte(code);
      if (src[this.i] === close) {
        this.i += 1;
      } else {
        if (isObject) this.members(open, depth + 1);
        else this.elements(depth + 1);
        this.lineAndIndent(depth);
      }
      this.byte(close);
    } else if (code === QUOTE) {
      this.string();
    } else if (code === LOWER_T) {
      this.literal(TRUE);
    } else if (code === LOWER_F) {
      this.literal(FALSE);
    } else if (code === LOWER_N) {
      this.literal(NULL);
    } else {
      this.number();
    }
  }

  /** An array's elements from `i` (after its `[`) up to and past its `]`. */
  elements(depth: number): void {
    for (let index = 0; ; index += 1) {
      if (index > 0) this.byte(COMMA);
      this.lineAndIndent(depth);
      this.path.push(index);
      this.value(depth);
      this.path.pop();
      this.skipWhitespace();
      const code = this.src[this.i];
      this.i += 1;
      if (code === CLOSE_ARRAY) return;
    }
  }

  /** An object's members from `i` (after its `{`) up to and past its `}`, in the parse's order. */
  members(open: number, depth: number): void {
    const plan = this.plans?.get(open);
    walkMembers(
      this,
      plan,
      (at, written) => this.member(at, plan, depth, written),
      () => {
        this.skipWhitespace();
        const code = this.src[this.i];
        this.i += 1;
        return code === CLOSE_OBJECT;
      },
    );
  }

  /** The member whose key is at `at` (with its last value if repeated); leaves `i` after its own value. */
  member(at: number, plan: MemberPlan | undefined, depth: number, written: number): void {
    if (written > 0) this.byte(COMMA);
    this.lineAndIndent(depth);
    this.i = at;
    this.string();
    this.byte(COLON);
    this.byte(SPACE);
    const own = valueOfKey(this.src, at);
    const last = plan?.lastValue.get(at);
    this.path.push(-at - 1);
    if (last === undefined) {
      this.i = own;
      this.value(depth);
    } else {
      this.i = last;
      this.value(depth);
      this.i = skipValue(this.src, skipWhitespace(this.src, own));
    }
    this.path.pop();
  }
}

/**
 * The keys of one open object: open addressing over typed arrays (a 32-bit hash of each key's file bytes and its
 * offset), no object per key, at most three quarters full: 1.5 million keys take 16 MiB, a Map of them ~60. Keys of equal
 * hash are compared as a parse reads them, so a collision costs a comparison, never a wrong verdict.
 */
class KeyTable {
  static readonly INITIAL = 16;
  #hashes = new Int32Array(KeyTable.INITIAL);
  /** The key's offset + 1; 0 for an empty slot. */
  #offsets = new Uint32Array(KeyTable.INITIAL);
  #count = 0;

  clear(): void {
    if (this.#count === 0) return;
    this.#count = 0;
    // A table grown for one large object is not cleared slot by slot for every small one after it.
    if (this.#offsets.length > 4 * KeyTable.INITIAL) {
      this.#hashes = new Int32Array(KeyTable.INITIAL);
      this.#offsets = new Uint32Array(KeyTable.INITIAL);
    } else {
      this.#offsets.fill(0);
    }
  }

  /** The offset of the key held equal to the one at `at` (same hash, same text), if any. */
  find(hash: number, src: Buffer, at: number): number | undefined {
    const hashes = this.#hashes;
    const offsets = this.#offsets;
    const mask = offsets.length - 1;
    let text: string | undefined;
    for (let slot = hash & mask; offsets[slot] !== 0; slot = (slot + 1) & mask) {
      if (hashes[slot] !== hash) continue;
      const other = offsets[slot]! - 1;
      text ??= keyText(src, at);
      if (keyText(src, other) === text) return other;
    }
    return undefined;
  }

  add(hash: number, at: number): void {
    if ((this.#count + 1) * 4 > this.#offsets.length * 3) this.#grow();
    this.#place(hash, at + 1);
    this.#count += 1;
  }

  #place(hash: number, stored: number): void {
    const offsets = this.#offsets;
    const mask = offsets.length - 1;
    let slot = hash & mask;
    while (offsets[slot] !== 0) slot = (slot + 1) & mask;
    this.#hashes[slot] = hash;
    offsets[slot] = stored;
  }

  #grow(): void {
    const hashes = this.#hashes;
    const offsets = this.#offsets;
    this.#hashes = new Int32Array(offsets.length * 2);
    this.#offsets = new Uint32Array(offsets.length * 2);
    for (let slot = 0; slot < offsets.length; slot++) {
      if (offsets[slot] !== 0) this.#place(hashes[slot]!, offsets[slot]!);
    }
  }
}

/** The key whose opening quote is at `at`, as a parse reads it. */
function keyText(src: Buffer, at: number): string {
  const close = byteStringEnd(src, at);
  for (let k = at + 1; k < close; k++) {
    if (src[k] === BACKSLASH) return JSON.parse(src.toString('utf8', at, close + 1)) as string;
  }
  return src.toString('utf8', at + 1, close);
}

/**
 * The members of an object in the parse's order, for the writers (this file's JSON, yaml-stream.ts's YAML), with
 * the cursor after its `{` and whitespace: array-index keys first in numeric order, then the others in the
 * text's order, a repeated key written once, in its first place (`plan`). `write(at, written)` writes the member
 * whose key is at `at` (`written` members before it) and leaves the cursor after its value; `ended()` moves past
 * what follows a member and says whether it was the object's end.
 */
export function walkMembers(
  cursor: { src: Buffer; i: number; skipWhitespace(): void },
  plan: MemberPlan | undefined,
  write: (at: number, written: number) => void,
  ended: () => boolean,
): void {
  let written = 0;
  if (plan !== undefined && plan.indexKeys.length > 0) {
    const { indexKeys, indexes } = plan;
    const order = Array.from(indexKeys.keys()).sort((a, b) => indexes[a]! - indexes[b]!);
    const resume = cursor.i;
    for (const k of order) write(indexKeys[k]!, written++);
    cursor.i = resume;
  }
  for (;;) {
    cursor.skipWhitespace();
    const at = cursor.i;
    if (
      plan !== undefined &&
      (plan.later.has(at) || (plan.indexKeys.length > 0 && isIndexKey(cursor.src, at)))
    ) {
      cursor.i = skipMember(cursor.src, at);
    } else {
      write(at, written++);
    }
    if (ended()) return;
  }
}

/** Whether the key at `at` is an array index (`0`, `7`, `4294967294`), which a parse puts first. */
function isIndexKey(src: Buffer, at: number): boolean {
  const key = keyText(src, at);
  if (key.length === 0 || key.length > 10 || (key.length > 1 && key.charCodeAt(0) === DIGIT_0)) return false;
  for (let k = 0; k < key.length; k++) {
    const code = key.charCodeAt(k);
    if (code < DIGIT_0 || code > DIGIT_9) return false;
  }
  return Number(key) <= MAX_ARRAY_INDEX;
}

/** Just past the member whose key is at `at` (checked text): its value's end. */
function skipMember(src: Buffer, at: number): number {
  return skipValue(src, valueOfKey(src, at));
}

/** Just past the value starting at `at` after whitespace (checked text). */
export function skipValueAt(src: Buffer, at: number): number {
  return skipValue(src, skipWhitespace(src, at));
}

/** The offset of the value of the member whose key is at `at` (checked text). */
function valueOfKey(src: Buffer, at: number): number {
  const colon = skipWhitespace(src, byteStringEnd(src, at) + 1);
  return skipWhitespace(src, colon + 1);
}

/** A content value checked and measured (`checkContent`), to be written by `writeContentFile`. */
export interface CheckedContent {
  /** Where the value's text starts and ends in the item: `[start, end)`. */
  start: number;
  end: number;
  /** The length of its file, newline included. */
  fileLength: number;
  /** The objects whose members a parse puts in another order than the text's, if any. */
  plans?: MemberPlans;
}

/** What `examineContent` makes of a content value's text. */
export type ContentVerdict =
  | { kind: 'content'; checked: CheckedContent }
  /** JSON, but not content: where and what, as schemas.ts locateContentProblem says it. */
  | { kind: 'problem'; start: number; end: number; path: (string | number)[]; problem: string }
  /** Not JSON at all. */
  | { kind: 'not_json' };

/**
 * Checks the content value whose text starts at `start` in `src` (possibly after whitespace), in the member order
 * a parse gives it, and measures its file.
 */
export function examineContent(src: Buffer, start: number): ContentVerdict {
  const walk = new Walk(src, start, undefined, false);
  try {
    walk.content();
  } catch (error) {
    if (error instanceof NotJson) return { kind: 'not_json' };
    throw error;
  }
  const from = skipWhitespace(src, start);
  const end = walk.i;
  if (walk.plans === undefined && !walk.deep && !walk.outOfRange) {
    return { kind: 'content', checked: { start: from, end, fileLength: walk.o + 1 } };
  }
  if (src[from] !== OPEN_OBJECT)
    return { kind: 'problem', start: from, end, path: [], problem: 'expected a JSON object' };
  const ordered = new Walk(src, from, undefined, true, walk.plans);
  try {
    ordered.value(0);
  } catch (error) {
    if (error instanceof ProblemFound) {
      return { kind: 'problem', start: from, end, path: error.path, problem: error.problem };
    }
    throw error;
  }
  const checked: CheckedContent = { start: from, end, fileLength: ordered.o + 1 };
  if (walk.plans !== undefined) checked.plans = walk.plans;
  return { kind: 'content', checked };
}

/**
 * `examineContent` for content that must be taken as it is: undefined unless it is content whose file's bytes
 * are known exactly (the text of a file already written, or a test's).
 */
export function checkContent(src: Buffer, start: number): CheckedContent | undefined {
  const verdict = examineContent(src, start);
  return verdict.kind === 'content' ? verdict.checked : undefined;
}

/** The bytes of the file of content checked by `checkContent` on the same `src`. */
export function writeContentFile(src: Buffer, checked: CheckedContent): Buffer {
  const out = Buffer.allocUnsafe(checked.fileLength);
  const walk = new Walk(src, checked.start, out, checked.plans !== undefined, checked.plans);
  if (checked.plans === undefined) walk.content();
  else walk.value(0);
  if (walk.o !== checked.fileLength - 1 || (checked.plans === undefined && walk.i !== checked.end)) {
    throw new Error('content written to another length than it was measured');
  }
  out[walk.o] = NEWLINE;
  return out;
}

/**
 * The last `content` of an item examined (a parse keeps the last of a repeated key); `dropped`: the `[start, end)`
 * of each one before it, which the rest of the item is judged without.
 */
export type FoundContent = Extract<ContentVerdict, { kind: 'content' | 'problem' }> & { dropped?: number[] };

/** What `examineItem` makes of a large item's text. */
export type ItemVerdict =
  | FoundContent
  /** Text json.ts parseJson refuses, with the error it throws (`text`: the item decoded, for its id). */
  | { kind: 'unparsable'; text: string; error: JsonTextError }
  /** Cannot be judged without the item's tree: why. */
  | { kind: 'unsure'; reason: string };

/**
 * A large list item judged on its bytes as json.ts parseJson and the content schema would judge it, without a
 * tree: text nested deeper than a parse allows or not JSON at all (the error parseJson throws), or its `content`
 * examined (`examineContent`). The rest of the item is only skipped over here: the caller parses it with `{}` in
 * place of the content, and names a problem there from the whole text (`itemTextError`).
 */
export function examineItem(item: Buffer): ItemVerdict {
  const depth = textDepth(item);
  if (depth > MAX_PARSE_DEPTH) {
    const error = new JsonTooDeepError(depth);
    return { kind: 'unparsable', text: item.toString('utf8'), error };
  }
  const found = findContent(item);
  if (typeof found === 'string' || found.kind === 'not_json') {
    return (
      itemTextError(item) ?? { kind: 'unsure', reason: typeof found === 'string' ? found : 'unread text' }
    );
  }
  return found;
}

/** The item's text and the error json.ts parseJson throws for it; undefined when lossless-json takes it. */
export function itemTextError(
  item: Buffer,
): { kind: 'unparsable'; text: string; error: JsonTextError } | undefined {
  const text = item.toString('utf8');
  const error = textError(text);
  return error === undefined ? undefined : { kind: 'unparsable', text, error };
}

/** The item's `content` examined, or why the item's keys cannot be read without a parse. */
function findContent(item: Buffer): FoundContent | { kind: 'not_json' } | string {
  const length = item.length;
  let at = skipWhitespace(item, 0);
  if (item[at] !== OPEN_OBJECT) return 'not an object';
  at = skipWhitespace(item, at + 1);
  let found: FoundContent | undefined;
  /** `[start, end)` of each `content` value before the last: a parse keeps the last one. */
  const dropped: number[] = [];
  while (item[at] !== CLOSE_OBJECT) {
    if (item[at] !== QUOTE) return 'unread text';
    const close = byteStringEnd(item, at);
    if (close === -1) return 'unread text';
    let isContent = close - at - 1 === 7 && item.toString('latin1', at + 1, close) === 'content';
    if (!isContent) {
      // A key written with an escape may be `content` (`"c\u006fntent"`).
      for (let k = at + 1; k < close; k++) {
        if (item[k] !== BACKSLASH) continue;
        try {
          isContent = keyText(item, at) === 'content';
        } catch {
          return 'unread text';
        }
        break;
      }
    }
    at = skipWhitespace(item, close + 1);
    if (item[at] !== COLON) return 'unread text';
    at = skipWhitespace(item, at + 1);
    if (isContent) {
      const verdict = examineContent(item, at);
      if (verdict.kind === 'not_json') return verdict;
      if (found !== undefined) {
        const { start, end } = found.kind === 'content' ? found.checked : found;
        dropped.push(start, end);
      }
      found = verdict;
      at = found.kind === 'content' ? found.checked.end : found.end;
    } else {
      at = skipValue(item, at);
      if (at === -1) return 'unread text';
    }
    at = skipWhitespace(item, at);
    if (item[at] === CLOSE_OBJECT) break;
    if (item[at] !== COMMA) return 'unread text';
    at = skipWhitespace(item, at + 1);
  }
  if (skipWhitespace(item, at + 1) !== length) return 'unread text';
  if (found === undefined) return 'no `content`';
  return dropped.length === 0 ? found : { ...found, dropped };
}

function skipWhitespace(src: Buffer, from: number): number {
  let at = from;
  while (isWhitespace(src[at])) at += 1;
  return at;
}

/** Just past the value starting at `from`, by its brackets and strings only; -1 when the bytes end first. */
function skipValue(src: Buffer, from: number): number {
  let depth = 0;
  let at = from;
  for (;;) {
    const code = src[at];
    if (code === undefined) return depth === 0 ? at : -1;
    if (code === QUOTE) {
      const close = byteStringEnd(src, at);
      if (close === -1) return -1;
      at = close + 1;
      if (depth === 0) return at;
    } else if (code === OPEN_OBJECT || code === OPEN_ARRAY) {
      depth += 1;
      at += 1;
    } else if (code === CLOSE_OBJECT || code === CLOSE_ARRAY) {
      if (depth === 0) return at;
      depth -= 1;
      at += 1;
      if (depth === 0) return at;
    } else if (depth === 0 && (code === COMMA || isWhitespace(code))) {
      return at;
    } else {
      at += 1;
    }
  }
}

/** What one string adds to a tree besides its characters (a string object, a slot in its container). */
const STRING_WEIGHT = 16;

/**
 * A bound on what `src[from, to)` weighs as a parsed tree, in bytes of text: its bytes outside strings (each
 * number, bracket and comma becomes a value or a slot) and STRING_WEIGHT per string, whose characters weigh
 * about what they do as text. A field of a megabyte of text is light; a megabyte of `[0,0,…]` is not.
 */
export function treeWeight(src: Buffer, from: number, to: number): number {
  let weight = 0;
  for (let at = from; at < to; at++) {
    if (src[at] !== QUOTE) {
      weight += 1;
      continue;
    }
    const close = byteStringEnd(src, at);
    if (close === -1 || close >= to) return weight + (to - at);
    weight += STRING_WEIGHT;
    at = close;
  }
  return weight;
}

/**
 * json.ts scan's depth, over bytes: the deepest nesting of brackets outside strings, read up to a string that
 * does not end (brackets and quotes are single bytes in UTF-8, so the bytes give what the characters give).
 */
function textDepth(src: Buffer): number {
  let depth = 0;
  let deepest = 0;
  for (let i = 0; i < src.length; i++) {
    const code = src[i];
    if (code === QUOTE) {
      const end = byteStringEnd(src, i);
      if (end === -1) break;
      i = end;
    } else if (code === OPEN_OBJECT || code === OPEN_ARRAY) {
      depth++;
      if (depth > deepest) deepest = depth;
    } else if (code === CLOSE_OBJECT || code === CLOSE_ARRAY) {
      depth--;
    }
  }
  return deepest;
}

/**
 * The error json.ts parseJson throws for `text` (depth aside), without building a value: lossless-json's parser
 * (4.x, `parse.js`) walked as it walks, with its messages and its positions (UTF-16 code units), and the error
 * then rewritten as parseJson rewrites it. Undefined when that parser takes the text.
 */
function textError(text: string): JsonTextError | undefined {
  try {
    new LosslessSyntax(text).parse();
    return undefined;
  } catch (error) {
    if (!(error instanceof SyntaxError)) throw error;
    const position = /position (\d+)/.exec(error.message);
    return new JsonTextError(error.message.replace(/ \(?at position \d+\)?/, ''), Number(position?.[1] ?? 0));
  }
}

/** The escapes lossless-json reads after a backslash, `u` aside. */
const LOSSLESS_ESCAPES = new Set(['"', '\\', '/', 'b', 'f', 'n', 'r', 't']);

function isHexCode(code: number): boolean {
  return (code >= 0x30 && code <= 0x39) || (code >= 0x41 && code <= 0x46) || (code >= 0x61 && code <= 0x66);
}

/** lossless-json's `parse` without its values: each step returns whether a value was there. */
class LosslessSyntax {
  readonly text: string;
  i = 0;

  constructor(text: string) {
    this.text = text;
  }

  parse(): void {
    if (!this.value()) throw new SyntaxError(`JSON value expected ${this.gotAt()}`);
    if (this.i < this.text.length) throw new SyntaxError(`Expected end of input ${this.gotAt()}`);
  }

  value(): boolean {
    this.skipWhitespace();
    const found =
      this.string() ||
      this.numeric() ||
      this.object() ||
      this.array() ||
      this.keyword('true') ||
      this.keyword('false') ||
      this.keyword('null');
    this.skipWhitespace();
    return found;
  }

  object(): boolean {
    const { text } = this;
    if (text.charCodeAt(this.i) !== OPEN_OBJECT) return false;
    this.i++;
    this.skipWhitespace();
    let initial = true;
    while (this.i < text.length && text.charCodeAt(this.i) !== CLOSE_OBJECT) {
      if (!initial) {
        this.eatComma();
        this.skipWhitespace();
      } else {
        initial = false;
      }
      if (!this.string()) throw new SyntaxError(`Quoted object key expected ${this.gotAt()}`);
      this.skipWhitespace();
      if (text.charCodeAt(this.i) !== COLON) {
        throw new SyntaxError(`Colon ':' expected after property name ${this.gotAt()}`);
      }
      this.i++;
      if (!this.value()) throw new SyntaxError(`Object value expected after ':' ${this.pos()}`);
    }
    if (text.charCodeAt(this.i) !== CLOSE_OBJECT) {
      throw new SyntaxError(`Quoted object key or end of object '}' expected ${this.gotAt()}`);
    }
    this.i++;
    return true;
  }

  array(): boolean {
    const { text } = this;
    if (text.charCodeAt(this.i) !== OPEN_ARRAY) return false;
    this.i++;
    this.skipWhitespace();
    let initial = true;
    while (this.i < text.length && text.charCodeAt(this.i) !== CLOSE_ARRAY) {
      if (!initial) this.eatComma();
      else initial = false;
      if (!this.value()) throw new SyntaxError(`Array item expected ${this.gotAt()}`);
    }
    if (text.charCodeAt(this.i) !== CLOSE_ARRAY) {
      throw new SyntaxError(`Array item or end of array ']' expected ${this.gotAt()}`);
    }
    this.i++;
    return true;
  }

  keyword(name: string): boolean {
    if (this.text.slice(this.i, this.i + name.length) !== name) return false;
    this.i += name.length;
    return true;
  }

  skipWhitespace(): void {
    while (isWhitespace(this.text.charCodeAt(this.i))) this.i++;
  }

  string(): boolean {
    const { text } = this;
    if (text.charCodeAt(this.i) !== QUOTE) return false;
    this.i++;
    while (this.i < text.length && text.charCodeAt(this.i) !== QUOTE) {
      if (text.charCodeAt(this.i) === BACKSLASH) {
        const char = text[this.i + 1];
        if (char !== undefined && LOSSLESS_ESCAPES.has(char)) {
          this.i++;
        } else if (char === 'u') {
          const at = this.i;
          if (
            isHexCode(text.charCodeAt(at + 2)) &&
            isHexCode(text.charCodeAt(at + 3)) &&
            isHexCode(text.charCodeAt(at + 4)) &&
            isHexCode(text.charCodeAt(at + 5))
          ) {
            this.i += 5;
          } else {
            throw new SyntaxError(`Invalid unicode character '${text.slice(at, at + 6)}' ${this.pos()}`);
          }
        } else {
          throw new SyntaxError(`Invalid escape character '${text.slice(this.i, this.i + 2)}' ${this.pos()}`);
        }
      } else if (text.charCodeAt(this.i) < SPACE) {
        throw new SyntaxError(`Invalid character '${text[this.i]}' ${this.pos()}`);
      }
      this.i++;
    }
    if (text.charCodeAt(this.i) !== QUOTE)
      throw new SyntaxError(`End of string '"' expected ${this.gotAt()}`);
    this.i++;
    return true;
  }

  numeric(): boolean {
    const { text } = this;
    const start = this.i;
    if (text.charCodeAt(this.i) === MINUS) {
      this.i++;
      this.expectDigit(start);
    }
    const code = text.charCodeAt(this.i);
    if (code === DIGIT_0) {
      this.i++;
    } else if (code >= DIGIT_1 && code <= DIGIT_9) {
      this.i++;
      while (this.isDigitAt()) this.i++;
    } else {
      return false;
    }
    if (text.charCodeAt(this.i) === DOT) {
      this.i++;
      this.expectDigit(start);
      while (this.isDigitAt()) this.i++;
    }
    if (text.charCodeAt(this.i) === LOWER_E || text.charCodeAt(this.i) === UPPER_E) {
      this.i++;
      if (text.charCodeAt(this.i) === MINUS || text.charCodeAt(this.i) === PLUS) this.i++;
      this.expectDigit(start);
      while (this.isDigitAt()) this.i++;
    }
    return true;
  }

  isDigitAt(): boolean {
    const code = this.text.charCodeAt(this.i);
    return code >= DIGIT_0 && code <= DIGIT_9;
  }

  expectDigit(start: number): void {
    if (!this.isDigitAt()) {
      throw new SyntaxError(
        `Invalid number '${this.text.slice(start, this.i)}', expecting a digit ${this.gotAt()}`,
      );
    }
  }

  eatComma(): void {
    if (this.text.charCodeAt(this.i) !== COMMA) {
      throw new SyntaxError(`Comma ',' expected after value ${this.gotAt()}`);
    }
    this.i++;
  }

  pos(): string {
    return `at position ${this.i}`;
  }

  gotAt(): string {
    const got = this.i < this.text.length ? `but got '${this.text[this.i]}'` : 'but reached end of input';
    return `${got} ${this.pos()}`;
  }
}
