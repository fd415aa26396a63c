// The generated list items that the hand checks of src/api/list-page.ts are held to against zod and the text path:
// list-page.test.ts runs the properties over a few hundred items, list-page.scale.test.ts over thousands.
import fc from 'fast-check';
import { expect } from 'vitest';
import { LosslessNumber } from '../../src/api/json.js';
import { judgeConfigInstance, judgeParsedItem, quickInstance } from '../../src/api/list-page.js';
import { ConfigInstance, isCleanContent, locateContentProblem } from '../../src/api/schemas.js';

export const T0 = '2025-01-01T00:00:00Z';

export function item(overrides: Record<string, unknown> = {}): Record<string, unknown> {
  return {
    object: 'config_instance',
    id: 'cfg_1',
    target_status: 'deployed',
    activity_status: 'deployed',
    error_status: 'none',
    status: 'deployed',
    relative_filepath: 'app/a.json',
    created_at: T0,
    updated_at: T0,
    device_id: 'dev_1',
    config_schema_id: 'sch_1',
    config_type_id: 'typ_1',
    device: null,
    config_schema: null,
    config_type: null,
    content: { port: 8080 },
    ...overrides,
  };
}

/** The hand check either says nothing or says exactly what zod says: same fields, same order, same values. */
export function agreesWithZod(value: unknown): 'quick' | 'zod' {
  const quick = quickInstance(value);
  const strict = ConfigInstance.safeParse(value);
  if (quick === undefined) return 'zod';
  expect(strict.success).toBe(true);
  expect(Object.keys(quick)).toEqual(Object.keys(strict.data ?? {}));
  expect(quick).toStrictEqual(strict.data);
  expect(quick.content).toBe((value as { content: unknown }).content);
  return 'quick';
}

export const anyValue = fc.oneof(
  fc.constant(undefined),
  fc.constant(null),
  fc.string({ maxLength: 30 }),
  fc.integer(),
  fc.double(),
  fc.boolean(),
  fc.constant([]),
  fc.constant({}),
  fc.constant({ object: 'device', id: 'dev_1' }),
);
export const validTimestamp = fc.oneof(
  fc.constantFrom(T0, '2024-02-29T23:59:59.123+02:00', '2025-06-30T12:00:00.5-11:30'),
  fc
    .date({ noInvalidDate: true, min: new Date('0001-01-01'), max: new Date('9999-12-31') })
    .map((d) => d.toISOString()),
);
export const timestamp = fc.oneof(
  fc.constant(T0),
  fc.constant('2024-02-29T23:59:59.123+02:00'),
  fc.constant('2023-02-29T00:00:00Z'),
  fc.constant('2025-01-01T00:00Z'),
  fc.constant('2025-01-01 00:00:00Z'),
  fc.constant('2025-01-01T24:00:00Z'),
  fc.constant('2025-01-01T00:00:00'),
  fc
    .date({ noInvalidDate: true, min: new Date('0001-01-01'), max: new Date('9999-12-31') })
    .map((d) => d.toISOString()),
  fc.string({ maxLength: 25 }),
);
export const content = fc.oneof(
  fc.jsonValue({ maxDepth: 4 }),
  fc.constant({ a: { b: Number.NaN } }),
  fc.constant({ n: Number.POSITIVE_INFINITY }),
  fc.constant(Object.create(null)),
  fc.constant({ d: new Date(0) }),
  fc.constant({ __proto__: null, x: [1, { y: 'z' }] }),
);

/**
 * quickInstance never disagrees with zod on `runs` generated items (a valid one, then one field mutated or dropped).
 * Returns how many the hand check took and how many it left to zod: both must be many, or the comparison is vacuous.
 */
