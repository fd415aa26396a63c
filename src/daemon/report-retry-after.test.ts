// The daemon honours a report's Retry-After: a real Reconciler against the mock, a fake clock, and the moment
// (on that clock) the service received each report.
import * as nodeFs from 'node:fs/promises';
import { mkdtemp, rm } from 'node:fs/promises';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { mockRecord } from '../../test/helpers/instances.js';
import { createClient } from '../api/client.js';
import { parseAgentConfig } from '../config/load.js';
import type { Clock } from '../lib/clock.js';
import { silentLogger } from '../lib/logger.js';
import { type RunningMockServer, startMockServer } from '../mock-server/server.js';
import { Reconciler } from '../reconcile/reconcile.js';
import { AgentDaemon } from './agent.js';
import { AgentMetrics } from './metrics.js';

const API_KEY = 'sk_test_report_retry_after_0123';
const POLL_S = 60;
const START = 1_000_000;

/** Monotonic time moves only when the test ends the daemon's wait; the wait then ends at its due time. */
class FakeClock implements Clock {
  mono = START;
  readonly sleeps: { ms: number; release: () => void }[] = [];
  now(): number {
    return Date.parse('2026-06-01T00:00:00.000Z') + this.mono;
  }
  monotonic(): number {
    return this.mono;
  }
  sleep(ms: number, signal?: AbortSignal): Promise<void> {
    return new Promise<void>((resolve, reject) => {
      const startedAt = this.mono;
      signal?.addEventListener('abort', () => reject(signal.reason), { once: true });
      this.sleeps.push({
        ms,
        release: () => {
          this.mono = Math.max(this.mono, startedAt + ms);
          resolve();
        },
      });
    });
  }
}

let dir: string;
let server: RunningMockServer;
let daemon: AgentDaemon | undefined;

beforeEach(async () => {
  dir = await mkdtemp(path.join(os.tmpdir(), 'config-agent-report-retry-after-'));
  server = await startMockServer({ apiKeys: [API_KEY] });
  server.state.instances.set('cfg_a', mockRecord('cfg_a'));
});

afterEach(async () => {
  await daemon?.stop();
  daemon = undefined;
  await server.close();
  await rm(dir, { recursive: true, force: true });
});

/**
 * Runs the daemon for `seconds` of fake time, one wait at a time; returns when (seconds after the first pass
 * started) each status report reached the service and how many status requests it got.
 */
async function runDaemon(
  seconds: number,
  baseUrl = server.url,
): Promise<{ receivedAt: number[]; patches: number }> {
  const clock = new FakeClock();
  const config = parseAgentConfig(
    {
      deviceId: 'dvc_1',
      server: { baseUrl, timeoutSeconds: 10 },
      rootDir: path.join(dir, 'root'),
      stateDir: path.join(dir, 'state'),
      poll: { intervalSeconds: POLL_S, jitterRatio: 0.1, fullResyncSeconds: 3600 },
      drift: 'off',
    },
    'report-retry-after.test',
  );
  await nodeFs.mkdir(config.rootDir, { recursive: true });
  await nodeFs.mkdir(config.stateDir, { recursive: true, mode: 0o700 });
  const deps = { fs: nodeFs, clock, random: () => 0.5, logger: silentLogger() };
  const client = createClient({
    baseUrl,
    apiKey: API_KEY,
    timeoutMs: 10_000,
    maxResponseBytes: 1 << 20,
  });
  const runner = await Reconciler.open(
    deps,
    {
      deviceId: 'dvc_1',
      rootDir: config.rootDir,
      stateDir: config.stateDir,
      fileMode: 0o644,
      dirMode: 0o755,
      retry: { maxAttempts: 3, baseDelaySeconds: 10, maxDelaySeconds: 60 },
      // The daemon's own setting: its poll loop is the retry layer.
      requestRetries: 0,
    },
    client,
  );
  daemon = new AgentDaemon({
    deps,
    config,
    runner,
    metrics: new AgentMetrics({ deviceId: 'dvc_1' }),
    hookEnv: {},
    scrub: (text) => text,
  });
  await daemon.start();
  const receivedAt: number[] = [];
  let firstPassAt: number | undefined;
  let waited = 0;
  while (clock.mono - START < seconds * 1000) {
    await settle(() => clock.sleeps.length > waited);
    const wait = clock.sleeps[waited++]!;
    const reportsBefore = server.state.reports.length;
    wait.release();
    const passAt = clock.mono;
    firstPassAt ??= passAt;
    // The pass runs on real sockets; its wait afterwards marks its end.
    await settle(() => clock.sleeps.length > waited);
    for (let k = reportsBefore; k < server.state.reports.length; k += 1) {
      receivedAt.push((passAt - firstPassAt) / 1000);
    }
  }
  await daemon.stop();
  await runner.close();
  daemon = undefined;
  return { receivedAt, patches: server.state.stats.get('PATCH /v1/config_instances/:id') ?? 0 };
}

