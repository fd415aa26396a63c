// The JSON syntax scanner: the same verdict as JSON.parse, and V8's position wherever V8 gives one.
import { describe, expect, it } from 'vitest';
import { jsonSyntaxErrorOffset, lineAndColumn } from './json-position.js';

const INVALID = [
  '{"a": s3}',
  '{"a":1,}',
  '[1,]',
  '{"a" 1}',
  '',
  '   ',
  '{"a":"\u0001"}',
  '{"a":"\\x"}',
  '{"a":"\\u12g4"}',
  '{"a":tru',
  '01',
  '{"a":1}}',
  '[1 2]',
  '"abc',
  '{"a":-}',
  '{\n "a": 1,\n "b": [1, 2,\n ]\n}',
  '{"a":1e}',
  '{"a":1.}',
  '{"a":.5}',
  'nul',
  '{"é": x}',
  '{,}',
  '{"a":1 "b":2}',
  '[}',
  '{]',
  "{'a':1}",
  '{"a":1,"b"}',
  '[[[[[[[[[[',
  '{"a":NaN}',
  '\uFEFF{}',
];

const VALID = [
  '{}',
  '[]',
  ' {"a": [1, -2.5e+3, 0, "x\\"\\\\\\/\\b\\f\\n\\r\\t\\u00e9", true, false, null, {}, []]} ',
  '"just a string"',
  '12345678901234567891',
  `${'['.repeat(100_000)}${']'.repeat(100_000)}`,
];

describe('jsonSyntaxErrorOffset', () => {
  it.each(INVALID)('%j: an offset, and V8’s position when V8 gives one', (text) => {
    let message = '';
    try {
      JSON.parse(text);
    } catch (error) {
      message = (error as Error).message;
    }
    expect(message).not.toBe('');
    const offset = jsonSyntaxErrorOffset(text);
    expect(offset).toBeGreaterThanOrEqual(0);
    expect(offset).toBeLessThanOrEqual(text.length);
    const v8 = /at position (\d+)/.exec(message)?.[1];
    if (v8 !== undefined) expect(offset).toBe(Number(v8));
    if (/end of JSON input/.test(message)) expect(offset).toBe(text.length);
  });

  it.each(VALID.map((text) => [text.slice(0, 40), text]))('%j… is valid', (_shown, text) => {
    expect(() => JSON.parse(text)).not.toThrow();
    expect(jsonSyntaxErrorOffset(text)).toBeUndefined();
  });

  it('places errors V8 leaves without a position', () => {
    expect(jsonSyntaxErrorOffset('{"a": s3}')).toBe(6);
    expect(jsonSyntaxErrorOffset('[1,]')).toBe(3);
    expect(jsonSyntaxErrorOffset('{\n "a": 1,\n "b": [1, 2,\n ]\n}')).toBe(25);
  });
});

describe('lineAndColumn', () => {
  it('counts lines from 1 and columns in characters from 1', () => {
    expect(lineAndColumn('abc', 0)).toEqual({ line: 1, column: 1 });
    expect(lineAndColumn('a\nbc', 3)).toEqual({ line: 2, column: 2 });
    expect(lineAndColumn('a\r\n😀x', 5)).toEqual({ line: 2, column: 2 });
    expect(lineAndColumn('a\n', 2)).toEqual({ line: 2, column: 1 });
  });
});
