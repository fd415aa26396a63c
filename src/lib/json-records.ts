// A JSON document of records parsed a record at a time as its bytes arrive: only what the caller keeps stays.
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
} from '../api/json-bytes.js';

/**
 * What a member of an object of the document is, by its key. `object`: descended into, its members judged by
 * `members` (any other key's value is parsed, so that its syntax is judged, and dropped). `leaf`: parsed whole and
 * kept in the object's `values`. `records`: an object of records, each member parsed alone (`JSON.parse` of its
 * bytes) and handed to `record` with its key, then dropped. `items`: an array of records, each handed to `item`.
 * `record` and `item` answer false to give the document up.
 */
export type RecordShape =
  | { readonly kind: 'object'; readonly members: ReadonlyMap<string, RecordShape> }
  | { readonly kind: 'leaf' }
  | { readonly kind: 'records'; readonly record: (key: string, value: unknown) => boolean }
  | { readonly kind: 'items'; readonly item: (value: unknown) => boolean };

export type ObjectShape = Extract<RecordShape, { kind: 'object' }>;

/** An object of the document walked: its `leaf` members' values and its `object` members', by key. */
export type WalkedObject = Map<string, unknown>;

const LEAF: RecordShape = { kind: 'leaf' };

/** Where a walk stands in an object or array: just after its opening, a key, the colon, a comma. */
enum Step {
  First,
  Key,
  Colon,
  Value,
  After,
}

interface Frame {
  readonly shape: RecordShape;
  step: Step;
  key: string;
  /** `object` frames: the values of known keys (a key seen twice gives the document up). */
  readonly values: WalkedObject | undefined;
}

/** A value or key whose bytes are being scanned for their end. */
enum Unit {
  None,
  Compound,
  String,
  Scalar,
}

/**
 * Walks a document that is a JSON object whose shape `RecordShape` gives, fed its bytes in chunks of any size
 * (`push`, then `end`). Every value is parsed by `JSON.parse` of its own bytes, decoded as UTF-8 on their own
 * (every cut falls between two ASCII bytes, where a decoder holds no state, so each value is what the
 * document's decoded text would give); the document's own punctuation between them is read here. The walk
 * gives up (push or end answers false, and reads no further) at anything it does not take exactly as
 * `JSON.parse` of the whole would: a syntax error, a known key twice (JSON.parse keeps the last), a member of
 * the wrong kind, a record refused. The caller then reads the document whole as before, which judges and names
 * it; a walk that ends true has seen a valid JSON text whose values are those JSON.parse gives.
 * Memory: the bytes of the value or key being read, and a chunk; what the callbacks keep.
 */
export class JsonRecordWalker {
  readonly top: WalkedObject = new Map();
  #buffer: Buffer;
  /** The bytes not read yet are `#buffer[#at, #end)`; a unit being scanned starts at `#unitStart`. */
  #at = 0;
  #end = 0;
  #frames: Frame[] = [];
  #started = false;
  #closed = false;
  #gaveUp = false;
  #unit = Unit.None;
  #unitStart = 0;
  #depth = 0;
  #inString = false;
  #escaped = false;
  readonly #shape: ObjectShape;
  readonly #initialBytes: number;

  constructor(shape: ObjectShape, initialBytes = 64 * 1024) {
    this.#shape = shape;
    this.#initialBytes = initialBytes;
    this.#buffer = Buffer.allocUnsafe(initialBytes);
  }

