// Wire JSON (json.ts): lossless numbers, the native fast paths against lossless-json, and the list-body scanners.
import fc from 'fast-check';
import { LosslessNumber, parse as losslessParse, stringify as losslessStringify } from 'lossless-json';
import { describe, expect, it } from 'vitest';
import {
  cutListBody,
  cutListBytes,
  isLosslessNumber,
  JsonTextError,
  MAX_PARSE_DEPTH,
  NATIVE_SPLIT_MAX_CHARS,
  parseCompactListBody,
  parseJson,
  peekId,
  peekStrings,
  splitListBody,
  stringifyJson,
} from './json.js';

describe('parseJson / stringifyJson', () => {
  it('keeps every number byte-faithful: plain numbers where printing gives the text back, else the text', () => {
    const text =
      '{"id":12345678901234567891,"ns":1700000000123456789,"small":42,"pi":3.14,"one":1.0,"exp":1e5,"neg":-0,"huge":1e400}';
    const value = parseJson(text) as Record<string, unknown>;
    expect(value.small).toBe(42);
    expect(value.pi).toBe(3.14);
    for (const key of ['id', 'ns', 'one', 'exp', 'neg', 'huge'])
      expect(isLosslessNumber(value[key])).toBe(true);
    expect(stringifyJson(value)).toBe(text);
  });

  it('writes everything else exactly as JSON.stringify does (indentation, escapes, key order)', () => {
    const value = {
      b: 'line\nbreak \u0001 "quoted" \\ é 😀 \ud800',
      '2': [true, false, null, [], {}],
      a: { nested: [1, -2.5, 1e21, 5e-324] },
    };
    const text = JSON.stringify(value, null, 2);
    expect(stringifyJson(parseJson(text), 2)).toBe(text);
    expect(stringifyJson(value, 2)).toBe(text);
  });

  it('keeps __proto__ as an own key and a repeated key keeps its last value, as JSON.parse does', () => {
    const value = parseJson('{"__proto__":{"polluted":1},"k":1,"k":2}') as Record<string, unknown>;
    expect(Object.getPrototypeOf(value)).toBe(Object.prototype);
    expect(Object.keys(value)).toEqual(['__proto__', 'k']);
    expect(value.k).toBe(2);
    expect(({} as Record<string, unknown>).polluted).toBeUndefined();
  });

  it('refuses nesting past the parse limit before recursing, and names syntax errors with a position', () => {
    const deep = `${'['.repeat(100_000)}${']'.repeat(100_000)}`;
    expect(() => parseJson(deep)).toThrow(JsonTextError);
    expect(() => parseJson(deep)).toThrow(`nested 100000 levels deep (the limit is ${MAX_PARSE_DEPTH})`);
    expect(() => parseJson('{"a":tru}')).toThrow(/at character 5/);
    // Many brackets, little depth: parsed, whichever way it is taken.
    const wide = `[${'[{}],'.repeat(600)}[1.0]]`;
    expect(stringifyJson(parseJson(wide))).toBe(wide);
    expect(parseJson(wide.replace('1.0', '1'))).toEqual(JSON.parse(wide.replace('1.0', '1')));
  });
});

