// One page of the config instance list, judged envelope first and then item by item, so one bad item costs
// only itself: good items are used, a bad one is named (by id when readable) with its real problem.
import { isUtf8 } from 'node:buffer';
import { hash } from 'node:crypto';
import * as z from 'zod';
import { formatFieldPath } from '../lib/field-path.js';
import {
  JsonTooDeepError,
  type KnownPageTexts,
  MAX_PARSE_DEPTH,
  parseJson,
  peekId,
  peekStrings,
} from './json.js';
import { examineItem, itemTextError, JsonContentFile, treeWeight } from './json-file.js';
import {
  ConfigInstance,
  ConfigInstanceActivityStatus,
  ConfigInstanceTargetStatus,
  contentProblem,
  ErrorStatus,
  isUsableInstanceId,
  LIMIT_MAX,
  LIMIT_MIN,
  MAX_CONTENT_DEPTH,
  Timestamp,
} from './schemas.js';

/** The envelope without its items: `data` is judged item by item. */
export const ListHead = z.object({
  object: z.literal('list'),
  total_count: z.number().int().min(-1),
  limit: z.number().int().min(LIMIT_MIN).max(LIMIT_MAX),
  offset: z.number().int().min(0),
  has_more: z.boolean(),
  data: z.array(z.unknown()),
});
export type ListHead = Omit<z.infer<typeof ListHead>, 'data'>;

/** A status field the agent acts on, holding a value it does not know (the service adds values over time). */
export interface UnknownStatus {
  field: 'target_status' | 'activity_status' | 'error_status';
  value: string;
}

/**
 * Bumped whenever what makes an item valid (`quickInstance`, schemas.ts `contentProblem`) or the bytes its file
 * gets (reconcile/serialize.ts, yaml-text.ts) change: the items recorded under another value are forgotten
 * (store/fingerprints.ts), so an upgrade never trusts what an older agent judged. list-page.test.ts pins the
 * serialization of a set of items and the verdicts on a set of hostile ones: a change to either fails it until
 * this is bumped and the pins are renewed.
 */
// 2: bef34e6 quoted '.', '-.', 'E5', '.e5' in YAML after rules 1 had recorded files that wrote them plain.
export const ITEM_RULES_VERSION = 2;

/** The key of an item's exact wire text: its sha256, base64. */
export function itemKey(text: string): string {
  return hash('sha256', text, 'base64');
}

/** What the agent recorded of an item it judged valid and serialized: its file's sha256 and length. */
export interface KnownItem {
  sha256: string;
  size: number;
}

/**
 * Items judged valid before, looked up by id and by the key of their exact wire text (store/fingerprints.ts
 * keeps them across runs). The same text is the same content under the same rules (ITEM_RULES_VERSION): found
 * here, an item's content is not checked again and its file is known without serializing it.
 */
export interface KnownItems {
  /** `length`: the text's, which the caller keeps for as long as the item (a pass bounds what it holds). */
  lookup(id: string, key: string, length: number): KnownItem | undefined;
  /** Pages whose exact item texts were seen before (full pulls only: api/pager.ts's wide listing). */
  pages?: KnownPages;
}

/**
 * Compact pages known by the key of their items' exact text (`pageKey`: the items as they lie in the body,
 * comma-joined), each with the key of its items' keys and text lengths in order (`itemKeysKey`, `pageItemsKey`).
 * A known page's items need no key of their own: each is the key recorded for the item's id, which is trusted
 * only when the recorded keys of the page's ids, in order, with its items' text lengths, give back `itemKeysKey`
 * (anything else, and the page is judged item by item).
 */
export interface KnownPages {
  lookupPage(pageKey: string): string | undefined;
  /**
   * `textLengths`: each item's text length, in order, which lets a later pull of the same page cut its items out
   * of the body instead of printing them (`knownPageTexts`).
   */
  recordPage(pageKey: string, itemKeysKey: string, textLengths: readonly number[]): void;
  /** The item text lengths recorded with the page (bound into its record: `pageItemsKey`). */
  pageTextLengths(pageKey: string): readonly number[] | undefined;
  /** The key recorded for the item `id`'s text (KnownItems), if any. */
  itemKeyOf(id: string): string | undefined;
}

