// Daemon through outages: the service stopped, then requests that hang — no file change, no crash, bounded retries, recovery.
import { readFile } from 'node:fs/promises';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { callLocalApi, killAllDaemons } from '../helpers/daemon.js';
import { AgentHarness } from '../helpers/harness.js';
import {
  expectConvergesAfterRecovery,
  LIST_PATH,
  LIST_ROUTE,
  rootSnapshot,
  startConverged,
  watchFaultUses,
} from '../helpers/outage.js';
import { sleep, waitFor } from '../helpers/wait-for.js';

const INTERVAL_S = 1;
const JITTER = 0.1;

let harness: AgentHarness;

beforeEach(async () => {
  harness = await AgentHarness.create({
    registerDevice: true,
    config: { poll: { intervalSeconds: INTERVAL_S, jitterRatio: JITTER, fullResyncSeconds: 600 } },
  });
});

afterEach(async () => {
  await killAllDaemons();
  await harness.close();
});

describe('daemon outages', { timeout: 45_000 }, () => {
  it('rides out a stopped service: files untouched, local status answers, then converges', async () => {
    const daemon = await startConverged(harness);
    const before = await rootSnapshot(harness);
    const passesBefore = daemon.passes().length;

    await harness.stopServer();
    const outageMs = 3000;
    const outageStarted = performance.now();
    // Work queued while the device cannot see it: it must land after recovery, with no attempt burnt on it.
    const created = harness.server.state.createInstance(
      { device_id: harness.deviceId, relative_filepath: 'etc/new.json', content: { added: 'offline' } },
      new Date().toISOString(),
    );
    harness.server.state.deploy(created.id, { dryRun: false, at: new Date().toISOString() });

    const status = await waitFor(
      async () => {
        const result = await harness.run(['status', '--json'], { timeoutMs: 10_000 });
        const body = JSON.parse(result.stdout) as { consecutiveFailures: number; deviceId: string };
        return body.consecutiveFailures >= 1 ? body : undefined;
      },
      outageMs + 2000,
      { what: 'status showing the failed polls' },
    );
    expect(status.deviceId).toBe(harness.deviceId);
    // Healthy while the loop makes progress: a cloud outage must not make systemd restart a fleet of agents.
    const health = await callLocalApi(harness.configObject().socketPath as string, 'GET', '/v1/health');
    expect(health).toMatchObject({ status: 200, body: { healthy: true } });
    await sleep(Math.max(0, outageMs - (performance.now() - outageStarted)));

    const failed = daemon.passes().slice(passesBefore);
    expect(failed.length).toBeGreaterThanOrEqual(1);
    expect(failed.every((p) => !p.reachable && !p.converged)).toBe(true);
    // No tight loop: at most one pass per (jittered) interval, and the daemon makes no in-pass retries.
    const elapsedS = (performance.now() - outageStarted) / 1000;
    expect(failed.length).toBeLessThanOrEqual(Math.ceil(elapsedS / (INTERVAL_S * (1 - JITTER))) + 1);
    expect(await rootSnapshot(harness)).toEqual(before);
    expect(daemon.alive).toBe(true);

    await harness.restartServer();
    // Backoff is exponential with full jitter: after a few failures the next poll may be several intervals away.
    await expectConvergesAfterRecovery(harness, daemon, created.id, 20_000);
    expect(await readFile(harness.rootPath('etc/new.json'), 'utf8')).toBe('{\n  "added": "offline"\n}\n');
    const after = await rootSnapshot(harness);
    for (const [key, entry] of Object.entries(before)) {
      if (key.startsWith('etc/') && key !== 'etc') expect(after[key]).toBe(entry);
    }
  });

  it('gives up on hanging requests after the request timeout, changes nothing, and converges', async () => {
    await harness.writeConfig({
      poll: { intervalSeconds: INTERVAL_S, jitterRatio: JITTER, fullResyncSeconds: 600 },
      server: { ...(harness.configObject().server as object), timeoutSeconds: 1 },
    });
    const daemon = await startConverged(harness);
    const before = await rootSnapshot(harness);
    const listsBefore = await harness.requestCount(LIST_ROUTE);

    await harness.fault({ match: LIST_PATH, count: 3, mode: 'hang' });
    const uses = await watchFaultUses(harness, 6000);
    expect(uses.length).toBeGreaterThanOrEqual(2);
    // Each hang costs one request timeout (1 s) before the next poll can even start.
    for (let k = 1; k < uses.length; k += 1) {
      expect((uses[k] ?? 0) - (uses[k - 1] ?? 0)).toBeGreaterThanOrEqual(900);
    }
    expect(daemon.passes().some((p) => !p.reachable)).toBe(true);
    expect(await rootSnapshot(harness)).toEqual(before);
    expect(await harness.requestCount(LIST_ROUTE)).toBeLessThanOrEqual(listsBefore + uses.length + 1);

    await harness.clearFaults();
    const added = await harness.createAndDeploy({
      relative_filepath: 'etc/after.json',
      content: { ok: true },
    });
    await expectConvergesAfterRecovery(harness, daemon, added.deploy.id, 20_000);
  });
});
