// A large item's judge at its sizes: an item over TREE_ITEM_BYTES refused, an object of 50,000 keys written without hashing its keys twice (integration tier: seconds of CPU).
import { describe, expect, it } from 'vitest';
import { serializeContent } from '../reconcile/serialize.js';
import { isJsonContentFile } from './json-file.js';
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

describe('a large item judged with its content streamed into its file, at scale', () => {
  it('refuses an item over TREE_ITEM_BYTES that only a tree could judge, naming it; below that, the usual path', () => {
    const big = JSON.stringify({
      rules: Array.from({ length: 60_000 }, (_, k) => `rule-${k}-${'x'.repeat(30)}`),
    });
    expect(big.length).toBeGreaterThan(TREE_ITEM_BYTES);
    const hostile = [
      `{"id":"cfg_1","activity_status":"queued","rules":${big}}`, // no `content`
      // A tree of the rest of the item: a million small values.
      itemText('{"a":1}', { before: `,"extra":[${'0,'.repeat(1_100_000)}0]` }),
    ];
    for (const text of hostile) {
      const judged = judgeItemBytes(Buffer.from(text, 'utf8'));
      expect(judged).toMatchObject({ kind: 'invalid', id: 'cfg_1', activityStatus: 'queued' });
      expect(judged.kind === 'invalid' && judged.problem).toMatch(
        /^too large to judge without parsing it whole/,
      );
    }
    // Without the limit, the item no tree-free judge can take goes the usual path.
    const usual = judgeItemBytes(Buffer.from(hostile[0]!, 'utf8'), 0, Number.POSITIVE_INFINITY);
    expect(outcome(usual)).toEqual(outcome(judgeConfigInstance(hostile[0]!)));
  });

  it('writes an object of 50,000 keys as JSON and YAML: the writing walk does not hash its keys again', () => {
    const content: Record<string, number> = {};
    for (let k = 0; k < 50_000; k++) content[`key-${k}`] = k;
    const text = itemText(JSON.stringify(content));
    for (const path of ['app/a.json', 'app/a.yaml']) {
      const judged = judgeItemBytes(Buffer.from(text.replace('app/a.json', path), 'utf8'));
      expect(judged.kind === 'valid' && isJsonContentFile(judged.instance.content)).toBe(true);
      const file = judged.kind === 'valid' ? serializeContent(path, judged.instance.content) : undefined;
      expect(file?.equals(serializeContent(path, content))).toBe(true);
    }
  });
});
