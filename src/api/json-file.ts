// A large item's content turned from its JSON text into the bytes of its file without a parsed tree: the very bytes
// parseJson and then serialize.ts give (JSON.stringify's layout with 2 spaces, numbers as sent, a newline).
import { byteStringEnd } from './json.js';
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
  writtenAs(write: (src: Buffer, start: number, end: number) => Buffer): Buffer {
    // Once written as JSON, that file is the same content's JSON text (keys in order, numbers as sent).
    if (this.#src === undefined) return write(this.data, 0, this.data.length - 1);
    return write(this.#src, this.#checked.start, this.#checked.end);
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
const PROTO = Buffer.from('__proto__', 'latin1');
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

/** Thrown inside a walk for anything it does not take; the caller then takes the usual path. */
class NotTaken extends Error {}
const NOT_TAKEN = new NotTaken();

/**
 * One walk over a content value's JSON text. Without `out` it checks the text and counts the bytes of its file
 * (and refuses what it cannot write exactly as the usual path does: a repeated key, an integer-like key, whose
 * place JSON.parse changes, and `__proto__`); with `out` it writes them, over text it has already checked.
 */
class Walk {
  readonly src: Buffer;
  readonly out: Buffer | undefined;
  i: number;
  o = 0;
  /** Keys of the object open at each depth, as hashes of their bytes in the file (checking walk only). */
  readonly keySets: Set<number>[] = [];
  // The key being read: two FNV-1a hashes of its file bytes, its length, whether all digits, whether `__proto__`.
  inKey = false;
  h1 = 0;
  h2 = 0;
  keyLength = 0;
  keyDigits = true;
  keyProto = true;

  constructor(src: Buffer, start: number, out: Buffer | undefined) {
    this.src = src;
    this.i = start;
    this.out = out;
  }

  /** The content value at `i`, which must be an object; leaves `i` just after it. */
  content(): void {
    const { src } = this;
    /** Per open container: an object (true) or an array (false). */
    const kinds: boolean[] = [];
    this.skipWhitespace();
    if (src[this.i] !== OPEN_OBJECT) throw NOT_TAKEN;
    for (;;) {
      // A value starts at i.
      let code = src[this.i];
      if (code === OPEN_OBJECT || code === OPEN_ARRAY) {
        const isObject = code === OPEN_OBJECT;
        if (kinds.length >= MAX_DEPTH) throw NOT_TAKEN;
        this.i += 1;
        this.skipWhitespace();
        if (src[this.i] === (isObject ? CLOSE_OBJECT : CLOSE_ARRAY)) {
          this.i += 1;
          this.byte(code);
          this.byte(isObject ? CLOSE_OBJECT : CLOSE_ARRAY);
        } else {
          kinds.push(isObject);
          this.byte(code);
          this.lineAndIndent(kinds.length);
          if (isObject) {
            if (this.out === undefined) this.keySetAt(kinds.length).clear();
            this.key(kinds.length);
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
        throw NOT_TAKEN;
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
          if (isObject) this.key(kinds.length);
          break;
        }
        if (code !== (isObject ? CLOSE_OBJECT : CLOSE_ARRAY)) throw NOT_TAKEN;
        this.i += 1;
        kinds.pop();
        this.lineAndIndent(kinds.length);
        this.byte(code);
      }
      this.skipWhitespace();
    }
  }

  keySetAt(depth: number): Set<number> {
    let set = this.keySets[depth];
    if (set === undefined) {
      set = new Set();
      this.keySets[depth] = set;
    }
    return set;
  }

  /** A member's key at i, its colon, and whitespace up to its value. */
  key(depth: number): void {
    if (this.src[this.i] !== QUOTE) throw NOT_TAKEN;
    if (this.out !== undefined) {
      this.string();
    } else {
      this.inKey = true;
      this.h1 = 0x811c9dc5;
      this.h2 = 0x2f2a1e3b;
      this.keyLength = 0;
      this.keyDigits = true;
      this.keyProto = true;
      this.string();
      this.inKey = false;
      // The key's bytes in the file are `"…"`: the quotes are counted in keyLength.
      const length = this.keyLength - 2;
      if (this.keyProto && length === PROTO.length) throw NOT_TAKEN;
      if (this.keyDigits && length > 0) throw NOT_TAKEN;
      const hash = (this.h1 & 0x3ffffff) * 0x4000000 + (this.h2 & 0x3ffffff);
      const keys = this.keySetAt(depth);
      if (keys.has(hash)) throw NOT_TAKEN;
      keys.add(hash);
    }
    this.skipWhitespace();
    if (this.src[this.i] !== COLON) throw NOT_TAKEN;
    this.i += 1;
    this.byte(COLON);
    this.byte(SPACE);
    this.skipWhitespace();
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
      if (at >= PROTO.length || PROTO[at] !== code) this.keyProto = false;
    }
    this.keyLength += 1;
    this.h1 = Math.imul(this.h1 ^ code, 0x01000193);
    this.h2 = Math.imul(this.h2 ^ code, 0x5bd1e995) ^ (this.h2 >>> 15);
  }

  literal(word: Buffer): void {
    const { src } = this;
    for (let k = 0; k < word.length; k++) if (src[this.i + k] !== word[k]) throw NOT_TAKEN;
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
    else throw NOT_TAKEN;
    let checkRange = at - start > SAFE_NUMBER_DIGITS;
    if (src[at] === DOT) {
      const fraction = at + 1;
      at = this.digits(fraction);
      if (at === fraction) throw NOT_TAKEN;
    }
    if (src[at] === LOWER_E || src[at] === UPPER_E) {
      at += 1;
      if (src[at] === PLUS || src[at] === MINUS) at += 1;
      const exponent = at;
      at = this.digits(exponent);
      if (at === exponent) throw NOT_TAKEN;
      checkRange = true;
    }
    // Beyond a double's range is not content (schemas.ts contentProblem): the usual path names it.
    if (out === undefined && checkRange && !Number.isFinite(Number(src.toString('latin1', start, at)))) {
      throw NOT_TAKEN;
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
      if (code !== BACKSLASH) throw NOT_TAKEN; // the end of the text, or a raw control character
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
        throw NOT_TAKEN;
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
    if (a < 0 || b < 0 || c < 0 || d < 0) throw NOT_TAKEN;
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
}

/** A content value checked and measured (`checkContent`), to be written by `writeContentFile`. */
export interface CheckedContent {
  /** Where the value's text starts and ends in the item: `[start, end)`. */
  start: number;
  end: number;
  /** The length of its file, newline included. */
  fileLength: number;
}

/**
 * Checks the content value whose text starts at `start` in `src` (an object, possibly after whitespace) and
 * measures its file. Undefined for anything the usual path might write otherwise or refuse: text that is not
 * JSON, content it would refuse (nested deeper than 64 levels, a number beyond a double's range), and keys whose
 * place or meaning JSON.parse changes (integer-like keys, which it moves first; a repeated key; `__proto__`).
 */
export function checkContent(src: Buffer, start: number): CheckedContent | undefined {
  const walk = new Walk(src, start, undefined);
  try {
    walk.content();
  } catch (error) {
    if (error instanceof NotTaken) return undefined;
    throw error;
  }
  return { start: skipWhitespace(src, start), end: walk.i, fileLength: walk.o + 1 };
}

/** The bytes of the file of content checked by `checkContent` on the same `src`. */
export function writeContentFile(src: Buffer, checked: CheckedContent): Buffer {
  const out = Buffer.allocUnsafe(checked.fileLength);
  const walk = new Walk(src, checked.start, out);
  walk.content();
  if (walk.o !== checked.fileLength - 1 || walk.i !== checked.end) {
    throw new Error('content written to another length than it was measured');
  }
  out[walk.o] = NEWLINE;
  return out;
}

/**
 * Where the value of key `content` of the object `item` is, checked and measured; undefined when the item is not
 * a plain object with one `content` key whose value `checkContent` takes. Keys at this level with an escape are
 * not read (one of them could be `content`): the item then takes the usual path. The rest of the item is only
 * skipped over, not checked: the caller parses it, with `{}` in place of the content.
 */
export function locateContent(item: Buffer): CheckedContent | undefined {
  const length = item.length;
  let at = skipWhitespace(item, 0);
  if (item[at] !== OPEN_OBJECT) return undefined;
  at = skipWhitespace(item, at + 1);
  if (item[at] === CLOSE_OBJECT) return undefined;
  let found: CheckedContent | undefined;
  for (;;) {
    if (item[at] !== QUOTE) return undefined;
    const close = byteStringEnd(item, at);
    if (close === -1) return undefined;
    for (let k = at + 1; k < close; k++) if (item[k] === BACKSLASH) return undefined;
    const isContent = close - at - 1 === 7 && item.toString('latin1', at + 1, close) === 'content';
    at = skipWhitespace(item, close + 1);
    if (item[at] !== COLON) return undefined;
    at = skipWhitespace(item, at + 1);
    if (isContent) {
      if (found !== undefined) return undefined;
      found = checkContent(item, at);
      if (found === undefined) return undefined;
      at = found.end;
    } else {
      at = skipValue(item, at);
      if (at === -1) return undefined;
    }
    at = skipWhitespace(item, at);
    if (item[at] === CLOSE_OBJECT) break;
    if (item[at] !== COMMA) return undefined;
    at = skipWhitespace(item, at + 1);
  }
  return skipWhitespace(item, at + 1) === length ? found : undefined;
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
