// The answer scanner: peekStrings reads the same fields of its skeleton as of the whole text, however it is cut.
import { describe, expect, it } from 'vitest';
import { AnswerScanner, TOKEN_MAX_BYTES } from './answer-scan.js';
import { peekStrings } from './json.js';

const NAMES = ['id', 'activity_status', 'error_status', 'updated_at'] as const;

function skeletonOf(text: string, cuts: number[]): string {
  const bytes = Buffer.from(text, 'utf8');
  const scanner = new AnswerScanner();
  let at = 0;
  for (const cut of [...cuts, bytes.length]) {
    if (scanner.finished) break;
    scanner.feed(bytes.subarray(at, Math.max(at, Math.min(cut, bytes.length))));
    at = Math.max(at, Math.min(cut, bytes.length));
  }
  return scanner.skeleton().toString('utf8');
}

const HEAD =
  '"id":"cfg_a","activity_status":"deployed","error_status":"none","updated_at":"2026-11-23T21:00:00.000Z"';
const BIG = 'x'.repeat(100_000);

const TEXTS: Record<string, string> = {
  'head first': `{${HEAD},"content":{"blob":"${BIG}"}}`,
  'head after the content': `{"content":{"blob":"${BIG}"},${HEAD}}`,
  'head after nested look-alikes': `{"content":{"updated_at":"1999-01-01T00:00:00Z","a":[{"id":"cfg_x"}, "\\"}]"]},${HEAD}}`,
  'escaped quotes and backslashes in the content': `{"content":"${'\\\\\\"'.repeat(1000)}}{][",${HEAD}}`,
  'a key written with an escape': `{"content":1,"updated\\u005fat":"2026-01-01T00:00:00Z","id":"cfg_a","activity_status":"deployed","error_status":"none"}`,
  'updated_at given twice': `{${HEAD},"content":"${BIG}","updated_at":"2027-01-01T00:00:00.000Z"}`,
  'an id of 512 escaped characters': `{"id":"${'\\u0061'.repeat(512)}","content":"${BIG}",${HEAD.slice(13)}}`,
  'numbers, literals and whitespace': `{ "n" : -1.5e3 , "t" : true , "z" : null ,\n\t${HEAD} , "c" : [ 1 , { } ] }`,
  'a long key': `{"${'k'.repeat(400)}":"v",${HEAD}}`,
  'cut short in the content': `{${HEAD},"content":"${BIG}`,
  'not an object': `["${BIG}"]`,
  'whitespace of each kind around the object, its keys and values': ` \r\n\t{ "id" :\t"cfg_a" ,\r\n"activity_status"\t:\n"deployed" , "error_status" :\r"none","updated_at": "2026-11-23T21:00:00.000Z" }`,
  'an empty first key': `{"":"x",${HEAD},"content":"${BIG}"}`,
  'a stray ] at the top level ends what is read': `{"id":"cfg_a"],"updated_at":"2026-11-23T21:00:00.000Z"}`,
  'escaped quotes in nested strings hiding look-alike keys': `{"content":{"s":"\\"},\\"updated_at\\":\\"1999-01-01T00:00:00Z\\",\\"x\\":{\\"","t":["\\\\"]},${HEAD}}`,
  'multi-byte text': `{"content":"${'é😀'.repeat(5000)}","id":"cfg_é",${HEAD.slice(13)}}`,
};

describe('AnswerScanner', () => {
  for (const [name, text] of Object.entries(TEXTS)) {
    it(`${name}: the same fields as the whole text, cut anywhere`, () => {
      const whole = peekStrings(text, 1, NAMES);
      const length = Buffer.byteLength(text);
      // Seeded cuts: every byte alone at the start, then pieces of varied sizes.
      let seed = 12345;
      const random = () => {
        seed = (seed * 1103515245 + 12345) % 2 ** 31;
        return seed / 2 ** 31;
      };
      const cuts: number[] = [];
      for (let at = 1; at < length; at += 1 + Math.floor(random() * (at < 64 ? 1 : 9000))) cuts.push(at);
      expect(peekStrings(skeletonOf(text, []), 1, NAMES)).toEqual(whole);
      expect(peekStrings(skeletonOf(text, cuts), 1, NAMES)).toEqual(whole);
    });
  }

  it('a value over TOKEN_MAX_BYTES is no string there (no field the agent reads is that long)', () => {
    const text = `{"id":"cfg_a","updated_at":"${'9'.repeat(TOKEN_MAX_BYTES + 1)}"}`;
    expect(peekStrings(skeletonOf(text, []), 1, NAMES)).toEqual({ id: 'cfg_a' });
  });

  it('keeps a bounded skeleton, whatever the answer holds', () => {
    const fields = Array.from({ length: 20_000 }, (_, i) => `"k${i}":"${'v'.repeat(200)}"`).join(',');
    const skeleton = skeletonOf(`{${fields},${HEAD}}`, []);
    expect(skeleton.length).toBeLessThanOrEqual(64 * 1024);
  });

  it('keeps a skeleton of exactly 64 KiB whole, and one byte more ends it', () => {
    const fields: string[] = [];
    for (let i = 0; i < 21; i += 1) fields.push(`"k${i}":"${'v'.repeat(3000)}"`);
    const bare = `{${fields.join(',')},"pad":"",${HEAD}}`;
    const exact = bare.replace('"pad":""', `"pad":"${'p'.repeat(64 * 1024 - bare.length)}"`);
    expect(exact.length).toBe(64 * 1024);
    expect(skeletonOf(exact, [])).toBe(exact);
    const over = exact.replace('"pad":"', '"pad":"p');
    expect(skeletonOf(over, [])).toBe(over.slice(0, -1));
  });

  it('is finished once the object ends or the bytes are not one, not before', () => {
    const ended = new AnswerScanner();
    ended.feed(Buffer.from(`{${HEAD},"content":{"a":[1]`));
    expect(ended.finished).toBe(false);
    ended.feed(Buffer.from('}} trailing bytes'));
    expect(ended.finished).toBe(true);
    expect(ended.skeleton().toString()).toBe(`{${HEAD},"content":0}`);
    const notAnObject = new AnswerScanner();
    notAnObject.feed(Buffer.from('  ['));
    expect(notAnObject.finished).toBe(true);
    expect(notAnObject.skeleton().length).toBe(0);
  });

  it('writes each kind of top-level value as the skeleton says, whatever the whitespace', () => {
    const long = 'v'.repeat(TOKEN_MAX_BYTES + 1);
    const text = ` {\t"n" : -1.5e3 ,"t":true,\r\n"z" : null , "s":"x", "o":{"k":"\\"}"}, "a":[1,"]"],"${long}":"${long}","e":""}`;
    expect(skeletonOf(text, [])).toBe('{"n":0,"t":0,"z":0,"s":"x","o":0,"a":0,"":0,"e":""}');
  });
});
