// The hand checks of everyday list items against zod and the full content walk: never a different verdict, only a faster one.
import { describe, expect, it } from 'vitest';
import {
  agreesWithZod,
  cleanAgreesWithLocate,
  item,
  parsedItemJudgedAsText,
  quickInstanceAgreesWithZod,
} from '../../test/helpers/list-item-oracle.js';
import { cutListBody, parseCompactListBody, parseJson } from './json.js';
import {
  itemKey,
  judgeConfigInstance,
  judgeParsedItem,
  knownPageTexts,
  PageItems,
  pageItemsKey,
  quickInstance,
} from './list-page.js';
import { isCleanContent, locateContentProblem } from './schemas.js';

// The generated items and the two properties over them: test/helpers/list-item-oracle.ts. Each property runs on 300
// items here and on 1,500 in list-page.scale.test.ts (integration tier, Node 24, Stryker). About 40% of the items
// are taken by the hand check and 40% judged valid (117-138 and 109-131 of 300 in five runs, 2026-11-25): the bounds
// are a fifth of the scale file's, six standard deviations below those means.
const QUICK_LEAST = 60;
const ZOD_LEAST = 60;
const VALID_LEAST = 40;
const OTHER_LEAST = 40;
// isCleanContent against locateContentProblem: 300 generated contents here, 2,000 in list-page.scale.test.ts. Each kind
// (clean, not) took 120-149 of 300 in 60 runs (mean 138, sd 8; 2026-11-25): the bound is ten deviations below.
const CLEAN_RUNS = 300;
const CLEAN_LEAST = 60;

describe('quickInstance', () => {
  it('a textbook item is taken by the hand check, and zod agrees', () => {
    expect(agreesWithZod(item())).toBe('quick');
    expect(agreesWithZod(parseJson(JSON.stringify(item({ extra: 1, content: { big: 1e300 } }))))).toBe(
      'quick',
    );
  });

  it('leaves to zod what zod must judge or name', () => {
    for (const odd of [
      item({ device: { object: 'device', id: 'd' } }),
      item({ config_schema: { object: 'config_schema', id: 's' } }),
      item({ target_status: 'retired' }),
      item({ created_at: '2025-13-01T00:00:00Z' }),
      item({ content: [] }),
      item({ content: { deep: JSON.parse(`${'['.repeat(70)}${']'.repeat(70)}`) } }),
      item({ id: undefined }),
      [item()],
      null,
    ]) {
      expect(quickInstance(odd)).toBeUndefined();
    }
  });

  it('never disagrees with zod on generated items (a valid one, then one field mutated or dropped)', () => {
    const outcomes = quickInstanceAgreesWithZod(300);
    // Both paths were taken often: the comparison is not vacuous.
    expect(outcomes.quick).toBeGreaterThan(QUICK_LEAST);
    expect(outcomes.zod).toBeGreaterThan(ZOD_LEAST);
  });

  it('judgeConfigInstance: the same verdicts as before on valid, unknown-status and broken items', () => {
    expect(judgeConfigInstance(JSON.stringify(item()))).toMatchObject({ kind: 'valid' });
    expect(judgeConfigInstance(JSON.stringify(item({ target_status: 'retired' })))).toMatchObject({
      kind: 'unknown_status',
      unknown: { field: 'target_status', value: 'retired' },
    });
    expect(judgeConfigInstance(JSON.stringify(item({ updated_at: 'yesterday' })))).toMatchObject({
      kind: 'invalid',
      id: 'cfg_1',
      problem: expect.stringContaining('updated_at'),
    });
  });
});

