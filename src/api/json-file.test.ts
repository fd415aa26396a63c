// A large item judged from its bytes with its content written straight into its file's bytes gives what the usual
// path gives (parse the item, then serialize.ts): byte for byte, verdict for verdict, over a corpus and seeded texts.
import { describe, expect, it } from 'vitest';
import { serializeContent } from '../reconcile/serialize.js';
import {
  checkContent,
  isJsonContentFile,
  JsonContentFile,
  locateContent,
  writeContentFile,
} from './json-file.js';
import { judgeConfigInstance, judgeItemBytes, type PageItem } from './list-page.js';

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

type Outcome = { kind: 'valid'; head: Record<string, unknown>; file: string } | PageItem;

/** A judged item with its file's bytes in place of its content, whichever form the content took. */
function outcome(item: PageItem): Outcome {
  if (item.kind !== 'valid') return item;
  const { content, ...head } = item.instance;
  return {
    kind: 'valid',
    head,
    file: serializeContent(item.instance.relative_filepath, content).toString('hex'),
  };
}

/**
 * The usual path against the streaming one for one item's text; returns whether the streaming one took it.
 */
function compare(text: string): boolean {
  // Both paths start from the item's bytes: a mistake cut into a surrogate pair is U+FFFD for both.
  const bytes = Buffer.from(text, 'utf8');
  const usual = outcome(judgeConfigInstance(bytes.toString('utf8')));
  const judged = judgeItemBytes(bytes, 0);
  const streamed = judged.kind === 'valid' && isJsonContentFile(judged.instance.content);
  expect(outcome(judged), text).toEqual(usual);
  return streamed;
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
  const key = () =>
    next() < 0.93 ? `"${pick(KEYS.slice(0, 4))}${Math.floor(next() * 100)}"` : `"${pick(KEYS)}"`;
  let budget = size;
  const value = (depth: number): string => {
    budget -= 1;
    const roll = next();
    if (depth < 6 && budget > 0 && roll < 0.2) {
      const members: string[] = [];
      const count = Math.floor(next() * 5);
      for (let k = 0; k < count; k++)
        members.push(`${ws()}${key()}${ws()}:${ws()}${value(depth + 1)}${ws()}`);
      return `{${members.join(',')}${count === 0 ? ws() : ''}}`;
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
  const members: string[] = [];
  const count = 1 + Math.floor(next() * 6);
  for (let k = 0; k < count; k++) members.push(`${ws()}${key()}${ws()}:${ws()}${value(1)}${ws()}`);
  let text = `${ws()}{${members.join(',')}}${ws()}`;
  const mistake = next();
  if (mistake < 0.03) text = text.slice(0, Math.floor(next() * text.length));
  else if (mistake < 0.06) {
    const at = Math.floor(next() * text.length);
    text = `${text.slice(0, at)}${pick([',', '}', ']', '"', ':', '{', '[', '\\'])}${text.slice(at)}`;
  }
  return text;
}

/** Nested `depth` levels: objects and arrays in turn, a string at the bottom. */
function nested(depth: number): string {
  let text = '"bottom"';
  for (let k = depth - 1; k >= 0; k--) text = k % 2 === 0 ? `{"k":${text}}` : `[${text}]`;
  return text;
}

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
];

describe('a large item judged with its content streamed into its file', () => {
  it('gives the usual verdict and the usual bytes for every text of the corpus', () => {
    let streamed = 0;
    for (const content of CORPUS) {
      for (const path of ['app/a.json', 'app/a.conf', 'app/a.yaml'])
        if (compare(itemText(content, { path }))) streamed++;
    }
    expect(streamed).toBeGreaterThan(10);
  });

  it('gives the usual verdict and bytes for seeded random texts', () => {
    const runs = Number(process.env.JSON_FILE_CASES ?? 200);
    const seed = Number(process.env.JSON_FILE_SEED ?? 9);
    const next = random(seed);
    let streamed = 0;
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
                      : itemText(content);
      if (compare(text)) streamed++;
    }
    // Most texts are content the streaming path takes: the comparison is not only of fallbacks.
    expect(streamed).toBeGreaterThan(runs * 0.4);
  });

  it('takes a large item of plain content without a tree: its bytes are those of the usual path', () => {
    const rules = Array.from({ length: 3000 }, (_, k) => `rule-${k}: match /var/log/app-${k % 97}/*.log`);
    for (const path of ['app/a.json', 'app/a.yaml', 'app/a.yml']) {
      const text = itemText(JSON.stringify({ index: 1, rules, on: 'yes', text: 'a\nb' }), { path });
      expect(compare(text)).toBe(true);
      const judged = judgeItemBytes(Buffer.from(text, 'utf8'));
      expect(judged.kind === 'valid' && isJsonContentFile(judged.instance.content)).toBe(true);
    }
  });

  it('leaves a small item to the usual path', () => {
    const judged = judgeItemBytes(Buffer.from(itemText('{"a":1}'), 'utf8'));
    expect(judged.kind === 'valid' && judged.instance.content).toEqual({ a: 1 });
  });
});

describe('locateContent / checkContent', () => {
  it('finds the content value and measures its file', () => {
    const text = itemText(' {"a" : [1, 2]} ');
    const bytes = Buffer.from(text, 'utf8');
    const found = locateContent(bytes);
    expect(found && text.slice(found.start, found.end)).toBe('{"a" : [1, 2]}');
    expect(found && writeContentFile(bytes, found).toString('utf8')).toBe(
      '{\n  "a": [\n    1,\n    2\n  ]\n}\n',
    );
  });

  it('refuses an item with no content, content twice, or a key it cannot read as written', () => {
    const locate = (text: string) => locateContent(Buffer.from(text, 'utf8'));
    expect(locate('{"a":1}')).toBeUndefined();
    expect(locate('{"content":{},"content":{}}')).toBeUndefined();
    expect(locate('{"c\\u006fntent":{},"content":{}}')).toBeUndefined();
    expect(locate('[{"content":{}}]')).toBeUndefined();
    expect(locate('{"content":{}} x')).toBeUndefined();
    expect(locate('{"x":{"content":1},"content":{"a":1}}')).toMatchObject({ start: 29 });
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
