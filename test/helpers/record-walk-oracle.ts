// Documents fed to JsonRecordWalker in random chunks, held to JSON.parse of the whole text: json-records.test.ts and state-walk.test.ts run them on a few hundred, *.scale.test.ts on thousands.
import fc from 'fast-check';
import { expect } from 'vitest';
import {
  inObjectKeyOrder,
  isArrayIndexKey,
  JsonRecordWalker,
  type RecordShape,
} from '../../src/lib/json-records.js';
import { emptyOutboxFile, outboxFileWalk, outboxSchemas } from '../../src/store/outbox.js';
import { quickStateFile, stateFileWalk, stateSchemas } from '../../src/store/state.js';
import { stateFile } from './state-file-oracle.js';

/** The document's bytes cut at `cuts` (each taken modulo its length): chunks of any size, a byte at a time too. */
export function chunks(bytes: Buffer, cuts: readonly number[]): Buffer[] {
  const at = [...new Set(cuts.map((cut) => (bytes.length === 0 ? 0 : cut % bytes.length)))].sort(
    (a, b) => a - b,
  );
  const out: Buffer[] = [];
  let from = 0;
  for (const cut of at) {
    out.push(bytes.subarray(from, cut));
    from = cut;
  }
  out.push(bytes.subarray(from));
  return out;
}

/** Feeds `bytes` to `walker` in the chunks `cuts` makes; whether it took the document whole. */
export function feed(walker: JsonRecordWalker, bytes: Buffer, cuts: readonly number[]): boolean {
  for (const chunk of chunks(bytes, cuts)) if (!walker.push(chunk)) return false;
  return walker.end();
}

/** Maps as [key, value] lists with each value's own keys, so that field order is compared too. */
export function comparable(value: unknown): unknown {
  if (value instanceof Map) return [...value].map(([key, item]) => [key, comparable(item)]);
  if (Array.isArray(value)) return value.map(comparable);
  if (typeof value === 'object' && value !== null) {
    return Object.entries(value).map(([key, item]) => [key, comparable(item)]);
  }
  return value;
}

const keyText = fc.oneof(
  fc.string({ maxLength: 6 }),
  fc.string({ unit: 'binary', maxLength: 4 }),
  fc.constantFrom(
    '__proto__',
    'constructor',
    '0',
    '1',
    '10',
    '01',
    '4294967294',
    '4294967295',
    '-1',
    'a"b',
    'é',
  ),
);

/** A JSON value's text, with the odd numbers and strings JSON.parse must be matched on. */
const valueText = fc.oneof(
  { weight: 4, arbitrary: fc.jsonValue({ maxDepth: 3 }).map((value) => JSON.stringify(value)) },
  fc.constantFrom('-0', '1E2', '1e400', '9007199254740993', '0.10', '"a\u2028b"', '"\ud800"', '"\\""'),
);

/** Members as text: `[key, value text]` pairs, a key possibly twice. */
type Members = Array<[string, string]>;
const objectText = (members: Members, space: string) =>
  `{${space}${members.map(([key, value]) => `${JSON.stringify(key)}${space}:${space}${value}`).join(`,${space}`)}${space}}`;

const records = fc.oneof(
  {
    weight: 5,
    arbitrary: fc.uniqueArray(fc.tuple(keyText, valueText), { selector: ([key]) => key, maxLength: 6 }),
  },
  fc.array(fc.tuple(keyText, valueText), { maxLength: 6 }),
);

/** The shape every generated document is walked with: a leaf, records, items, and an object of both. */
export interface WalkedParts {
  recs: Array<[string, unknown]>;
  arr: unknown[];
  innerRecs: Array<[string, unknown]>;
}

export function documentShape(parts: WalkedParts): RecordShape & { kind: 'object' } {
  const recordsInto = (list: Array<[string, unknown]>): RecordShape => ({
    kind: 'records',
    record: (key, value) => {
      if (list.some(([seen]) => seen === key)) return false;
      list.push([key, value]);
      return true;
    },
  });
  return {
    kind: 'object',
    members: new Map<string, RecordShape>([
      ['leaf', { kind: 'leaf' }],
      ['recs', recordsInto(parts.recs)],
      ['arr', { kind: 'items', item: (value) => parts.arr.push(value) > 0 }],
      [
        'obj',
        {
          kind: 'object',
          members: new Map<string, RecordShape>([
            ['x', { kind: 'leaf' }],
            ['recs', recordsInto(parts.innerRecs)],
          ]),
        },
      ],
    ]),
  };
}

