// Content → file bytes (serialize.ts): JSON and YAML outputs read back by real parsers as the same values.
import { spawnSync } from 'node:child_process';
import { describe, expect, it } from 'vitest';
import { parse as parseYaml, stringify as stringifyYaml } from 'yaml';
import { isLosslessNumber, parseJson, stringifyJson } from '../api/json.js';
import { checkContent, JsonContentFile } from '../api/json-file.js';
import type { ConfigContent } from '../api/schemas.js';
import { serializeContent, yamlMisreads, yamlNumberText } from './serialize.js';

const content = (text: string) => parseJson(text) as ConfigContent;

/** Numbers compared by value (integers beyond 2^53 exactly), so a reader's own number syntax does not matter. */
function canonical(value: unknown): unknown {
  if (typeof value === 'number' || typeof value === 'bigint' || isLosslessNumber(value)) {
    const text = String(value);
    const exact = /^-?[0-9]+$/.test(text) && !Number.isSafeInteger(Number(text));
    return exact ? `int:${BigInt(text)}` : `num:${Number(text)}`;
  }
  if (Array.isArray(value)) return value.map(canonical);
  if (value !== null && typeof value === 'object') {
    return Object.entries(value).map(([key, item]) => [key, canonical(item)]);
  }
  return value;
}

/** Strings every common YAML reader must read back as strings (issue 8 §2 and the class they stand for). */
const AMBIGUOUS = [
  ...[
    'yes',
    'Yes',
    'YES',
    'yEs',
    'no',
    'No',
    'NO',
    'on',
    'On',
    'ON',
    'off',
    'Off',
    'OFF',
    'y',
    'Y',
    'n',
    'N',
  ],
  ...['true', 'True', 'FALSE', 'null', 'Null', 'NULL', '~', '', '<<', '='],
  ...['1:20', '190:20:30', '-1:30', '1:20.5', '0b101', '-0b11', '0x1F', '0o17', '017', '0777', '09', '1_000'],
  ...['.5', '-.5', '1.', '1.5', '1e5', '1E+5', '1.0e-3', '6.8523015e+5', '685_230.15', '+12', '-0', '0'],
  ...['.inf', '-.Inf', '+.INF', '.nan', '.NaN', '2001-12-14', '2001-12-14t21:59:43.10-05:00'],
  ...['2001-12-14 21:59:43.10 -5', '2002-12-14', ':symbol', '12345678901234567891'],
  // Each part the patterns above make optional or repeatable, taken away or repeated once.
  ...['2001-12-14 21:59:43', '2001-12-14  21:59:43', '2001-12-14T21:59:43Z', '1:2', '1:20.55', '.55'],
  ...['1e10', '-1.5e-10', '0x1f_ff', '+.nan'],
  // Floats only to the yaml package's YAML 1.1 schema (NaN): a lone dot, an exponent without a mantissa.
  ...['.', '-.', '+.', 'E5', 'e-3', '.e5', '-E+2'],
  // A byte order mark that would open the file (the first key) is dropped by readers.
  ...['\ufeff', '\ufeffkey'],
];
const ORDINARY = [
  'hello',
  'x y',
  'with: colon',
  '#hash',
  ' lead',
  'multi\nline',
  'ünïcode',
  '1st',
  'v1.2.3',
  'a:b',
  // An ambiguous form with something before or after it is an ordinary string.
  ...['x.inf', '.infinity', 'x1:20', '1:20x', '2001-12-14x', 'x2001-12-14', '1e', 'x.5', 'yes!'],
];

/**
 * Characters YAML 1.1 does not allow raw in a stream (DEL, the C1 controls, U+FFFE, U+FFFF: PyYAML refuses the
 * whole file, "unacceptable character") or takes for line breaks (NEL, LS, PS: folded to a space inside quotes,
 * a broken mapping outside), each alone, inside, at both edges and in a multi-line string.
 */
