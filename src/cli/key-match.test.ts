// Where the API key is looked for outside the log (listed paths, hooks' variables): never for a key short enough to match ordinary text.
import { describe, expect, it } from 'vitest';
import { apiKeyMatcher, KEY_MATCH_MIN_LENGTH, withoutKeyValues } from './compose.js';

const KEY = 'sk_live_0123456789abcdef';

describe('apiKeyMatcher', () => {
  it('finds a long key as written, escaped or percent-encoded, and nothing else', () => {
    const holds = apiKeyMatcher(KEY);
    expect(holds?.(`etc/${KEY}.json`)).toBe(true);
    expect(holds?.(`etc/${encodeURIComponent(`${KEY}/`)}x.json`)).toBe(true);
    expect(holds?.('etc/app.json')).toBe(false);
  });

  it('looks for no key shorter than the bound: `prod` must not refuse production/...', () => {
    expect(KEY_MATCH_MIN_LENGTH).toBeGreaterThan(4);
    expect(apiKeyMatcher('prod')).toBeUndefined();
    expect(apiKeyMatcher('x'.repeat(KEY_MATCH_MIN_LENGTH - 1))).toBeUndefined();
    expect(apiKeyMatcher(undefined)).toBeUndefined();
    expect(apiKeyMatcher('x'.repeat(KEY_MATCH_MIN_LENGTH))?.(`a/${'x'.repeat(KEY_MATCH_MIN_LENGTH)}`)).toBe(
      true,
    );
  });
});

describe('withoutKeyValues (hooks inherit the environment without the key)', () => {
  const env = { PATH: '/opt/product/bin:/usr/bin', TOKEN: `--key=${KEY}`, KEEP: 'yes' };

  it('drops every variable whose value holds a long key, keeps the rest', () => {
    expect(withoutKeyValues(env, KEY)).toEqual({ PATH: '/opt/product/bin:/usr/bin', KEEP: 'yes' });
  });

  it('drops nothing for a short key: a key `prod` would have taken PATH away from every hook', () => {
    expect(withoutKeyValues(env, 'prod')).toEqual(env);
  });
});
