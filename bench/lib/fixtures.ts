// Bench fixtures: N config instances of about 1 KiB in nested directories, or a few large ones, for the mock.
import type { FixtureConfigInstance, Fixtures } from '../../src/api/admin-schemas.js';
import type { ConfigContent } from '../../src/api/schemas.js';
import { serializeContent } from '../../src/reconcile/serialize.js';

export const BENCH_DEVICE = 'dvc_bench';
export const BENCH_API_KEY = 'sk_bench_0123456789abcdef';
const CREATED_AT = '2026-11-01T00:00:00.000Z';

/**
 * The path of instance `i`: every 1,000 instances form one set of 10 groups × 10 services × 10 files, so
 * 1,000 instances fill 111 directories and 10,000 are the same tree ten times over.
 */
export function benchPath(i: number): string {
  const set = Math.floor(i / 1000);
  const local = i % 1000;
  return `set${set}/group${Math.floor(local / 100)}/svc${Math.floor(local / 10) % 10}/conf${i}.json`;
}

/** About 1 KiB once serialized the way the agent writes it (pretty JSON and a newline). */
export function smallContent(i: number): ConfigContent {
  return {
    index: i,
    name: `service-${i}`,
    enabled: i % 3 !== 0,
    limits: { cpu: 0.5, memoryMb: 256 + (i % 7) * 64, openFiles: 4096 },
    listen: { host: '0.0.0.0', port: 8000 + (i % 1000) },
    upstreams: [0, 1, 2, 3].map((k) => ({ host: `10.0.${k}.${i % 250}`, port: 9000 + k, weight: k + 1 })),
    tags: ['bench', `set-${Math.floor(i / 1000)}`, `group-${Math.floor((i % 1000) / 100)}`],
    description: `Synthetic configuration ${i}, sized like a typical small service file.`.padEnd(180, '.'),
  };
}

/** About `bytes` once serialized: a list of log-shipping rules, the kind of file that does grow large. */
export function largeContent(i: number, bytes: number): ConfigContent {
  const rules: string[] = [];
  const line = (k: number) => `rule-${i}-${k}: match /var/log/app-${k % 97}/*.log ship to sink-${k % 13}`;
  let size = 0;
  for (let k = 0; size < bytes; k += 1) {
    const rule = line(k);
    rules.push(rule);
    size += rule.length + 8;
  }
  return { index: i, rules };
}

export interface BenchFixtureOptions {
  count: number;
  /** When set, every instance's content is about this many bytes (default: ~1 KiB). */
  contentBytes?: number;
}

export function instanceId(i: number): string {
  return `cfg_bench_${String(i).padStart(6, '0')}`;
}

/** Every instance targets `deployed` and is `queued`: the first sync has to write them all. */
export function benchFixtures(options: BenchFixtureOptions): Fixtures {
  const instances: FixtureConfigInstance[] = [];
  for (let i = 0; i < options.count; i += 1) {
    instances.push({
      id: instanceId(i),
      device_id: BENCH_DEVICE,
      relative_filepath: benchPath(i),
      content: options.contentBytes === undefined ? smallContent(i) : largeContent(i, options.contentBytes),
      target_status: 'deployed',
      activity_status: 'queued',
      error_status: 'none',
      created_at: CREATED_AT,
      updated_at: CREATED_AT,
    });
  }
  return { devices: [{ id: BENCH_DEVICE }], config_instances: instances };
}

/** The files the agent is expected to publish: relative path → bytes (the floor loops write exactly these). */
export function expectedFiles(fixtures: Fixtures): { path: string; data: Buffer }[] {
  return (fixtures.config_instances ?? []).map((instance) => ({
    path: instance.relative_filepath,
    data: serializeContent(instance.relative_filepath, instance.content),
  }));
}
