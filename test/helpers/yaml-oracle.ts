// The yaml-package serializer the agent's YAML emitter replaced, kept as the oracle, and generators of content for
// it: shared by src/reconcile/yaml-text.test.ts (unit tier) and yaml-text.scale.test.ts (hundreds of generated cases).
import fc from 'fast-check';
import { expect } from 'vitest';
import { Document, parse as parseYaml, type ScalarTag, visit } from 'yaml';
import { isLosslessNumber, LosslessNumber, parseJson, stringifyJson } from '../../src/api/json.js';
import { checkContent } from '../../src/api/json-file.js';
import type { ConfigContent } from '../../src/api/schemas.js';
import { yamlBytesFromJson } from '../../src/reconcile/yaml-stream.js';
import { yamlBytes, yamlMisreads, yamlNumberText } from '../../src/reconcile/yaml-text.js';

/** Cases per property, and the seed: `YAML_DIFF_RUNS=100000 YAML_DIFF_SEED=7` for a long local run. */
export const RUNS = Number(process.env.YAML_DIFF_RUNS ?? 300);
export const SEED = Number(process.env.YAML_DIFF_SEED ?? 20261124);

// The serializer as it was up to this change (src/reconcile/serialize.ts before the emitter), kept as the oracle.
const losslessNumberTag: ScalarTag = {
  identify: (value) => isLosslessNumber(value),
  default: true,
  tag: 'tag:yaml.org,2002:float',
  test: /^\b$/,
  resolve: (source) => source,
  stringify: ({ value }) => yamlNumberText(String(value)),
};

function withExponentNumbersAsText(value: unknown): unknown {
  if (typeof value === 'number') {
    const text = String(value);
    return /e/i.test(text) ? new LosslessNumber(text) : value;
  }
  if (Array.isArray(value)) return value.map(withExponentNumbersAsText);
  if (value !== null && typeof value === 'object' && !isLosslessNumber(value)) {
    const out: Record<string, unknown> = {};
    for (const [key, item] of Object.entries(value)) {
      Object.defineProperty(out, key, {
        value: withExponentNumbersAsText(item),
        enumerable: true,
        writable: true,
        configurable: true,
      });
    }
    return out;
  }
  return value;
}

const YAML_RAW_UNSAFE = /[\x7f-\x9f\u2028\u2029\ufffe\uffff]/;
const YAML_RAW_UNSAFE_ALL = new RegExp(YAML_RAW_UNSAFE.source, 'g');

function yamlEscape(char: string): string {
  const code = char.charCodeAt(0);
  return code <= 0xff ? `\\x${code.toString(16)}` : `\\u${code.toString(16)}`;
}

export function yamlPackageText(content: ConfigContent): string {
  const doc = new Document(withExponentNumbersAsText(content), { customTags: [losslessNumberTag] });
  let unsafe = false;
  visit(doc, {
    Scalar(_key, node) {
      if (typeof node.value !== 'string') return;
      if (YAML_RAW_UNSAFE.test(node.value)) {
        unsafe = true;
        node.type = 'QUOTE_DOUBLE';
      } else if (yamlMisreads(node.value)) node.type = 'QUOTE_DOUBLE';
      // The one deliberate change: a tab in what would be a plain scalar is quoted (PyYAML refuses it plain),
      // single-quoted when the string has double quotes and no single ones, as the package picks.
      else if (node.value.includes('\t') && !node.value.includes('\n')) {
        node.type = node.value.includes('"') && !node.value.includes("'") ? 'QUOTE_SINGLE' : 'QUOTE_DOUBLE';
      }
    },
  });
  const text = doc.toString({ indent: 2, lineWidth: 0 });
  return unsafe ? text.replace(YAML_RAW_UNSAFE_ALL, yamlEscape) : text;
}

/** An object with these own keys in order, `__proto__` included as an own key. */
export function objectOf(entries: readonly (readonly [string, unknown])[]): Record<string, unknown> {
  const out: Record<string, unknown> = {};
  for (const [key, value] of entries) {
    Object.defineProperty(out, key, { value, enumerable: true, writable: true, configurable: true });
  }
  return out;
}

