// A large item judged from its bytes with its content written straight into its file's bytes gives what the usual
// path gives (parse the item, then serialize.ts): byte for byte, verdict for verdict, over a corpus and seeded texts.
import { describe, expect, it } from 'vitest';
import { serializeContent } from '../reconcile/serialize.js';
import { MAX_PARSE_DEPTH, parseJson } from './json.js';
import {
  type CheckedContent,
  checkContent,
  examineContent,
  examineItem,
  isJsonContentFile,
  JsonContentFile,
  writeContentFile,
} from './json-file.js';
import { judgeConfigInstance, judgeItemBytes, type PageItem, TREE_ITEM_BYTES } from './list-page.js';

const T0 = '2025-01-01T00:00:00Z';

/** An item's text around a content text: `content` in the middle of the fields, as the service writes it. */
function itemText(content: string, options: { path?: string; before?: string; after?: string } = {}): string {
  const path = JSON.stringify(options.path ?? 'app/a.json');
  return (
    `{"object":"config_instance","id":"cfg_1","target_status":"deployed","activity_status":"queued",` +
    `"error_status":"none","status":"queued","relative_filepath":${path},"created_at":"${T0}",` +
    `"updated_at":"${T0}","device_id":"dev_1","config_schema_id":"sch_1"${options.before ?? ''},"content":${content}` +
    `${options.after ?? ''},"config_type_id":"typ_1","device":null,"config_schema":null,"config_type":null}`
  );
}

type Outcome = { kind: string; head: Record<string, unknown>; file: string } | PageItem;

/** A judged item with its file's bytes in place of its content, whichever form the content took. */
function outcome(item: PageItem): Outcome {
  if (item.kind === 'invalid') return item;
  const { content, ...head } = item.instance;
  return {
    kind: item.kind,
    head,
    file: serializeContent(item.instance.relative_filepath, content).toString('hex'),
  };
}

/**
 * The usual path against the streaming one for one item's text: the same verdict, fields and file bytes. Then the
 * same with every item refused that the streaming judge cannot judge alone (`treeFrom` 0): `unsure` for those.
 */
function compare(text: string): 'streamed' | 'judged' | 'unsure' {
  // Both paths start from the item's bytes: a mistake cut into a surrogate pair is U+FFFD for both.
  const bytes = Buffer.from(text, 'utf8');
  const usual = outcome(judgeConfigInstance(bytes.toString('utf8')));
  const judged = judgeItemBytes(bytes, 0);
  expect(outcome(judged), text).toEqual(usual);
  const alone = judgeItemBytes(bytes, 0, 0);
  if (alone.kind === 'invalid' && alone.problem.startsWith('too large to judge')) {
    return 'unsure';
  }
  expect(outcome(alone), text).toEqual(usual);
  return judged.kind !== 'invalid' && isJsonContentFile(judged.instance.content) ? 'streamed' : 'judged';
}

