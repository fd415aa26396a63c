// report22: report-truth gaps against runPass and the mock: a status endpoint that answers 2xx and records nothing.
import * as nodeFs from 'node:fs/promises';
import { mkdir, mkdtemp, readFile, rm } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import pino from 'pino';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { createClient, type ServiceClient } from '../api/client.js';
import type { Clock } from '../lib/clock.js';
import type { Deps } from '../lib/deps.js';
import { type RunningMockServer, startMockServer } from '../mock-server/server.js';
import type { ConfigInstanceRecord } from '../mock-server/state.js';
import { Reconciler } from './reconcile.js';

const API_KEY = 'sk_test_report22_0123456789abcdef';
const DEVICE = 'dvc_1';
const T0 = '2026-01-01T00:00:00.000Z';
const PATCH = '^/v1/config_instances/[^/]+$';
const UNRECORDED = 'recorded none of them';

/** Monotonic time the tests move by hand; sleeps end at once. */
let monotonic: number;
const clock: Clock = {
  now: () => Date.parse('2026-06-01T00:00:00.000Z') + monotonic,
  monotonic: () => monotonic,
  sleep: async () => undefined,
};

let dir: string;
let rootDir: string;
let server: RunningMockServer;
let reconciler: Reconciler;
/** Every status report the agent sent (the requests, whatever the service did with them). */
let patches: number;
/** The warnings the agent logged, one JSON line each. */
let warnings: string[];

function counting(client: ServiceClient): ServiceClient {
  return {
    ...client,
    reportConfigInstanceStatus: (id, report, opts) => {
      patches += 1;
      return client.reportConfigInstanceStatus(id, report, opts);
    },
  };
}

beforeEach(async () => {
  dir = await mkdtemp(path.join(os.tmpdir(), 'config-agent-report22-'));
  rootDir = path.join(dir, 'root');
  await mkdir(rootDir);
  await mkdir(path.join(dir, 'state'), { mode: 0o700 });
  server = await startMockServer({ apiKeys: [API_KEY] });
  monotonic = 1_000;
  patches = 0;
  warnings = [];
  const logger = pino({ level: 'warn' }, { write: (line: string) => void warnings.push(line) });
  const client = createClient({
    baseUrl: server.url,
    apiKey: API_KEY,
    timeoutMs: 10_000,
    maxResponseBytes: 1 << 20,
  });
  // random 1: each backoff is its whole ceiling (REPORT_BACKOFF: 30 s, then 60 s, ...).
  const deps: Deps = { fs: nodeFs, clock, random: () => 1, logger };
  reconciler = await Reconciler.open(
    deps,
    {
      deviceId: DEVICE,
      rootDir,
      stateDir: path.join(dir, 'state'),
      fileMode: 0o640,
      dirMode: 0o750,
      retry: { maxAttempts: 3, baseDelaySeconds: 10, maxDelaySeconds: 60 },
      requestRetries: 0,
    },
    counting(client),
  );
});

afterEach(async () => {
  await reconciler.close();
  await server.close();
  await rm(dir, { recursive: true, force: true });
});

function put(fields: Partial<ConfigInstanceRecord> & { id: string }): void {
  server.state.instances.set(fields.id, {
    device_id: DEVICE,
    relative_filepath: `${fields.id}.json`,
    config_schema_id: `sch_${fields.id}`,
    config_type_id: 'typ',
    target_status: 'deployed',
    activity_status: 'queued',
    error_status: 'none',
    content: { owner: fields.id },
    created_at: T0,
    updated_at: T0,
    ...fields,
  });
}

const reports = () =>
  server.state.reports.map((r) => `${r.config_instance_id} ${r.activity_status}/${r.error_status}`);
const unrecordedWarnings = () => warnings.filter((line) => line.includes(UNRECORDED)).length;
const fileAt = (relative: string) => readFile(path.join(rootDir, relative), 'utf8');

describe('a status endpoint that answers 2xx and records nothing', () => {
  // It answered every report 200 (a body that is no instance: no echo) and changed nothing. Each poll found the
  // instances as before, derived their reports again and sent them all: 3 requests a poll for as long as it lasted.
  it('has its reports held back as refused ones are, kept queued, and told once', async () => {
    for (const id of ['u_a', 'u_b', 'u_c']) put({ id });
    server.state.addFault({ match: PATCH, status: 200, count: 1000 });
    const first = await reconciler.runPass({ mode: 'full' });
    expect(first.reports.delivered).toBe(3);
    expect(patches).toBe(3);
    expect(await fileAt('u_a.json')).toBe('{\n  "owner": "u_a"\n}\n');
    const counts: number[] = [];
    for (let i = 0; i < 3; i += 1) {
      monotonic += 10_000;
      const result = await reconciler.runPass({ mode: 'incremental' });
      expect(result.converged).toBe(false);
      expect(result.reports.pending).toBe(3);
      counts.push(patches);
    }
    // Held 30 s after the pass that found them unrecorded: none sent in the next 30 s (before: 6, 9, 12).
    expect(counts).toEqual([3, 3, 3]);
    expect(unrecordedWarnings()).toBe(1);
    // Past the backoff they go again, and unrecorded once more, wait twice as long.
    monotonic += 10_001;
    await reconciler.runPass({ mode: 'incremental' });
    expect(patches).toBe(6);
    monotonic += 1_000;
    await reconciler.runPass({ mode: 'incremental' });
    monotonic += 59_000;
    await reconciler.runPass({ mode: 'incremental' });
    expect(patches).toBe(6);
    expect(unrecordedWarnings()).toBe(1);
    expect(reports()).toEqual([]);
    // The service records again: once the backoff ends every report lands, and the pass converges.
    server.state.clearFaults();
    monotonic += 1_001;
    const healed = await reconciler.runPass({ mode: 'incremental' });
    expect(patches).toBe(9);
    expect(reports().sort()).toEqual(['u_a deployed/none', 'u_b deployed/none', 'u_c deployed/none']);
    expect(healed.reports.pending).toBe(0);
    expect((await reconciler.runPass({ mode: 'full' })).converged).toBe(true);
    expect(patches).toBe(9);
    // A new episode is told again.
    put({ id: 'u_d' });
    server.state.addFault({ match: PATCH, status: 200, count: 1000 });
    await reconciler.runPass({ mode: 'incremental' });
    monotonic += 1_000;
    await reconciler.runPass({ mode: 'incremental' });
    expect(unrecordedWarnings()).toBe(2);
  });
});
