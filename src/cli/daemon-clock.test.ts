// The running agent's local API keeps time on deps.clock: its sync interval is waited out on the injected clock.
import * as nodeFs from 'node:fs/promises';
import { mkdtemp, rm } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { afterEach, beforeEach, expect, it } from 'vitest';
import { HeldClock, heldDaemonConfig, ScriptedRunner } from '../../test/helpers/held-daemon.js';
import { PATIENCE_MS, waitFor } from '../../test/helpers/wait-for.js';
import { AgentMetrics } from '../daemon/metrics.js';
import type { FsPort } from '../lib/fs-port.js';
import { silentLogger } from '../lib/logger.js';
import { startAgent } from './daemon.js';
import { callAgent } from './local-client.js';

let dir: string;

beforeEach(async () => {
  dir = await mkdtemp(path.join(os.tmpdir(), 'config-agent-daemon-clock-'));
});

afterEach(async () => {
  await rm(dir, { recursive: true, force: true });
});

it("a second sync within the local API's interval waits on deps.clock, and runs its own pass once that wait ends", async () => {
  const socketPath = path.join(dir, 'agent.sock');
  const config = heldDaemonConfig('dvc_clock', socketPath, 'daemon-clock.test');
  // Time stands still; each wait lasts until the test ends it. Passes change nothing: what is counted is how many ran.
  const clock = new HeldClock(1_000_000);
  const runner = new ScriptedRunner();
  const agent = await startAgent({
    deps: { fs: nodeFs as unknown as FsPort, clock, random: () => 0.5, logger: silentLogger() },
    config,
    runner,
    metrics: new AgentMetrics({ deviceId: config.deviceId }),
    hookEnv: {},
    scrub: (text) => text,
  });
  try {
    expect(await callAgent(socketPath, 'POST', '/v1/sync', PATIENCE_MS)).toMatchObject({ status: 200 });
    const afterFirst = runner.passes;
    const second = callAgent(socketPath, 'POST', '/v1/sync', PATIENCE_MS);
    // The local API's minSyncIntervalMs (5 s) from the first sync's end, time standing still on deps.clock.
    await waitFor(() => clock.waits.some((wait) => wait.ms === 5_000), PATIENCE_MS, {
      what: 'the sync interval waited out on deps.clock',
    });
    expect(runner.passes).toBe(afterFirst);
    for (const wait of clock.waits.filter((each) => each.ms === 5_000)) wait();
    expect(await second).toMatchObject({ status: 200 });
    expect(runner.passes).toBe(afterFirst + 1);
  } finally {
    await agent.stop();
  }
});