/** Whole strings of every class some reader misreads, and of every class that needs a quote style or a block. */
export const TOKENS = [
  ...['yes', 'No', 'ON', 'off', 'y', 'N', 'true', 'False', 'NULL', 'null', '~', '', '<<', '=', 'Yes', 'oFF'],
  ...['0', '-0', '+12', '017', '0b101', '0o17', '0x1F', '0x1f_ff', '1_000', '12345678901234567891', '09'],
  ...['.5', '1.', '1.5', '1e5', '1E+5', '-1.5e-10', '685_230.15', '.inf', '-.Inf', '.NaN', '+.nan'],
  ...['2001-12-14', '2001-12-14t21:59:43.10-05:00', '2001-12-14 21:59:43.10 -5', '2001-12-14T21:59:43Z'],
  ...['1:20', '190:20:30', '-1:30', '1:20.5', ':symbol', ':', '\ufeff', '\ufeffkey', '-', '?', '- x', '? x'],
  ...['---', '...', '--- x', '%YAML', 'a\n---', 'a\n...\nb', '#', 'a #b', 'a# b', 'a: b', 'a:', 'a :b'],
  ...[
    ' lead',
    'trail ',
    '\tt',
    't\t',
    '\n',
    '\n\n',
    'a\n',
    'a\n\n',
    'a\n \n',
    '\na',
    ' \na',
    '\n a',
    'a \nb',
  ],
  ...['a\n\tb', 'a\n\nb\n', '  \n  x\n', "it's", 'say "hi"', `both ' and "`, 'back\\slash', '\\n', '"', "'"],
  ...['[a]', '{a}', 'a,b', '&a', '*a', '!t', '|', '>', '@x', '`x`', '%', 'x\r\ny', 'ünïcode', '😀', 'a😀\nb'],
  ...['\u0000', '\u0007', '\u000b', '\u001b', '\u007f', '\u0085', '\u00a0', '\u2028', '\u2029', '\ufffe'],
  ...['\uffff', '\ud800', '\udfff', 'x\ud83dy', '\u0080\n\u009f'],
  // Blocks: a blank last line (quoted instead), leading and trailing runs of line breaks.
  ...[
    'a\n ',
    'a\n\t',
    '\n ',
    '\n\na',
    '\n\n  a\n',
    ' \n\na',
    'x\n\n\n',
    'a\n\n\nb\n\n',
    '\n\n\na',
    '\n\n\n  a',
  ],
];
/** Pieces strings are built from: the characters that steer a scalar's style, and ordinary ones. */
const PIECES = [
  ...[' ', '  ', '\n', '\n\n', '\t', '\r', '#', ':', ': ', ' #', '-', '- ', '?', ',', '[', ']', '{', '}'],
  ...['"', "'", '\\', '\\n', '%', '.', '...', '---', '|', '>', '&', '*', '!', '@', '`', '~', '=', '<<'],
  ...['a', 'Z', 'key', 'value', '0', '1', '12', '1.5', 'e', 'E5', '+', '_', 'x', 'yes', 'no', 'null', 'true'],
  ...[
    'é',
    '\u00a0',
    '\u0085',
    '\u2028',
    '\u2029',
    '\ufeff',
    '\ufffe',
    '\uffff',
    '\u007f',
    '\u009f',
    '\u0000',
  ],
  ...['\u0007', '\u001b', '\u000b', '\u0001', '\ud800', '\udc00', '😀', '𝄞', '中文', '\u200b'],
];

const pieceString = fc.array(fc.constantFrom(...PIECES), { maxLength: 24 }).map((parts) => parts.join(''));
const text = fc.oneof(
  { weight: 3, arbitrary: fc.constantFrom(...TOKENS) },
  { weight: 5, arbitrary: pieceString },
  // A token with something before or after it, and long strings (folded double quotes, keys over 1024).
  {
    weight: 2,
    arbitrary: fc.tuple(pieceString, fc.constantFrom(...TOKENS), pieceString).map((p) => p.join('')),
  },
  {
    weight: 1,
    arbitrary: fc.tuple(pieceString, fc.integer({ min: 2, max: 120 })).map(([s, n]) => s.repeat(n)),
  },
  { weight: 2, arbitrary: fc.string({ unit: 'grapheme', maxLength: 20 }) },
  { weight: 2, arbitrary: fc.string({ unit: 'binary', maxLength: 20 }) },
);
const key = fc.oneof(
  { weight: 6, arbitrary: text },
  {
    weight: 1,
    arbitrary: fc.constantFrom('__proto__', '0', '1', '42', '4294967294', '4294967295', '-1', '01'),
  },
);
/** A string as a value, a key, a list item, at three depths: where the emitter quotes, folds or escapes it. */
export function placements(long: string): ConfigContent[] {
  return [
    { k: long },
    { [long]: 1 },
    { [long]: { [long]: [long, [long], { [long]: long }] } },
    { a: { b: { c: [long, { [long]: [] }, { d: {} }] } } },
  ] as ConfigContent[];
}

/**
 * Each token short, in a text long enough to fold, and after or before a control character (double-quoted whatever it
 * holds, so its line breaks fold). The token repeated 300 times, a key over 1024 characters, costs most of the CPU:
 * yaml-text.scale.test.ts runs those.
 */
export function tokenForms(token: string): string[] {
  const folded = `${token} and then a text long enough to fold ${token}`;
  return [token, folded, `\u0007${folded}`, `${folded}\u0007${token}`];
}

