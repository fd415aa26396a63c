// JSON text ↔ values for the wire: numbers kept byte-faithful (lossless-json), nesting checked before parsing,
// and a list body cut into its envelope and its items so that each item is judged on its own.
import { isLosslessNumber, LosslessNumber, parse, stringify } from 'lossless-json';
import { AgentError } from '../lib/errors.js';
import {
  BACKSLASH,
  CLOSE_ARRAY,
  CLOSE_OBJECT,
  COLON,
  COMMA,
  DIGIT_0,
  DIGIT_9,
  isWhitespace,
  MINUS,
  OPEN_ARRAY,
  OPEN_OBJECT,
  QUOTE,
} from './json-bytes.js';

export { isLosslessNumber, LosslessNumber };

/**
 * The parser recurses once per level: past this depth a body is refused before parsing, far below the stack's
 * edge. Content itself is held to a much lower limit by the wire schema, with a message naming the field.
 */
export const MAX_PARSE_DEPTH = 512;

/** Text that is not JSON, or JSON the parser must not descend into; `offset` is where the problem was seen. */
export class JsonTextError extends AgentError {
  readonly offset: number;
  constructor(problem: string, offset: number) {
    super('invalid_json', `${problem} at character ${offset}`, { retryable: false });
    this.offset = offset;
  }
}

/** Text nested deeper than MAX_PARSE_DEPTH: refused before a parse, whatever it holds. */
export class JsonTooDeepError extends JsonTextError {
  constructor(depth: number) {
    super(`nested ${depth} levels deep (the limit is ${MAX_PARSE_DEPTH})`, 0);
  }
}

/**
 * A number stays a plain `number` when printing it gives back the very text the service sent (most numbers);
 * otherwise it stays a `LosslessNumber` holding that text (`12345678901234567891`, `1.0`, `1e400`, `-0`).
 */
function parseNumber(text: string): number | LosslessNumber {
  const value = Number(text);
  return String(value) === text ? value : new LosslessNumber(text);
}

/** Like JSON.parse: a repeated key keeps its last value (lossless-json throws by default). */
function lastWins({ newValue }: { newValue: unknown }): unknown {
  return newValue;
}

/**
 * JSON.parse with faithful numbers and bounded nesting. Throws JsonTextError. Text in the compact form
 * JSON.stringify writes (what the service sends) is parsed natively and checked by printing it back; otherwise,
 * when every number of the text prints back as written (nearly always), the native parser gives the very same
 * value, 40 times faster than the lossless one.
 */
export function parseJson(text: string): unknown {
  const compact = fewBrackets(text) ? parseCompact(text) : undefined;
  if (compact !== undefined) return compact.value;
  const { depth, faithful } = scan(text);
  if (depth > MAX_PARSE_DEPTH) {
    throw new JsonTooDeepError(depth);
  }
  if (faithful) {
    try {
      return JSON.parse(text);
    } catch {
      // The lossless parser below names the problem with its position.
    }
  }
  try {
    return parse(text, null, { parseNumber, onDuplicateKey: lastWins });
  } catch (error) {
    if (error instanceof JsonTextError) throw error;
    const message = error instanceof Error ? error.message : String(error);
    const position = /position (\d+)/.exec(message);
    throw new JsonTextError(message.replace(/ \(?at position \d+\)?/, ''), Number(position?.[1] ?? 0));
  }
}

/**
 * The native parse of text that is exactly what JSON.stringify writes for the value it gives (whitespace around
 * it aside), undefined otherwise. Then every number in it prints back as written (`1.0`, `-0`, `1e5` or a
 * 20-digit integer would not), and no key is repeated, so the native value is the faithful one: no character
 * walk is needed. Native code, where the walks below run as interpreted JavaScript in a short-lived process.
 */
function parseCompact(text: string): { value: unknown } | undefined {
  try {
    const value: unknown = JSON.parse(text);
    return JSON.stringify(value) === text.trim() ? { value } : undefined;
  } catch {
    return undefined;
  }
}