/**
 * The key a page is recorded with: of its items' keys and their texts' lengths, in order. The lengths are bound
 * into it, so a record whose lengths were changed (two swapped, the total kept, which can cut a page at a `},{`
 * inside a string) gives another key and is refused (`knownPageTexts`), then mended from the page's own texts
 * (`PageKeys`). `|` is in no key (base64), so no record made before the lengths were bound (the keys alone)
 * gives this key either: such a record is refused and made again.
 */
export function pageItemsKey(keys: readonly string[], lengths: readonly number[]): string {
  return itemKey(`${keys.join('')}|${lengths.join(',')}`);
}

/** A valid item's exact text on the wire (compact pages), its key, and what was recorded of it, if anything. */
export interface ItemWire {
  text: string;
  key: string;
  /** Set only when the text's key was recorded for this id: the content was then NOT checked by this judge. */
  known?: KnownItem;
}

export type PageItem =
  | { kind: 'valid'; instance: ConfigInstance; wire?: ItemWire }
  /** Readable, but with a status value the agent does not know: skipped with a warning, never acted on. */
  | { kind: 'unknown_status'; instance: LenientInstance; unknown: UnknownStatus }
  /**
   * Not acceptable. `id` is there when readable; `activityStatus` when the item carries a known one (the
   * report of its failure keeps it); `problem` names the field and what is wrong with it.
   */
  | {
      kind: 'invalid';
      id?: string;
      activityStatus?: ConfigInstanceActivityStatus;
      /** The item's error_status when known: `failed` means the service already holds a failure. */
      errorStatus?: ErrorStatus;
      /** Known only to tell whether a query would have listed it (api/pager.ts `matches`). */
      targetStatus?: ConfigInstanceTargetStatus;
      deviceId?: string;
      problem: string;
    };

/**
 * The items of one page, each judged when it is asked for and not kept: the pager takes them one by one, so a
 * page of large items never holds more than one parsed item (a parsed tree weighs several times its text). A
 * large page stays bytes, each item decoded only then (`ofBytes`).
 */
export class PageItems implements Iterable<PageItem> {
  readonly length: number;
  readonly #judge: (index: number, known?: KnownItems) => PageItem;

  private constructor(length: number, judge: (index: number, known?: KnownItems) => PageItem) {
    this.length = length;
    this.#judge = judge;
  }

  /** Items already cut into texts of a body that was valid UTF-8. */
  static ofTexts(texts: readonly string[]): PageItems {
    return new PageItems(texts.length, (index) => judgeConfigInstance(texts[index]!));
  }

  /**
   * Items parsed natively from a compact body (json.ts parseCompactListBody): the everyday item is checked by
   * hand on its value; any other is judged from its text as `ofTexts` would, so every problem is named alike.
   * `texts`: each item's exact text (json.ts ListBodyValues), which gives a valid item its `wire`.
   */
  static ofValues(values: readonly unknown[], texts?: readonly string[], pageKey?: string): PageItems {
    if (texts === undefined) {
      return new PageItems(values.length, (index) => judgeParsedItem(values[index], undefined));
    }
    let page: PageKeys | undefined;
    return new PageItems(values.length, (index, known) => {
      if (known?.pages === undefined || values.length === 0) {
        return judgeParsedItem(values[index], texts[index], known);
      }
      page ??= new PageKeys(values, texts, known.pages, pageKey);
      const judged = judgeParsedItem(values[index], texts[index], known, page.knownKey(index));
      page.judged(index, judged);
      return judged;
    });
  }

  /** Items as `[start, end)` byte ranges of `body`, two numbers per item (json.ts cutListBytes). */
  static ofBytes(body: Buffer, ranges: readonly number[]): PageItems {
    return new PageItems(ranges.length / 2, (index) =>
      judgeItemBytes(body.subarray(ranges[2 * index], ranges[2 * index + 1])),
    );
  }

