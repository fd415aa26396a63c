import * as nodeFs from 'node:fs/promises';
import { mkdir, mkdtemp, readFile, rm } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { afterEach, beforeEach, expect, it } from 'vitest';
import { createClient } from '../api/client.js';
import type { Clock } from '../lib/clock.js';
import type { Deps } from '../lib/deps.js';
import { silentLogger } from '../lib/logger.js';
import { type RunningMockServer, startMockServer } from '../mock-server/server.js';
import { Reconciler } from './reconcile.js';

const API_KEY = 'sk_test_wire_0123456789abcdef';
const clock: Clock = { now: () => Date.parse('2026-06-01T00:00:00.000Z'), monotonic: () => 1_000, sleep: async () => undefined };
let dir: string; let rootDir: string; let server: RunningMockServer; let reconciler: Reconciler;
beforeEach(async () => {
  dir = await mkdtemp(path.join(os.tmpdir(), 'probe-'));
  rootDir = path.join(dir, 'root'); await mkdir(rootDir); await mkdir(path.join(dir, 'state'), { mode: 0o700 });
  server = await startMockServer({ apiKeys: [API_KEY] });
  const client = createClient({ baseUrl: server.url, apiKey: API_KEY, timeoutMs: 10_000, maxResponseBytes: 1 << 20 });
  const deps: Deps = { fs: nodeFs, clock, random: () => 0.5, logger: silentLogger() };
  reconciler = await Reconciler.open(deps, { deviceId: 'dvc_1', rootDir, stateDir: path.join(dir, 'state'), fileMode: 0o640, dirMode: 0o750,
    retry: { maxAttempts: 3, baseDelaySeconds: 10, maxDelaySeconds: 60 }, requestRetries: 0, maxResponseBytes: 1 << 20 }, client);
});
afterEach(async () => { await reconciler.close(); await server.close(); await rm(dir, { recursive: true, force: true }); });

function put(id: string, p: string) {
  server.state.instances.set(id, { id, device_id: 'dvc_1', relative_filepath: p, config_schema_id: `s_${id}`, config_type_id: 't',
    target_status: 'deployed', activity_status: 'queued', error_status: 'none', content: { marker: id }, created_at: '2026-01-01T00:00:00.000Z', updated_at: '2026-01-01T00:00:00.000Z' } as never);
}
it('pathological content', async () => {
  put('cfg_a', 'a.json'); put('cfg_b', 'b.yaml');
  const body = '{"__proto__":{"x":1},"constructor":{"prototype":1},"neg":-0,"big":1e308,"small":5e-324,"e":1E+2,"u":"\\u0000\\ud800","n":null}';
  server.state.addFault({ match: '^/v1/config_instances$', count: 100, mode: 'rewrite', replace: [{ find: '{"marker":"cfg_a"}', with: body }, { find: '{"marker":"cfg_b"}', with: body }] });
  const r = await reconciler.runPass({ mode: 'full' });
  console.log(JSON.stringify(r.outcomes), JSON.stringify(server.state.reports));
  console.log(await readFile(path.join(rootDir, 'a.json'), 'utf8').catch((e) => String(e)));
  console.log(await readFile(path.join(rootDir, 'b.yaml'), 'utf8').catch((e) => String(e)));
  const r2 = await reconciler.runPass({ mode: 'full' });
  console.log(JSON.stringify(r2.outcomes));
  expect(1).toBe(1);
});