/**
 * Whether the text holds at most MAX_PARSE_DEPTH opening brackets, strings included: then it cannot nest deeper
 * than that, and its depth needs no walk. Counted by `indexOf`, stopping at the limit.
 */
function fewBrackets(text: string): boolean {
  let count = 0;
  for (const bracket of ['{', '[']) {
    for (let at = text.indexOf(bracket); at !== -1; at = text.indexOf(bracket, at + 1)) {
      count += 1;
      if (count > MAX_PARSE_DEPTH) return false;
    }
  }
  return true;
}

/**
 * JSON.stringify serialises a `LosslessNumber` as an object with this own key: text without it held none, and
 * the native output is then the lossless one (which differs from it only in how it writes those numbers).
 */
const LOSSLESS_NUMBER_KEY = '"isLosslessNumber"';

/**
 * JSON.stringify that writes a `LosslessNumber` as its original text; otherwise byte-identical to it. The
 * native serialiser runs first, 20 times faster; only text that shows a LosslessNumber (or a value the native
 * one refuses, such as a BigInt) goes through lossless-json.
 */
export function stringifyJson(value: unknown, space?: number): string {
  let text: string | undefined;
  try {
    text = JSON.stringify(value, undefined, space);
  } catch {
    text = undefined;
  }
  if (text === undefined || text.includes(LOSSLESS_NUMBER_KEY)) text = stringify(value, undefined, space);
  if (text === undefined) throw new TypeError('value has no JSON representation');
  return text;
}

/** Index of the quote closing the string opened at `start`, or -1 when the text ends first. */
function stringEnd(text: string, start: number): number {
  let at = start + 1;
  for (;;) {
    const quote = text.indexOf('"', at);
    if (quote === -1) return -1;
    let backslashes = 0;
    for (let k = quote - 1; k > start && text.charCodeAt(k) === BACKSLASH; k--) backslashes++;
    if (backslashes % 2 === 0) return quote;
    at = quote + 1;
  }
}

function isNumberChar(code: number): boolean {
  // 0-9 . - + e E
  return (
    (code >= 0x30 && code <= 0x39) ||
    code === 0x2e ||
    code === 0x2d ||
    code === 0x2b ||
    code === 0x65 ||
    code === 0x45
  );
}

/**
 * Whether `text[start, end)` is an integer that a double prints back as written without converting it: an
 * optional minus, then `0` or up to 15 digits not starting with 0 (every such integer is below 2^53), and not
 * `-0` (printed `0`). Most numbers on the wire are these; the rest take the exact check.
 */
function plainInteger(text: string, start: number, end: number): boolean {
  let at = start;
  if (text.charCodeAt(at) === MINUS) at++;
  const digits = end - at;
  if (digits < 1 || digits > 15) return false;
  const first = text.charCodeAt(at);
  if (first === DIGIT_0) return digits === 1 && at === start;
  for (let k = at; k < end; k++) {
    const code = text.charCodeAt(k);
    if (code < DIGIT_0 || code > DIGIT_9) return false;
  }
  return true;
}

/**
 * The deepest nesting of objects and arrays, and whether every number prints back as written, without
 * recursion. Strings are skipped whole, so a number-like string is not a number.
 */
function scan(text: string): { depth: number; faithful: boolean } {
  let depth = 0;
  let deepest = 0;
  let faithful = true;
  for (let i = 0; i < text.length; i++) {
    const code = text.charCodeAt(i);
    if (code === QUOTE) {
      const end = stringEnd(text, i);
      if (end === -1) break;
      i = end;
    } else if (code === OPEN_OBJECT || code === OPEN_ARRAY) {
      depth++;
      if (depth > deepest) deepest = depth;
    } else if (code === CLOSE_OBJECT || code === CLOSE_ARRAY) {
      depth--;
    } else if (faithful && (code === MINUS || (code >= DIGIT_0 && code <= DIGIT_9))) {
      // A number starts with a minus or a digit; the `e` of `true` and `false` is not one.
      let end = i + 1;
      while (end < text.length && isNumberChar(text.charCodeAt(end))) end++;
      if (!plainInteger(text, i, end)) {
        const token = text.slice(i, end);
        if (String(Number(token)) !== token) faithful = false;
      }
      i = end - 1;
    }
  }
  return { depth: deepest, faithful };
}

