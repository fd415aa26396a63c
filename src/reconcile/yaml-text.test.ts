// The agent's YAML emitter against the yaml-package serializer it replaced (test/helpers/yaml-oracle.ts): byte for
// byte on tokens of every class, deep nesting and number forms, so no deployed YAML file is rewritten after an
// upgrade. The properties over hundreds of generated documents, wide content and each token repeated 300 times:
// yaml-text.scale.test.ts.
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { parse as parseYaml } from 'yaml';
import {
  deep,
  expectSameBytes,
  expectSameStreamed,
  jsonOf,
  NUMBER_TEXTS,
  placements,
  RUNS,
  readBack,
  SEED,
  TOKENS,
  tokenForms,
} from '../../test/helpers/yaml-oracle.js';
import { LosslessNumber, parseJson } from '../api/json.js';
import { checkContent } from '../api/json-file.js';
import type { ConfigContent } from '../api/schemas.js';
import { yamlBytesFromJson } from './yaml-stream.js';
import { yamlBytes } from './yaml-text.js';

describe('yamlBytes', () => {
  it('writes what the yaml package wrote for content nested up to 65 levels deep', () => {
    fc.assert(fc.property(deep, expectSameBytes), { numRuns: Math.ceil(RUNS / 5), seed: SEED });
  });

  it('writes what the yaml package wrote for each token as a value, a key, a list item, at three depths', () => {
    // Each token repeated 300 times (keys over 1024 characters): yaml-text.scale.test.ts.
    for (const token of TOKENS) {
      for (const long of tokenForms(token)) for (const sample of placements(long)) expectSameBytes(sample);
    }
  });

  it('reads back what the old serializer lost: blank-only lines, a folded blank line, a long escaped key, `.`', () => {
    const long = 'and then a text long enough to be folded';
    const samples = [
      // Blank-only multi-line values were literal blocks whose blank lines a reader takes as empty: ' \n' read '\n'.
      { k: ' \n' },
      { k: ' \n \n' },
      { k: ' \t\n\t \n' },
      { k: ['  \n\n \n'] },
      // A line of one space between breaks, in a folded double-quoted value, read back as a backslash and a space.
      { k: `\u0007\n \n \n ${long}` },
      { k: `\u0007a\n \n${long}` },
      // A key of 200 LS written as 1,200 characters of escapes: an implicit key over 1024, which no reader takes.
      { ['\u2028'.repeat(200)]: 1 },
      { k: { ['\x85'.repeat(300)]: ['\u2029'.repeat(300)] } },
      // Plain, these were NaN to the yaml package as YAML 1.1.
      { '.': '.', k: ['-.', 'E5', '.e5', '+e-3'] },
    ] as ConfigContent[];
    for (const sample of samples) {
      const text = yamlBytes(sample).toString('utf8');
      expect(readBack(text), JSON.stringify(text)).toBe(jsonOf(sample));
    }
  });

  it('writes every number form as before: integers, exponents, -0, texts kept from the service', () => {
    const numbers = [0, -0, 1, -1, 0.5, 1e21, 1e-7, 5e-324, 1.7976931348623157e308, 123456789.125, -2.5e-300];
    const lossless = NUMBER_TEXTS.map((t) => new LosslessNumber(t));
    expectSameBytes({ numbers, lossless, n: -0, l: new LosslessNumber('1E5') } as unknown as ConfigContent);
  });

  it('writes empty and nested empty collections, and an empty document, as before', () => {
    const samples = [{}, { a: {} }, { a: [] }, { a: [[], {}, [[]], [{}]] }, { a: { b: {} } }, { '': {} }];
    for (const sample of samples) expectSameBytes(sample as ConfigContent);
    expect(yamlBytes({}).toString()).toBe('{}\n');
  });

  it('keeps a __proto__ key and integer-like keys in the order the object has them', () => {
    const sample = JSON.parse('{"b":1,"__proto__":{"x":"on"},"10":2,"2":[3]}') as ConfigContent;
    expectSameBytes(sample);
    expect(parseYaml(yamlBytes(sample).toString())).toEqual(sample);
  });
});

describe('yamlBytesFromJson (a large item streamed to a YAML path)', () => {
  it('writes nothing for a text it was not given checked: a region ending elsewhere, a bad separator, an open string', () => {
    const text = Buffer.from('{"a":1} ');
    expect(yamlBytesFromJson(text, 0, 7).toString()).toBe('a: 1\n');
    expect(() => yamlBytesFromJson(text, 0, 8)).toThrow('content text ends elsewhere than it was checked to');
    expect(() => yamlBytesFromJson(Buffer.from('{"a":1 x}'), 0, 9)).toThrow(
      'unchecked content text at byte 7',
    );
    expect(() => yamlBytesFromJson(Buffer.from('{"a'), 0, 3)).toThrow('unchecked content text at byte 1');
  });

  it('writes what yamlBytes writes for content nested up to 63 levels deep', () => {
    let taken = 0;
    fc.assert(
      fc.property(deep, (sample) => {
        if (expectSameStreamed(sample)) taken++;
      }),
      { numRuns: Math.ceil(RUNS / 5), seed: SEED },
    );
    expect(taken).toBeGreaterThan(0);
  });

  it('writes what yamlBytes writes for each token as a value, a key, a list item, at three depths', () => {
    // Each token repeated 300 times (keys over 1024 characters): yaml-text.scale.test.ts.
    for (const token of TOKENS) {
      for (const long of tokenForms(token)) for (const sample of placements(long)) expectSameStreamed(sample);
    }
  });

  it("writes every number form as the usual path does: exponents, -0, 1.0, integers past a double's digits", () => {
    // 1e400 is beyond a double: not content, refused by both paths.
    const texts = [
      ...NUMBER_TEXTS.filter((t) => t !== '1e400'),
      '0',
      '-0.0',
      '1e21',
      '1e+21',
      '5e-324',
      '1.7976931348623157e308',
      '9007199254740993',
    ];
    const text = `{"n":[${texts.join(',')}],"m":{${texts.map((t, k) => `"k${k}":${t}`).join(',')}}}`;
    const bytes = Buffer.from(text, 'utf8');
    const checked = checkContent(bytes, 0);
    expect(checked).toBeDefined();
    const streamed = yamlBytesFromJson(bytes, checked!.start, checked!.end).toString('utf8');
    expect(streamed).toBe(yamlBytes(parseJson(text) as ConfigContent).toString('utf8'));
    expect(streamed).toContain('- 1.0e+21\n');
    expect(streamed).toContain('- -0\n');
  });
});

describe('the yaml package', () => {
  it('is a devDependency only: no module the build ships imports it', async () => {
    const { readdir, readFile } = await import('node:fs/promises');
    const pkg = JSON.parse(await readFile('package.json', 'utf8')) as {
      dependencies: object;
      devDependencies: object;
    };
    expect(Object.keys(pkg.dependencies)).not.toContain('yaml');
    expect(Object.keys(pkg.devDependencies)).toContain('yaml');
    const shipped = (await readdir('src', { recursive: true })).filter(
      (file) => file.endsWith('.ts') && !file.endsWith('.test.ts'),
    );
    const importing = [];
    for (const file of shipped) {
      if (/from 'yaml'|import\('yaml'\)/.test(await readFile(`src/${file}`, 'utf8'))) importing.push(file);
    }
    expect(importing).toEqual([]);
  });
});