describe('parseJson / stringifyJson against lossless-json alone (the native fast paths change no result)', () => {
  const losslessNumber = (text: string) => {
    const value = Number(text);
    return String(value) === text ? value : new LosslessNumber(text);
  };
  const exact = (text: string) =>
    losslessStringify(
      losslessParse(text, null, { parseNumber: losslessNumber, onDuplicateKey: ({ newValue }) => newValue }),
    );

  it('parses any JSON text to the value the lossless parser gives, booleans and odd numbers included', () => {
    const number = fc.oneof(
      fc.integer().map(String),
      fc.double({ noNaN: true, noDefaultInfinity: true }).map(String),
      fc.constantFrom('1.0', '-0', '1e5', '1E+2', '12345678901234567891', '0.1000', '-12.50e-3', '1e400'),
    );
    const text = fc.letrec((tie) => ({
      value: fc.oneof(
        { depthSize: 'small' },
        number,
        fc.constantFrom('true', 'false', 'null'),
        fc.string().map((s) => JSON.stringify(s)),
        fc.array(tie('value'), { maxLength: 4 }).map((items) => `[${items.join(',')}]`),
        fc
          .array(fc.tuple(fc.string(), tie('value')), { maxLength: 4 })
          .map((entries) => `{${entries.map(([k, v]) => `${JSON.stringify(k)}:${v}`).join(',')}}`),
      ),
    })).value;
    fc.assert(
      fc.property(text, (json) => {
        expect(stringifyJson(parseJson(json))).toBe(exact(json));
      }),
      { numRuns: 500 },
    );
  });

  it('serialises any value as lossless-json does, with or without indentation', () => {
    const value = fc.letrec((tie) => ({
      value: fc.oneof(
        { depthSize: 'small' },
        fc.jsonValue({ maxDepth: 1 }),
        fc.constantFrom('1.0', '12345678901234567891', '-0').map((t) => new LosslessNumber(t)),
        fc.array(tie('value'), { maxLength: 4 }),
        fc.dictionary(fc.string(), tie('value'), { maxKeys: 4 }),
      ),
    })).value;
    fc.assert(
      fc.property(value, fc.constantFrom(undefined, 0, 2), (v, space) => {
        expect(stringifyJson(v, space)).toBe(losslessStringify(v, undefined, space));
      }),
      { numRuns: 500 },
    );
  });

  it('a key named like the marker, or a BigInt, takes the lossless path and still comes out right', () => {
    const marked = { isLosslessNumber: true, value: '1' };
    expect(stringifyJson(marked)).toBe(JSON.stringify(marked));
    expect(stringifyJson({ big: 12345678901234567891n })).toBe('{"big":12345678901234567891}');
  });
});

describe('splitListBody', () => {
  it('gives the envelope with data emptied and the exact text of each item', () => {
    const body =
      '{"object":"list","data":[{"id":"a","s":"],{\\"x"} , [1,[2]],\n "x" ,7],"has_more":false,"limit":10}';
    const parts = splitListBody(body);
    expect(parts.envelopeText).toBe('{"object":"list","data":[],"has_more":false,"limit":10}');
    expect(parts.items).toEqual(['{"id":"a","s":"],{\\"x"}', '[1,[2]]', '"x"', '7']);
    expect(splitListBody('{"data":[]}').items).toEqual([]);
    // A key spelt with escapes is still the key.
    expect(splitListBody('{"d\\u0061ta":[{"id":"x"}]}').items).toEqual(['{"id":"x"}']);
  });

  it('cuts out items whatever they hold: a broken literal or a deep nest stays inside its item', () => {
    const deep = `{"id":"deep","content":${'['.repeat(5000)}${']'.repeat(5000)}}`;
    const parts = splitListBody(`{"data":[{"id":"ok"},{"id":"bad","n":tru},${deep}],"object":"list"}`);
    expect(parts.items).toEqual(['{"id":"ok"}', '{"id":"bad","n":tru}', deep]);
  });

  it('a compact body gives exactly what the cut gives, odd numbers, escapes and repeated keys included', () => {
    const oddNumber = fc.constantFrom('1.0', '-0', '1e5', '12345678901234567891', '0.5', '-7');
    const item = fc.oneof(
      fc.jsonValue({ maxDepth: 3 }).map((value) => JSON.stringify(value)),
      fc
        .tuple(fc.string({ maxLength: 6 }), oddNumber)
        .map(([id, number]) => `{"id":${JSON.stringify(id)},"n":${number},"s":"]\\",\\"{"}`),
      fc.constant('{"k":1,"k":2}'),
      fc.constant('{"__proto__":{"x":1},"d\\u0061ta":[]}'),
    );
    const body = fc
      .tuple(fc.array(item, { maxLength: 6 }), fc.boolean(), fc.constantFrom('', ' ', '\n'))
      .map(
        ([items, first, space]) =>
          `${space}{${first ? `"data":[${items.join(',')}],"object":"list"` : `"object":"list","data":[${items.join(',')}],"has_more":false`}}${space}`,
      );
    fc.assert(
      fc.property(body, (text) => {
        const parts = splitListBody(text);
        const cut = cutListBody(text);
        expect(parts.items).toEqual(cut.items);
        expect(parts.envelopeText.trim()).toBe(cut.envelopeText.trim());
      }),
      { numRuns: 500 },
    );
  });

  it('a body past the native size is cut all the same', () => {
    const item = JSON.stringify({ id: 'x', content: { text: 'y'.repeat(1000) } });
    const items = Array.from({ length: Math.ceil(NATIVE_SPLIT_MAX_CHARS / item.length) + 1 }, () => item);
    const body = `{"object":"list","data":[${items.join(',')}]}`;
    expect(body.length).toBeGreaterThan(NATIVE_SPLIT_MAX_CHARS);
    expect(splitListBody(body)).toEqual({ envelopeText: '{"object":"list","data":[]}', items });
  });

  it('refuses a body whose structure is broken (a body cut short), which no item can survive', () => {
    expect(() => splitListBody('{"data":[{"id":"a"},{"id":"b"')).toThrow(JsonTextError);
    expect(() => splitListBody('{"data":[{"id":"a"]}')).toThrow(/unexpected \]/);
    expect(() => splitListBody('{"data":[],"data":[]}')).toThrow(/appears twice/);
  });
});

