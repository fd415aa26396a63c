// The daemon's local API over its unix socket: `status`, `sync` (exit codes), raw routes, single-flight, no agent → 3.

import { readFile, stat } from 'node:fs/promises';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { callLocalApi, DaemonProcess, killAllDaemons } from '../helpers/daemon.js';
import { AgentHarness } from '../helpers/harness.js';
import { LIST_PATH } from '../helpers/outage.js';
import { PATIENCE_MS, waitFor } from '../helpers/wait-for.js';

interface StatusBody {
  deviceId: string;
  running: boolean;
  lastSuccessfulSyncAt: string | null;
  lastAttemptAt: string | null;
  nextPollAt: string | null;
  consecutiveFailures: number;
  managedFiles: { path: string; instanceId: string; sha256: string; status: string }[];
  pendingReports: number;
  errors: { instanceId: string; path: string; status: string; message?: string }[];
}

let harness: AgentHarness;
let socketPath: string;

beforeEach(async () => {
  harness = await AgentHarness.create({ registerDevice: true });
  // No jitter and an hour between polls: after the first pass only `sync` runs passes, so the test knows who wrote.
  await harness.writeConfig({ poll: { intervalSeconds: 3600, jitterRatio: 0, fullResyncSeconds: 3600 } });
  socketPath = harness.configObject().socketPath as string;
});

afterEach(async () => {
  await killAllDaemons();
  await harness.close();
});

async function startDaemon(): Promise<DaemonProcess> {
  const daemon = DaemonProcess.start(harness);
  await daemon.waitForPasses(1, PATIENCE_MS);
  await waitFor(() => stat(socketPath).then(() => true), PATIENCE_MS, { what: 'the socket' });
  return daemon;
}