export interface ListBodyParts {
  /** The body with its `data` array emptied: the envelope alone, small whatever the items hold. */
  envelopeText: string;
  /** The text of each element of `data`, in order. */
  items: string[];
}

/** Bodies up to this size are first parsed whole natively (`splitListBody`); a larger one is only cut. */
export const NATIVE_SPLIT_MAX_CHARS = 1024 * 1024;

/**
 * Cuts a list body into its envelope and the text of each item, so that each is parsed and judged on its own
 * and one broken item costs only that item. A body of at most NATIVE_SPLIT_MAX_CHARS in the compact form the
 * service sends is parsed natively and each part printed back, which gives the same texts as `cutListBody`
 * (whitespace around the body aside) without walking a character in JavaScript; the parsed tree is dropped at
 * once, and a larger body (large items) is never parsed whole. Anything else is cut by `cutListBody`.
 */
export function splitListBody(text: string): ListBodyParts {
  const compact = parseCompactListBody(text);
  if (compact === undefined) return cutListBody(text);
  return { envelopeText: compact.envelopeText, items: compact.texts };
}

/** A compact list body parsed natively: its envelope's text, and each item's value and exact text. */
export interface ListBodyValues {
  envelopeText: string;
  values: unknown[];
  /**
   * Each item's text as it lies in the body, character for character (JSON.stringify of its value, which the
   * body was proven to be made of): what a key of the item's exact wire text is taken from (list-page.ts).
   */
  texts: string[];
  /**
   * The key of the items' text (`texts` comma-joined, as it lies in the body) when a known page's records gave the
   * texts (`KnownPageTexts`): then the body was not printed back, and the key need not be made again.
   */
  pageKey?: string;
}

/**
 * The items of a page recorded before, by the exact text of its items (the body's `data` array without its
 * brackets): their texts cut by recorded lengths, and that text's key; undefined when the page is not known so
 * (list-page.ts `knownPageTexts`). A page is recorded only after its body was proven compact, and its key is of
 * the very characters that were proven, so a page it answers for needs no proof again.
 */
export type KnownPageTexts = (
  itemsText: string,
  values: readonly unknown[],
) => { texts: string[]; pageKey: string } | undefined;

/**
 * A body of at most NATIVE_SPLIT_MAX_CHARS in the compact form the service sends, parsed natively once: each item
 * is the very value `parseJson` gives for its text (the whole printed back as written, so every number of every
 * item does and no key is repeated), so it needs no second parse. The proof prints the envelope and each item
 * on its own and checks that the body is exactly those texts put together (the work of printing the whole, once),
 * which leaves each item's exact text in hand. The tree of the page stays whole until the page is done: at most
 * what a 1 MiB body parses into. Undefined for anything else, which is cut (`splitListBody`).
 */
export function parseCompactListBody(text: string, known?: KnownPageTexts): ListBodyValues | undefined {
  if (text.length > NATIVE_SPLIT_MAX_CHARS) return undefined;
  let list: unknown;
  try {
    list = JSON.parse(text);
  } catch {
    return undefined;
  }
  if (typeof list !== 'object' || list === null || Array.isArray(list) || !Object.hasOwn(list, 'data')) {
    return undefined;
  }
  const envelope = list as { data: unknown };
  const { data } = envelope;
  if (!Array.isArray(data)) return undefined;
  envelope.data = [];
  let envelopeText: string;
  let texts: string[];
  try {
    envelopeText = JSON.stringify(envelope);
    if (known !== undefined && data.length > 0) {
      const page = knownPage(text.trim(), envelopeText, data, known);
      if (page !== undefined) return { envelopeText, values: data, ...page };
    }
    texts = data.map((item) => JSON.stringify(item));
  } catch {
    // Nested deeper than the native printer's recursion reaches (JSON.parse has no such limit): a RangeError for
    // the whole page. Cut instead, so that such an item costs only itself (judged on its own text, too deep).
    return undefined;
  }
  return madeOf(text.trim(), envelopeText, texts) ? { envelopeText, values: data, texts } : undefined;
}

