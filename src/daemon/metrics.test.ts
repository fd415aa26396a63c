// Agent metrics: the rendered series after recorded events, and the textfile on memfs and on a real disk.
import { mkdtempSync, promises as nodeFs, readdirSync, readFileSync, rmSync, statSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { Volume } from 'memfs';
import { register as globalRegistry } from 'prom-client';
import { afterAll, describe, expect, it } from 'vitest';
import { memfsPort } from '../../test/helpers/memfs.js';
import type { FsPort } from '../lib/fs-port.js';
import { DiskError } from '../store/errors.js';
import type { HookRunResult } from './hooks.js';
import { AgentMetrics, writeMetricsTextfile } from './metrics.js';

const BASE = mkdtempSync(path.join(os.tmpdir(), 'config-agent-metrics-'));

afterAll(() => {
  rmSync(BASE, { recursive: true, force: true });
});

/** The value of the one sample named `name` whose labels are exactly `labels` (device_id aside). */
function sample(text: string, name: string, labels: Record<string, string> = {}): number | undefined {
  for (const line of text.split('\n')) {
    if (line.startsWith('#') || line === '') continue;
    const match = /^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})? (\S+)$/.exec(line);
    if (match === null || match[1] !== name) continue;
    const found: Record<string, string> = {};
    for (const [, key, value] of (match[2] ?? '').matchAll(/([a-zA-Z_]\w*)="((?:[^"\\]|\\.)*)"/g)) {
      found[key!] = value!;
    }
    const { device_id: _device, ...rest } = found;
    if (JSON.stringify(Object.entries(rest).sort()) === JSON.stringify(Object.entries(labels).sort())) {
      return Number(match[3]);
    }
  }
  return undefined;
}

function hookResult(overrides: Partial<HookRunResult> = {}): HookRunResult {
  return {
    match: 'nginx/**',
    argv: ['systemctl', 'reload', 'nginx'],
    changedPaths: ['nginx/nginx.conf'],
    exitCode: 0,
    signal: null,
    timedOut: false,
    durationMs: 12,
    stderrTail: '',
    leftovers: [],
    ...overrides,
  };
}

const pass = {
  durationMs: 1500,
  converged: true,
  reachable: true,
  finishedAtMs: 1_767_225_600_000,
  managedFiles: 3,
  instancesByStatus: { deployed: 3, queued: 1 },
  retries: 2,
};

describe('AgentMetrics', () => {
  it('starts with the pass results at 0, no success yet, and every series labelled with the device', async () => {
    const text = await new AgentMetrics({ deviceId: 'dev-1' }).render();
    for (const result of ['converged', 'not_converged', 'unreachable']) {
      expect(sample(text, 'config_agent_passes_total', { result })).toBe(0);
    }
    expect(sample(text, 'config_agent_last_success_timestamp_seconds')).toBe(0);
    expect(text).toContain('# TYPE config_agent_managed_files gauge');
    expect(text).toContain('device_id="dev-1"');
    expect(text).not.toContain('process_cpu');
  });

  it('renders passes, instances by status, durations, timestamps and retries', async () => {
    const metrics = new AgentMetrics({ deviceId: 'dev-1' });
    metrics.recordPass(pass);
    metrics.recordPass({
      ...pass,
      converged: false,
      durationMs: 500,
      finishedAtMs: pass.finishedAtMs + 30_000,
      managedFiles: 2,
      instancesByStatus: { deployed: 2, failed: 1 },
      retries: 1,
      pendingReports: 4,
    });
    metrics.recordPass({
      ...pass,
      reachable: false,
      converged: false,
      finishedAtMs: pass.finishedAtMs + 60_000,
    });
    const text = await metrics.render();

    expect(sample(text, 'config_agent_passes_total', { result: 'converged' })).toBe(1);
    expect(sample(text, 'config_agent_passes_total', { result: 'not_converged' })).toBe(1);
    expect(sample(text, 'config_agent_passes_total', { result: 'unreachable' })).toBe(1);
    expect(sample(text, 'config_agent_last_success_timestamp_seconds')).toBe(1_767_225_600);
    expect(sample(text, 'config_agent_last_pass_timestamp_seconds')).toBe(1_767_225_660);
    expect(sample(text, 'config_agent_managed_files')).toBe(3);
    expect(sample(text, 'config_agent_instances', { status: 'deployed' })).toBe(3);
    expect(sample(text, 'config_agent_instances', { status: 'queued' })).toBe(1);
    // A status that disappeared reads 0 instead of keeping its old value.
    expect(sample(text, 'config_agent_instances', { status: 'failed' })).toBe(0);
    expect(sample(text, 'config_agent_retries_total')).toBe(5);
    // Absent from a summary (the third pass): the last known count stays.
    expect(sample(text, 'config_agent_reports_pending')).toBe(4);
    expect(sample(text, 'config_agent_pass_duration_seconds_count')).toBe(3);
    expect(sample(text, 'config_agent_pass_duration_seconds_sum')).toBe(3.5);
    expect(sample(text, 'config_agent_pass_duration_seconds_bucket', { le: '1' })).toBe(1);
    expect(sample(text, 'config_agent_pass_duration_seconds_bucket', { le: '+Inf' })).toBe(3);
  });

  it('counts requests by route and outcome, drift, and hook runs and failures', async () => {
    const metrics = new AgentMetrics({ deviceId: 'dev-1' });
    const route = '/v1/config_instances';
    metrics.recordRequest({ method: 'GET', route, outcome: 'ok', status: 200, durationMs: 20 });
    metrics.recordRequest({ method: 'GET', route, outcome: 'ok', status: 200, durationMs: 30 });
    metrics.recordRequest({ method: 'GET', route, outcome: 'http_error', status: 503, durationMs: 5 });
    metrics.recordRequest({
      method: 'PATCH',
      route: '/v1/config_instances/{id}',
      outcome: 'timeout',
      durationMs: 1,
    });
    metrics.recordDriftDetected();
    metrics.recordDriftDetected(2);
    metrics.recordDriftRepair();
    metrics.recordDriftRepair(Number.NaN);
    metrics.recordHookRun(hookResult());
    metrics.recordHookRun(hookResult({ exitCode: 1, stderrTail: 'bad config' }));
    metrics.recordHookRun(hookResult({ exitCode: null, signal: 'SIGTERM', timedOut: true }));
    metrics.recordHookRun(hookResult({ exitCode: null, error: 'spawn systemctl ENOENT' }));
    const text = await metrics.render();

    expect(sample(text, 'config_agent_requests_total', { method: 'GET', route, outcome: 'ok' })).toBe(2);
    expect(sample(text, 'config_agent_requests_total', { method: 'GET', route, outcome: 'http_error' })).toBe(
      1,
    );
    expect(
      sample(text, 'config_agent_requests_total', {
        method: 'PATCH',
        route: '/v1/config_instances/{id}',
        outcome: 'timeout',
      }),
    ).toBe(1);
    expect(sample(text, 'config_agent_request_duration_seconds_count', { method: 'GET', route })).toBe(3);
    expect(sample(text, 'config_agent_drift_detected_total')).toBe(3);
    expect(sample(text, 'config_agent_drift_repairs_total')).toBe(1);
    expect(sample(text, 'config_agent_hook_runs_total')).toBe(4);
    expect(sample(text, 'config_agent_hook_failures_total')).toBe(3);
  });

  it('keeps each instance in its own registry, away from the global one', async () => {
    const one = new AgentMetrics({ deviceId: 'dev-1' });
    const two = new AgentMetrics({ deviceId: 'dev-2' });
    one.recordDriftRepair(5);
    expect(sample(await one.render(), 'config_agent_drift_repairs_total')).toBe(5);
    expect(sample(await two.render(), 'config_agent_drift_repairs_total')).toBe(0);
    expect(await globalRegistry.metrics()).not.toContain('config_agent_');
  });
});