  /** Reads the next bytes (copied: the caller may reuse its buffer); false once the walk gave up. */
  push(chunk: Uint8Array): boolean {
    if (this.#gaveUp) return false;
    this.#take(chunk);
    if (!this.#walk()) this.#giveUp();
    return !this.#gaveUp;
  }

  /** The document ended: true when it was whole, valid, and every record taken. */
  end(): boolean {
    if (this.#gaveUp) return false;
    const done = this.#closed && this.#unit === Unit.None && this.#at === this.#end;
    this.#giveUp();
    return done;
  }

  #giveUp(): void {
    this.#gaveUp = true;
    this.#frames = [];
    this.#buffer = Buffer.alloc(0);
    this.#at = 0;
    this.#end = 0;
  }

  /** Appends `chunk` after the bytes kept, dropping those read (and growing the buffer for a long value). */
  #take(chunk: Uint8Array): void {
    const keep = this.#unit === Unit.None ? this.#at : this.#unitStart;
    const kept = this.#end - keep;
    const needed = kept + chunk.length;
    const length = this.#buffer.length;
    // Grown by a quarter (a long value is copied ~5 times over, held at most 1.25 times), and given back once a
    // long value is read (a value of 32 MiB doubled the buffer to 64 MiB: 193 MB peak against 162 parsed whole).
    const size =
      needed > length
        ? Math.max(needed, Math.floor(length * 1.25))
        : length > 4 * this.#initialBytes && needed <= this.#initialBytes
          ? this.#initialBytes
          : length;
    if (size !== length) {
      const grown = Buffer.allocUnsafe(size);
      this.#buffer.copy(grown, 0, keep, this.#end);
      this.#buffer = grown;
    } else if (keep > 0) this.#buffer.copy(this.#buffer, 0, keep, this.#end);
    this.#buffer.set(chunk, kept);
    this.#at -= keep;
    this.#unitStart -= keep;
    this.#end = kept + chunk.length;
  }

  /** Reads as far as the bytes go; false to give up. */
  #walk(): boolean {
    const buffer = this.#buffer;
    for (;;) {
      if (this.#unit !== Unit.None) {
        const unitEnd = this.#scan();
        if (unitEnd === -1) return true;
        if (!this.#finishUnit(unitEnd)) return false;
        continue;
      }
      if (this.#at >= this.#end) return true;
      const byte = buffer[this.#at]!;
      if (isWhitespace(byte)) {
        this.#at++;
        continue;
      }
      const frame = this.#frames.at(-1);
      if (frame === undefined) {
        // Before the document's object, or after it (nothing but whitespace may follow).
        if (this.#started || byte !== OPEN_OBJECT) return false;
        this.#started = true;
        this.#at++;
        this.#frames.push({ shape: this.#shape, step: Step.First, key: '', values: this.top });
        continue;
      }
      if (!this.#punctuation(frame, byte)) return false;
    }
  }

  /** One byte of the document's own structure in `frame`, or the start of a key or value; false to give up. */
  #punctuation(frame: Frame, byte: number): boolean {
    const isArray = frame.shape.kind === 'items';
    switch (frame.step) {
      case Step.First:
      case Step.After:
        if (byte === (isArray ? CLOSE_ARRAY : CLOSE_OBJECT)) {
          this.#at++;
          this.#close();
          return true;
        }
        if (frame.step === Step.After) {
          if (byte !== COMMA) return false;
          this.#at++;
          frame.step = isArray ? Step.Value : Step.Key;
          return true;
        }
        if (isArray) return this.#valueStart(frame, byte);
        return this.#keyStart(frame, byte);
      case Step.Key:
        return this.#keyStart(frame, byte);
      case Step.Colon:
        if (byte !== COLON) return false;
        this.#at++;
        frame.step = Step.Value;
        return true;
      case Step.Value:
        return this.#valueStart(frame, byte);
    }
  }

  #keyStart(frame: Frame, byte: number): boolean {
    if (byte !== QUOTE) return false;
    frame.step = Step.Key;
    this.#begin(Unit.String);
    this.#at++;
    this.#inString = true;
    return true;
  }

  /** A value starts at `byte`: descended into when its shape says so, else scanned as a unit. */
  #valueStart(frame: Frame, byte: number): boolean {
    frame.step = Step.Value;
    const shape = this.#memberShape(frame);
    if (shape.kind !== 'leaf') {
      if (byte !== (shape.kind === 'items' ? OPEN_ARRAY : OPEN_OBJECT)) return false;
      this.#at++;
      const values: WalkedObject | undefined = shape.kind === 'object' ? new Map() : undefined;
      if (values !== undefined && !this.#keep(frame, values)) return false;
      if (shape.kind === 'records' || shape.kind === 'items') {
        if (!this.#keep(frame, true)) return false;
      }
      this.#frames.push({ shape, step: Step.First, key: '', values });
      return true;
    }
    if (byte === OPEN_OBJECT || byte === OPEN_ARRAY) this.#begin(Unit.Compound);
    else if (byte === QUOTE) {
      this.#begin(Unit.String);
      this.#at++;
      this.#inString = true;
    } else this.#begin(Unit.Scalar);
    return true;
  }

  /** The shape of the value now starting in `frame`. */
  #memberShape(frame: Frame): RecordShape {
    const shape = frame.shape;
    if (shape.kind === 'object') return shape.members.get(frame.key) ?? LEAF;
    return LEAF;
  }

  /** Records a known member's value in an `object` frame; false when its key was seen before. */
  #keep(frame: Frame, value: unknown): boolean {
    const shape = frame.shape;
    if (shape.kind !== 'object' || frame.values === undefined || !shape.members.has(frame.key)) return true;
    if (frame.values.has(frame.key)) return false;
    frame.values.set(frame.key, value);
    return true;
  }

  #begin(unit: Unit): void {
    this.#unit = unit;
    this.#unitStart = this.#at;
    this.#depth = 0;
    this.#inString = false;
    this.#escaped = false;
  }

  #close(): void {
    this.#frames.pop();
    const parent = this.#frames.at(-1);
    if (parent === undefined) this.#closed = true;
    else parent.step = Step.After;
  }

