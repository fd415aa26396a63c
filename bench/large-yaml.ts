// Peak RSS and CPU of the agent's `--once` first sync of large items at YAML paths (docs/performance.md, "YAML,
// ninth round"): `node dist-bench/bench/large-yaml.js one26|one26json|one26keys|forty3 [runs]`, a JSON line a run.
import { readFile } from 'node:fs/promises';
import path from 'node:path';
import type { FixtureConfigInstance, Fixtures } from '../src/api/admin-schemas.js';
import type { ConfigContent } from '../src/api/schemas.js';
import { serializeContent } from '../src/reconcile/serialize.js';
import { AGENT_ARGV } from './lib/first-sync.js';
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
 * one26keys: the same with one integer-like key first (`"7":0`), which only the parse-then-emit path writes (it
 * comes first in a parse); forty3: 40 × 3 MiB at YAML paths.
 */
function fixtures(kind: string): Fixtures {
  const instances: FixtureConfigInstance[] = [];
  if (kind.startsWith('one26')) {
    const content: Record<string, number> = kind === 'one26keys' ? { 7: 0 } : {};
    for (let k = 0; k < 1_500_000; k++) content[`k${k}`] = k;
    instances.push(instance(0, kind === 'one26json' ? 'big.json' : 'big.yaml', content));
  } else {
    for (let i = 0; i < 40; i++)
      instances.push(instance(i, `large/conf${i}.yaml`, largeContent(i, 3 * 1024 * 1024)));
  }
  return { devices: [{ id: BENCH_DEVICE }], config_instances: instances };
}

const kind = process.argv[2] ?? 'one26';
const runs = Number(process.argv[3] ?? 1);
const fixture = fixtures(kind);
for (let run = 0; run < runs; run++) {
  const world = await createWorld(fixture);
  try {
    const timed = await runTimed(process.execPath, [...AGENT_ARGV, '--config', world.configPath, '--once'], {
      rss: true,
    });
    let wrong = 0;
    for (const item of fixture.config_instances ?? []) {
      const data = await readFile(path.join(world.rootDir, item.relative_filepath)).catch(() => undefined);
      if (data === undefined || !data.equals(serializeContent(item.relative_filepath, item.content))) wrong++;
    }
    process.stdout.write(
      `${JSON.stringify({
        kind,
        code: timed.code,
        wrongFiles: wrong,
        peakRssMiB: timed.maxRssKiB === undefined ? null : Math.round(timed.maxRssKiB / 1024),
        cpuSeconds: timed.cpuSeconds,
      })}\n`,
    );
  } finally {
    await world.close();
  }
}