describe('peekId', () => {
  it('reads the id of an item, or of the first item of a list body cut short', () => {
    expect(peekId('{"object":"config_instance","id":"cfg_\\u0041","content":{"id":"inner"}}', 1)).toBe(
      'cfg_A',
    );
    expect(
      peekId(
        '{"object":"list","total_count":1,"data":[{"object":"config_instance","id":"big","content":{"x":"aaaa',
        3,
      ),
    ).toBe('big');
    expect(peekId('{"content":{"id":"inner"},"id":"outer"}', 1)).toBe('outer');
  });

  it('is undefined when the id is absent, not a string, or comes after the cut', () => {
    expect(peekId('{"object":"config_instance","content":{"id":"inner"}}', 1)).toBeUndefined();
    expect(peekId('{"id":17}', 1)).toBeUndefined();
    expect(peekId('{"object":"list","data":[{"content":{"x":"aaa', 3)).toBeUndefined();
    expect(peekId('{"id":"unterminated', 1)).toBeUndefined();
    // Only an item of data names the instance, not an object in another envelope field.
    expect(peekId('{"meta":{"x":{"id":"evil"}},"data":[{"id":"real","content":{"a":"…', 3)).toBe('real');
    expect(peekId('{"object":"list","data":[{"id":"real"', 3)).toBe('real');
  });

  it('is undefined when the item gives its id twice: JSON.parse keeps the last, so the first names nobody', () => {
    // A hostile item broken on purpose could otherwise have another instance of the device reported failed.
    expect(peekId('{"id":"victim","content":{"n":1e400},"id":"real"}', 1)).toBeUndefined();
    expect(peekId('{"id":"victim","id":"victim"}', 1)).toBeUndefined();
    expect(peekId('{"id":"a","n":12345,"m":true,"content":{"id":"b"}}', 1)).toBe('a');
  });
});

describe('cutListBytes', () => {
  /** The parts as text: the envelope, and each item decoded from where the cut says it lies. */
  function cut(text: string): { envelopeText: string; items: string[] } {
    const body = Buffer.from(text, 'utf8');
    const parts = cutListBytes(body);
    const items: string[] = [];
    for (let k = 0; k < parts.items.length; k += 2) {
      items.push(body.toString('utf8', parts.items[k], parts.items[k + 1]));
    }
    return { envelopeText: parts.envelope.toString('utf8'), items };
  }

  it('cuts as cutListBody does, on the bytes', () => {
    const bodies = [
      '{"object":"list","data":[{"id":"a","s":"],{\\"x"} , [1,[2]],\n "x" ,7],"has_more":false,"limit":10}',
      '{"data":[]}',
      '{"data":[ \n ]}',
      '{"d\\u0061ta":[{"id":"x"}]}',
      `{"data":[{"id":"ok"},{"id":"bad","n":tru},{"id":"deep","content":${'['.repeat(5000)}${']'.repeat(5000)}}],"object":"list"}`,
    ];
    for (const body of bodies) expect(cut(body)).toEqual(cutListBody(body));
  });

  it('multi-byte UTF-8 before and inside items moves no boundary', () => {
    const parts = cut('{"note":"caf\u00e9 ☃ 𝄞","data":[{"s":"é,]}"} ,\t{"s":"𝄞"}\r\n],"x":"ü"}');
    expect(parts.items).toEqual(['{"s":"é,]}"}', '{"s":"𝄞"}']);
    expect(parts.envelopeText).toBe('{"note":"caf\u00e9 ☃ 𝄞","data":[],"x":"ü"}');
  });

  it('refuses a body whose structure is broken (a body cut short), which no item can survive', () => {
    expect(() => cut('{"data":[{"id":"a"},{"id":"b"')).toThrow(JsonTextError);
    expect(() => cut('{"data":[{"id":"a"]}')).toThrow(/unexpected \]/);
    expect(() => cut('{"data":[],"data":[]}')).toThrow(/appears twice/);
  });
});