/** A document of that shape (sometimes a member of another kind, a key twice, extra keys), maybe mutated. */
export const documentCase = fc
  .record({
    space: fc.constantFrom('', ' ', '\n\t', '\r\n '),
    leaf: fc.option(valueText, { nil: undefined }),
    recs: fc.option(fc.oneof({ weight: 6, arbitrary: records }, valueText), { nil: undefined }),
    arr: fc.option(fc.oneof({ weight: 6, arbitrary: fc.array(valueText, { maxLength: 5 }) }, valueText), {
      nil: undefined,
    }),
    obj: fc.option(
      fc.record({
        x: fc.option(valueText, { nil: undefined }),
        recs: fc.option(records, { nil: undefined }),
        extra: fc.option(fc.tuple(keyText, valueText), { nil: undefined }),
      }),
      { nil: undefined },
    ),
    extra: fc.array(fc.tuple(keyText, valueText), { maxLength: 2 }),
    twice: fc.option(fc.constantFrom('leaf', 'recs', 'arr', 'obj'), { nil: undefined, freq: 8 }),
    edits: fc.array(
      fc.tuple(
        fc.nat(),
        fc.constantFrom<'set' | 'drop' | 'copy'>('set', 'drop', 'copy'),
        fc.constantFrom(
          ...'{}[]",:\\ 0-e.n\t'.split('').map((c) => c.charCodeAt(0)),
          0x80,
          0xc3,
          0xe2,
          0xff,
          0x01,
        ),
      ),
      { maxLength: 3 },
    ),
    mutate: fc.boolean(),
    cuts: fc.array(fc.nat(), { maxLength: 12 }),
  })
  .map((c) => {
    const sp = c.space;
    const members: Members = [];
    const recordsText = (value: Members | string) =>
      typeof value === 'string' ? value : objectText(value, sp);
    if (c.leaf !== undefined) members.push(['leaf', c.leaf]);
    if (c.recs !== undefined) members.push(['recs', recordsText(c.recs)]);
    if (c.arr !== undefined)
      members.push(['arr', typeof c.arr === 'string' ? c.arr : `[${sp}${c.arr.join(`,${sp}`)}${sp}]`]);
    if (c.obj !== undefined) {
      const inner: Members = [];
      if (c.obj.x !== undefined) inner.push(['x', c.obj.x]);
      if (c.obj.recs !== undefined) inner.push(['recs', objectText(c.obj.recs, sp)]);
      if (c.obj.extra !== undefined) inner.push(c.obj.extra);
      members.push(['obj', objectText(inner, sp)]);
    }
    members.push(...c.extra);
    const again = c.twice === undefined ? undefined : members.find(([key]) => key === c.twice);
    if (again !== undefined) members.push(again);
    let bytes = Buffer.from(`${sp}${objectText(members, sp)}${sp}`);
    if (c.mutate) {
      for (const [at, edit, byte] of c.edits) {
        const i = bytes.length === 0 ? 0 : at % bytes.length;
        if (edit === 'set') bytes[i] = byte;
        else if (edit === 'drop') bytes = Buffer.concat([bytes.subarray(0, i), bytes.subarray(i + 1)]);
        else bytes = Buffer.concat([bytes.subarray(0, i), bytes.subarray(i, i + 8), bytes.subarray(i)]);
      }
    }
    const dupRecs = (list: Members | undefined) =>
      list !== undefined && new Set(list.map(([key]) => key)).size !== list.length;
    // The walk must take it: valid JSON of the shape, no key twice where the walk keeps values.
    const clean =
      (!c.mutate || c.edits.length === 0) &&
      again === undefined &&
      typeof c.recs !== 'string' &&
      typeof c.arr !== 'string' &&
      !dupRecs(typeof c.recs === 'string' ? undefined : c.recs) &&
      !dupRecs(c.obj?.recs ?? undefined) &&
      !(c.obj?.extra !== undefined && ['x', 'recs'].includes(c.obj.extra[0])) &&
      !c.extra.some(([key]) => ['leaf', 'recs', 'arr', 'obj'].includes(key));
    return { bytes, cuts: c.cuts, clean };
  });

