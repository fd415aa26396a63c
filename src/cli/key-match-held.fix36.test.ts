// The API keys a daemon keeps looking for across reloads that rotate it: a few, newest last, each matched (fix36).
import { describe, expect, it } from 'vitest';
import { apiKeyMatcher, HELD_API_KEYS, heldApiKeys } from './compose.js';

const key = (n: number) => `sk_test_fix36_key_${String(n).padStart(4, '0')}`;

describe('heldApiKeys and apiKeyMatcher (fix36)', () => {
  it('keeps the last HELD_API_KEYS keys, once each, and matches each of them in any spelling', () => {
    let held: string[] = [];
    for (const n of [1, 2, 2, 3, 4, 5]) held = heldApiKeys(held, key(n));
    expect(HELD_API_KEYS).toBe(4);
    expect(held).toEqual([key(2), key(3), key(4), key(5)]);
    const holds = apiKeyMatcher(held);
    expect([2, 3, 4, 5].map((n) => holds?.(`path/${key(n)}.json`))).toEqual([true, true, true, true]);
    expect(holds?.(encodeURIComponent(`a ${key(3)}`))).toBe(true);
    expect(holds?.(`path/${key(1)}.json`)).toBe(false);
    expect(holds?.('production/app.json')).toBe(false);
  });

  it('passes over a short key and answers undefined without a long one', () => {
    expect(apiKeyMatcher(['prod', 'short'])).toBeUndefined();
    expect(apiKeyMatcher(undefined)).toBeUndefined();
    const holds = apiKeyMatcher(['prod', key(9)]);
    expect(holds?.('production/app.json')).toBe(false);
    expect(holds?.(key(9))).toBe(true);
  });
});
