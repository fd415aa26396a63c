// quickStateFile against zod on 2,000 generated state files: seconds of CPU, so with the integration tier;
// state-quick.test.ts runs the same property on 600 (test/helpers/state-file-oracle.ts).
import { describe, expect, it } from 'vitest';
import { stateFilesAgreeWithZod } from '../../test/helpers/state-file-oracle.js';

describe('quickStateFile', () => {
  it('agrees with zod on 2,000 generated files', () => {
    const seen = stateFilesAgreeWithZod(2_000);
    // Both paths were exercised. About one generated file in 29 is wholly valid: 69.8 of 2,000 on average over
    // 100 seeds (41 the fewest of 60), so a bound of 50 failed about one run in a hundred; 20 is six standard
    // deviations below the mean.
    expect(seen.quick).toBeGreaterThan(20);
    expect(seen.zod).toBeGreaterThan(50);
  });
});