describe('writeMetricsTextfile', () => {
  const DIR = '/var/lib/node_exporter/textfile';
  const FILE = `${DIR}/config-agent.prom`;

  function memfs(): FsPort {
    return memfsPort(Volume.fromJSON({ [`${DIR}/node.prom`]: 'other 1\n' }));
  }

  it('publishes the file with mode 0644 on memfs, replaces it, and leaves no temp file', async () => {
    const fs = memfs();
    const metrics = new AgentMetrics({ deviceId: 'dev-1' });
    await writeMetricsTextfile(fs, FILE, await metrics.render());
    metrics.recordPass(pass);
    const text = await metrics.render();
    await writeMetricsTextfile(fs, FILE, text);

    expect((await fs.readFile(FILE)).toString('utf8')).toBe(text);
    expect((await fs.stat(FILE)).mode & 0o7777).toBe(0o644);
    expect((await fs.readdir(DIR)).map(String).sort()).toEqual(['config-agent.prom', 'node.prom']);
  });

  it('syncs nothing: rewritten after every pass, it must not cost the flash two fsyncs a pass', async () => {
    const base = memfs();
    let syncs = 0;
    const open = (async (...args: Parameters<FsPort['open']>) => {
      const handle = await base.open(...args);
      return new Proxy(handle, {
        get(target, key) {
          const value = Reflect.get(target, key) as unknown;
          if (typeof value !== 'function') return value;
          if (key === 'sync' || key === 'datasync') syncs += 1;
          return (value as (...a: unknown[]) => unknown).bind(target);
        },
      });
    }) as FsPort['open'];
    const fs = { ...base, open } as FsPort;
    const metrics = new AgentMetrics({ deviceId: 'dev-1' });
    for (let i = 0; i < 10; i += 1) {
      metrics.recordPass(pass);
      await writeMetricsTextfile(fs, FILE, await metrics.render());
    }
    expect((await fs.readFile(FILE)).toString('utf8')).toBe(await metrics.render());
    expect(syncs).toBe(0);
  });

  it('does not create a missing textfile directory', async () => {
    const fs = memfs();
    const missing = '/var/lib/node_exporter/absent/config-agent.prom';
    const error = await writeMetricsTextfile(fs, missing, 'x 1\n').catch((e: unknown) => e);
    expect(error).toBeInstanceOf(DiskError);
    // The warning names the missing directory (it once said `stat root directory failed for ""`).
    expect((error as DiskError).message).toBe(
      'disk error: stat directory failed for "/var/lib/node_exporter/absent": ENOENT (no such file or directory)',
    );
    expect((await fs.readdir('/var/lib/node_exporter')).map(String)).toEqual(['textfile']);
  });

  it('publishes the file with mode 0644 on a real directory whatever the umask, leaving no temp file', async () => {
    const dir = path.join(BASE, 'textfile');
    await nodeFs.mkdir(dir);
    const file = path.join(dir, 'config-agent.prom');
    const metrics = new AgentMetrics({ deviceId: 'dev-1' });
    metrics.recordPass(pass);
    const text = await metrics.render();
    const previous = process.umask(0o077);
    try {
      await writeMetricsTextfile(nodeFs, file, text);
      await writeMetricsTextfile(nodeFs, file, `${text}# again\n`);
    } finally {
      process.umask(previous);
    }
    expect(readFileSync(file, 'utf8')).toBe(`${text}# again\n`);
    expect(statSync(file).mode & 0o7777).toBe(0o644);
    expect(readdirSync(dir)).toEqual(['config-agent.prom']);
  });
});
