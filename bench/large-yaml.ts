// Peak RSS and CPU of the agent's `--once` first sync of large items (docs/performance-history.md, "YAML, ninth round",
// "Memory, sixth round"): `node dist-bench/bench/large-yaml.js <kind> [runs]`, a JSON line a run; kinds below.
import { readFile } from 'node:fs/promises';
import path from 'node:path';
import type { FixtureConfigInstance, Fixtures } from '../src/api/admin-schemas.js';
import type { ConfigContent } from '../src/api/schemas.js';
import { serializeContent } from '../src/reconcile/serialize.js';
import { AGENT_ARGV, AGENT_ENV } from './lib/first-sync.js';
import { BENCH_DEVICE, instanceId, largeContent } from './lib/fixtures.js';
import { runTimed } from './lib/proc.js';
import { createWorld } from './lib/world.js';

const CREATED_AT = '2026-11-01T00:00:00.000Z';

function instance(i: number, relativePath: string, content: ConfigContent): FixtureConfigInstance {
  return {
    id: instanceId(i),
    device_id: BENCH_DEVICE,
    relative_filepath: relativePath,
    content,
    target_status: 'deployed',
    activity_status: 'queued',
    error_status: 'none',
    created_at: CREATED_AT,
    updated_at: CREATED_AT,
  };
}

/**
 * one26: `{"k0":0,…,"k1499999":1499999}` (26.3 MB of JSON) at big.yaml; one26json: the same at big.json;
 * one26keys: the same with one integer-like key first (`"7":0`), which a parse moves first; one26proto: with a
 * `__proto__` key first; forty3: 40 × 3 MiB at YAML paths. The hostile ones, the 26.3 MB item rewritten on the
 * wire (the mock's `rewrite` fault; `json` at the end of a kind: at big.json): one26dup (`"k1":-1` early, so
 * `k1` is repeated: first place, last value), one26deep (`k0` nested 64 deep), one26num (`k0` is `1e400`),
 * one26broken (a comma before the last `}`: not JSON). The last three are refused: no file, one `failed` report.
 */
function fixtures(kind: string): Fixtures {
  const instances: FixtureConfigInstance[] = [];
  if (kind.startsWith('one26')) {
    const content: Record<string, number> =
      kind === 'one26keys' ? { 7: 0 } : kind === 'one26proto' ? JSON.parse('{"__proto__":0}') : {};
    for (let k = 0; k < 1_500_000; k++) content[`k${k}`] = k;
    instances.push(instance(0, kind.endsWith('json') ? 'big.json' : 'big.yaml', content));
  } else {
    for (let i = 0; i < 40; i++)
      instances.push(instance(i, `large/conf${i}.yaml`, largeContent(i, 3 * 1024 * 1024)));
  }
  return { devices: [{ id: BENCH_DEVICE }], config_instances: instances };
}

/** What the wire carries instead, for the hostile kinds. */
function rewrites(kind: string): { find: string; with: string }[] {
  const base = kind.replace(/json$/, '');
  if (base === 'one26dup') return [{ find: '"k0":0,', with: '"k0":0,"k1":-1,' }];
  if (base === 'one26deep') return [{ find: '"k0":0,', with: `"k0":${'['.repeat(64)}${']'.repeat(64)},` }];
  if (base === 'one26num') return [{ find: '"k0":0,', with: '"k0":1e400,' }];
  if (base === 'one26broken') return [{ find: '"k1499999":1499999}', with: '"k1499999":1499999,}' }];
  return [];
}

const kind = process.argv[2] ?? 'one26';
const runs = Number(process.argv[3] ?? 1);
const fixture = fixtures(kind);
for (let run = 0; run < runs; run++) {
  const world = await createWorld(fixture);
  const replace = rewrites(kind);
  if (replace.length > 0) {
    world.server.state.addFault({
      match: '^/v1/config_instances$',
      count: 1_000_000,
      mode: 'rewrite',
      replace,
    });
  }
  const refused = /^one26(deep|num|broken)/.test(kind);
  try {
    const timed = await runTimed(process.execPath, [...AGENT_ARGV, '--config', world.configPath, '--once'], {
      rss: true,
      env: AGENT_ENV,
    });
    let wrong = 0;
    for (const item of fixture.config_instances ?? []) {
      const data = await readFile(path.join(world.rootDir, item.relative_filepath)).catch(() => undefined);
      if (refused) {
        if (data !== undefined) wrong++;
      } else if (data === undefined || !data.equals(serializeContent(item.relative_filepath, item.content))) {
        wrong++;
      }
    }
    const failed = world.server.state.reports.filter((report) => report.error_status === 'failed');
    process.stdout.write(
      `${JSON.stringify({
        kind,
        code: timed.code,
        wrongFiles: wrong,
        failedReports: failed.length,
        ...(failed[0] === undefined ? {} : { failure: String(failed[0].message).slice(0, 200) }),
        peakRssMiB: timed.maxRssKiB === undefined ? null : Math.round(timed.maxRssKiB / 1024),
        cpuSeconds: timed.cpuSeconds,
      })}\n`,
    );
  } finally {
    await world.close();
  }
}
