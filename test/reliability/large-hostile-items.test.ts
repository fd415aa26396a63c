// One large item of each kind the streaming judge once left to a parsed tree (integer-like, repeated and
// `__proto__` keys; content nested 64 deep, a number beyond a double, text that is not JSON), pulled by a real
// `--once` whose JS heap is capped far below that tree: it writes the usual bytes or refuses with the usual words.
import { readFile, rm } from 'node:fs/promises';
import path from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import type { FixtureConfigInstance } from '../../src/api/admin-schemas.js';
import type { ConfigContent } from '../../src/api/schemas.js';
import { serializeContent } from '../../src/reconcile/serialize.js';
import { AgentHarness } from '../helpers/harness.js';

/** Keys in the item: ~4.4 MB of content, whose tree alone would take over 100 MB of heap. */
const KEYS = 250_000;
/**
 * The agent's old generation, capped: before json-file.ts judged these items on their bytes, each of them went
 * through a parse into a tree of over 100 MB and the agent died of heap exhaustion (V8's "Reached heap limit").
 */
const HEAP_MIB = 32;
const LIST = '^/v1/config_instances$';
const T0 = '2026-11-01T00:00:00.000Z';

function bigContent(first: Record<string, number>): ConfigContent {
  const content: Record<string, number> = first;
  for (let k = 0; k < KEYS; k++) content[`k${k}`] = k;
  return content;
}

function item(relativePath: string, content: ConfigContent): FixtureConfigInstance {
  return {
    id: 'cfg_big',
    device_id: 'dvc_it_01',
    relative_filepath: relativePath,
    content,
    target_status: 'deployed',
    activity_status: 'queued',
    error_status: 'none',
    created_at: T0,
    updated_at: T0,
  };
}

let harness: AgentHarness | undefined;
afterEach(async () => {
  await harness?.server.close();
  if (harness !== undefined) await rm(harness.dir, { recursive: true, force: true });
  harness = undefined;
});

/** A `--once` first sync of `instance`, its list rewritten by `replace`, the agent's heap capped. */
async function firstSync(instance: FixtureConfigInstance, replace: { find: string; with: string }[] = []) {
  harness = await AgentHarness.create({
    registerDevice: true,
    fixtures: { config_instances: [instance] },
  });
  await harness.writeConfig({
    server: { baseUrl: harness.server.url, apiKeyFile: harness.keyPath, timeoutSeconds: 60 },
  });
  if (replace.length > 0)
    harness.server.state.addFault({ match: LIST, count: 100, mode: 'rewrite', replace });
  const result = await harness.run(['--once'], {
    env: { NODE_OPTIONS: `--max-old-space-size=${HEAP_MIB}` },
    timeoutMs: 240_000,
  });
  const file = await readFile(path.join(harness.rootDir, instance.relative_filepath)).catch(() => undefined);
  const reports = (await harness.reportsFor(instance.id)).map((report) =>
    `${report.activity_status}/${report.error_status} ${report.message ?? ''}`.trim(),
  );
  return { result, file, reports };
}

describe('a large item only a parse tree could once judge, under a heap far below that tree', () => {
  for (const [name, relativePath, first] of [
    ['an integer-like key (written first)', 'big.json', { 7: 0 }],
    ['an integer-like key, at a YAML path', 'big.yaml', { 7: 0 }],
    ['a `__proto__` key (an own key)', 'big.yaml', JSON.parse('{"__proto__":1}') as Record<string, number>],
  ] as const) {
    it(`writes the usual bytes for ${name}`, async () => {
      const content = bigContent({ ...first });
      const { result, file, reports } = await firstSync(item(relativePath, content));
      expect(result.stderr).not.toMatch(/heap limit|out of memory/i);
      expect(result.code).toBe(0);
      expect(file?.equals(serializeContent(relativePath, content))).toBe(true);
      expect(reports.at(-1)).toBe('deployed/none');
    });
  }

  it('writes a repeated key in its first place with its last value', async () => {
    const content = bigContent({});
    // `k1` twice on the wire: first right after `k0` (its place), last with its own value.
    const { result, file, reports } = await firstSync(item('big.json', content), [
      { find: '"k0":0,', with: '"k0":0,"k1":-1,' },
    ]);
    expect(result.code).toBe(0);
    expect(file?.equals(serializeContent('big.json', content))).toBe(true);
    expect(reports.at(-1)).toBe('deployed/none');
  });

  for (const [name, replacement, problem] of [
    [
      'content nested 64 deep',
      `"k0":${'['.repeat(64)}${']'.repeat(64)},`,
      `content.k0${'[0]'.repeat(63)}: nested deeper than 64 levels`,
    ],
    ['a number beyond a double', '"k0":1e400,', 'content.k0: number 1e400 is out of range (beyond ±1.8e308)'],
    [
      'text that is not JSON',
      '"k0":0,,',
      "not valid JSON: Quoted object key expected but got ',' at character",
    ],
  ] as const) {
    it(`refuses ${name} with the usual words, reported failed, no file`, async () => {
      const { result, file, reports } = await firstSync(item('big.yaml', bigContent({})), [
        { find: '"k0":0,', with: replacement },
      ]);
      expect(result.stderr).not.toMatch(/heap limit|out of memory/i);
      expect(result.code).toBe(1);
      expect(file).toBeUndefined();
      expect(reports).toHaveLength(1);
      expect(reports[0]).toContain(`queued/failed invalid instance from the service: ${problem}`);
    });
  }
});