const EMPTY_DATA = '"data":[]';

/**
 * The texts of a known page (`known`), when `body` is the printed envelope with some text in its `"data":[]`
 * (tried at every place it appears, as `madeOf` does) and that text is a page `known` recorded: each item's text
 * is then a slice of the body, not printed back (~3.5 ms of CPU for the 11 pages of an idle pull at 1,000).
 */
function knownPage(
  body: string,
  envelopeText: string,
  values: readonly unknown[],
  known: KnownPageTexts,
): { texts: string[]; pageKey: string } | undefined {
  for (let at = envelopeText.indexOf(EMPTY_DATA); at !== -1; at = envelopeText.indexOf(EMPTY_DATA, at + 1)) {
    const open = at + EMPTY_DATA.length - 1;
    const head = envelopeText.slice(0, open);
    const tail = envelopeText.slice(open);
    if (body.length < head.length + tail.length || !body.startsWith(head) || !body.endsWith(tail)) continue;
    const page = known(body.slice(head.length, body.length - tail.length), values);
    if (page !== undefined) return page;
  }
  return undefined;
}

/**
 * Whether `body` is exactly `envelopeText` with `texts` joined by commas in its `"data":[]`: then it is what
 * JSON.stringify writes for the value JSON.parse made of it. Every place `"data":[]` appears is tried (a nested
 * object of the envelope may hold one; the body then matches at the top-level one only).
 */
function madeOf(body: string, envelopeText: string, texts: readonly string[]): boolean {
  let length = envelopeText.length + Math.max(0, texts.length - 1);
  for (const item of texts) length += item.length;
  if (body.length !== length) return false;
  for (let at = envelopeText.indexOf(EMPTY_DATA); at !== -1; at = envelopeText.indexOf(EMPTY_DATA, at + 1)) {
    const open = at + EMPTY_DATA.length - 1;
    if (!body.startsWith(envelopeText.slice(0, open))) continue;
    let position = open;
    let same = true;
    for (let index = 0; index < texts.length && same; index += 1) {
      if (index > 0) {
        same = body.charCodeAt(position) === COMMA;
        position += 1;
      }
      const item = texts[index]!;
      // Not `startsWith(item, position)`: V8 copies the body's piece for it (1 MB and ~2 ms per idle pull at
      // 1,000); a slice shares the body's characters, and === compares them.
      same &&= body.slice(position, position + item.length) === item;
      position += item.length;
    }
    if (same && body.endsWith(envelopeText.slice(open))) return true;
  }
  return false;
}

/**
 * Cuts a list body into its envelope and the text of each item, checking only structure (brackets, strings,
 * commas). Throws JsonTextError when the structure itself is broken (a truncated body), which no item could
 * survive.
 */