export const NUMBER_TEXTS = [
  '12345678901234567891',
  '1.0',
  '1e400',
  '-0',
  '1E5',
  '2.50',
  '-2.5E-3',
  '0.0',
  '1e-7',
];
NUMBER_TEXTS.push('1.25e5', '12E-3', '-0.5e10', '100e+2');
const scalar = fc.oneof(
  text,
  fc.constant(null),
  fc.boolean(),
  fc.integer(),
  fc.double({ noNaN: true, noDefaultInfinity: true }),
  fc.constantFrom(0, -0, 1e21, 5e-324, 1e-7, 123456789012, 0.1, -1.5e300, Number.MAX_SAFE_INTEGER),
  fc.constantFrom(...NUMBER_TEXTS).map((t) => new LosslessNumber(t)),
);
const { value } = fc.letrec((tie) => ({
  value: fc.oneof({ depthSize: 'small', withCrossShrink: true }, scalar, tie('array'), tie('object')),
  array: fc.array(tie('value'), { maxLength: 6 }),
  object: fc.array(fc.tuple(key, tie('value')), { maxLength: 6 }).map(objectOf),
}));
export const content = fc
  .array(fc.tuple(key, value), { maxLength: 8 })
  .map((entries) => objectOf(entries) as ConfigContent);

/** `inner` under `depth` levels of single-key objects and one-item arrays, alternating as `shape` says. */
export const deep = fc
  .tuple(value, fc.array(fc.tuple(fc.boolean(), key), { minLength: 1, maxLength: 64 }))
  .map(([inner, shape]) => {
    let node: unknown = inner;
    for (const [asArray, name] of shape) node = asArray ? [node] : objectOf([[name, node]]);
    return objectOf([['root', node]]) as ConfigContent;
  });

/**
 * The JSON text of what the yaml package takes `text` for (numbers as numbers), as YAML 1.2 (core schema) and
 * as YAML 1.1 (its type repository, looser: `.` and `E5` are floats there): both must agree.
 */
export function readBack(text: string): string {
  const json = JSON.stringify(parseYaml(text));
  const asOld = JSON.stringify(parseYaml(text, { version: '1.1' }));
  return json === asOld ? json : `1.2 ${json} but 1.1 ${asOld}`;
}

export function jsonOf(sample: ConfigContent): string {
  return JSON.stringify(sample, (_key, item) => (isLosslessNumber(item) ? Number(String(item)) : item));
}

function readsBackAs(text: string, sample: ConfigContent): boolean {
  try {
    return readBack(text) === jsonOf(sample);
  } catch {
    return false;
  }
}

/**
 * The old serializer's bytes, except where a YAML reader does not take those for the content (its bugs: a
 * blank-only multi-line value, a folded ` \n `, an escaped key over 1024): there the emitter's text must be.
 */
export function expectSameBytes(sample: ConfigContent): void {
  const expected = yamlPackageText(sample);
  const actual = yamlBytes(sample).toString('utf8');
  if (actual === expected) return;
  expect(readsBackAs(expected, sample), `differs from ${JSON.stringify(expected)}`).toBe(false);
  expect(readBack(actual), JSON.stringify(actual)).toBe(jsonOf(sample));
}

/** A large item's JSON text, as the service might lay it out: compact, pretty, or with blanks everywhere. */
function layouts(sample: ConfigContent): string[] {
  const compact = stringifyJson(sample);
  // Blanks after every comma, colon and bracket outside strings: the walk must skip them all.
  let spaced = '';
  let inString = false;
  for (let k = 0; k < compact.length; k++) {
    const ch = compact[k] as string;
    spaced += ch;
    if (ch === '"' && compact[k - 1] !== '\\') inString = !inString;
    else if (!inString && ',:[]{}'.includes(ch)) spaced += k % 2 === 0 ? ' \n' : '\t\r\n ';
  }
  return [compact, stringifyJson(sample, 2), ` \n${spaced}\t`];
}

/**
 * The streamed YAML of the content's JSON text against the usual path's (parse the text, then yamlBytes), byte
 * for byte, for each layout. False when json-file.ts does not take the text (integer-like, repeated or
 * `__proto__` keys, 64 deep): the usual path writes those, so the streamed writer never sees them.
 */
export function expectSameStreamed(sample: ConfigContent): boolean {
  let taken = true;
  for (const text of layouts(sample)) {
    const bytes = Buffer.from(text, 'utf8');
    const checked = checkContent(bytes, 0);
    if (checked === undefined) {
      taken = false;
      continue;
    }
    const usual = yamlBytes(parseJson(text) as ConfigContent).toString('utf8');
    expect(yamlBytesFromJson(bytes, checked.start, checked.end).toString('utf8'), text).toBe(usual);
  }
  return taken;
}