/** Records as a parsed object lists them: `JSON.parse` then `Object.entries`. */
function inParsedOrder(list: Array<[string, unknown]>): Array<[string, unknown]> {
  return [...inObjectKeyOrder(new Map(list), list.filter(([key]) => isArrayIndexKey(key)).length)];
}

/**
 * Walks one generated document and holds what it took to `JSON.parse` of the whole: a walk that ends true saw
 * valid JSON and kept exactly its values (the same keys in the same order, -0 and lone surrogates included); a
 * clean document (`documentCase`) is always taken. Says whether it was.
 */
export function walkAgreesWithParse(c: { bytes: Buffer; cuts: number[]; clean: boolean }): boolean {
  const parts: WalkedParts = { recs: [], arr: [], innerRecs: [] };
  const walker = new JsonRecordWalker(documentShape(parts), 1 + ((c.cuts[0] ?? 0) % 64));
  const taken = feed(walker, c.bytes, c.cuts);
  let parsed: unknown;
  let valid = true;
  try {
    parsed = JSON.parse(c.bytes.toString('utf8'));
  } catch {
    valid = false;
  }
  if (c.clean) expect(taken).toBe(true);
  if (!taken) return false;
  expect(valid).toBe(true);
  const whole = parsed as Record<string, unknown>;
  const top = walker.top;
  expect(top.get('leaf')).toStrictEqual(whole.leaf);
  expect(top.has('leaf')).toBe(Object.hasOwn(whole, 'leaf'));
  expect(top.get('recs') === true).toBe(Object.hasOwn(whole, 'recs'));
  if (top.get('recs') === true)
    expect(inParsedOrder(parts.recs)).toStrictEqual(Object.entries(whole.recs as object));
  expect(top.get('arr') === true).toBe(Object.hasOwn(whole, 'arr'));
  if (top.get('arr') === true) expect(parts.arr).toStrictEqual(whole.arr);
  const obj = top.get('obj') as Map<string, unknown> | undefined;
  expect(obj !== undefined).toBe(Object.hasOwn(whole, 'obj'));
  if (obj !== undefined) {
    const inner = whole.obj as Record<string, unknown>;
    expect(obj.get('x')).toStrictEqual(inner.x);
    expect(obj.has('x')).toBe(Object.hasOwn(inner, 'x'));
    expect(obj.get('recs') === true).toBe(Object.hasOwn(inner, 'recs'));
    if (obj.get('recs') === true)
      expect(inParsedOrder(parts.innerRecs)).toStrictEqual(Object.entries(inner.recs as object));
  }
  return true;
}

/** `walkAgreesWithParse` on `runs` generated documents; how many were taken and how many given up. */
export function walksAgreeWithParse(runs: number): { taken: number; givenUp: number } {
  const seen = { taken: 0, givenUp: 0 };
  fc.assert(
    fc.property(documentCase, (c) => {
      if (walkAgreesWithParse(c)) seen.taken += 1;
      else seen.givenUp += 1;
    }),
    { numRuns: runs },
  );
  return seen;
}

/**
 * state.json walked (`stateFileWalk`) against `quickStateFile(JSON.parse(text))` and zod: a walk that takes the
 * file gives exactly what the hand check gives (zod agreeing), and every file the hand check takes is walked.
 */
export function stateWalkAgrees(value: unknown, cuts: readonly number[], indent: number): 'walked' | 'text' {
  const bytes = Buffer.from(JSON.stringify(value, null, indent));
  const walk = stateFileWalk();
  const taken = feed(walk.walker, bytes, cuts) && walk.accept();
  const whole: unknown = JSON.parse(bytes.toString('utf8'));
  const quick = quickStateFile(whole);
  if (quick !== undefined) expect(taken).toBe(true);
  if (!taken) return 'text';
  const strict = stateSchemas().LocalStateFile.safeParse(whole);
  expect(strict.success).toBe(true);
  expect(comparable(walk.parsed())).toStrictEqual(comparable(quick));
  return 'walked';
}