const UNPRINTABLE_CHARS = [
  ...Array.from({ length: 0xa0 - 0x7f }, (_, i) => String.fromCharCode(0x7f + i)),
  '\u2028',
  '\u2029',
  '\ufffe',
  '\uffff',
];
const UNPRINTABLE = UNPRINTABLE_CHARS.flatMap((ch) => [ch, `x${ch}y`, `${ch}x${ch}`, `l1\nx${ch}y\nl3`]);

describe('JSON output', () => {
  it('writes numbers as the service sent them (64-bit ids, nanosecond stamps, 1.0, 1e400 text)', () => {
    const text = '{"serial":12345678901234567891,"ns":1700000000123456789,"ratio":1.0,"tiny":5e-324,"n":42}';
    const bytes = serializeContent('app/settings.json', content(text)).toString('utf8');
    expect(bytes).toBe(
      `${JSON.stringify(JSON.parse(text), null, 2)}\n`.replace(
        /"serial": \d+,\n {2}"ns": \d+,\n {2}"ratio": 1,/,
        '"serial": 12345678901234567891,\n  "ns": 1700000000123456789,\n  "ratio": 1.0,',
      ),
    );
    expect(bytes).toContain('"serial": 12345678901234567891');
  });

  it('is byte-identical to the earlier JSON.stringify output for content that had no such number', () => {
    const samples = [
      { a: 1, b: [true, null, 'x', -2.5, 1e21], c: { '2': 'k', __proto__x: {} } },
      JSON.parse('{"__proto__":{"k":1},"s":"\\u0001\\ud800 é","e":[],"o":{}}'),
    ];
    for (const sample of samples) {
      const reparsed = content(JSON.stringify(sample));
      expect(serializeContent('x.json', reparsed).toString()).toBe(`${JSON.stringify(sample, null, 2)}\n`);
    }
  });
});

