// The running agent's local API keeps time on deps.clock: its sync interval is waited out on the injected clock.
import * as nodeFs from 'node:fs/promises';
import { mkdtemp, rm } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { afterEach, beforeEach, expect, it } from 'vitest';
import { PATIENCE_MS, waitFor } from '../../test/helpers/wait-for.js';
import { parseAgentConfig } from '../config/load.js';
import { AgentMetrics } from '../daemon/metrics.js';
import type { Clock } from '../lib/clock.js';
import type { FsPort } from '../lib/fs-port.js';
import { silentLogger } from '../lib/logger.js';
import type { PassOptions, PassResult, PassRunner } from '../reconcile/pass-runner.js';
import { emptyState } from '../store/state.js';
import { startAgent } from './daemon.js';
import { callAgent } from './local-client.js';

/** Time stands still; each sleep waits until the test ends it (or its signal aborts it). */
class HeldClock implements Clock {
  readonly sleeps: Array<{ ms: number; end: () => void }> = [];

  now(): number {
    return Date.parse('2030-06-01T12:00:00Z');
  }

  monotonic(): number {
    return 1_000_000;
  }

  sleep(ms: number, signal?: AbortSignal): Promise<void> {
    return new Promise<void>((resolve, reject) => {
      const sleep = { ms, end: resolve };
      this.sleeps.push(sleep);
      signal?.addEventListener('abort', () => reject(signal.reason), { once: true });
    });
  }
}

/** Passes that do nothing and succeed: what is counted is how many ran. */
class CountingRunner implements PassRunner {
  readonly state = emptyState('dvc_clock', '/srv/config');
  readonly pendingReports = 0;
  passes = 0;

  async runPass(options: PassOptions): Promise<PassResult> {
    this.passes += 1;
    return {
      mode: options.mode,
      dryRun: false,
      startedAt: '2030-06-01T12:00:00.000Z',
      durationMs: 1,
      reachable: true,
      steps: [],
      outcomes: [],
      reports: { delivered: 0, rejected: 0, pending: 0 },
      sweptTempFiles: [],
      converged: true,
    };
  }
  hasDueRetries(): boolean {
    return false;
  }
  nextRetryAt(): number | undefined {
    return undefined;
  }
  pendingHookPaths(): string[] {
    return [];
  }
  settleHookPaths(): void {}
  async flushState(): Promise<void> {}
  async close(): Promise<void> {}
}

let dir: string;

beforeEach(async () => {
  dir = await mkdtemp(path.join(os.tmpdir(), 'config-agent-daemon-clock-'));
});

afterEach(async () => {
  await rm(dir, { recursive: true, force: true });
});

it("a second sync within the local API's interval waits on deps.clock, and runs its own pass once that wait ends", async () => {
  const socketPath = path.join(dir, 'agent.sock');
  const config = parseAgentConfig(
    {
      deviceId: 'dvc_clock',
      server: { baseUrl: 'https://dcds.example.com' },
      rootDir: '/srv/config',
      stateDir: '/var/lib/config-agent',
      socketPath,
      poll: { intervalSeconds: 60 },
      drift: 'off',
    },
    'daemon-clock.test',
  );
  const clock = new HeldClock();
  const runner = new CountingRunner();
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
    await waitFor(() => clock.sleeps.some((sleep) => sleep.ms === 5_000), PATIENCE_MS, {
      what: 'the sync interval waited out on deps.clock',
    });
    expect(runner.passes).toBe(afterFirst);
    for (const sleep of clock.sleeps.filter((each) => each.ms === 5_000)) sleep.end();
    expect(await second).toMatchObject({ status: 200 });
    expect(runner.passes).toBe(afterFirst + 1);
  } finally {
    await agent.stop();
  }
});