export function cutListBody(text: string): ListBodyParts {
  const stack: number[] = [];
  let expectKey = false;
  let rootKey: string | undefined;
  let dataOpen = -1;
  let dataClose = -1;
  let itemStart = -1;
  const items: string[] = [];
  const inData = () => dataOpen !== -1 && dataClose === -1 && stack.length === 2;
  const endItem = (at: number) => {
    if (itemStart !== -1) items.push(text.slice(itemStart, at).trimEnd());
    itemStart = -1;
  };

  for (let i = 0; i < text.length; i++) {
    const code = text.charCodeAt(i);
    if (isWhitespace(code)) continue;
    if (inData() && itemStart === -1 && code !== COMMA && code !== CLOSE_ARRAY) itemStart = i;
    switch (code) {
      case QUOTE: {
        const end = stringEnd(text, i);
        if (end === -1) throw new JsonTextError('unterminated string', i);
        if (stack.length === 1 && expectKey) rootKey = keyText(text, i, end);
        i = end;
        break;
      }
      case OPEN_OBJECT:
      case OPEN_ARRAY:
        if (code === OPEN_ARRAY && stack.length === 1 && stack[0] === OPEN_OBJECT && rootKey === 'data') {
          if (dataOpen !== -1) throw new JsonTextError('the key "data" appears twice', i);
          dataOpen = i;
        }
        stack.push(code);
        expectKey = code === OPEN_OBJECT;
        break;
      case CLOSE_OBJECT:
      case CLOSE_ARRAY: {
        const open = stack.pop();
        if (open !== (code === CLOSE_OBJECT ? OPEN_OBJECT : OPEN_ARRAY)) {
          throw new JsonTextError(`unexpected ${String.fromCharCode(code)}`, i);
        }
        if (dataOpen !== -1 && dataClose === -1 && stack.length === 1) {
          endItem(i);
          dataClose = i;
        }
        expectKey = false;
        break;
      }
      case COMMA:
        if (inData()) endItem(i);
        expectKey = stack[stack.length - 1] === OPEN_OBJECT;
        break;
      case COLON:
        expectKey = false;
        break;
      default:
        break;
    }
  }
  if (stack.length > 0) throw new JsonTextError('unexpected end of text', text.length);
  if (dataOpen === -1) return { envelopeText: text, items: [] };
  return { envelopeText: `${text.slice(0, dataOpen + 1)}${text.slice(dataClose)}`, items };
}

/**
 * How many elements of a list body's top-level `data` array begin in `text`, which may be the body's first bytes
 * only (cut anywhere): a page over the response cap, read for what it proves. Never throws; a text that is not a
 * list body begins none.
 */
export function itemsBegunIn(text: string): number {
  let depth = 0;
  let expectKey = false;
  let rootKey: string | undefined;
  let inData = false;
  let begun = 0;
  let awaitingItem = false;
  for (let i = 0; i < text.length; i++) {
    const code = text.charCodeAt(i);
    if (isWhitespace(code)) continue;
    if (inData && depth === 2 && awaitingItem && code !== COMMA && code !== CLOSE_ARRAY) {
      begun += 1;
      awaitingItem = false;
    }
    switch (code) {
      case QUOTE: {
        const end = stringEnd(text, i);
        if (end === -1) return begun;
        if (depth === 1 && expectKey) rootKey = keyText(text, i, end);
        i = end;
        break;
      }
      case OPEN_OBJECT:
      case OPEN_ARRAY:
        if (code === OPEN_ARRAY && depth === 1 && rootKey === 'data') {
          inData = true;
          awaitingItem = true;
        }
        depth += 1;
        expectKey = code === OPEN_OBJECT;
        break;
      case CLOSE_OBJECT:
      case CLOSE_ARRAY:
        depth -= 1;
        if (inData && depth === 1) return begun;
        expectKey = false;
        break;
      case COMMA:
        if (inData && depth === 2) awaitingItem = true;
        // Only the root object's keys matter: the one naming `data`.
        expectKey = depth === 1;
        break;
      case COLON:
        expectKey = false;
        break;
      default:
        break;
    }
  }
  return begun;
}

export interface ListBytesParts {
  /** The body with its `data` array emptied: the envelope alone, small whatever the items hold. */
  envelope: Buffer;
  /**
   * Where each element of `data` lies in the body, in order: `[start, end)` byte offsets, two per item, end
   * before any whitespace that follows it. The items stay bytes until each is decoded on its own.
   */
  items: number[];
}

/** Index of the quote byte closing the string opened at `start`, or -1 when the bytes end first. */
export function byteStringEnd(body: Buffer, start: number): number {
  let at = start + 1;
  for (;;) {
    const quote = body.indexOf(QUOTE, at);
    if (quote === -1) return -1;
    let backslashes = 0;
    for (let k = quote - 1; k > start && body[k] === BACKSLASH; k--) backslashes++;
    if (backslashes % 2 === 0) return quote;
    at = quote + 1;
  }
}