describe('peekStrings', () => {
  it('reads the string value of each named key of the first item, nothing of nested objects, nothing given twice', () => {
    const body =
      '{"object":"list","data":[{"id":"big","content":{"error_status":"inner"},"error_status":"retrying","error_status":"none","device_id":17,"activity_status":"queued","x":{"a":"b';
    expect(peekStrings(body, 3, ['id', 'error_status', 'device_id', 'activity_status'])).toEqual({
      id: 'big',
      activity_status: 'queued',
    });
    // Cut before a key, or the item ended without it: absent.
    expect(peekStrings('{"id":"a","content":{"x":"aaa', 1, ['id', 'error_status'])).toEqual({ id: 'a' });
    expect(peekStrings('{"id":"a"},{"error_status":"none"}', 1, ['error_status'])).toEqual({});
  });
});

describe('parseCompactListBody', () => {
  it('gives each item\'s exact text, also when the envelope holds another "data":[] before the list\'s', () => {
    const items = ['{"id":"a","data":[]}', '{"id":"b","n":1.5}'];
    const body = `{"meta":{"data":[]},"object":"list","data":[${items.join(',')}],"tail":{"data":[]}}\n`;
    const compact = parseCompactListBody(body);
    expect(compact?.texts).toEqual(items);
    expect(compact?.envelopeText).toBe('{"meta":{"data":[]},"object":"list","data":[],"tail":{"data":[]}}');
    expect(compact?.values).toEqual([
      { id: 'a', data: [] },
      { id: 'b', n: 1.5 },
    ]);
  });

  it('takes a body exactly when it is what JSON.stringify writes for what JSON.parse reads (one character changed)', () => {
    const items = fc.array(
      fc.record({ id: fc.string({ maxLength: 6 }), n: fc.oneof(fc.integer(), fc.double({ noNaN: true })) }),
      { maxLength: 4 },
    );
    const edit = fc.record({ at: fc.nat(), to: fc.constantFrom(' ', ',', '}', ']', '0', '"', '1', 'x') });
    fc.assert(
      fc.property(items, fc.option(edit), (data, change) => {
        let body = JSON.stringify({ object: 'list', data, has_more: false });
        if (change !== null) {
          const at = change.at % body.length;
          body = body.slice(0, at) + change.to + body.slice(at + 1);
        }
        let list: unknown;
        try {
          list = JSON.parse(body);
        } catch {
          list = undefined;
        }
        const data2 = (list as { data?: unknown } | undefined)?.data;
        const exact = Array.isArray(data2) && JSON.stringify(list) === body;
        expect(parseCompactListBody(body) !== undefined, body).toBe(exact);
      }),
      { numRuns: 300 },
    );
  });

  it('is undefined for a body that is not exactly what JSON.stringify writes for it', () => {
    for (const body of [
      '{"object":"list","data":[{"id":"a","id":"b"}]}',
      '{"object":"list","data":[{"id":"a","n":1.0}]}',
      '{"object":"list","data":[{"id":"a"} ]}',
      '{"object":"list","data":[{"id":"\\u0061"}]}',
      '{"object":"list","data":[{"id":"a"}],"object":"list"}',
      '{"data":{"id":"a"}}',
    ]) {
      expect(parseCompactListBody(body), body).toBeUndefined();
    }
  });
});