async function settle(done: () => boolean): Promise<void> {
  for (let turn = 0; turn < 20_000; turn += 1) {
    if (done()) return;
    await new Promise((resolve) => setTimeout(resolve, 1));
  }
  throw new Error('the daemon never asked for its next wait');
}

describe('a status report answered 503 with Retry-After', () => {
  it('shorter than the poll: sent again when it has passed, not at the next poll', async () => {
    server.state.addFault({ match: '^/v1/config_instances/cfg_a$', count: 1, status: 503, retry_after: 5 });

    const { receivedAt, patches } = await runDaemon(3 * POLL_S);

    // The first pass's report was refused at 0 s; the service asked for 5 s. Before: delivered at the poll, 60 s.
    expect(receivedAt).toEqual([5]);
    expect(patches).toBe(2);
  });

  it('longer than the poll: not sent again before it has passed, and sent then', async () => {
    server.state.addFault({ match: '^/v1/config_instances/cfg_a$', count: 1, status: 503, retry_after: 150 });

    const { receivedAt, patches } = await runDaemon(4 * POLL_S);

    // Polls at 60 and 120 s send nothing. Before: sent again at 60 s, 90 s before the service asked.
    expect(receivedAt).toEqual([150]);
    expect(patches).toBe(2);
  });

  it("as an HTTP date: measured against the service's Date header, not the device's clock", async () => {
    // A stand-in in front of the mock answers the first report itself: the service's clock says 2001, the
    // device's 2026; the date asked for is 20 s after the service's Date. Against the device's clock it is
    // long past (no wait at all).
    let refused = false;
    const standIn = http.createServer((req, res) => {
      if (req.method === 'PATCH' && !refused) {
        refused = true;
        req.resume();
        res.writeHead(503, {
          'content-type': 'application/json',
          date: 'Mon, 01 Jan 2001 00:00:00 GMT',
          'retry-after': 'Mon, 01 Jan 2001 00:00:20 GMT',
        });
        res.end('{}');
        return;
      }
      const upstream = http.request(
        { host: '127.0.0.1', port: server.port, path: req.url, method: req.method, headers: req.headers },
        (answer) => {
          res.writeHead(answer.statusCode ?? 502, answer.headers);
          answer.pipe(res);
        },
      );
      req.pipe(upstream);
    });
    await new Promise<void>((resolve) => standIn.listen(0, '127.0.0.1', resolve));
    try {
      const { port } = standIn.address() as AddressInfo;
      const { receivedAt, patches } = await runDaemon(2 * POLL_S, `http://127.0.0.1:${port}`);

      expect(refused).toBe(true);
      expect(receivedAt).toEqual([20]);
      expect(patches).toBe(1);
    } finally {
      standIn.closeAllConnections();
      await new Promise((resolve) => standIn.close(resolve));
    }
  });

  it('beyond the 30-minute cap: held 30 minutes, then sent', async () => {
    server.state.addFault({
      match: '^/v1/config_instances/cfg_a$',
      count: 1,
      status: 503,
      retry_after: 10 ** 9,
    });

    const { receivedAt, patches } = await runDaemon(40 * 60);

    expect(receivedAt).toEqual([30 * 60]);
    expect(patches).toBe(2);
  });
});