describe('status and sync over the socket', () => {
  it('status reports the managed files; sync reconciles now and exits with the outcome', async () => {
    const first = await harness.createAndDeploy({ relative_filepath: 'app/a.json', content: { a: 1 } });
    const daemon = await startDaemon();
    expect((await stat(socketPath)).mode & 0o777).toBe(0o660);

    const json = await harness.run(['status', '--json'], { timeoutMs: PATIENCE_MS });
    expect(json.code).toBe(0);
    const status = JSON.parse(json.stdout) as StatusBody;
    expect(status).toMatchObject({
      deviceId: harness.deviceId,
      running: true,
      consecutiveFailures: 0,
      pendingReports: 0,
      errors: [],
      managedFiles: [{ path: 'app/a.json', instanceId: first.deploy.id, status: 'deployed' }],
    });
    expect(Date.parse(status.lastSuccessfulSyncAt ?? '')).toBeGreaterThan(Date.now() - 60_000);
    expect(Date.parse(status.nextPollAt ?? '')).toBeGreaterThan(Date.now());

    const human = await harness.run(['status'], { timeoutMs: PATIENCE_MS });
    expect(human.code).toBe(0);
    expect(human.stdout).toContain(harness.deviceId);
    expect(human.stdout).toContain(`app/a.json (${first.deploy.id})`);

    // Nothing polls for a minute: only `sync` can make this file appear, and it answers after the pass.
    await harness.createAndDeploy({ relative_filepath: 'app/b.json', content: { b: 2 } });
    const sync = await harness.run(['sync'], { timeoutMs: PATIENCE_MS });
    expect(sync.code).toBe(0);
    expect(await readFile(harness.rootPath('app/b.json'), 'utf8')).toBe('{\n  "b": 2\n}\n');
    expect(sync.stdout).toMatch(/app\/b\.json/);
    expect(daemon.passes()).toHaveLength(2);

    // An instance that cannot converge: sync exits 1, status lists it under errors and exits 1.
    const bad = await harness.createAndDeploy({ relative_filepath: '../escape.json', content: { x: 1 } });
    const failing = await harness.run(['sync'], { timeoutMs: PATIENCE_MS });
    expect(failing.code).toBe(1);
    const after = await harness.run(['status', '--json'], { timeoutMs: PATIENCE_MS });
    expect(after.code).toBe(1);
    const errors = (JSON.parse(after.stdout) as StatusBody).errors;
    expect(errors.map((e) => e.instanceId)).toEqual([bad.deploy.id]);

    // The service failing the pass: sync exits 3, like --once.
    await harness.fault({ match: LIST_PATH, count: 1, status: 503 });
    const unreachable = await harness.run(['sync'], { timeoutMs: PATIENCE_MS });
    expect(unreachable.code).toBe(3);
    expect(daemon.alive).toBe(true);
  });

  it('answers raw routes with JSON, errors as {error: {code, message}}', async () => {
    await startDaemon();
    const health = await callLocalApi(socketPath, 'GET', '/v1/health');
    expect(health).toMatchObject({ status: 200, body: { healthy: true } });
    const missing = await callLocalApi(socketPath, 'GET', '/v1/nope');
    expect(missing.status).toBe(404);
    expect(missing.body).toMatchObject({ error: { code: 'not_found', message: expect.any(String) } });
    const wrongMethod = await callLocalApi(socketPath, 'DELETE', '/v1/status');
    expect(wrongMethod.status).toBe(405);
    expect(wrongMethod.body).toMatchObject({ error: { code: 'method_not_allowed' } });
  });

  it('coalesces concurrent sync requests into one running pass and one follow-up', async () => {
    await harness.createAndDeploy({ relative_filepath: 'app/a.json', content: { a: 1 } });
    const daemon = await startDaemon();
    const passesBefore = daemon.passes().length;
    // A slow answer keeps the first pass running while the other requests arrive.
    await harness.fault({ match: LIST_PATH, count: 1, mode: 'slow', chunk_bytes: 32, interval_ms: 50 });
    const answers = await Promise.all(
      Array.from({ length: 5 }, () => callLocalApi(socketPath, 'POST', '/v1/sync')),
    );
    expect(answers.map((a) => a.status)).toEqual([200, 200, 200, 200, 200]);
    expect(answers.every((a) => (a.body as { converged: boolean }).converged)).toBe(true);
    expect(daemon.passes().length - passesBefore).toBe(2);
  });

  it('exits 3 with a clear message when no agent answers', async () => {
    for (const command of [['status'], ['status', '--json'], ['sync']]) {
      const result = await harness.run(command, { timeoutMs: PATIENCE_MS });
      expect(result.code).toBe(3);
      expect(result.stderr).toContain(`cannot reach the agent at ${socketPath}: no agent is running`);
    }
    // A socket left behind by a killed agent: still "no agent", and a new agent takes the path over.
    const killed = await startDaemon();
    await killed.kill();
    const stale = await harness.run(['sync'], { timeoutMs: PATIENCE_MS });
    expect(stale.code).toBe(3);
    expect(stale.stderr).toContain('no agent is running');
    await startDaemon();
    expect((await harness.run(['status'], { timeoutMs: PATIENCE_MS })).code).toBe(0);
  });
});

describe('one agent per state directory', () => {
  it('--once refuses while the daemon runs, names it, and changes nothing; it runs once the daemon stops', async () => {
    await harness.createAndDeploy({ relative_filepath: 'app/a.json', content: { a: 1 } });
    const daemon = await startDaemon();
    const before = await readFile(harness.rootPath('app/a.json'), 'utf8');

    const refused = await harness.runOnce();
    expect(refused.code).toBe(1);
    expect(refused.stderr).toMatch(/agent\.lock is held by another config-agent \(pid \d+\)/);
    expect(refused.stderr).not.toContain('"level"');
    expect(await readFile(harness.rootPath('app/a.json'), 'utf8')).toBe(before);

    expect((await daemon.stop()).code).toBe(0);
    expect((await harness.runOnce()).code).toBe(0);
  });
});
