// sameJson against JSON.stringify: equal exactly when the two serialise to the same text, fields in any order.
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { sameJson } from './state-snapshot.js';

/** JSON.stringify with every object's fields in sorted order: the order JSON.parse keeps does not matter. */
function canonical(value: unknown): string {
  return JSON.stringify(value, (_key, item: unknown) =>
    typeof item === 'object' && item !== null && !Array.isArray(item)
      ? Object.fromEntries(Object.entries(item).sort(([a], [b]) => (a < b ? -1 : 1)))
      : item,
  );
}

const leaf = fc.oneof(fc.constantFrom('a', 'b', ''), fc.integer({ min: -2, max: 2 }));
// A field may hold undefined (JSON.stringify leaves it out); an array never does in a record.
const record = fc.letrec((tie) => ({
  value: fc.oneof({ depthSize: 'small' }, leaf, fc.array(tie('value'), { maxLength: 3 }), tie('object')),
  field: fc.oneof(tie('value'), fc.constant(undefined)),
  object: fc.dictionary(fc.constantFrom('x', 'y', 'z', 'w'), tie('field'), { maxKeys: 4 }),
})).object;

describe('sameJson', () => {
  it('is true exactly when both serialise to the same JSON, fields in any order, undefined fields absent', () => {
    fc.assert(
      fc.property(record, record, (a, b) => {
        expect(sameJson(a, b)).toBe(canonical(a) === canonical(b));
        // A copy with its fields reversed is the same JSON.
        const reversed = Object.fromEntries(Object.entries(a).reverse());
        expect(sameJson(a, reversed)).toBe(true);
      }),
      { numRuns: 2000 },
    );
  });

  it('tells an array from an object and null from an object', () => {
    expect(sameJson([], {})).toBe(false);
    expect(sameJson({}, [])).toBe(false);
    expect(sameJson(null, {})).toBe(false);
    expect(sameJson({ a: undefined }, {})).toBe(true);
    expect(sameJson({ a: 1 }, { b: 1 })).toBe(false);
  });

  it('never takes a hole in an array for the value at that index (written as null, so unequal)', () => {
    // biome-ignore lint/suspicious/noSparseArray: the hole is the case
    expect(sameJson([, 1], ['x', 1])).toBe(false);
    // biome-ignore lint/suspicious/noSparseArray: the hole is the case
    expect(sameJson({ dirs: ['a', 'b'] }, { dirs: [, 'b'] })).toBe(false);
  });
});