  /** Scans the unit on from `#at`: just past its end, or -1 when its bytes run out first. */
  #scan(): number {
    const buffer = this.#buffer;
    const end = this.#end;
    let at = this.#at;
    if (this.#unit === Unit.Scalar) {
      while (at < end) {
        const byte = buffer[at]!;
        if (byte === COMMA || byte === CLOSE_OBJECT || byte === CLOSE_ARRAY || isWhitespace(byte)) {
          this.#at = at;
          return at;
        }
        at++;
      }
      this.#at = at;
      return -1;
    }
    let depth = this.#depth;
    let inString = this.#inString;
    let escaped = this.#escaped;
    const string = this.#unit === Unit.String;
    while (at < end) {
      if (inString) {
        if (escaped) {
          escaped = false;
          at++;
          continue;
        }
        const quote = buffer.indexOf(QUOTE, at);
        const stop = quote === -1 || quote >= end ? end : quote;
        let run = 0;
        for (let j = stop - 1; j >= at && buffer[j] === BACKSLASH; j--) run++;
        if (stop === end) {
          escaped = run % 2 === 1;
          at = end;
          break;
        }
        at = stop + 1;
        if (run % 2 === 0) {
          inString = false;
          if (string || depth === 0) {
            this.#at = at;
            return at;
          }
        }
        continue;
      }
      const byte = buffer[at++]!;
      if (byte === QUOTE) inString = true;
      else if (byte === OPEN_OBJECT || byte === OPEN_ARRAY) depth++;
      else if (byte === CLOSE_OBJECT || byte === CLOSE_ARRAY) {
        if (--depth === 0) {
          this.#at = at;
          return at;
        }
      }
    }
    this.#at = at;
    this.#depth = depth;
    this.#inString = inString;
    this.#escaped = escaped;
    return -1;
  }

  /** The unit `[#unitStart, unitEnd)` is whole: a key, or a value handed on; false to give up. */
  #finishUnit(unitEnd: number): boolean {
    this.#unit = Unit.None;
    const frame = this.#frames.at(-1)!;
    let value: unknown;
    try {
      value = JSON.parse(this.#buffer.toString('utf8', this.#unitStart, unitEnd));
    } catch {
      return false;
    }
    if (frame.step === Step.Key) {
      frame.key = value as string;
      frame.step = Step.Colon;
      return true;
    }
    frame.step = Step.After;
    const shape = frame.shape;
    if (shape.kind === 'records') return shape.record(frame.key, value);
    if (shape.kind === 'items') return shape.item(value);
    return this.#keep(frame, value);
  }
}

/** The largest array index (2³² − 2): keys of this form come first in a parsed object, in numeric order. */
const MAX_ARRAY_INDEX = 4294967294;

/** Whether `key` is an array index, which `JSON.parse`'s object lists before its other keys, in numeric order. */
export function isArrayIndexKey(key: string): boolean {
  const length = key.length;
  if (length === 0 || length > 10 || (length > 1 && key.charCodeAt(0) === 0x30)) return false;
  for (let k = 0; k < length; k++) {
    const code = key.charCodeAt(k);
    if (code < 0x30 || code > 0x39) return false;
  }
  return Number(key) <= MAX_ARRAY_INDEX;
}

/**
 * `map` in the order of a parsed object's keys: array indices first, ascending, then the others as they came
 * (`JSON.parse` then `for…in` give this order). The map itself when it holds no array index.
 */
export function inObjectKeyOrder<T>(map: Map<string, T>, indexKeys: number): Map<string, T> {
  if (indexKeys === 0) return map;
  const ordered = new Map<string, T>();
  const indices = [...map.keys()].filter(isArrayIndexKey).sort((a, b) => Number(a) - Number(b));
  for (const key of indices) ordered.set(key, map.get(key) as T);
  for (const [key, value] of map) if (!ordered.has(key)) ordered.set(key, value);
  return ordered;
}
