// config_agent_local_api_up says whether the local API listens: 0 while it could not start and is retried, then 1.
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
  dir = await mkdtemp(path.join(os.tmpdir(), 'config-agent-api-up-'));
});

afterEach(async () => {
  await rm(dir, { recursive: true, force: true });
});

it('reads 0 while the socket directory is missing and 1 once the retry listens', async () => {
  const socketPath = path.join(dir, 'run', 'agent.sock');
  const config = heldDaemonConfig('dvc_up', socketPath, 'api-up-metric.fix39.test');
  const lines: { level: number; msg: string }[] = [];
  const logger = pino({ level: 'info' }, { write: (line: string) => void lines.push(JSON.parse(line)) });
  const clock = new HeldClock(1_000_000);
  const metrics = new AgentMetrics({ deviceId: config.deviceId });
  const up = async () =>
    /^config_agent_local_api_up\{device_id="dvc_up"\} (\d)$/m.exec(await metrics.render())?.[1];
  const agent = await startAgent({
    deps: { fs: nodeFs as unknown as FsPort, clock, random: () => 0.5, logger },
    config,
    runner: new ScriptedRunner(),
    metrics,
    hookEnv: {},
    scrub: (text) => text,
  });
  /** Ends the waits of one poll interval (the retry's and the poll's): the retry then tries once. */
  const interval = async () => {
    await waitFor(() => clock.waits.some((wait) => wait.ms === 60_000), PATIENCE_MS, {
      what: 'a wait of one poll interval',
    });
    for (const wait of clock.waits.splice(0)) wait();
  };
  try {
    // Before: no such series; nothing but one error line showed the local API down.
    expect(await up()).toBe('0');
    await interval();
    expect(await up()).toBe('0');
    await mkdir(path.join(dir, 'run'));
    await interval();
    await waitFor(() => lines.some((line) => line.msg === 'local API listening'), PATIENCE_MS, {
      what: 'the local API listening',
    });
    expect(await up()).toBe('1');
    expect(await callAgent(socketPath, 'GET', '/v1/health', PATIENCE_MS)).toMatchObject({ status: 200 });
    // A reload that keeps the listening API keeps it 1.
    await agent.reload(async (current) => current);
    expect(await up()).toBe('1');
  } finally {
    await agent.stop();
  }
});
