// Daemon under service faults (/_admin/faults): 503 with Retry-After and connection resets — backoff, no writes, recovery.
// End states only (faults used, passes logged, the schedule the agent chose, files); the waits themselves are pinned
// by the fake-clock tests in src/daemon/agent.test.ts.
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

interface StatusBody {
  lastAttemptAt: string | null;
  nextPollAt: string | null;
  lastResult: { reachable: boolean } | null;
}

describe('daemon under service faults', () => {
  it('honours Retry-After on 503: the next poll is scheduled at least that far out, nothing written, then converges', async () => {
    const daemon = await startConverged(harness);
    const before = await rootSnapshot(harness);
    // Far beyond what the outage backoff alone would wait after one failure (interval · 2 = 2 s).
    const retryAfterS = 30;
    const passesBefore = daemon.passes().length;

    await harness.fault({ match: LIST_PATH, count: 1, status: 503, retry_after: retryAfterS });
    await daemon.waitForPasses(1, 30_000, { after: passesBefore, predicate: (p) => !p.reachable });
    // The schedule the agent chose after that pass, as its local API reports it (both times from one clock).
    const socketPath = harness.configObject().socketPath as string;
    const status = await waitFor(
      async () => {
        const { body } = await callLocalApi(socketPath, 'GET', '/v1/status');
        const s = body as StatusBody;
        const next = Date.parse(s.nextPollAt ?? '');
        const attempt = Date.parse(s.lastAttemptAt ?? '');
        return s.lastResult?.reachable === false && next > attempt ? { next, attempt } : undefined;
      },
      30_000,
      { what: 'the schedule after the 503' },
    );
    // ISO timestamps are whole milliseconds: allow the 1 ms two roundings can lose.
    expect(status.next - status.attempt).toBeGreaterThanOrEqual(retryAfterS * 1000 - 1);
    expect(await activeFaultUses(harness)).toBe(0);
    expect(await rootSnapshot(harness)).toEqual(before);

    // `sync` wakes the agent early: the Retry-After delays polling, not an operator.
    const added = await harness.createAndDeploy({ relative_filepath: 'etc/late.json', content: { n: 1 } });
    expect((await harness.run(['sync'], { timeoutMs: 30_000 })).code).toBe(0);
    await expectConvergesAfterRecovery(harness, daemon, added.deploy.id, 30_000);
  });

  it('survives connection resets: each fails one pass (no retry with backoff inside it), writes nothing, then converges', async () => {
    const daemon = await startConverged(harness);
    const before = await rootSnapshot(harness);
    const passesBefore = daemon.passes().length;
    const resets = 3;

    await harness.fault({ match: LIST_PATH, count: resets, mode: 'reset' });
    await waitFor(async () => (await activeFaultUses(harness)) === 0, 60_000, { what: 'every reset used' });
    expect(await rootSnapshot(harness)).toEqual(before);
    const added = await harness.createAndDeploy({ relative_filepath: 'etc/late.json', content: { n: 2 } });
    await expectConvergesAfterRecovery(harness, daemon, added.deploy.id, 60_000);

    // The daemon neither retried inside a pass nor gave up polling. A reset met on a kept-alive connection
    // looks like one the service closed while idle, and is sent once more at once on a new connection
    // (src/api/stale-connection.ts): whether the poll found its connection still open is timing, so a failed
    // pass used up one reset or two — never more, and none was left unused. A pass that met the last reset on
    // a kept-alive connection (node:http keeps one per request that ran at once: a report beside the pull) is
    // answered by that second send, so the failed passes are at least ceil((resets − 1) / 2).
    const since = daemon.passes().slice(passesBefore);
    const failed = since.filter((p) => !p.reachable).length;
    expect(failed).toBeGreaterThanOrEqual(Math.ceil((resets - 1) / 2));
    expect(failed).toBeLessThanOrEqual(resets);
    expect(daemon.alive).toBe(true);
  });
});
