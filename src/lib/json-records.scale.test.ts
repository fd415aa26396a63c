// JsonRecordWalker, stateFileWalk and outboxFileWalk against JSON.parse of the whole text on thousands of generated documents: seconds of CPU, so with the integration tier; json-records.test.ts and state-walk.test.ts run a few hundred.
import { describe, expect, it } from 'vitest';
import {
  outboxWalksAgree,
  stateWalksAgree,
  walksAgreeWithParse,
} from '../../test/helpers/record-walk-oracle.js';

describe('records walked against the whole text parsed', () => {
  it('JsonRecordWalker takes exactly what JSON.parse gives on 5,000 generated documents', () => {
    const seen = walksAgreeWithParse(5_000);
    // ~16 % taken (json-records.test.ts): ~780 of 5,000.
    expect(seen.taken).toBeGreaterThan(400);
    expect(seen.givenUp).toBeGreaterThan(2_000);
  });

  it('stateFileWalk agrees with quickStateFile and zod on 2,000 generated state files', () => {
    const seen = stateWalksAgree(2_000);
    // About one in 29 wholly valid: 41 the fewest of 60 seeds (state-quick.scale.test.ts).
    expect(seen.walked).toBeGreaterThan(20);
    expect(seen.text).toBeGreaterThan(500);
  });

  it('outboxFileWalk agrees with the outbox (emptyOutboxFile, else zod) on 2,000 generated outbox files', () => {
    const seen = outboxWalksAgree(2_000);
    expect(seen.walked).toBeGreaterThan(100);
    expect(seen.text).toBeGreaterThan(100);
  });
});