/**
 * `cutListBody` on the bytes of a body: where each item lies, not its text, so that a page of large items never
 * exists as one text and each item is decoded only when it is judged (list-page.ts PageItems). Every structural
 * character of JSON is ASCII, and no byte of a multi-byte UTF-8 sequence is, so the cuts are the same. Throws
 * JsonTextError when the structure itself is broken.
 */
export function cutListBytes(body: Buffer): ListBytesParts {
  const stack: number[] = [];
  let expectKey = false;
  let rootKey: string | undefined;
  let dataOpen = -1;
  let dataClose = -1;
  let itemStart = -1;
  /** The end of the current item's last byte that is not whitespace. */
  let itemEnd = -1;
  const items: number[] = [];
  const inData = () => dataOpen !== -1 && dataClose === -1 && stack.length === 2;
  const endItem = () => {
    if (itemStart !== -1) items.push(itemStart, itemEnd);
    itemStart = -1;
  };

  for (let i = 0; i < body.length; i++) {
    const code = body[i]!;
    if (isWhitespace(code)) continue;
    if (inData() && itemStart === -1 && code !== COMMA && code !== CLOSE_ARRAY) itemStart = i;
    switch (code) {
      case QUOTE: {
        const end = byteStringEnd(body, i);
        if (end === -1) throw new JsonTextError('unterminated string', i);
        if (stack.length === 1 && expectKey) {
          const quoted = body.toString('utf8', i, end + 1);
          rootKey = keyText(quoted, 0, quoted.length - 1);
        }
        i = end;
        break;
      }
      case OPEN_OBJECT:
      case OPEN_ARRAY:
        if (code === OPEN_ARRAY && stack.length === 1 && stack[0] === OPEN_OBJECT && rootKey === 'data') {
          if (dataOpen !== -1) throw new JsonTextError('the key "data" appears twice', i);
          dataOpen = i;
        }
        stack.push(code);
        expectKey = code === OPEN_OBJECT;
        break;
      case CLOSE_OBJECT:
      case CLOSE_ARRAY: {
        const open = stack.pop();
        if (open !== (code === CLOSE_OBJECT ? OPEN_OBJECT : OPEN_ARRAY)) {
          throw new JsonTextError(`unexpected ${String.fromCharCode(code)}`, i);
        }
        if (dataOpen !== -1 && dataClose === -1 && stack.length === 1) {
          endItem();
          dataClose = i;
        }
        expectKey = false;
        break;
      }
      case COMMA:
        if (inData()) endItem();
        expectKey = stack[stack.length - 1] === OPEN_OBJECT;
        break;
      case COLON:
        expectKey = false;
        break;
      default:
        break;
    }
    if (itemStart !== -1) itemEnd = i + 1;
  }
  if (stack.length > 0) throw new JsonTextError('unexpected end of text', body.length);
  if (dataOpen === -1) return { envelope: body, items: [] };
  return { envelope: Buffer.concat([body.subarray(0, dataOpen + 1), body.subarray(dataClose)]), items };
}

// With the u flag only an unpaired half matches: a lone surrogate has no UTF-8 form, so no URL can carry it.
const LONE_SURROGATE = /[\uD800-\uDFFF]/u;

/**
 * An instance id the agent can use: it names the instance's record, its file's owner and its report (PATCH
 * /config_instances/{id}), so it must not be empty, longer than MAX_INSTANCE_ID_LENGTH, nor hold a lone surrogate
 * (encodeURIComponent throws on one, and a report that can never be sent is never dropped either).
 */
export function isUsableInstanceId(id: unknown): id is string {
  return (
    typeof id === 'string' && id !== '' && id.length <= MAX_INSTANCE_ID_LENGTH && !LONE_SURROGATE.test(id)
  );
}