describe('items of a compact body judged on their values', () => {
  it('judgeParsedItem gives what judgeConfigInstance gives for the text (generated items, one field mutated)', () => {
    const kinds = parsedItemJudgedAsText(300);
    expect(kinds.valid).toBeGreaterThan(VALID_LEAST);
    expect(kinds.other).toBeGreaterThan(OTHER_LEAST);
  });

  it('a page of values judges like the page of texts cut from the same body, a too-deep item included', () => {
    const deep = `${'['.repeat(600)}${']'.repeat(600)}`;
    const items = [
      JSON.stringify(item({ id: 'cfg_a' })),
      JSON.stringify(item({ id: 'cfg_b', target_status: 'retired' })),
      JSON.stringify(item({ id: 'cfg_c', updated_at: 'yesterday' })),
      JSON.stringify(item({ id: 'cfg_d' })).replace('{"port":8080}', `{"deep":${deep}}`),
    ];
    const body = `{"object":"list","total_count":4,"limit":10,"offset":0,"has_more":false,"data":[${items.join(',')}]}`;
    const compact = parseCompactListBody(body);
    expect(compact?.envelopeText).toBe(cutListBody(body).envelopeText);
    const byValues = [...PageItems.ofValues(compact?.values ?? [])];
    expect(byValues).toEqual([...PageItems.ofTexts(cutListBody(body).items)]);
    expect(byValues.map((judged) => judged.kind)).toEqual(['valid', 'unknown_status', 'invalid', 'invalid']);
    expect(byValues[3]).toMatchObject({
      id: 'cfg_d',
      problem: expect.stringContaining('nested more than 512'),
    });
    // Not compact (a number written 1.0): no values, the body is cut as before.
    expect(parseCompactListBody(body.replace('"limit":10', '"limit":10.0'))).toBeUndefined();
  });
});

describe('isCleanContent', () => {
  /** Nested `levels` deep: an object holding an array holding an object ... */
  function nested(levels: number): unknown {
    let value: unknown = 1;
    for (let i = 0; i < levels; i += 1) value = i % 2 === 0 ? [value] : { k: value };
    return value;
  }

  it('says clean exactly when locateContentProblem finds nothing', () => {
    const outcomes = cleanAgreesWithLocate(CLEAN_RUNS);
    expect(Math.min(outcomes.clean, outcomes.not)).toBeGreaterThan(CLEAN_LEAST);
    for (const levels of [62, 63, 64, 65, 66]) {
      const content = { top: nested(levels) };
      expect(isCleanContent(content)).toBe(locateContentProblem(content) === undefined);
    }
    expect(isCleanContent({ top: nested(62) })).toBe(true);
    expect(isCleanContent({ top: nested(64) })).toBe(false);
  });
});

describe('judgeParsedItem with the exact text of the item', () => {
  const hostile = item({ content: { deep: JSON.parse(`${'{"a":'.repeat(70)}{}${'}'.repeat(70)}`) } });
  const text = JSON.stringify(hostile);
  const known = (id: string, key: string) => ({
    lookup: (askedId: string, askedKey: string) =>
      askedId === id && askedKey === key ? { sha256: 'a'.repeat(64), size: 9 } : undefined,
  });

  it('gives a valid item its text and key; unknown, its content is checked', () => {
    const valid = judgeParsedItem(item(), JSON.stringify(item()), known('cfg_1', 'another key'));
    expect(valid).toMatchObject({
      kind: 'valid',
      wire: { text: JSON.stringify(item()), key: itemKey(JSON.stringify(item())) },
    });
    expect(valid.kind === 'valid' && valid.wire?.known).toBeUndefined();
    expect(judgeParsedItem(hostile, text).kind).toBe('invalid');
    expect(judgeParsedItem(hostile, text, known('cfg_2', itemKey(text))).kind).toBe('invalid');
    expect(judgeParsedItem(hostile, text, known('cfg_1', itemKey(`${text} `))).kind).toBe('invalid');
  });

  it('takes an item known for its id and key without checking its content, every other field still checked', () => {
    expect(judgeParsedItem(hostile, text, known('cfg_1', itemKey(text)))).toMatchObject({
      kind: 'valid',
      wire: { known: { sha256: 'a'.repeat(64), size: 9 } },
    });
    const badHead = item({ updated_at: 'yesterday' });
    const badText = JSON.stringify(badHead);
    expect(judgeParsedItem(badHead, badText, known('cfg_1', itemKey(badText))).kind).toBe('invalid');
  });
});

