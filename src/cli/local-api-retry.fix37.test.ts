// A local API that could not start is tried again every poll interval on deps.clock, its failure told once per cause.
import * as nodeFs from 'node:fs/promises';
import { mkdir, mkdtemp, rm } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { pino } from 'pino';
import { afterEach, beforeEach, expect, it } from 'vitest';
import { HeldClock, heldDaemonConfig, ScriptedRunner } from '../../test/helpers/held-daemon.js';
import { PATIENCE_MS, waitFor } from '../../test/helpers/wait-for.js';
import { AgentMetrics } from '../daemon/metrics.js';
import type { FsPort } from '../lib/fs-port.js';
import { startAgent } from './daemon.js';
import { callAgent } from './local-client.js';

let dir: string;

beforeEach(async () => {
  dir = await mkdtemp(path.join(os.tmpdir(), 'config-agent-api-retry-'));
});

afterEach(async () => {
  await rm(dir, { recursive: true, force: true });
});

it('a socket directory missing at start: told once, retried each poll interval, served once it exists', async () => {
  const socketPath = path.join(dir, 'run', 'agent.sock');
  const config = heldDaemonConfig('dvc_retry', socketPath, 'local-api-retry.fix37.test');
  const lines: { level: number; msg: string }[] = [];
  const logger = pino({ level: 'info' }, { write: (line: string) => void lines.push(JSON.parse(line)) });
  const clock = new HeldClock(1_000_000);
  const agent = await startAgent({
    deps: { fs: nodeFs as unknown as FsPort, clock, random: () => 0.5, logger },
    config,
    runner: new ScriptedRunner(),
    metrics: new AgentMetrics({ deviceId: config.deviceId }),
    hookEnv: {},
    scrub: (text) => text,
  });
  const unavailable = () => lines.filter((line) => line.msg.startsWith('local API unavailable'));
  /** Ends the waits of one poll interval (the retry's and the poll's): the retry then tries once. */
  const interval = async () => {
    await waitFor(() => clock.waits.some((wait) => wait.ms === 60_000), PATIENCE_MS, {
      what: 'a wait of one poll interval',
    });
    for (const wait of clock.waits.splice(0)) wait();
  };
  try {
    expect(unavailable()).toHaveLength(1);
    for (let i = 0; i < 3; i += 1) await interval();
    // Before: nothing tried again until a SIGHUP. Now tried 3 times, the same cause told once.
    await interval();
    expect(unavailable()).toHaveLength(1);
    await mkdir(path.join(dir, 'run'));
    await interval();
    await waitFor(() => lines.some((line) => line.msg === 'local API listening'), PATIENCE_MS, {
      what: 'the local API listening',
    });
    expect(await callAgent(socketPath, 'GET', '/v1/health', PATIENCE_MS)).toMatchObject({ status: 200 });
    expect(unavailable()).toHaveLength(1);
  } finally {
    await agent.stop();
  }
});
