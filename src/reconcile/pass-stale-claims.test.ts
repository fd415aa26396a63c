// A `deployed` report queued for one version never reaches the service before that version's bytes are on disk.
import * as nodeFs from 'node:fs/promises';
import { mkdir, mkdtemp, readFile, rm } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { createClient, type ServiceClient } from '../api/client.js';
import type { Clock } from '../lib/clock.js';
import type { Deps } from '../lib/deps.js';
import { silentLogger } from '../lib/logger.js';
import { type RunningMockServer, startMockServer } from '../mock-server/server.js';
import type { ConfigInstanceRecord } from '../mock-server/state.js';
import { Reconciler } from './reconcile.js';
import { serializeContent } from './serialize.js';

const API_KEY = 'sk_test_stale_0123456789abcdef';
const DEVICE = 'dvc_1';
const T0 = '2026-01-01T00:00:00.000Z';

const clock: Clock = {
  now: () => Date.parse('2026-06-01T00:00:00.000Z'),
  monotonic: () => 1_000,
  sleep: async () => undefined,
};

let dir: string;
let rootDir: string;
let server: RunningMockServer;
let reconciler: Reconciler;
/**
 * Each `deployed` report the service took: whether the file on disk then held the bytes of the content the
 * service then had for the instance (read once the answer came, so the service had recorded it).
 */
let claims: string[];

function claimChecking(client: ServiceClient): ServiceClient {
  return {
    ...client,
    reportConfigInstanceStatus: async (id, report, opts) => {
      const answer = await client.reportConfigInstanceStatus(id, report, opts);
      const record = server.state.instances.get(id);
      if (report.activity_status === 'deployed' && record !== undefined) {
        const onDisk = await readFile(path.join(rootDir, record.relative_filepath)).catch(() => undefined);
        const wanted = serializeContent(record.relative_filepath, record.content);
        claims.push(`${id} ${onDisk?.equals(wanted) === true ? 'true' : 'false'}`);
      }
      return answer;
    },
  };
}

async function open(batchSteps?: number): Promise<void> {
  await reconciler?.close();
  const client = createClient({
    baseUrl: server.url,
    apiKey: API_KEY,
    timeoutMs: 10_000,
    maxResponseBytes: 1 << 20,
  });
  const deps: Deps = { fs: nodeFs, clock, random: () => 0.5, logger: silentLogger() };
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
      ...(batchSteps === undefined ? {} : { batchSteps }),
    },
    claimChecking(client),
  );
}

beforeEach(async () => {
  dir = await mkdtemp(path.join(os.tmpdir(), 'config-agent-stale-'));
  rootDir = path.join(dir, 'root');
  await mkdir(rootDir);
  await mkdir(path.join(dir, 'state'), { mode: 0o700 });
  server = await startMockServer({ apiKeys: [API_KEY] });
  claims = [];
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

const pass = () => reconciler.runPass({ mode: 'full' });

describe('a deployed report left queued while the operator changes the instance', () => {
  it('is not sent before the new version is written (a pass that reports at its end)', async () => {
    await open();
    put({ id: 'cfg_a', content: { v: 1 } });
    // The report of version 1 meets an outage of the status route and stays queued.
    server.state.addFault({ match: '^/v1/config_instances/cfg_a$', count: 1 });
    await pass();
    expect(server.state.reports).toHaveLength(0);
    // Meanwhile the operator deploys version 2.
    put({ id: 'cfg_a', content: { v: 2 }, updated_at: '2026-02-01T00:00:00.000Z' });
    const result = await pass();

    expect(result.converged).toBe(true);
    expect(await readFile(path.join(rootDir, 'cfg_a.json'), 'utf8')).toBe('{\n  "v": 2\n}\n');
    expect(claims).toEqual(['cfg_a true']);
  });

  it('is not sent before the new version is written when the pass reports while it writes', async () => {
    await open(4);
    put({ id: 'zz_changed', content: { v: 1 } });
    server.state.addFault({ match: '^/v1/config_instances/zz_changed$', count: 1 });
    await pass();
    expect(server.state.reports).toHaveLength(0);
    // Version 2, and 40 new instances written before it (plan order is by path): deliveries start on the way.
    put({ id: 'zz_changed', content: { v: 2 }, updated_at: '2026-02-01T00:00:00.000Z' });
    for (let i = 0; i < 40; i++) put({ id: `cfg_${String(i).padStart(2, '0')}` });
    const result = await pass();

    expect(result.converged).toBe(true);
    expect(claims.filter((claim) => claim.endsWith('false'))).toEqual([]);
    expect(claims).toContain('zz_changed true');
  });

  it('a write of the new version that fails replaces it: the service never hears deployed', async () => {
    await open();
    put({ id: 'cfg_a', content: { v: 1 } });
    server.state.addFault({ match: '^/v1/config_instances/cfg_a$', count: 1 });
    await pass();
    // Version 2 goes to a path whose directory is taken by a file: its write fails (obstructed).
    await nodeFs.writeFile(path.join(rootDir, 'taken'), 'a local file\n');
    put({
      id: 'cfg_a',
      relative_filepath: 'taken/cfg_a.json',
      content: { v: 2 },
      updated_at: '2026-02-01T00:00:00.000Z',
    });
    await pass();

    expect(claims).toEqual([]);
    expect(server.state.instances.get('cfg_a')).toMatchObject({ error_status: 'retrying' });
  });
});

describe('a failed report left queued while the operator deploys a fixed version', () => {
  it('does not land on the fixed version (failed is final: the agent would skip it for good); the fix is written', async () => {
    await open();
    // A path no device may write: failed at once.
    put({ id: 'cfg_a', relative_filepath: '../outside.json', content: { v: 1 } });
    server.state.addFault({ match: '^/v1/config_instances/cfg_a$', count: 1 });
    await pass();
    expect(server.state.reports).toHaveLength(0);
    // The operator fixes the path and deploys again.
    put({
      id: 'cfg_a',
      relative_filepath: 'cfg_a.json',
      content: { v: 2 },
      updated_at: '2026-02-01T00:00:00.000Z',
    });
    await pass();

    expect(await readFile(path.join(rootDir, 'cfg_a.json'), 'utf8')).toBe('{\n  "v": 2\n}\n');
    expect(server.state.instances.get('cfg_a')).toMatchObject({
      activity_status: 'deployed',
      error_status: 'none',
    });
    expect(server.state.reports.map((r) => `${r.activity_status}/${r.error_status}`)).toEqual([
      'deployed/none',
    ]);
  });
});
