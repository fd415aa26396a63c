// The hand checks of list items against zod and the text path on 1,500 generated items per property (isCleanContent on
// 2,000): seconds of CPU, so with the integration tier; list-page.test.ts runs the same properties on 300
// (test/helpers/list-item-oracle.ts).
import { describe, expect, it } from 'vitest';
import {
  cleanAgreesWithLocate,
  parsedItemJudgedAsText,
  quickInstanceAgreesWithZod,
} from '../../test/helpers/list-item-oracle.js';

describe('quickInstance', () => {
  it('never disagrees with zod on 1,500 generated items (a valid one, then one field mutated or dropped)', () => {
    const outcomes = quickInstanceAgreesWithZod(1_500);
    // Both paths were taken often: the comparison is not vacuous.
    expect(outcomes.quick).toBeGreaterThan(300);
    expect(outcomes.zod).toBeGreaterThan(300);
  });
});

describe('items of a compact body judged on their values', () => {
  it('judgeParsedItem gives what judgeConfigInstance gives for the text (1,500 generated items, one field mutated)', () => {
    const kinds = parsedItemJudgedAsText(1_500);
    expect(kinds.valid).toBeGreaterThan(200);
    expect(kinds.other).toBeGreaterThan(200);
  });
});

describe('isCleanContent', () => {
  it('says clean exactly when locateContentProblem finds nothing (2,000 generated contents)', () => {
    const outcomes = cleanAgreesWithLocate(2_000);
    expect(Math.min(outcomes.clean, outcomes.not)).toBeGreaterThan(200);
  });
});