describe('YAML output', () => {
  it('is byte-identical to the earlier output when no string needed quoting and no number changed', () => {
    const sample = { a: 'hello', b: [1, 2.5, true, null, ...ORDINARY], c: { d: {}, e: [] }, true: 'k' };
    expect(serializeContent('x.yaml', content(JSON.stringify(sample))).toString()).toBe(
      stringifyYaml(sample, { indent: 2, lineWidth: 0 }),
    );
  });

  it('quotes every ambiguous string, as a value and as a key, and nothing ordinary', () => {
    for (const value of AMBIGUOUS) expect(yamlMisreads(value), value).toBe(true);
    for (const value of ORDINARY) expect(yamlMisreads(value), value).toBe(false);
  });

  it('a first key starting with a byte order mark keeps it', () => {
    const sample = { '\ufeff': 1, '\ufeffk': 'v' } as ConfigContent;
    const text = serializeContent('c.yaml', sample).toString();
    for (const version of ['1.2', '1.1'] as const) expect(parseYaml(text, { version })).toEqual(sample);
  });

  it('escapes every character YAML 1.1 forbids raw or reads as a line break, as a value and as a key', () => {
    for (const value of UNPRINTABLE) {
      for (const sample of [{ k: value }, { [value]: 1 }] as ConfigContent[]) {
        const text = serializeContent('c.yaml', sample).toString();
        expect(text, JSON.stringify(text)).not.toMatch(/[\x7f-\x9f\u2028\u2029\ufffe\uffff]/);
        expect(parseYaml(text, { version: '1.1' }), JSON.stringify(text)).toEqual(sample);
      }
    }
    expect(serializeContent('c.yaml', { k: 'x\u0085y\u2028' }).toString()).toBe('k: "x\\x85y\\u2028"\n');
  });

  it('writes numbers in a form 1.1 and 1.2 readers agree on', () => {
    expect(yamlNumberText('1e5')).toBe('1.0e+5');
    expect(yamlNumberText('-2.5E-3')).toBe('-2.5e-3');
    expect(yamlNumberText('12345678901234567891')).toBe('12345678901234567891');
    expect(yamlNumberText('1.0')).toBe('1.0');
    expect(yamlNumberText('1.25e5')).toBe('1.25e+5');
    expect(yamlNumberText('12E-3')).toBe('12.0e-3');
  });

  const numbers =
    '{"serial":12345678901234567891,"ns":1700000000123456789,"exp":1e5,"neg":-2.5E-3,"big":1e21,"one":1.0,"tiny":5e-324}';
  /** Tabs inside what would be a plain scalar: PyYAML refuses the whole file when one is written plain. */
  const TABBED = ['a\tb', 'x\ty z', 'say "a\tb"', "it's\ta", 'k\t1', 'multi\tline\nwith\ttabs\n'];
  const corpus = [
    content(numbers),
    Object.fromEntries(TABBED.map((value, i) => [`t${i}`, value])) as ConfigContent,
    Object.fromEntries(TABBED.map((value, i) => [value, i])) as ConfigContent,
    { list: TABBED, nested: { 'a\tb': [{ 'c\td': 'e\tf' }] } } as ConfigContent,
    Object.fromEntries(UNPRINTABLE.map((value, i) => [`u${i}`, value])) as ConfigContent,
    Object.fromEntries(UNPRINTABLE.map((value, i) => [value, i])) as ConfigContent,
    { '\ufeff': 1, '\ufeffk': 'v' } as ConfigContent,
    Object.fromEntries(AMBIGUOUS.map((value, i) => [`k${i}`, value])) as ConfigContent,
    Object.fromEntries(AMBIGUOUS.map((value, i) => [value, i])) as ConfigContent,
    { list: [...AMBIGUOUS, ...ORDINARY], nested: { deeper: [{ on: 'off' }] } } as ConfigContent,
  ];

  it('the yaml package reads the corpus back identically, as YAML 1.2 and as YAML 1.1', () => {
    for (const sample of corpus) {
      const text = serializeContent('c.yaml', sample).toString();
      for (const version of ['1.2', '1.1'] as const) {
        expect(canonical(parseYaml(text, { version, intAsBigInt: true })), `${version}\n${text}`).toEqual(
          canonical(sample),
        );
      }
    }
  });

  const python = spawnSync('python3', ['-c', 'import yaml'], { encoding: 'utf8' });
  const noPyYaml = python.status !== 0 ? 'python3 with PyYAML (python3-yaml) is not installed' : undefined;
  it.skipIf(noPyYaml !== undefined)(
    `PyYAML (YAML 1.1) reads the corpus back identically${noPyYaml ? ` — skipped: ${noPyYaml}` : ''}`,
    () => {
      // Each sample from its tree, then from its JSON text as a large item's content (yaml-stream.ts) where taken.
      const samples: ConfigContent[] = [];
      const texts: string[] = [];
      for (const sample of corpus) {
        samples.push(sample);
        texts.push(serializeContent('c.yaml', sample).toString());
        const bytes = Buffer.from(stringifyJson(sample), 'utf8');
        const checked = checkContent(bytes, 0);
        if (checked === undefined) continue;
        samples.push(sample);
        texts.push(serializeContent('c.yaml', new JsonContentFile(bytes, checked).asContent()).toString());
      }
      expect(texts.length).toBeGreaterThan(corpus.length * 1.5);
      const script =
        'import sys, json, yaml\n' +
        'docs = json.load(sys.stdin)\n' +
        'print(json.dumps([yaml.safe_load(d) for d in docs], default=lambda v: "<" + type(v).__name__ + ">"))\n';
      const run = spawnSync('python3', ['-c', script], { input: JSON.stringify(texts), encoding: 'utf8' });
      expect(run.stderr).toBe('');
      const read = parseJson(run.stdout) as unknown[];
      samples.forEach((sample, i) => {
        expect(canonical(read[i]), texts[i]).toEqual(canonical(sample));
      });
    },
  );
});
