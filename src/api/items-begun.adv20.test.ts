// adv20: itemsBegunIn, what the first bytes of a list page over the cap prove about how many items it holds.
import { describe, expect, it } from 'vitest';
import { itemsBegunIn } from './json.js';

const body = JSON.stringify({
  object: 'list',
  total_count: 3,
  limit: 1,
  offset: 0,
  has_more: true,
  data: [{ id: 'a', s: '],"data":[{', n: [1, { x: [] }] }, { id: 'b' }, { id: 'c' }],
});
const dataAt = body.indexOf('"data":[') + '"data":['.length;
const secondAt = body.indexOf('{"id":"b"');

describe('itemsBegunIn', () => {
  it('counts the items of data begun in a body cut anywhere', () => {
    expect(itemsBegunIn(body.slice(0, dataAt))).toBe(0);
    expect(itemsBegunIn(body.slice(0, dataAt + 1))).toBe(1);
    // Brackets, keys and "data" inside the first item's strings and values are not the array's.
    expect(itemsBegunIn(body.slice(0, secondAt))).toBe(1);
    expect(itemsBegunIn(body.slice(0, secondAt + 1))).toBe(2);
    expect(itemsBegunIn(body)).toBe(3);
    for (let cut = 0; cut <= body.length; cut += 1) {
      const n = itemsBegunIn(body.slice(0, cut));
      expect(n).toBe(cut <= dataAt ? 0 : cut <= secondAt ? 1 : cut <= body.indexOf('{"id":"c"') ? 2 : 3);
    }
  });

  it('begins none outside a list body, and only the root object names data', () => {
    expect(itemsBegunIn('{"data":[]}')).toBe(0);
    expect(itemsBegunIn('{"data":[ {"x":[1,2]} ]}')).toBe(1);
    expect(itemsBegunIn('{"x":{"data":[1,2,3]},"data":[{},{}]}')).toBe(2);
    expect(itemsBegunIn('{"data":[1, 2,"3"]}')).toBe(3);
    expect(itemsBegunIn('not json')).toBe(0);
    expect(itemsBegunIn('')).toBe(0);
  });
});