/** mulberry32: the same texts for the same seed. */
function random(seed: number): () => number {
  let state = seed >>> 0;
  return () => {
    state = (state + 0x6d2b79f5) >>> 0;
    let t = state;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

const NUMBERS = [
  '0',
  '-0',
  '7',
  '-45',
  '123456789',
  '1.0',
  '1.50',
  '0.1',
  '1e5',
  '1E+5',
  '1e-7',
  '2.5E-3',
  '-0.0',
  '1e400',
  '-1e309',
  '1e-400',
  '5e-324',
  '1.7976931348623157e308',
  '12345678901234567891',
  '9007199254740993',
  '100000000000000000000000',
  `1${'0'.repeat(310)}`,
  '00',
  '01',
  '1.',
  '.5',
  '-',
  '+1',
  '1e',
  '1e+',
  '0x10',
  '1_0',
];
const KEYS = [
  'a',
  'b',
  'name',
  'é',
  '☃',
  '',
  ' ',
  '__proto__',
  'constructor',
  'toString',
  '0',
  '1',
  '10',
  '01',
  '-1',
  '1.5',
  '4294967295',
  '4294967294',
  '\\u0061',
  '\\u005f_proto__',
  'a\\"b',
  'a\\\\b',
  'a\\/b',
  'x\\ny',
];
const STRING_PIECES = [
  'plain',
  'x',
  ' ',
  '/',
  'é',
  '☃',
  '𝄞',
  '\u2028',
  '\u2029',
  '\u007f',
  '\u0080',
  '\uffff',
  '\ufffd',
  '\\"',
  '\\\\',
  '\\/',
  '\\b',
  '\\f',
  '\\n',
  '\\r',
  '\\t',
  '\\u0000',
  '\\u001f',
  '\\u001F',
  '\\u0020',
  '\\u0022',
  '\\u005c',
  '\\u005C',
  '\\u002f',
  '\\u0041',
  '\\u00e9',
  '\\u00E9',
  '\\u2028',
  '\\uffff',
  '\\ud834\\udd1e',
  '\\uD834\\uDD1E',
  '\\ud800',
  '\\udfff',
  '\\udc00\\ud800',
  '\\ud800\\u0041',
  '\\ud800x',
  '\\u007f',
  '\\u0008',
  '\\u000a',
  '\\u000c',
  '\\u000d',
  '\\u0009',
  // Not JSON: taken by neither path.
  '\\x',
  '\\u12',
  '\\uZZZZ',
  '\t',
  '\u0001',
];
const LITERALS = ['true', 'false', 'null', 'tru', 'nul', 'True'];
const SPACES = ['', '', '', ' ', '\n', '\t', '\r\n  ', '  '];

/** A JSON-ish text: mostly JSON, with every form of number, key and escape, and now and then a mistake. */
function generate(next: () => number, size: number): string {
  const pick = <T>(items: readonly T[]): T => items[Math.floor(next() * items.length)]!;
  const ws = () => (next() < 0.3 ? pick(SPACES) : '');
  const string = () => {
    let text = '"';
    const pieces = Math.floor(next() * 4);
    for (let k = 0; k < pieces; k++)
      text += next() < 0.01 ? pick(STRING_PIECES.slice(-5)) : pick(STRING_PIECES.slice(0, -5));
    return `${text}"`;
  };
  /** A key; now and then one the object already has, or that one with its first character escaped. */
  const key = (used: string[]) => {
    if (used.length > 0 && next() < 0.12) {
      const again = pick(used);
      const first = again.charCodeAt(0);
      return next() < 0.3 && first < 0x80 && again[0] !== '\\'
        ? `"\\u${first.toString(16).padStart(4, '0')}${again.slice(1)}"`
        : `"${again}"`;
    }
    const name =
      next() < 0.85
        ? `${pick(KEYS.slice(0, 4))}${Math.floor(next() * 100)}`
        : next() < 0.5
          ? `${Math.floor(next() * 12)}`
          : pick(KEYS);
    used.push(name);
    return `"${name}"`;
  };
  const members = (depth: number, count: number): string => {
    const used: string[] = [];
    const list: string[] = [];
    for (let k = 0; k < count; k++) list.push(`${ws()}${key(used)}${ws()}:${ws()}${value(depth + 1)}${ws()}`);
    return list.join(',');
  };
  let budget = size;
  const value = (depth: number): string => {
    budget -= 1;
    const roll = next();
    // Now and then a chain nested about 64 deep (content may nest 64 levels).
    if (roll < 0.006) return nested(56 + Math.floor(next() * 12), value(depth + 1));
    if (depth < 6 && budget > 0 && roll < 0.2) {
      const count = Math.floor(next() * 5);
      return `{${members(depth, count)}${count === 0 ? ws() : ''}}`;
    }
    if (depth < 6 && budget > 0 && roll < 0.35) {
      const elements: string[] = [];
      const count = Math.floor(next() * 5);
      for (let k = 0; k < count; k++) elements.push(`${ws()}${value(depth + 1)}${ws()}`);
      return `[${elements.join(',')}${count === 0 ? ws() : ''}]`;
    }
    if (roll < 0.65) return string();
    if (roll < 0.9) return next() < 0.97 ? pick(NUMBERS.slice(0, 22)) : pick(NUMBERS);
    return pick(LITERALS.slice(0, next() < 0.98 ? 3 : LITERALS.length));
  };
  let text = `${ws()}{${members(0, 1 + Math.floor(next() * 6))}}${ws()}`;
  const mistake = next();
  if (mistake < 0.03) text = text.slice(0, Math.floor(next() * text.length));
  else if (mistake < 0.06) {
    const at = Math.floor(next() * text.length);
    text = `${text.slice(0, at)}${pick([',', '}', ']', '"', ':', '{', '[', '\\'])}${text.slice(at)}`;
  }
  return text;
}

/** Nested `depth` levels: objects and arrays in turn, `bottom` at the bottom. */
function nested(depth: number, bottom = '"bottom"'): string {
  let text = bottom;
  for (let k = depth - 1; k >= 0; k--) text = k % 2 === 0 ? `{"k":${text}}` : `[${text}]`;
  return text;
}

/** Values of a repeated key that lossless-json holds equal (`isDeepEqual`), in text it parses (`1.0`). */
const DEEP_EQUAL = [
  '{"x":{"b":1,"a":2},"n":1.0,"x":{"a":2,"b":1}}',
  '{"x":[],"x":{},"n":1.0}',
  '{"x":{},"x":[],"x":{"0":1},"n":1.0}',
  '{"x":[1,2],"x":{"1":2,"0":1},"n":1.0}',
  '{"x":1.0,"x":{"value":"1.0","isLosslessNumber":true}}',
  '{"x":{"isLosslessNumber":true,"value":"1.0"},"x":1.0}',
  '{"x":{"a":{"b":1,"c":2}},"y":1.5e0,"x":{"a":{"c":2,"b":1}},"x":{"a":{"b":1,"c":3}}}',
];

const CORPUS = [
  '{}',
  ' { } ',
  '{"a":{},"b":[],"c":[ ],"d":{ \n }}',
  '{"a":1,"b":[1,2,{"c":null}],"d":{"e":true,"f":false}}',
  '{\n  "a": 1,\n  "b": [\n    1\n  ]\n}',
  '{"n":[0,-0,1.0,1.50,1e5,1E+5,1e-7,-0.0,12345678901234567891,1e-400,5e-324,1.7976931348623157e308]}',
  '{"s":"caf\\u00e9 \\ud834\\udd1e \\ud800 \\udfff \\u0000\\u001f\\u007f \\" \\\\ \\/ \\b\\f\\n\\r\\t é ☃ 𝄞 \u2028"}',
  '{"\\u0061":1,"b\\nc":2,"\\"":3}',
  '{"a":1,"a":2}',
  '{"a":1,"\\u0061":2}',
  '{"b":1,"2":2,"1":3}',
  '{"__proto__":{"x":1}}',
  '{"__proto__x":1,"_proto__":2,"01":3,"-1":4,"1.5":5}',
  '{"n":1e400}',
  '{"n":-1e309}',
  `{"n":1${'0'.repeat(400)}}`,
  `{"n":${'9'.repeat(300)}}`,
  `{"d":${nested(63)}}`,
  `{"d":${nested(64)}}`,
  `{"d":${nested(65)}}`,
  '[]',
  '"text"',
  '1',
  'null',
  '{"a":1,}',
  '{"a":1',
  '{"a" 1}',
  '{a:1}',
  "{'a':1}",
  '{"a":01}',
  '{"a":"\t"}',
  '{"a":[1,]}',
  '{"a":1}x',
  '{"__proto__":1,"a":{"__proto__":[1,2],"b":{"__proto__":{"x":1}}}}',
  '{"b":1,"2":{"1":1,"0":2},"1":3,"1":4,"10":5,"01":6,"4294967295":7,"4294967294":8,"\\u0033":9,"-1":10}',
  '{"a":1,"b":2,"a":3,"c":{"d":1,"d":[1],"e":2},"\\u0061":{"x":"y"}}',
  '{"x":{"b":1,"a":2},"y":1,"x":{"a":2,"b":1},"x":[]}',
  '{"a":1,"b":2,"a":{"c":1e400}}',
  '{"a":1e400,"a":1,"b":[1e999]}',
  '{"a":1,"a":{"b":1e400}}',
  `{"b":1e400,"1":${nested(64)}}`,
  `{"a":[1,{"b":[0,{"c":-1e400}]}],"z":${nested(70)}}`,
  `{"7":${nested(64)},"3":"x","k":${nested(63)}}`,
  `{"d":${nested(64)},"d":1}`,
  `{"d":${nested(513)}}`,
  `{"d":${nested(600)},"e":1e400}`,
  '{"a":1,"a":2,"b":[1e400],"c":',
  '{"z":1,"a":{"9":1,"8":{"x":[1,{"1":1e400,"0":"first"}]}},"8":[]}',
  ...DEEP_EQUAL,
  ...DEEP_EQUAL.map((text) => text.replace(/1\.0/g, '1').replace('1.5e0', '1.5')),
];

describe('a large item judged with its content streamed into its file', () => {
  it('gives the usual verdict and the usual bytes for every text of the corpus, judging each alone', () => {
    const routes = { streamed: 0, judged: 0, unsure: [] as string[] };
    for (const content of CORPUS) {
      for (const path of ['app/a.json', 'app/a.conf', 'app/a.yaml']) {
        const route = compare(itemText(content, { path }));
        if (route === 'unsure') routes.unsure.push(content);
        else routes[route]++;
      }
    }
    expect(routes.unsure).toEqual([]);
    expect(routes.streamed).toBeGreaterThan(60);
    expect(routes.judged).toBeGreaterThan(60);
  });

  it('gives the usual verdict and bytes for seeded random texts', () => {
    const runs = Number(process.env.JSON_FILE_CASES ?? 300);
    const seed = Number(process.env.JSON_FILE_SEED ?? 9);
    const next = random(seed);
    const routes = { streamed: 0, judged: 0, unsure: 0 };
    for (let run = 0; run < runs; run++) {
      const content = generate(next, 10 + Math.floor(next() * 60));
      const shape = next();
      const text =
        shape < 0.05
          ? itemText(content, { after: ',"content":{}' })
          : shape < 0.08
            ? itemText(content, { before: ',"cont\\u0065nt":{"a":1}' })
            : shape < 0.1
              ? itemText(content, { path: 'app/a.yml' })
              : shape < 0.12
                ? itemText(content).replace('"queued","error', '"paused","error')
                : shape < 0.17
                  ? // Pretty-printed around the content, and the content the item's first or last field.
                    itemText(content)
                      .replace('{"object"', '{ \n "object"')
                      .replace(',"content":', ' ,\n\t"content" : ')
                      .replace(/}$/, ' \n}\n')
                  : shape < 0.2
                    ? `{"content":${content},${itemText('{}').slice(1).replace(',"content":{}', '')}`
                    : shape < 0.23
                      ? `${itemText('{}').replace(',"content":{}', '').slice(0, -1)},"content":${content}}`
                      : shape < 0.26
                        ? // Other fields wrong too: their issues come before the content's.
                          itemText(content).replace('"deployed"', '"bogus"').replace('"dev_1"', '5')
                        : shape < 0.28
                          ? itemText(content).replace('"cfg_1"', '""').replace('"sch_1"', '{"a":[1.0,')
                          : shape < 0.3
                            ? itemText(content, { path: 'app/a.yaml', after: ',"extra":{"x":1.0}' })
                            : itemText(content);
      routes[compare(text)]++;
    }
    // Most texts are judged alone (valid ones streamed, the rest refused with the usual words): the comparison
    // is not only of fallbacks: none is needed (`content` twice and a key of the item written with an escape
    // included).
    expect(routes.streamed).toBeGreaterThan(runs * 0.4);
    expect(routes.judged).toBeGreaterThan(runs * 0.15);
    expect(routes.unsure).toBe(0);
  });

  it('takes a large item of plain content without a tree: its bytes are those of the usual path', () => {
    const rules = Array.from({ length: 3000 }, (_, k) => `rule-${k}: match /var/log/app-${k % 97}/*.log`);
    for (const path of ['app/a.json', 'app/a.yaml', 'app/a.yml']) {
      const text = itemText(JSON.stringify({ index: 1, rules, on: 'yes', text: 'a\nb' }), { path });
      expect(compare(text)).toBe('streamed');
      const judged = judgeItemBytes(Buffer.from(text, 'utf8'));
      expect(judged.kind === 'valid' && isJsonContentFile(judged.instance.content)).toBe(true);
    }
  });

  it('judges a large item whose other fields hold a long string (light as a tree) as the usual path does', () => {
    const long = 'x'.repeat(TREE_ITEM_BYTES + 10);
    for (const text of [
      itemText('{"a":1}').replace('"status":"queued"', `"status":"${long}"`),
      itemText('{"a":[1,2]}', { before: `,"extra":["${long}",{"b":"${long}"}]` }),
    ]) {
      expect(compare(text)).toBe('streamed');
    }
  });

  it('writes a planned object (integer-like and repeated keys) alike as JSON, as YAML, and as YAML after JSON', () => {
    const text =
      '{"b":{"2":1,"1":[{"z":1,"0":2,"z":3}]},"10":"ten","b":{"3":1,"1":"x","3":2},"a":null,"0":0}';
    const bytes = Buffer.from(text, 'utf8');
    const checked = checkContent(bytes, 0)!;
    // The root, both values of `b` (the first one dropped) and the object inside the first.
    expect(checked.plans?.size).toBe(4);
    const tree = judgeConfigInstance(itemText(text));
    const content = tree.kind === 'valid' ? tree.instance.content : {};
    expect(JSON.stringify(content)).toBe('{"0":0,"10":"ten","b":{"1":"x","3":2},"a":null}');
    for (const paths of [
      ['a.json', 'a.yaml'],
      ['a.yaml', 'a.json', 'a.yml'],
    ]) {
      const file = new JsonContentFile(bytes, checked).asContent();
      for (const path of paths) {
        expect(serializeContent(path, file).toString('utf8')).toBe(
          serializeContent(path, content).toString('utf8'),
        );
      }
    }
  });

  it('leaves a small item to the usual path', () => {
    const judged = judgeItemBytes(Buffer.from(itemText('{"a":1}'), 'utf8'));
    expect(judged.kind === 'valid' && judged.instance.content).toEqual({ a: 1 });
  });
});

/** Where `examineItem` found the item's content, checked and measured; undefined for any other verdict. */
function locateContent(item: Buffer): CheckedContent | undefined {
  const verdict = examineItem(item);
  return verdict.kind === 'content' ? verdict.checked : undefined;
}

describe('examineItem locating the content / checkContent', () => {
  it('finds the content value and measures its file', () => {
    const text = itemText(' {"a" : [1, 2]} ');
    const bytes = Buffer.from(text, 'utf8');
    const found = locateContent(bytes);
    expect(found && text.slice(found.start, found.end)).toBe('{"a" : [1, 2]}');
    expect(found && writeContentFile(bytes, found).toString('utf8')).toBe(
      '{\n  "a": [\n    1,\n    2\n  ]\n}\n',
    );
  });

  it('finds the last content, also under an escaped key; refuses an item with none or one it cannot read', () => {
    const locate = (text: string) => locateContent(Buffer.from(text, 'utf8'));
    expect(locate('{"a":1}')).toBeUndefined();
    // A parse keeps the last `content`, also one whose key is written with an escape.
    for (const text of ['{"content":{},"content":{"a":1}}', '{"content":{},"c\\u006fntent":{"a":1}}']) {
      expect(locate(text)).toMatchObject({ start: text.indexOf('{"a":1}') });
    }
    expect(locate('{"c\\u006fntent":{"a":1,"a":2},"x\\u":1}')).toBeUndefined();
    expect(locate('[{"content":{}}]')).toBeUndefined();
    expect(locate('{"content":{}} x')).toBeUndefined();
    expect(locate('{"x":{"content":1},"content":{"a":1}}')).toMatchObject({ start: 29 });
  });

  it('takes content holding every kind of value without a tree, and finds text that is not JSON', () => {
    const text = '{"t":true,"f":false,"n":null,"i":-12,"d":0.5,"s":"x","a":[],"o":{}}';
    const bytes = Buffer.from(text, 'utf8');
    const checked = checkContent(bytes, 0);
    expect(checked && writeContentFile(bytes, checked).toString('utf8')).toBe(
      `${JSON.stringify(JSON.parse(text), null, 2)}\n`,
    );
    const refused = [
      ...['{a":1}', '{"a" 11}', '{"a":x}', '{"a":trux}', '{"a":falsy}', '{"a":nulx}'],
      ...['{"a":-}', '{"a":-.5}', '{"a":1.}', '{"a":1e}', '{"a":1e+}'],
      // A raw control character in a string (here a tab before an `n`), and a string left open.
      ...['{"a":"\tn"}', '{"a":"x'],
    ];
    for (const bad of refused) {
      expect(examineContent(Buffer.from(bad, 'utf8'), 0)).toEqual({ kind: 'not_json' });
    }
  });

  it('writes each escape as JSON.stringify writes the string it stands for, at every boundary; refuses bad ones', () => {
    const strings = [
      // Surrogate pairs at both ends of their ranges, and halves without their other half.
      ...[
        '\\ud800\\udc00',
        '\\udbff\\udfff',
        '\\u0041\\udc00',
        '\\ud800\\u0041',
        '\\udbff\\ud800',
        '\\udfff',
        // A high half followed by something other than an escaped low half.
        '\\ud800xudc00',
        '\\ud800\\ndc00',
        '\\ud800\\ue000',
      ],
      // UTF-8's one, two and three byte lengths at their edges; control characters; short escapes.
      ...['\\u007f\\u0080\\u07ff\\u0800\\uffff', '\\u0000\\u001f\\u0008\\u000a', '\\"\\\\\\/\\b\\f\\n\\r\\t'],
    ];
    for (const escaped of strings) {
      const text = `{"s":"${escaped}"}`;
      const bytes = Buffer.from(text, 'utf8');
      const checked = checkContent(bytes, 0);
      expect(checked && writeContentFile(bytes, checked).toString('utf8')).toBe(
        `${JSON.stringify(JSON.parse(text), null, 2)}\n`,
      );
    }
    for (const escaped of ['\\é', '\\ug000', '\\u0g00', '\\u00g0', '\\u000g', '\\x41']) {
      expect(examineContent(Buffer.from(`{"s":"${escaped}"}`, 'utf8'), 0)).toEqual({ kind: 'not_json' });
    }
    // A backslash before the byte 0x80 (not UTF-8, but bytes are what is judged here).
    const byte80 = Buffer.concat([Buffer.from('{"s":"\\'), Buffer.from([0x80]), Buffer.from('"}')]);
    expect(examineContent(byte80, 0)).toEqual({ kind: 'not_json' });
  });

  it('names a number beyond a double by its text up to 64 characters, by its length past that', () => {
    for (const length of [64, 65]) {
      const number = `1${'0'.repeat(length - 5)}e999`;
      const verdict = examineContent(Buffer.from(`{"n":${number}}`, 'utf8'), 0);
      const shown = length === 64 ? number : `<written in ${length} characters>`;
      expect(verdict).toMatchObject({
        kind: 'problem',
        path: ['n'],
        problem: `number ${shown} is out of range (beyond ±1.8e308)`,
      });
    }
  });

  it('reads an item only as far as it is an object of members: anything else is not located', () => {
    const locate = (text: string) => locateContent(Buffer.from(text, 'utf8'));
    expect(locate('{"x":[1,{"y":"]"}],"content":{"a":1}}')).toMatchObject({ start: 29 });
    for (const text of [
      '{"content" {"a":1}}',
      '{"content"x{"a":1}}',
      '{"x":1 "content":{"a":1}}',
      '{"x":1 ;"content":{"a":1}}',
      '{"content":{"a":1} "x":1}',
      '{"x":[1,2,"content":{"a":1}}',
      '{"x":"open,"content":{"a":1}}',
      '{"content":{"a":1},"x":[1',
      '{"content":{"a":1},"x":"open',
    ]) {
      expect(locate(text)).toBeUndefined();
    }
  });

  it('a repeated content: the last one is examined and the earlier ones are named as dropped', () => {
    const text = '{"content":{"a":1},"id":"x","content":{"b":2}}';
    const verdict = examineItem(Buffer.from(text, 'utf8'));
    expect(verdict).toMatchObject({ kind: 'content', checked: { start: text.indexOf('{"b"') } });
    expect(verdict).toMatchObject({ dropped: [text.indexOf('{"a"'), text.indexOf(',"id"')] });
    expect(examineItem(Buffer.from('{"content":{"a":1}}', 'utf8'))).not.toHaveProperty('dropped');
    expect(examineItem(Buffer.from('{"content":x}', 'utf8'))).toMatchObject({ kind: 'unparsable' });
  });

  it('says why an item is not judged here: unsure (and why) for JSON that is no object of members, unparsable otherwise', () => {
    const examine = (text: string) => examineItem(Buffer.from(text, 'utf8'));
    expect(examine('[{"content":{}}]')).toEqual({ kind: 'unsure', reason: 'not an object' });
    expect(examine('{"a":1}')).toEqual({ kind: 'unsure', reason: 'no `content`' });
    expect(examine('{"content":{"a":1},"x":[1,2 ]}')).toMatchObject({ kind: 'content' });
    for (const text of ['{"content":{}} x', '{"content":{},"x":"open', '{"content":{}', '{1:2}']) {
      expect(examine(text)).toMatchObject({ kind: 'unparsable', text });
    }
    const nested = (depth: number) => `{"content":{},"x":${'['.repeat(depth)}${']'.repeat(depth)}}`;
    expect(examine(nested(MAX_PARSE_DEPTH - 1))).toMatchObject({ kind: 'content' });
    expect(examine(nested(MAX_PARSE_DEPTH))).toMatchObject({ kind: 'unparsable' });
  });

  it('an unparsable item carries the very error parseJson throws for its text; brackets in strings and closed ones do not count as depth', () => {
    const texts = [
      '{"content":{},"x":[1,2',
      '{"content":{},"x":"open',
      // Other members are only skipped over here: text after the item sends it to the whole-text check,
      // which meets their problem first.
      '{"s":"\\x","content":{}} 2',
      '{"s":"\\u12G4","content":{}} 2',
      '{"s":"\\u12","content":{}} 2',
      '{"x":[1 2],"content":{}} 2',
      '{"content":{},"x":1} 2',
      // Every hex digit's edge, upper and lower case, read before the text after the item.
      '{"s":"\\u09AF\\uaf90\\uFa0A","content":{}} 2',
      '',
    ];
    for (const text of texts) {
      let thrown: unknown;
      try {
        parseJson(text);
      } catch (error) {
        thrown = error;
      }
      expect(thrown).toBeInstanceOf(Error);
      const verdict = examineItem(Buffer.from(text, 'utf8'));
      expect(verdict).toMatchObject({ kind: 'unparsable', error: { message: (thrown as Error).message } });
    }
    const taken = [
      // 600 brackets inside a string, 600 arrays side by side, and a shallow one after a deep one.
      `{"content":{},"s":"${'['.repeat(600)}"}`,
      `{"content":{},"a":[${Array(600).fill('[]').join(',')}]}`,
      `{"content":{},"d":${'['.repeat(MAX_PARSE_DEPTH - 1)}${']'.repeat(MAX_PARSE_DEPTH - 1)},"e":[1]}`,
    ];
    for (const text of taken)
      expect(examineItem(Buffer.from(text, 'utf8'))).toMatchObject({ kind: 'content' });
    const tooDeep = `{"content":{},"d":${'['.repeat(MAX_PARSE_DEPTH)}${']'.repeat(MAX_PARSE_DEPTH)},"e":[1]}`;
    expect(examineItem(Buffer.from(tooDeep, 'utf8'))).toMatchObject({ kind: 'unparsable' });
  });

  it('two keys whose hashes collide in the key table are two members, not one repeated', () => {
    // `"k38740"` and `"k60029"` hash alike (found by a search over k0, k1, ...): only their text tells them apart.
    const text = '{"k38740":1,"k60029":2,"k38740":3}';
    const bytes = Buffer.from(text, 'utf8');
    const checked = checkContent(bytes, 0);
    expect(checked && writeContentFile(bytes, checked).toString('utf8')).toBe(
      `${JSON.stringify(JSON.parse(text), null, 2)}\n`,
    );
  });

  it('an object of many members, a key repeated after its table grew, is written as a parse gives it', () => {
    const members = Array.from({ length: 40 }, (_, n) => `"k${n}":${n}`);
    // Keys a parse does or does not take for array indexes: `01`, ``, 11 digits and 2^32 - 1 are not.
    const indexLike = '"01":1,"":2,"12345678901":3,"4294967295":4,"4294967294":5,"0":6';
    const text = `{${members.join(',')},"k3":"last","7":7,"k\\u0030":"escaped",${indexLike}}`;
    const bytes = Buffer.from(text, 'utf8');
    const checked = checkContent(bytes, 0);
    expect(checked && writeContentFile(bytes, checked).toString('utf8')).toBe(
      `${JSON.stringify(JSON.parse(text), null, 2)}\n`,
    );
  });

  it('measures exactly what it writes', () => {
    const bytes = Buffer.from('{"s":"\\ud834\\udd1e\\ud800é","n":[1e5,-0]}', 'utf8');
    const checked = checkContent(bytes, 0)!;
    expect(writeContentFile(bytes, checked).length).toBe(checked.fileLength);
  });
});

describe('JsonContentFile in serialize.ts', () => {
  it('gives its bytes for a JSON path and the usual YAML for a YAML path, before or after its JSON bytes', () => {
    const text = ' {"b":[1.0,"x\\u00e9\\ud800"],"a":{"c":null, "d": "on"}} ';
    const bytes = Buffer.from(text, 'utf8');
    const tree = judgeConfigInstance(itemText(text));
    const content = tree.kind === 'valid' ? tree.instance.content : {};
    for (const paths of [
      ['a.json', 'a.yaml'],
      ['a.yaml', 'a.json', 'a.yml'],
    ]) {
      const file = new JsonContentFile(bytes, checkContent(bytes, 1)!).asContent();
      for (const path of paths) {
        expect(serializeContent(path, file).toString('utf8')).toBe(
          serializeContent(path, content).toString('utf8'),
        );
      }
    }
  });
});