/** `stateWalkAgrees` on `runs` generated state files (state-file-oracle.ts's); how many were walked. */
export function stateWalksAgree(runs: number): { walked: number; text: number } {
  const seen = { walked: 0, text: 0 };
  fc.assert(
    fc.property(
      stateFile,
      fc.array(fc.nat(), { maxLength: 8 }),
      fc.constantFrom(0, 1),
      (value, cuts, indent) => {
        seen[stateWalkAgrees(JSON.parse(JSON.stringify(value)), cuts, indent)] += 1;
      },
    ),
    { numRuns: runs },
  );
  return seen;
}

const oddValue = fc.oneof(
  fc.constant(null),
  fc.constant(''),
  fc.string({ maxLength: 4 }),
  fc.constantFrom(-1, 1.5, 2 ** 53, -0),
  fc.boolean(),
  fc.constant({}),
);
const usually = <T>(good: fc.Arbitrary<T>) =>
  fc.oneof({ weight: 12, arbitrary: good }, { weight: 1, arbitrary: oddValue });

const outboxEntry = fc.record(
  {
    seq: usually(fc.nat({ max: 1000 })),
    instanceId: usually(fc.string({ minLength: 1, maxLength: 8 })),
    report: usually(
      fc.record(
        {
          activity_status: usually(fc.constantFrom('deployed', 'removed', 'queued', 'bogus')),
          error_status: usually(fc.constantFrom('none', 'failed', 'retrying')),
          message: usually(fc.string({ maxLength: 8 })),
        },
        { requiredKeys: ['activity_status', 'error_status'] },
      ),
    ),
    queuedAt: usually(fc.constant('2026-11-23T05:05:55.514Z')),
    attempts: usually(fc.nat({ max: 9 })),
    listedUpdatedAt: usually(fc.constant('2026-11-23T05:05:55Z')),
    listedVersion: usually(fc.constant('v1')),
    unknown: fc.constant(1),
  },
  { requiredKeys: ['seq', 'instanceId', 'report', 'queuedAt'] },
);

export const outboxFile = fc.record(
  {
    version: usually(fc.constant(1)),
    nextSeq: usually(fc.nat({ max: 1000 })),
    entries: fc.oneof({ weight: 12, arbitrary: fc.array(outboxEntry, { maxLength: 5 }) }, oddValue),
    other: fc.jsonValue({ maxDepth: 1 }),
  },
  { requiredKeys: ['version', 'nextSeq', 'entries'] },
);

/**
 * outbox.json walked (`outboxFileWalk`) against what the outbox made of `JSON.parse(text)` (`emptyOutboxFile`,
 * else zod's `OutboxFile`): a walk that takes the file gives exactly that, and every file zod takes is walked.
 */
export function outboxWalkAgrees(value: unknown, cuts: readonly number[]): 'walked' | 'text' {
  const bytes = Buffer.from(JSON.stringify(value));
  const walk = outboxFileWalk();
  const taken = feed(walk.walker, bytes, cuts) && walk.accept();
  const whole: unknown = JSON.parse(bytes.toString('utf8'));
  const empty = emptyOutboxFile(whole);
  const strict =
    empty === undefined ? outboxSchemas().OutboxFile.safeParse(whole) : { success: true, data: empty };
  expect(taken).toBe(strict.success);
  if (!taken) return 'text';
  expect(comparable(walk.parsed())).toStrictEqual(comparable(strict.data));
  return 'walked';
}

/** `outboxWalkAgrees` on `runs` generated outbox files; how many were walked. */
export function outboxWalksAgree(runs: number): { walked: number; text: number } {
  const seen = { walked: 0, text: 0 };
  fc.assert(
    fc.property(outboxFile, fc.array(fc.nat(), { maxLength: 8 }), (value, cuts) => {
      seen[outboxWalkAgrees(JSON.parse(JSON.stringify(value)), cuts)] += 1;
    }),
    { numRuns: runs },
  );
  return seen;
}