/**
 * Ids are tens of characters; a megabyte one would be kept in state.json and sent in every report's URL, which
 * servers refuse (414), and a report refused that way stays queued: such an item is invalid instead.
 */
export const MAX_INSTANCE_ID_LENGTH = 512;

/**
 * The string value of key `id` of the first object at `depth` (1: `text` is the item; 3: `text` is a list body,
 * the item its first element), read without parsing the rest: `text` may be cut short (the first bytes of a
 * body over the size cap) or nested too deep to parse. Undefined when it is not there or not usable.
 */
export function peekId(text: string, depth: 1 | 3): string | undefined {
  const id = peekStrings(text, depth, ['id']).id;
  // An id no report could name is no id: the item is then named by its place.
  return id !== undefined && isUsableInstanceId(id) ? id : undefined;
}

/**
 * The string values of the keys `names` of the first object at `depth`, read as `peekId` reads the id: only its
 * own keys (not those of nested objects), the first of each name, none whose value is not a string.
 */
export function peekStrings<N extends string>(
  text: string,
  depth: 1 | 3,
  names: readonly N[],
): Partial<Record<N, string>> {
  const found: Partial<Record<N, string>> = {};
  const wanted = new Set<string>(names);
  const seen = new Set<string>();
  let level = 0;
  let expectKey = false;
  let key: string | undefined;
  /** In a list body, the envelope's key being read: only an item of `data` may name the instance. */
  let rootKey: string | undefined;
  const inItem = () => level === depth && (depth === 1 || rootKey === 'data');
  /** After a colon of the item: the next token is a value (one `take` per value, not per digit). */
  let awaitingValue = false;
  /** Keys given twice: JSON.parse keeps the last, this reader would keep the first, so neither is trusted. */
  const twice = new Set<string>();
  const take = (value: string | undefined) => {
    if (!awaitingValue) return;
    awaitingValue = false;
    if (key === undefined || !wanted.has(key)) return;
    if (seen.has(key)) twice.add(key);
    seen.add(key);
    if (value !== undefined && !twice.has(key)) found[key as N] = value;
    else delete found[key as N];
  };
  // To the item's end (or the text's): a key given again later must be seen.
  for (let i = 0; i < text.length; i++) {
    const code = text.charCodeAt(i);
    if (isWhitespace(code)) continue;
    if (code === QUOTE) {
      const end = stringEnd(text, i);
      if (end === -1) return found;
      const raw = text.slice(i, end + 1);
      if (level === 1 && depth === 3 && expectKey) rootKey = decodeString(raw);
      if (inItem() && expectKey) key = decodeString(raw);
      else if (inItem()) take(decodeString(raw));
      i = end;
    } else if (code === OPEN_OBJECT || code === OPEN_ARRAY) {
      // An object or array value: not a string, whatever key it belongs to.
      if (inItem() && !expectKey) take(undefined);
      level++;
      expectKey = code === OPEN_OBJECT;
      key = level === depth ? undefined : key;
    } else if (code === CLOSE_OBJECT || code === CLOSE_ARRAY) {
      // The first object at this depth ended.
      if (inItem()) return found;
      level--;
      expectKey = false;
    } else if (code === COMMA) {
      expectKey = true;
      if (level === depth) key = undefined;
    } else if (code === COLON) {
      expectKey = false;
      awaitingValue = inItem();
    } else if (inItem()) {
      // A number or a literal: not a string value.
      take(undefined);
    }
  }
  return found;
}

/** A key as its value: raw when it has no escapes (nearly always), decoded otherwise (`"d\u0061ta"`). */
function keyText(text: string, start: number, end: number): string {
  const raw = text.slice(start + 1, end);
  return raw.includes('\\') ? (decodeString(text.slice(start, end + 1)) ?? raw) : raw;
}

function decodeString(quoted: string): string | undefined {
  try {
    const value: unknown = JSON.parse(quoted);
    return typeof value === 'string' ? value : undefined;
  } catch {
    return undefined;
  }
}