export function quickInstanceAgreesWithZod(runs: number): { quick: number; zod: number } {
  const fields = Object.keys(item());
  const outcomes = { quick: 0, zod: 0 };
  fc.assert(
    fc.property(
      fc.record({
        id: fc.string({ maxLength: 20 }),
        target_status: fc.constantFrom(...ConfigInstance.unwrap().shape.target_status.options),
        activity_status: fc.constantFrom(...ConfigInstance.unwrap().shape.activity_status.options),
        error_status: fc.constantFrom(...ConfigInstance.unwrap().shape.error_status.options),
        status: fc.string({ maxLength: 12 }),
        relative_filepath: fc.string({ maxLength: 20 }),
        created_at: validTimestamp,
        updated_at: validTimestamp,
        content: fc.oneof(
          { arbitrary: fc.dictionary(fc.string(), fc.jsonValue({ maxDepth: 3 })), weight: 4 },
          content,
        ),
      }),
      // Which field goes wrong (none when past the end), with what, and whether it is dropped instead.
      fc.nat({ max: fields.length * 2 }),
      fc.oneof(anyValue, timestamp, fc.constantFrom('archived', 'Deployed', '')),
      fc.boolean(),
      (valid, which, bad, drop) => {
        const value: Record<string, unknown> = item(valid);
        const field = fields[which];
        if (field !== undefined && drop) delete value[field];
        else if (field !== undefined) value[field] = bad;
        outcomes[agreesWithZod(value)] += 1;
      },
    ),
    { numRuns: runs },
  );
  return outcomes;
}

/**
 * judgeParsedItem gives what judgeConfigInstance gives for the text, on `runs` generated items with one field
 * mutated. Returns how many were valid and how many not.
 */
export function parsedItemJudgedAsText(runs: number): { valid: number; other: number } {
  const fields = Object.keys(item());
  const kinds = { valid: 0, other: 0 };
  fc.assert(
    fc.property(
      fc.record({
        id: fc.string({ maxLength: 20 }),
        target_status: fc.constantFrom(...ConfigInstance.unwrap().shape.target_status.options, 'retired'),
        activity_status: fc.constantFrom(...ConfigInstance.unwrap().shape.activity_status.options),
        created_at: validTimestamp,
        content: fc.oneof(
          { arbitrary: fc.dictionary(fc.string(), fc.jsonValue({ maxDepth: 3 })), weight: 4 },
          content,
        ),
      }),
      fc.nat({ max: fields.length * 2 }),
      fc.oneof(anyValue, timestamp),
      (valid, which, bad) => {
        const value: Record<string, unknown> = item(valid);
        const field = fields[which];
        if (field !== undefined) value[field] = bad;
        const text = JSON.stringify(value);
        // What the native parse of a compact body holds for this item.
        const verdict = judgeParsedItem(JSON.parse(text));
        expect(verdict).toEqual(judgeConfigInstance(text));
        kinds[verdict.kind === 'valid' ? 'valid' : 'other'] += 1;
      },
    ),
    { numRuns: runs },
  );
  return kinds;
}

/**
 * isCleanContent says clean exactly when locateContentProblem finds nothing, on `runs` generated contents: JSON
 * values, values no JSON text holds (NaN, a LosslessNumber out of range, a Date, a function, ...) and nestings of
 * both. Returns how many were clean and how many not.
 */
export function cleanAgreesWithLocate(runs: number): { clean: number; not: number } {
  const odd = fc.constantFrom<unknown>(
    Number.NaN,
    Number.POSITIVE_INFINITY,
    new LosslessNumber('1e400'),
    new LosslessNumber('12345678901234567891'),
    new Date(0),
    new Map(),
    Object.create(null),
    undefined,
    () => 1,
    Symbol('s'),
    10n,
  );
  const value = fc.letrec((tie) => ({
    node: fc.oneof(
      { arbitrary: fc.jsonValue({ maxDepth: 2 }), weight: 6 },
      { arbitrary: odd, weight: 1 },
      { arbitrary: fc.array(tie('node'), { maxLength: 3 }), weight: 2 },
      { arbitrary: fc.dictionary(fc.string({ maxLength: 4 }), tie('node'), { maxKeys: 3 }), weight: 2 },
    ),
  })).node;
  const outcomes = { clean: 0, not: 0 };
  fc.assert(
    fc.property(fc.oneof(value, fc.dictionary(fc.string({ maxLength: 4 }), value)), (content) => {
      const clean = isCleanContent(content);
      expect(clean).toBe(locateContentProblem(content) === undefined);
      outcomes[clean ? 'clean' : 'not'] += 1;
    }),
    { numRuns: runs },
  );
  return outcomes;
}