describe('a compact page known by its items’ exact text (KnownPages)', () => {
  const deep = JSON.parse(`${'{"a":'.repeat(70)}{}${'}'.repeat(70)}`);
  const values = [
    item({ id: 'cfg_1' }),
    item({ id: 'cfg_2', relative_filepath: 'b.json' }),
    item({ id: 'cfg_3', relative_filepath: 'c.json' }),
  ];
  const texts = values.map((value) => JSON.stringify(value));
  const FILE = { sha256: 'b'.repeat(64), size: 7 };

  /** Records as fingerprints.json holds them: item id → key of its text; page key → key of its items' keys. */
  function records(
    itemKeys: Record<string, string>,
    pages: Record<string, string> = {},
    lengths: Record<string, readonly number[]> = {},
  ) {
    const recordedPages = new Map(Object.entries(pages));
    const recordedLengths = new Map(Object.entries(lengths));
    return {
      pages: recordedPages,
      lengths: recordedLengths,
      known: {
        lookup: (id: string, key: string) => (itemKeys[id] === key ? FILE : undefined),
        pages: {
          lookupPage: (pageKey: string) => recordedPages.get(pageKey),
          recordPage: (pageKey: string, itemKeysKey: string, textLengths: readonly number[]) => {
            recordedPages.set(pageKey, itemKeysKey);
            recordedLengths.set(pageKey, textLengths);
          },
          pageTextLengths: (pageKey: string) => recordedLengths.get(pageKey),
          itemKeyOf: (id: string) => itemKeys[id],
        },
      },
    };
  }
  const judgeAll = (page: PageItems, known: Parameters<PageItems['at']>[1]) =>
    Array.from({ length: page.length }, (_, index) => page.at(index, known));
  const pageKey = itemKey(texts.join(','));

  it('a page whose every item was judged valid is recorded by its items’ text, with the keys of its items in order', () => {
    const { known, pages, lengths } = records({});
    const judged = judgeAll(PageItems.ofValues(values, texts), known);
    expect(judged.map((one) => one?.kind)).toEqual(['valid', 'valid', 'valid']);
    const textLengths = texts.map((text) => text.length);
    expect([...pages]).toEqual([
      [
        pageKey,
        pageItemsKey(
          texts.map((text) => itemKey(text)),
          textLengths,
        ),
      ],
    ]);
    expect([...lengths]).toEqual([[pageKey, texts.map((text) => text.length)]]);
  });

  it('a page holding an item that is not valid is not recorded', () => {
    const broken = [...values.slice(0, 2), item({ id: 'cfg_3', updated_at: 'yesterday' })];
    const { known, pages } = records({});
    judgeAll(
      PageItems.ofValues(
        broken,
        broken.map((value) => JSON.stringify(value)),
      ),
      known,
    );
    expect(pages.size).toBe(0);
  });

  it('a known page takes each item by the key recorded for its id, without a key of its own (content unchecked)', () => {
    // The premise, shown by a record no hash of the text could give: cfg_2's text is hostile, its record vouches.
    const hostile = [values[0], item({ id: 'cfg_2', content: { deep } }), values[2]];
    const hostileTexts = hostile.map((value) => JSON.stringify(value));
    const vouched = { cfg_1: itemKey(texts[0]!), cfg_2: `${'V'.repeat(43)}=`, cfg_3: itemKey(texts[2]!) };
    const { known } = records(vouched, {
      [itemKey(hostileTexts.join(','))]: pageItemsKey(
        Object.values(vouched),
        hostileTexts.map((text) => text.length),
      ),
    });
    const judged = judgeAll(PageItems.ofValues(hostile, hostileTexts), known);
    expect(judged[1]).toMatchObject({ kind: 'valid', wire: { key: vouched.cfg_2, known: FILE } });
    // The same page without its record: every item keyed by its text, the hostile one judged in full.
    const unknown = judgeAll(PageItems.ofValues(hostile, hostileTexts), records(vouched).known);
    expect(unknown[1]?.kind).toBe('invalid');
  });

  it('a page recorded with other keys than its ids hold now (a later text of an id) is judged item by item', () => {
    // cfg_2 was listed with this very text when the page was recorded; its id's record now holds a later text.
    const later = itemKey(
      JSON.stringify(item({ id: 'cfg_2', relative_filepath: 'b.json', content: { port: 1 } })),
    );
    const recordedThen = pageItemsKey(
      texts.map((text) => itemKey(text)),
      texts.map((text) => text.length),
    );
    const { known } = records(
      { cfg_1: itemKey(texts[0]!), cfg_2: later, cfg_3: itemKey(texts[2]!) },
      { [pageKey]: recordedThen },
    );
    const judged = judgeAll(PageItems.ofValues(values, texts), known);
    // Keyed by its own text: not the later record, so not known (its file is made from this text).
    expect(judged[1]).toMatchObject({ kind: 'valid', wire: { key: itemKey(texts[1]!) } });
    expect(judged[1]?.kind === 'valid' && judged[1].wire?.known).toBeUndefined();
    expect(judged[0]).toMatchObject({ kind: 'valid', wire: { known: FILE } });
  });

  describe('a known page cut by its recorded text lengths (knownPageTexts)', () => {
    const body = (items: readonly string[], envelope = '{"has_more":false,"data":[]}') =>
      envelope.replace('"data":[]', `"data":[${items.join(',')}]`);
    /** Records as a full pull leaves them after judging `texts` valid. */
    function recordedAfterJudging(pageTexts: readonly string[]) {
      const itemKeys = Object.fromEntries(
        pageTexts.map((text) => [JSON.parse(text).id as string, itemKey(text)]),
      );
      const recorded = records(itemKeys);
      judgeAll(
        PageItems.ofValues(
          pageTexts.map((text) => JSON.parse(text)),
          pageTexts,
        ),
        recorded.known,
      );
      expect(recorded.pages.size).toBe(1);
      return recorded;
    }

    it('gives the very texts and values the proof gives, and the page key, without printing', () => {
      const { known } = recordedAfterJudging(texts);
      const cut = parseCompactListBody(body(texts), knownPageTexts(known.pages));
      const proven = parseCompactListBody(body(texts));
      expect(cut).toEqual({ ...proven, pageKey });
      const judged = judgeAll(PageItems.ofValues(cut!.values, cut!.texts, cut!.pageKey), known);
      expect(judged.map((one) => one?.kind === 'valid' && one.wire)).toEqual(
        texts.map((text) => ({ text, key: itemKey(text), known: FILE })),
      );
    });

    it('a page with one character changed is proven and printed as before; another envelope does not matter', () => {
      const { known } = recordedAfterJudging(texts);
      const changed = body([texts[0]!, texts[1]!.replace('b.json', 'c.json'), texts[2]!]);
      expect(parseCompactListBody(changed, knownPageTexts(known.pages))).toEqual(
        parseCompactListBody(changed),
      );
      // The key is of the items' text alone: under another envelope (printed and checked apart) the page is known.
      const counted = body(texts, '{"has_more":false,"total_count":3,"data":[]}');
      expect(parseCompactListBody(counted, knownPageTexts(known.pages))).toEqual({
        ...parseCompactListBody(counted),
        pageKey,
      });
      // Not compact (a space inside an item): cut by the caller, whatever the records say.
      const spaced = body([texts[0]!.replace('{"', '{ "'), texts[1]!, texts[2]!]);
      expect(parseCompactListBody(spaced, knownPageTexts(known.pages))).toBeUndefined();
    });

    it('a record whose lengths cut elsewhere, or do not cover the text, is not used: the body is proven', () => {
      const { known, lengths } = recordedAfterJudging(texts);
      const right = [...(lengths.get(pageKey) ?? [])];
      const damaged = [
        [right[1]!, right[0]!, right[2]!],
        [right[0]! - 1, right[1]! + 1, right[2]!],
        [right[0]!, right[1]!, right[2]! - 1],
        [right[0]!, right[1]!],
        [right[0]!, right[1]!, right[2]!, 2],
      ];
      for (const wrong of damaged) {
        lengths.set(pageKey, wrong);
        const parsed = parseCompactListBody(body(texts), knownPageTexts(known.pages));
        expect([wrong, parsed]).toEqual([wrong, parseCompactListBody(body(texts))]);
      }
    });

    it('two lengths swapped where the cut lands on a `},{` inside a string: refused, then mended from the page', () => {
      // cfg_1's text holds `},{` inside a string exactly where cfg_2's length would cut it: swapped, both lengths
      // cut at a `}` followed by `,{` and the total is kept, so only the lengths bound into the key tell.
      const second = JSON.stringify(item({ id: 'cfg_2', relative_filepath: 'b.json' }));
      const probe = JSON.stringify(item({ id: 'cfg_1', content: { note: '' } }));
      const at = probe.indexOf('"note":"') + '"note":"'.length;
      const note = `${'x'.repeat(second.length - 1 - at)}},{"y":1`;
      const first = JSON.stringify(item({ id: 'cfg_1', content: { note } }));
      expect(first.slice(second.length - 1, second.length + 2)).toBe('},{');
      const pageTexts = [first, second];
      const { known, lengths, pages } = recordedAfterJudging(pageTexts);
      const key = itemKey(pageTexts.join(','));
      const recorded = pages.get(key);
      lengths.set(key, [second.length, first.length]);
      const swappedBody = body(pageTexts);
      expect(parseCompactListBody(swappedBody, knownPageTexts(known.pages))).toEqual(
        parseCompactListBody(swappedBody),
      );
      // The page's own texts prove the record (their lengths give its key), and its lengths are mended.
      const proven = parseCompactListBody(swappedBody)!;
      const judged = judgeAll(PageItems.ofValues(proven.values, proven.texts), known);
      expect(judged.map((one) => one?.kind === 'valid' && one.wire?.text)).toEqual(pageTexts);
      expect([pages.get(key), lengths.get(key)]).toEqual([recorded, [first.length, second.length]]);
      expect(parseCompactListBody(swappedBody, knownPageTexts(known.pages))).toEqual({
        ...proven,
        pageKey: key,
      });
    });

    it('a record made before the lengths were bound (the key of the item keys alone) is never used: made again', () => {
      const { known, lengths, pages } = recordedAfterJudging(texts);
      const bound = pages.get(pageKey);
      pages.set(pageKey, itemKey(texts.map((text) => itemKey(text)).join('')));
      expect(parseCompactListBody(body(texts), knownPageTexts(known.pages))).toEqual(
        parseCompactListBody(body(texts)),
      );
      const judged = judgeAll(PageItems.ofValues(values, texts), known);
      // Each item keyed by its own text (the page not known), and the page recorded again, bound.
      expect(judged.map((one) => one?.kind === 'valid' && one.wire?.key)).toEqual(
        texts.map((text) => itemKey(text)),
      );
      expect([pages.get(pageKey), lengths.get(pageKey)]).toEqual([bound, texts.map((text) => text.length)]);
    });

    describe('a record bound to lengths that cut elsewhere (made wrong as a whole: a bug, a hand edit)', () => {
      /** The items' text of a page and its values, as knownPageTexts is given them by json.ts. */
      const cutOf = (known: ReturnType<typeof records>['known'], pageTexts: readonly string[]) =>
        knownPageTexts(known.pages)(
          pageTexts.join(','),
          pageTexts.map((text) => JSON.parse(text)),
        );
      /** Records `pageTexts` as known, its record's key made of `wrong` lengths (so the binding agrees). */
      function boundTo(pageTexts: readonly string[], wrong: readonly number[]) {
        const recorded = recordedAfterJudging(pageTexts);
        const key = itemKey(pageTexts.join(','));
        const right = recorded.lengths.get(key);
        // The premise: with its own lengths the page is cut, so only the cut's own checks refuse what follows.
        expect(cutOf(recorded.known, pageTexts)).toEqual({ texts: pageTexts, pageKey: key });
        recorded.pages.set(
          key,
          pageItemsKey(
            pageTexts.map((text) => itemKey(text)),
            wrong,
          ),
        );
        recorded.lengths.set(key, wrong);
        return { ...recorded, right };
      }
      /** Two items, the first holding `inside` in a string; `at`: the length that cuts the first at its `marker`. */
      function pageWith(inside: string, marker: string) {
        const first = JSON.stringify(item({ id: 'cfg_1', content: { note: inside } }));
        const second = JSON.stringify(item({ id: 'cfg_2', relative_filepath: 'b.json' }));
        const at = first.indexOf(inside) + inside.indexOf(marker) + 1;
        return { pageTexts: [first, second], at, total: first.length + 1 + second.length };
      }

      it('a cut that ends at a `}` not followed by a comma (`}:{` in a string) is refused', () => {
        const { pageTexts, at, total } = pageWith('a}:{b', '}');
        const { known } = boundTo(pageTexts, [at, total - at - 1]);
        expect(cutOf(known, pageTexts)).toBeUndefined();
      });

      it('a cut whose next item does not start with `{` (`},"` in a string) is refused', () => {
        const { pageTexts, at, total } = pageWith('a},"b', '}');
        const { known } = boundTo(pageTexts, [at, total - at - 1]);
        expect(cutOf(known, pageTexts)).toBeUndefined();
      });

      it('a cut that does not end at a `}` (`x,{` in a string) is refused', () => {
        const { pageTexts, at, total } = pageWith('ax,{b', 'x');
        const { known } = boundTo(pageTexts, [at, total - at - 1]);
        expect(cutOf(known, pageTexts)).toBeUndefined();
      });

      it('lengths that stop short of the text (the last item cut at its content’s `}`) are refused', () => {
        const pageTexts = [texts[0]!, texts[1]!];
        expect(pageTexts[1]!.endsWith('}}')).toBe(true);
        const { known } = boundTo(pageTexts, [pageTexts[0]!.length, pageTexts[1]!.length - 1]);
        expect(cutOf(known, pageTexts)).toBeUndefined();
      });

      it('fewer lengths than the page has items (two items taken as one) are refused', () => {
        const { known, right } = boundTo(texts, [texts[0]!.length, texts[1]!.length + 1 + texts[2]!.length]);
        expect(right).toEqual(texts.map((text) => text.length));
        expect(cutOf(known, texts)).toBeUndefined();
      });

      it('a record of an empty page is never a known page', () => {
        const { known, pages, lengths } = records({});
        pages.set(itemKey(''), pageItemsKey([], []));
        lengths.set(itemKey(''), []);
        expect(knownPageTexts(known.pages)('', [])).toBeUndefined();
      });

      it('an item whose id has no recorded key, or that is not an object, refuses the record (nothing thrown)', () => {
        // The record made as a page missing cfg_2's key would give it, were the missing key taken as empty.
        const { known, pages, lengths } = records({ cfg_1: itemKey(texts[0]!), cfg_3: itemKey(texts[2]!) });
        const textLengths = texts.map((text) => text.length);
        pages.set(pageKey, pageItemsKey([itemKey(texts[0]!), '', itemKey(texts[2]!)], textLengths));
        lengths.set(pageKey, textLengths);
        expect(cutOf(known, texts)).toBeUndefined();
        // `null` and a number among the items: recorded as if their keys were empty, refused all the same.
        const odd = ['null', '7'];
        const forged = records({});
        forged.pages.set(itemKey(odd.join(',')), pageItemsKey(['', ''], [4, 1]));
        forged.lengths.set(itemKey(odd.join(',')), [4, 1]);
        expect(knownPageTexts(forged.known.pages)(odd.join(','), [null, 7])).toBeUndefined();
      });
    });
  });

  it('an item judged twice counts once: the page is recorded only once every item was judged', () => {
    const { known, pages, lengths } = records({});
    const page = PageItems.ofValues(values, texts);
    page.at(0, known);
    page.at(0, known);
    page.at(1, known);
    expect(pages.size).toBe(0);
    page.at(2, known);
    expect([...pages]).toEqual([
      [
        pageKey,
        pageItemsKey(
          texts.map((text) => itemKey(text)),
          texts.map((text) => text.length),
        ),
      ],
    ]);
    expect(lengths.get(pageKey)).toEqual(texts.map((text) => text.length));
  });

  it('a record that does not prove its page is left as it was while the page holds an item not valid', () => {
    const broken = [...values.slice(0, 2), item({ id: 'cfg_3', updated_at: 'yesterday' })];
    const brokenTexts = broken.map((value) => JSON.stringify(value));
    const brokenKey = itemKey(brokenTexts.join(','));
    const { known, pages, lengths } = records(
      { cfg_1: itemKey(texts[0]!), cfg_2: itemKey(texts[1]!) },
      { [brokenKey]: pageItemsKey(['x', 'y', 'z'], [1, 2, 3]) },
      { [brokenKey]: [1, 2, 3] },
    );
    judgeAll(PageItems.ofValues(broken, brokenTexts), known);
    expect([...pages]).toEqual([[brokenKey, pageItemsKey(['x', 'y', 'z'], [1, 2, 3])]]);
    expect([...lengths]).toEqual([[brokenKey, [1, 2, 3]]]);
  });

  it('a list of lengths is bound unambiguously: [1, 23] and [12, 3] give two keys', () => {
    const keys = texts.slice(0, 2).map((text) => itemKey(text));
    expect(pageItemsKey(keys, [1, 23])).not.toBe(pageItemsKey(keys, [12, 3]));
  });
});
