// The agent's YAML emitter against the yaml-package serializer it replaced, on 300 generated documents per property
// (YAML_DIFF_RUNS), on wide content past the emitter's chunks and on every token repeated 300 times: seconds of CPU,
// so with the integration tier.
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import {
  content,
  expectSameBytes,
  expectSameStreamed,
  jsonOf,
  objectOf,
  placements,
  RUNS,
  readBack,
  SEED,
  TOKENS,
} from '../../test/helpers/yaml-oracle.js';
import { parseJson, stringifyJson } from '../api/json.js';
import { checkContent } from '../api/json-file.js';
import type { ConfigContent } from '../api/schemas.js';
import { yamlBytesFromJson } from './yaml-stream.js';
import { yamlBytes } from './yaml-text.js';

describe('yamlBytes', () => {
  it('writes what the yaml package wrote, byte for byte, for generated content', () => {
    fc.assert(fc.property(content, expectSameBytes), { numRuns: RUNS, seed: SEED });
  });

  it('reads back as the content through a YAML 1.2 and a YAML 1.1 reader, for generated content', () => {
    fc.assert(
      fc.property(content, (sample) => {
        const text = yamlBytes(sample).toString('utf8');
        expect(readBack(text), JSON.stringify(text)).toBe(jsonOf(sample));
      }),
      { numRuns: RUNS, seed: SEED },
    );
  });

  it('writes what the yaml package wrote for each token repeated 300 times as a value, a key, a list item, at three depths', () => {
    // The shorter forms of each token: yaml-text.test.ts (unit tier).
    for (const token of TOKENS) for (const sample of placements(token.repeat(300))) expectSameBytes(sample);
  });

  it('writes wide content, in more than one chunk, as before', () => {
    // 10,000 members: well over two of Utf8Chunks' 64 K-character chunks (asserted), a quarter of a second.
    const wide = objectOf(
      Array.from({ length: 10_000 }, (_, i) => [
        `key${i}`,
        i % 3 === 0 ? `v${i}\nline` : i % 3 === 1 ? 'on' : i,
      ]),
    ) as ConfigContent;
    const list = { list: Array.from({ length: 10_000 }, (_, i) => ({ i, s: `é${i}` })) } as ConfigContent;
    for (const content of [wide, list]) {
      expect(yamlBytes(content).length).toBeGreaterThan(2 * 65_536);
      expectSameBytes(content);
    }
  });
});

describe('yamlBytesFromJson (a large item streamed to a YAML path)', () => {
  it('writes what yamlBytes writes for the parsed text, byte for byte, for generated content', () => {
    let taken = 0;
    fc.assert(
      fc.property(content, (sample) => {
        if (expectSameStreamed(sample)) taken++;
      }),
      { numRuns: RUNS, seed: SEED },
    );
    // Many samples have no integer-like or __proto__ key nor 1e400: the comparison is not only of refusals.
    expect(taken).toBeGreaterThan(RUNS * 0.2);
  });

  it('reads back as the content through a YAML 1.2 and a YAML 1.1 reader, for generated content', () => {
    fc.assert(
      fc.property(content, (sample) => {
        const bytes = Buffer.from(stringifyJson(sample), 'utf8');
        const checked = checkContent(bytes, 0);
        if (checked === undefined) return;
        const text = yamlBytesFromJson(bytes, checked.start, checked.end).toString('utf8');
        expect(readBack(text), JSON.stringify(text)).toBe(
          jsonOf(parseJson(bytes.toString()) as ConfigContent),
        );
      }),
      { numRuns: RUNS, seed: SEED },
    );
  });

  it('writes what yamlBytes writes for each token repeated 300 times as a value, a key, a list item, at three depths', () => {
    for (const token of TOKENS)
      for (const sample of placements(token.repeat(300))) expectSameStreamed(sample);
  });

  it('writes wide content, in more than one chunk, as yamlBytes does', () => {
    const wide = objectOf(
      Array.from({ length: 10_000 }, (_, i) => [
        `key${i}`,
        i % 3 === 0 ? `v${i}\nline` : i % 3 === 1 ? 'on' : i,
      ]),
    ) as ConfigContent;
    const list = { list: Array.from({ length: 10_000 }, (_, i) => ({ i, s: `é${i}` })) } as ConfigContent;
    for (const content of [wide, list]) {
      expect(yamlBytes(content).length).toBeGreaterThan(2 * 65_536);
      expect(expectSameStreamed(content)).toBe(true);
    }
  });
});