  /**
   * The item at `index`, judged afresh on every call; undefined past the end. With `known`, an item of a compact
   * page whose exact text is recorded there for its id is taken without checking its content (`judgeParsedItem`).
   */
  at(index: number, known?: KnownItems): PageItem | undefined {
    return Number.isInteger(index) && index >= 0 && index < this.length
      ? this.#judge(index, known)
      : undefined;
  }

  *[Symbol.iterator](): Iterator<PageItem> {
    for (let index = 0; index < this.length; index += 1) yield this.#judge(index);
  }
}

/**
 * The keys of one compact page's items: taken from the records when the page's exact text is known
 * (KnownPages), otherwise made item by item as they are judged, and the page recorded once every item on it was
 * judged valid with its text's key. A record of the page trusts nothing by itself: its items' keys are the ones
 * recorded for their ids, and only when those, in order, are what the page was recorded with (a later text of
 * an id, then listed back as before, leaves its id's record with the later key: the page is judged in full).
 */
class PageKeys {
  readonly #pages: KnownPages;
  readonly #pageKey: string;
  readonly #texts: readonly string[];
  /** Every item's key, when the page is known; else filled as its items are judged. */
  readonly #keys: (string | undefined)[];
  readonly #known: boolean;
  #filled = 0;
  #unusable = false;

