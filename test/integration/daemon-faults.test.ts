// Daemon under service faults (/_admin/faults): 503 with Retry-After and connection resets — backoff, no writes, recovery.
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { killAllDaemons } from '../helpers/daemon.js';
import { AgentHarness } from '../helpers/harness.js';
import {
  expectConvergesAfterRecovery,
  LIST_PATH,
  LIST_ROUTE,
  rootSnapshot,
  startConverged,
  watchFaultUses,
} from '../helpers/outage.js';

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

describe('daemon under service faults', { timeout: 45_000 }, () => {
  it('honours Retry-After on 503: no poll before it elapses, nothing written, then converges', async () => {
    const daemon = await startConverged(harness);
    const before = await rootSnapshot(harness);
    const retryAfterS = 3;

    await harness.fault({ match: LIST_PATH, count: 100, status: 503, retry_after: retryAfterS });
    const uses = await watchFaultUses(harness, 7500);
    // Polls every ~1 s would make 7; Retry-After: 3 allows at most one per 3 s.
    expect(uses.length).toBeGreaterThanOrEqual(2);
    expect(uses.length).toBeLessThanOrEqual(3);
    for (let k = 1; k < uses.length; k += 1) {
      expect((uses[k] ?? 0) - (uses[k - 1] ?? 0)).toBeGreaterThanOrEqual(retryAfterS * 1000 - 100);
    }
    const unreachable = daemon.passes().filter((p) => !p.reachable);
    expect(unreachable.length).toBeGreaterThanOrEqual(2);
    expect(await rootSnapshot(harness)).toEqual(before);

    await harness.clearFaults();
    const added = await harness.createAndDeploy({ relative_filepath: 'etc/late.json', content: { n: 1 } });
    await expectConvergesAfterRecovery(harness, daemon, added.deploy.id, 20_000);
  });

  it('survives connection resets with a bounded request rate, writes nothing, then converges', async () => {
    const daemon = await startConverged(harness);
    const before = await rootSnapshot(harness);
    const listsBefore = await harness.requestCount(LIST_ROUTE);
    const windowMs = 5000;

    await harness.fault({ match: LIST_PATH, count: 100, mode: 'reset' });
    const started = performance.now();
    const uses = await watchFaultUses(harness, windowMs);
    const elapsedS = (performance.now() - started) / 1000;
    const lists = (await harness.requestCount(LIST_ROUTE)) - listsBefore;

    expect(uses.length).toBeGreaterThanOrEqual(2);
    // One request per failed pass (no in-pass retries), at most one pass per jittered interval.
    expect(lists).toBeLessThanOrEqual(Math.ceil(elapsedS / (INTERVAL_S * (1 - JITTER))) + 1);
    expect(daemon.passes().filter((p) => !p.reachable).length).toBeGreaterThanOrEqual(2);
    expect(await rootSnapshot(harness)).toEqual(before);
    expect(daemon.alive).toBe(true);

    await harness.clearFaults();
    const added = await harness.createAndDeploy({ relative_filepath: 'etc/late.json', content: { n: 2 } });
    await expectConvergesAfterRecovery(harness, daemon, added.deploy.id, 20_000);
  });
});
