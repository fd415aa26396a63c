// JsonRecordWalker against JSON.parse of the whole text on generated documents cut into random chunks (a few hundred; json-records.scale.test.ts runs thousands).
import { describe, expect, it } from 'vitest';
import {
  documentShape,
  feed,
  type WalkedParts,
  walkAgreesWithParse,
  walksAgreeWithParse,
} from '../../test/helpers/record-walk-oracle.js';
import { JsonRecordWalker } from './json-records.js';

function walk(
  text: string,
  cuts: number[] = [],
): { taken: boolean; parts: WalkedParts; top: Map<string, unknown> } {
  const parts: WalkedParts = { recs: [], arr: [], innerRecs: [] };
  const walker = new JsonRecordWalker(documentShape(parts), 4);
  const taken = feed(walker, Buffer.from(text), cuts);
  return { taken, parts, top: walker.top };
}

describe('JsonRecordWalker', () => {
  it('keeps each record as JSON.parse gives it, whatever the chunks (a byte at a time too)', () => {
    const text =
      ' {"leaf":[1,{"a":"b"}],"recs":{"x\\"y":{"n":-0,"s":"é\\u00e9"},"2":true},"arr":[1e2,"\\ud800"],"obj":{"x":null,"recs":{}},"other":{"z":[]}} \n';
    const cutsEveryByte = Array.from({ length: text.length }, (_, i) => i);
    for (const cuts of [[], cutsEveryByte, [3, 17, 40]]) {
      const { taken, parts, top } = walk(text, cuts);
      expect(taken).toBe(true);
      expect(top.get('leaf')).toStrictEqual([1, { a: 'b' }]);
      expect(parts.recs).toStrictEqual([
        ['x"y', { n: -0, s: 'éé' }],
        ['2', true],
      ]);
      expect(parts.arr).toStrictEqual([100, '\ud800']);
      expect((top.get('obj') as Map<string, unknown>).get('x')).toBeNull();
      expect(top.has('other')).toBe(false);
    }
  });

  it('gives up on what JSON.parse refuses or keeps otherwise: a trailing comma, a known key twice, a member of another kind, bytes after the end', () => {
    for (const text of [
      '{"recs":{"a":1,}}',
      '{"leaf":1,"leaf":2}',
      '{"recs":{"a":1,"a":2}}',
      '{"recs":[]}',
      '{"arr":{}}',
      '{"leaf":1} x',
      '{"leaf":01}',
      '{"leaf":"\u0001"}',
      '\ufeff{}',
      '[]',
      '{"leaf":1',
      '',
    ]) {
      expect(walk(text).taken, text).toBe(false);
    }
  });

  it('a value longer than its buffer and its chunks (a 1 MiB string across 4 KiB chunks) is taken whole', () => {
    const long = 'x\\"'.repeat(350_000);
    const text = `{"recs":{"k":"${long}"}}`;
    const cuts = Array.from({ length: Math.ceil(text.length / 4096) }, (_, i) => i * 4096);
    const { taken, parts } = walk(text, cuts);
    expect(taken).toBe(true);
    expect(parts.recs[0]?.[1]).toBe(JSON.parse(`"${long}"`));
  });

  it('takes exactly what JSON.parse gives on 150 generated documents, clean ones always, mutated ones when valid', () => {
    const seen = walksAgreeWithParse(150);
    // About 47 of 300 are taken (39 the fewest of 20 seeds): most are mutated, or hold a key twice or a member
    // of another kind. json-records.scale.test.ts runs 5,000.
    expect(seen.taken).toBeGreaterThan(6);
    expect(seen.givenUp).toBeGreaterThan(30);
  });

  it('a document of invalid UTF-8 inside a value: what the whole text decodes to, or given up', () => {
    const bytes = Buffer.concat([
      Buffer.from('{"recs":{"k'),
      Buffer.from([0xe2, 0x82]),
      Buffer.from('":"v'),
      Buffer.from([0xff, 0xc3]),
      Buffer.from('"}}'),
    ]);
    for (const cuts of [[], [12], [11, 13, 17, 18]]) {
      expect(walkAgreesWithParse({ bytes, cuts, clean: false })).toBe(true);
    }
  });
});