  /** `pageKey`: the key of `texts` comma-joined, when the caller made it already (json.ts ListBodyValues). */
  constructor(values: readonly unknown[], texts: readonly string[], pages: KnownPages, pageKey?: string) {
    this.#pages = pages;
    this.#texts = texts;
    this.#pageKey = pageKey ?? itemKey(texts.join(','));
    const recorded = pages.lookupPage(this.#pageKey);
    const keys = recorded === undefined ? undefined : recordedKeys(values, pages);
    // The lengths of these texts, which are the page's (their key is its key): a record whose lengths were
    // changed still proves the page, and is mended below.
    this.#known = keys !== undefined && pageItemsKey(keys, textLengths(texts)) === recorded;
    this.#keys = this.#known && keys !== undefined ? keys : new Array<string | undefined>(values.length);
    // A page recorded with lengths that do not cut these texts (a damaged record, refused by `knownPageTexts`)
    // gets its texts' lengths again, so that the next pull cuts it instead of printing it.
    if (this.#known && recorded !== undefined && !cutsInto(pages.pageTextLengths(this.#pageKey), texts))
      pages.recordPage(this.#pageKey, recorded, textLengths(texts));
  }

  /** The key of item `index`'s text, when the page is known. */
  knownKey(index: number): string | undefined {
    return this.#known ? this.#keys[index] : undefined;
  }

  judged(index: number, item: PageItem): void {
    if (this.#known || this.#unusable) return;
    if (item.kind !== 'valid' || item.wire === undefined) {
      this.#unusable = true;
      return;
    }
    if (this.#keys[index] === undefined) this.#filled += 1;
    this.#keys[index] = item.wire.key;
    if (this.#filled === this.#keys.length) {
      const lengths = textLengths(this.#texts);
      this.#pages.recordPage(this.#pageKey, pageItemsKey(this.#keys as string[], lengths), lengths);
    }
  }
}

function cutsInto(lengths: readonly number[] | undefined, texts: readonly string[]): boolean {
  return lengths?.length === texts.length && texts.every((text, index) => text.length === lengths[index]);
}

function textLengths(texts: readonly string[]): number[] {
  return texts.map((text) => text.length);
}

const COMMA = 0x2c;
const OPEN_BRACE = 0x7b;
const CLOSE_BRACE = 0x7d;

/**
 * A known page's item texts cut out of `itemsText` (a compact body's `data` array without its brackets, json.ts
 * KnownPageTexts): only when that text's key is a recorded page with its texts' lengths, the recorded keys of the
 * page's ids, in order, with those lengths give back its record's key (`pageItemsKey`), and the lengths with a
 * comma between each two cover the text exactly. The page was recorded only after its body was
 * proven compact (each text is JSON.stringify of its item's value), and the key is of the very characters
 * proven, so the texts and values are what the proof would give; anything else, and the body is proven as before.
 */
export function knownPageTexts(pages: KnownPages): KnownPageTexts {
  return (itemsText, values) => {
    const pageKey = itemKey(itemsText);
    const recorded = pages.lookupPage(pageKey);
    if (recorded === undefined) return undefined;
    const lengths = pages.pageTextLengths(pageKey);
    if (lengths === undefined || lengths.length !== values.length || values.length === 0) return undefined;
    const keys = recordedKeys(values, pages);
    // The recorded lengths are bound into the record's key: changed ones are refused here, never used to cut.
    if (keys === undefined || pageItemsKey(keys, lengths) !== recorded) return undefined;
    const texts: string[] = [];
    let position = 0;
    for (let index = 0; index < lengths.length; index += 1) {
      if (index > 0) {
        if (itemsText.charCodeAt(position) !== COMMA) return undefined;
        position += 1;
      }
      const length = lengths[index]!;
      const end = position + length;
      // Each an object's text (a damaged record that cuts elsewhere is refused here or by the total length).
      if (length < 2 || end > itemsText.length) return undefined;
      if (itemsText.charCodeAt(position) !== OPEN_BRACE || itemsText.charCodeAt(end - 1) !== CLOSE_BRACE)
        return undefined;
      texts.push(itemsText.slice(position, end));
      position = end;
    }
    return position === itemsText.length ? { texts, pageKey } : undefined;
  };
}

/** The key recorded for each item's id, in order; undefined when any has none. */
function recordedKeys(values: readonly unknown[], pages: KnownPages): string[] | undefined {
  const keys: string[] = [];
  for (const value of values) {
    const id = typeof value === 'object' && value !== null ? (value as { id?: unknown }).id : undefined;
    const key = typeof id === 'string' ? pages.itemKeyOf(id) : undefined;
    if (key === undefined) return undefined;
    keys.push(key);
  }
  return keys;
}

/**
 * Items at least this long (a page of them is cut on its bytes) have their content written straight into the
 * bytes of its file: a parsed tree weighs several times its text, and it would only be serialized and dropped.
 */
export const STREAMED_ITEM_BYTES = 64 * 1024;

/**
 * An item longer than this that the streaming judge cannot judge without its tree (json-file.ts `examineItem`
 * "unsure": no `content`, an item that is not an object), or whose fields besides its content would weigh this
 * much as a tree (json-file.ts `treeWeight`: long strings count as their text), is refused rather than parsed: a
 * tree weighs up to ~25 times its text, more than a small device holds. Below it, the usual path.
 */
export const TREE_ITEM_BYTES = 2 * 1024 * 1024;

/** Judges the bytes of one list item: bytes that are not UTF-8 cost this item only. Never throws. */
export function judgeItemBytes(
  bytes: Buffer,
  streamFrom = STREAMED_ITEM_BYTES,
  treeFrom = TREE_ITEM_BYTES,
): PageItem {
  if (!isUtf8(bytes)) return notUtf8(bytes.toString('utf8'));
  if (bytes.length >= streamFrom) {
    const streamed = judgeStreamed(bytes, treeFrom);
    if (streamed !== undefined) return streamed;
  }
  return judgeConfigInstance(bytes.toString('utf8'));
}

/**
 * A large item judged as `judgeConfigInstance` judges its text, without the content's tree: its content is
 * examined on its bytes (json-file.ts `examineItem`: the parse's member order, the first problem named with its
 * path), a valid one kept as its checked JSON text and written into its file's bytes (JSON or YAML) by
 * serialize.ts; the rest of the item is parsed and judged as usual with `{}` for its content. Text that is not
 * JSON gets parseJson's own error. Undefined when only the usual path can judge it and the item is at most
 * `treeFrom` long; past that, refused (`tooLargeToJudge`).
 */
function judgeStreamed(bytes: Buffer, treeFrom: number): PageItem | undefined {
  const verdict = examineItem(bytes);
  if (verdict.kind === 'unparsable') return judgeUnparsable(verdict.text, verdict.error);
  if (verdict.kind === 'unsure') {
    return bytes.length > treeFrom ? tooLargeToJudge(bytes, verdict.reason, treeFrom) : undefined;
  }
  const { start, end } = verdict.kind === 'content' ? verdict.checked : verdict;
  // Every `content` value, the last one and any before it (`dropped`), in the order of the text.
  const ranges = [...(verdict.dropped ?? []), start, end];
  // A tree of the rest of the item: bounded too, whatever `treeFrom` (a test's) says. Long strings weigh
  // what their text does; a field of a million small values would not.
  let weight = 0;
  for (let k = 0, from = 0; k <= ranges.length; k += 2) {
    weight += treeWeight(bytes, from, ranges[k] ?? bytes.length);
    from = ranges[k + 1] ?? bytes.length;
  }
  if (weight > TREE_ITEM_BYTES) {
    return tooLargeToJudge(
      bytes,
      'its fields besides `content` would make a tree too large',
      TREE_ITEM_BYTES,
    );
  }
  let head = '';
  let from = 0;
  for (let k = 0; k < ranges.length; k += 2) {
    head += `${bytes.toString('utf8', from, ranges[k])}{}`;
    from = ranges[k + 1]!;
  }
  head += bytes.toString('utf8', from);
  let value: unknown;
  try {
    value = parseJson(head);
  } catch {
    // Not JSON outside the content: named, as the usual path names it, from the whole text.
    const unparsable = itemTextError(bytes);
    if (unparsable !== undefined) return judgeUnparsable(unparsable.text, unparsable.error);
    return bytes.length > treeFrom ? tooLargeToJudge(bytes, 'unread text', treeFrom) : undefined;
  }
  if (verdict.kind === 'problem') {
    return judgeInstanceValue(value, { path: ['content', ...verdict.path], message: verdict.problem });
  }
  const judged = judgeInstanceValue(value);
  if (judged.kind === 'invalid') return judged;
  const content = new JsonContentFile(bytes, verdict.checked).asContent();
  return { ...judged, instance: { ...judged.instance, content } } as PageItem;
}

/**
 * A large item refused without a parse (`TREE_ITEM_BYTES`): named by what its text shows of its id and statuses,
 * as any invalid item is; never retried into a tree.
 */
function tooLargeToJudge(bytes: Buffer, reason: string, limit: number): PageItem {
  const text = bytes.toString('utf8');
  const fields = peekStrings(text, 1, ['activity_status', 'error_status', 'target_status', 'device_id']);
  return invalidItem(
    peekId(text, 1),
    fields,
    `too large to judge without parsing it whole (${bytes.length} bytes; an item over ${limit} bytes ` +
      `must not need that): ${reason}`,
  );
}

/** An item refused, with what of its id and statuses could be read (the record then names it). */
function invalidItem(
  id: string | undefined,
  fields: { activity_status?: unknown; error_status?: unknown; target_status?: unknown; device_id?: unknown },
  problem: string,
): PageItem {
  const activity = ConfigInstanceActivityStatus.safeParse(fields.activity_status);
  const error = ErrorStatus.safeParse(fields.error_status);
  const target = ConfigInstanceTargetStatus.safeParse(fields.target_status);
  return {
    kind: 'invalid',
    ...(id === undefined ? {} : { id }),
    ...(activity.success ? { activityStatus: activity.data } : {}),
    ...(error.success ? { errorStatus: error.data } : {}),
    ...(target.success ? { targetStatus: target.data } : {}),
    ...(typeof fields.device_id === 'string' ? { deviceId: fields.device_id } : {}),
    problem,
  };
}

export interface ConfigInstancePage {
  head: ListHead;
  items: PageItems;
  /** Size of the body, for the pull's memory budget. */
  bytes: number;
}

/**
 * The instance schema with free-form statuses: tells "unknown status value" apart from "broken item". Built the
 * first time an item fails the strict schema, as the wire schemas are (schemas.ts's onFirstUse).
 */
function buildLenientInstance() {
  return ConfigInstance.unwrap().extend({
    target_status: z.string(),
    activity_status: z.string(),
    error_status: z.string(),
  });
}
type LenientInstance = z.infer<ReturnType<typeof buildLenientInstance>>;
let lenientInstance: ReturnType<typeof buildLenientInstance> | undefined;
function lenientInstanceSchema(): ReturnType<typeof buildLenientInstance> {
  lenientInstance ??= buildLenientInstance();
  return lenientInstance;
}

const STATUS_FIELDS = [
  ['target_status', ConfigInstanceTargetStatus],
  ['activity_status', ConfigInstanceActivityStatus],
  ['error_status', ErrorStatus],
] as const;

const SHOWN_PROBLEMS = 3;

function describeIssues(issues: readonly z.core.$ZodIssue[]): string {
  const shown = issues
    .slice(0, SHOWN_PROBLEMS)
    .map((issue) => `${formatFieldPath(issue.path) || '(item)'}: ${issue.message}`);
  const more = issues.length > SHOWN_PROBLEMS ? ` (and ${issues.length - SHOWN_PROBLEMS} more)` : '';
  return `${shown.join('; ')}${more}`;
}

/** An item whose bytes were not valid UTF-8: its strings cannot be written as the service meant them. */
export function notUtf8(text: string): PageItem {
  const id = peekId(text, 1);
  const problem = 'not valid UTF-8 (JSON text must be UTF-8)';
  return id === undefined || id.includes('\uFFFD')
    ? { kind: 'invalid', problem }
    : { kind: 'invalid', id, problem };
}

const TARGET_STATUSES: ReadonlySet<unknown> = new Set(ConfigInstanceTargetStatus.options);
export const ACTIVITY_STATUSES: ReadonlySet<unknown> = new Set(ConfigInstanceActivityStatus.options);
export const ERROR_STATUSES: ReadonlySet<unknown> = new Set(ErrorStatus.options);
/** The very pattern zod's Timestamp checks; without one (another zod), every item goes to zod. */
const TIMESTAMP_PATTERN: RegExp | undefined = Timestamp._zod.pattern;

/** Whether `value` is a Timestamp as zod's takes it: by its own pattern, or by zod itself without one. */
export function isTimestamp(value: unknown): value is string {
  if (typeof value !== 'string') return false;
  return TIMESTAMP_PATTERN === undefined ? Timestamp.safeParse(value).success : TIMESTAMP_PATTERN.test(value);
}

/**
 * The everyday item (no expanded objects) checked by hand: zod costs ~0.1 ms per item and most of an idle
 * pass's validation. Returns what `ConfigInstance.parse` returns (the same fields in the same order, content
 * by reference, unknown fields dropped), or undefined whenever anything differs, for zod to judge and name.
 * src/api/list-page.test.ts compares the two on generated items.
 */
export function quickInstance(value: unknown, contentKnown = false): ConfigInstance | undefined {
  if (TIMESTAMP_PATTERN === undefined || typeof value !== 'object' || value === null) return undefined;
  const v = value as Record<string, unknown>;
  const {
    id,
    status,
    relative_filepath,
    created_at,
    updated_at,
    device_id,
    config_schema_id,
    config_type_id,
  } = v;
  if (
    v.object !== 'config_instance' ||
    !isUsableInstanceId(id) ||
    !TARGET_STATUSES.has(v.target_status) ||
    !ACTIVITY_STATUSES.has(v.activity_status) ||
    !ERROR_STATUSES.has(v.error_status) ||
    typeof status !== 'string' ||
    typeof relative_filepath !== 'string' ||
    typeof created_at !== 'string' ||
    !TIMESTAMP_PATTERN.test(created_at) ||
    typeof updated_at !== 'string' ||
    !TIMESTAMP_PATTERN.test(updated_at) ||
    typeof device_id !== 'string' ||
    typeof config_schema_id !== 'string' ||
    typeof config_type_id !== 'string' ||
    v.device !== null ||
    v.config_schema !== null ||
    v.config_type !== null ||
    (!contentKnown && contentProblem(v.content) !== undefined)
  ) {
    return undefined;
  }
  return {
    object: 'config_instance',
    id,
    target_status: v.target_status as ConfigInstance['target_status'],
    activity_status: v.activity_status as ConfigInstance['activity_status'],
    error_status: v.error_status as ConfigInstance['error_status'],
    status,
    relative_filepath,
    created_at,
    updated_at,
    device_id,
    config_schema_id,
    config_type_id,
    device: null,
    config_schema: null,
    config_type: null,
    content: v.content as ConfigInstance['content'],
  };
}

/**
 * Judges an item parsed from a compact body: what `judgeConfigInstance` gives for its text (JSON.stringify of
 * it, which parses back to an equal value; `text` when given). A valid everyday item holds nothing nested past
 * its content's 64 levels, so the hand check needs no depth guard; anything else goes through the text.
 *
 * With its exact `text`, a valid everyday item carries it and its key (`wire`), and when `known` holds that key
 * for the item's id, its content is not checked again: that very text passed every check before, under these
 * rules (ITEM_RULES_VERSION), and only ever is recorded after it did. Every other field is checked as always.
 * `textKey`: the key of `text` as a known page gave it (PageKeys), not made again.
 */
export function judgeParsedItem(
  value: unknown,
  text?: string,
  known?: KnownItems,
  textKey?: string,
): PageItem {
  if (text === undefined) {
    const quick = quickInstance(value);
    if (quick !== undefined) return { kind: 'valid', instance: quick };
    return judgeConfigInstance(JSON.stringify(value));
  }
  const key = textKey ?? itemKey(text);
  const id = typeof value === 'object' && value !== null ? (value as { id?: unknown }).id : undefined;
  const recorded =
    known !== undefined && typeof id === 'string' ? known.lookup(id, key, text.length) : undefined;
  const quick = quickInstance(value, recorded !== undefined);
  if (quick !== undefined) {
    const wire = recorded === undefined ? { text, key } : { text, key, known: recorded };
    return { kind: 'valid', instance: quick, wire };
  }
  return judgeConfigInstance(text);
}

/** Judges the text of one list item. Never throws: every outcome is a value. */
export function judgeConfigInstance(text: string): PageItem {
  let value: unknown;
  try {
    value = parseJson(text);
  } catch (error) {
    return judgeUnparsable(text, error);
  }
  return judgeInstanceValue(value);
}

/** An item whose text parseJson refused with `error`. */
function judgeUnparsable(text: string, error: unknown): PageItem {
  const id = peekId(text, 1);
  const problem =
    error instanceof JsonTooDeepError
      ? `nested more than ${MAX_PARSE_DEPTH} levels deep (content may nest ${MAX_CONTENT_DEPTH} levels)`
      : `not valid JSON: ${error instanceof Error ? error.message : String(error)}`;
  return id === undefined ? { kind: 'invalid', problem } : { kind: 'invalid', id, problem };
}

/**
 * Judges a parsed item. `contentIssue`: the problem its real content has (found on its bytes; `value` then holds
 * `{}` there), which the content schema would add after every other field's issues, as the last field's.
 */
function judgeInstanceValue(
  value: unknown,
  contentIssue?: { path: (string | number)[]; message: string },
): PageItem {
  if (contentIssue === undefined) {
    const quick = quickInstance(value);
    if (quick !== undefined) return { kind: 'valid', instance: quick };
  }
  const strict = ConfigInstance.safeParse(value);
  if (strict.success && contentIssue === undefined) return { kind: 'valid', instance: strict.data };

  if (contentIssue === undefined) {
    const lenient = lenientInstanceSchema().safeParse(value);
    if (lenient.success) {
      for (const [field, schema] of STATUS_FIELDS) {
        const raw = lenient.data[field];
        if (!schema.safeParse(raw).success) {
          return { kind: 'unknown_status', instance: lenient.data, unknown: { field, value: raw } };
        }
      }
    }
  }
  const issues: z.core.$ZodIssue[] = strict.success ? [] : [...strict.error.issues];
  if (contentIssue !== undefined) {
    issues.push({ code: 'custom', path: contentIssue.path, message: contentIssue.message, input: undefined });
  }
  const record = typeof value === 'object' && value !== null ? (value as Record<string, unknown>) : {};
  return invalidItem(isUsableInstanceId(record.id) ? record.id : undefined, record, describeIssues(issues));
}
