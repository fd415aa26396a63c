// The API key's every spelling in an output is scrubbed: as it is, JSON-escaped at any depth, percent-encoded.
import { describe, expect, it } from 'vitest';
import { createSecretRegistry, REDACTED } from './secrets.js';

function escapeJson(text: string, levels: number): string {
  let out = text;
  for (let level = 0; level < levels; level += 1) out = JSON.stringify(out).slice(1, -1);
  return out;
}

describe('createSecretRegistry', () => {
  it('scrubs a key with quotes and backslashes however many times it was JSON-escaped', () => {
    const key = 'sk_"quoted"\\back\\slash';
    const secrets = createSecretRegistry();
    secrets.add(key);
    for (let levels = 0; levels <= 4; levels += 1) {
      const text = `before ${escapeJson(key, levels)} after`;
      expect(secrets.scrub(text), `escaped ${levels} times`).toBe(`before ${REDACTED} after`);
    }
    // A log line of a message that quotes a JSON body holding the key: escaped twice.
    const line = JSON.stringify({ msg: `request body ${JSON.stringify({ key })} refused` });
    expect(secrets.scrub(line)).not.toMatch(/quoted/);
  });

  it('scrubs a percent-encoded key, as it is and JSON-escaped', () => {
    const key = 'sk_a b/c?d="e"';
    const secrets = createSecretRegistry();
    secrets.add(key);
    expect(secrets.scrub(`url ?key=${encodeURIComponent(key)}`)).toBe(`url ?key=${REDACTED}`);
    expect(secrets.scrub(`url ?key=${encodeURIComponent(escapeJson(key, 1))}`)).toBe(`url ?key=${REDACTED}`);
  });

  it('leaves text without the key alone, and ignores secrets too short to scrub', () => {
    const secrets = createSecretRegistry();
    secrets.add('abc');
    secrets.add('sk_live_123');
    expect(secrets.scrub('abc sk_live_12 sk_live_1234')).toBe(`abc sk_live_12 ${REDACTED}4`);
  });

  it('scrubs a secret that holds another one whole, whichever was added first', () => {
    for (const order of [
      ['pr0xy-s3cret', 'pr0xy-s3cret-2'],
      ['pr0xy-s3cret-2', 'pr0xy-s3cret'],
    ]) {
      const secrets = createSecretRegistry();
      for (const secret of order) secrets.add(secret);
      expect(secrets.scrub('a pr0xy-s3cret-2 b pr0xy-s3cret c'), order.join(' then ')).toBe(
        `a ${REDACTED} b ${REDACTED} c`,
      );
    }
  });
});
