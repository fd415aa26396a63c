// Daemon through outages: the service stopped, then requests that hang — no file change, no crash, recovery.
// End states only; how long the agent waits between failed polls is pinned by src/daemon/agent.test.ts (fake clock).
import { readFile } from 'node:fs/promises';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { callLocalApi, killAllDaemons } from '../helpers/daemon.js';
import { AgentHarness } from '../helpers/harness.js';
import {
  activeFaultUses,
  expectConvergesAfterRecovery,
  LIST_PATH,
  rootSnapshot,
  startConverged,
} from '../helpers/outage.js';
import { waitFor } from '../helpers/wait-for.js';

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

describe('daemon outages', () => {
  it('rides out a stopped service: files untouched, local status answers, then converges', async () => {
    const daemon = await startConverged(harness);
    const before = await rootSnapshot(harness);
    const passesBefore = daemon.passes().length;

    await harness.stopServer();
    // Work queued while the device cannot see it: it must land after recovery, with no attempt burnt on it.
    const created = harness.server.state.createInstance(
      { device_id: harness.deviceId, relative_filepath: 'etc/new.json', content: { added: 'offline' } },
      new Date().toISOString(),
    );
    harness.server.state.deploy(created.id, { dryRun: false, at: new Date().toISOString() });

    const status = await waitFor(
      async () => {
        const result = await harness.run(['status', '--json'], { timeoutMs: 30_000 });
        const body = JSON.parse(result.stdout) as { consecutiveFailures: number; deviceId: string };
        return body.consecutiveFailures >= 2 ? body : undefined;
      },
      60_000,
      { what: 'status showing two failed polls' },
    );
    expect(status.deviceId).toBe(harness.deviceId);
    // Healthy while the loop makes progress: a cloud outage must not make systemd restart a fleet of agents.
    const health = await callLocalApi(harness.configObject().socketPath as string, 'GET', '/v1/health');
    expect(health).toMatchObject({ status: 200, body: { healthy: true } });

    const failed = daemon.passes().slice(passesBefore);
    expect(failed.length).toBeGreaterThanOrEqual(2);
    expect(failed.every((p) => !p.reachable && !p.converged)).toBe(true);
    expect(await rootSnapshot(harness)).toEqual(before);
    expect(daemon.alive).toBe(true);

    await harness.restartServer();
    // Backoff is exponential with full jitter: after a few failures the next poll may be several intervals away.
    await expectConvergesAfterRecovery(harness, daemon, created.id, 60_000);
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
    const passesBefore = daemon.passes().length;
    const hangs = 3;

    await harness.fault({ match: LIST_PATH, count: hangs, mode: 'hang' });
    // A hung request never answers: only the agent's own request timeout can end each of these passes.
    await waitFor(async () => (await activeFaultUses(harness)) === 0, 60_000, { what: 'every hang used' });
    expect(await rootSnapshot(harness)).toEqual(before);
    const added = await harness.createAndDeploy({
      relative_filepath: 'etc/after.json',
      content: { ok: true },
    });
    await expectConvergesAfterRecovery(harness, daemon, added.deploy.id, 60_000);

    const failed = daemon
      .passes()
      .slice(passesBefore)
      .filter((p) => !p.reachable);
    expect(failed).toHaveLength(hangs);
    for (const pass of failed) expect(String(pass.error)).toMatch(/timed out/);
  });
});
