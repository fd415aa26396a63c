// withoutBom takes off a byte order mark only when all three of its bytes are there (client.bom.test.ts has the rest).
import { describe, expect, it } from 'vitest';
import { withoutBom } from './json-bytes.js';

describe('withoutBom', () => {
  it.each([
    ['the first byte differs', [0x80, 0xbb, 0xbf, 0x7b, 0x7d]],
    ['the second byte differs', [0xef, 0x80, 0xbf, 0x7b, 0x7d]],
    ['the third byte differs', [0xef, 0xbb, 0x80, 0x7b, 0x7d]],
    ['only the first byte', [0xef, 0x7b, 0x7d]],
  ])('%s: the body is kept whole', (_name, bytes) => {
    expect([...withoutBom(Buffer.from(bytes))]).toEqual(bytes);
  });

  it('all three: exactly those three go', () => {
    expect([...withoutBom(Buffer.from([0xef, 0xbb, 0xbf, 0xef, 0xbb, 0xbf, 0x7b]))]).toEqual([
      0xef, 0xbb, 0xbf, 0x7b,
    ]);
  });
});
