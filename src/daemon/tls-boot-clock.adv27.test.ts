// A device booted with its clock at 1970 sees the service's TLS certificate as not yet valid: the daemon keeps
// polling, never gives up on anything, and is back within one poll of the clock being set right.
import { spawnSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import * as nodeFs from 'node:fs/promises';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import http from 'node:http';
import { createServer as createHttpsServer, type Server } from 'node:https';
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

const API_KEY = 'sk_test_tls_boot_clock_0123456';
const POLL_S = 60;
const JITTER = 0.1;
const START = 1_000_000;
const SERVICE_TIME = Date.parse('2026-06-01T00:00:00.000Z');
const hasOpenssl = spawnSync('openssl', ['version']).error === undefined;

/**
 * Monotonic time moves only when the test ends the daemon's wait. The wall clock reads 1970 (monotonic ms since
 * the epoch) until `setRight` is called, then the service's time.
 */
class BootClock implements Clock {
  mono = START;
  right = false;
  readonly sleeps: { ms: number; release: () => void }[] = [];
  now(): number {
    return (this.right ? SERVICE_TIME : 0) + this.mono;
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
let front: Server;
let frontUrl: string;
let daemon: AgentDaemon | undefined;
/** Self-signed for 127.0.0.1: one valid from 2036 only (what a 1970 clock makes of a real one), one valid now. */
const certs: { key: string; notYet: string; valid: string } = { key: '', notYet: '', valid: '' };

function makeCerts(into: string): void {
  const run = (args: string[]) => {
    const made = spawnSync('openssl', args, { cwd: into });
    if (made.status !== 0) throw new Error(String(made.stderr));
  };
  const config = ['[ca]', 'default_ca = d', '[d]', 'database = index.txt', 'serial = serial'];
  config.push('new_certs_dir = .', 'default_md = sha256', 'policy = p', 'copy_extensions = copy');
  config.push('[p]', 'commonName = supplied', '');
  spawnSync(
    'sh',
    ['-c', `touch index.txt && echo 01 > serial && printf '%s\\n' "$@" > ca.cnf`, 'sh', ...config],
    {
      cwd: into,
    },
  );
  const name = ['-subj', '/CN=127.0.0.1', '-addext', 'subjectAltName=IP:127.0.0.1'];
  run([
    'req',
    '-new',
    '-newkey',
    'ec',
    '-pkeyopt',
    'ec_paramgen_curve:P-256',
    '-nodes',
    '-keyout',
    'key.pem',
    ...name,
    '-out',
    'req.csr',
  ]);
  run(
    ['ca', '-batch', '-config', 'ca.cnf', '-selfsign', '-keyfile', 'key.pem', '-in', 'req.csr'].concat([
      '-startdate',
      '20360101000000Z',
      '-enddate',
      '20370101000000Z',
      '-out',
      'future.pem',
    ]),
  );
  run(['req', '-x509', '-key', 'key.pem', '-days', '2', ...name, '-out', 'valid.pem']);
  certs.key = readFileSync(path.join(into, 'key.pem'), 'utf8');
  certs.notYet = readFileSync(path.join(into, 'future.pem'), 'utf8');
  certs.valid = readFileSync(path.join(into, 'valid.pem'), 'utf8');
}

beforeEach(async () => {
  dir = await mkdtemp(path.join(os.tmpdir(), 'config-agent-tls-boot-clock-'));
  if (!hasOpenssl) return;
  const pki = path.join(dir, 'pki');
  await nodeFs.mkdir(pki);
  await writeFile(path.join(pki, '.keep'), '');
  makeCerts(pki);
  server = await startMockServer({ apiKeys: [API_KEY] });
  server.state.instances.set('cfg_a', mockRecord('cfg_a'));
  // The service behind TLS: a front that passes every request on to the mock.
  front = createHttpsServer({ key: certs.key, cert: certs.notYet }, (req, res) => {
    const upstream = http.request(
      { host: '127.0.0.1', port: server.port, path: req.url, method: req.method, headers: req.headers },
      (answer) => {
        res.writeHead(answer.statusCode ?? 502, answer.headers);
        answer.pipe(res);
      },
    );
    req.pipe(upstream);
  });
  await new Promise<void>((resolve) => front.listen(0, '127.0.0.1', resolve));
  frontUrl = `https://127.0.0.1:${(front.address() as AddressInfo).port}`;
});

afterEach(async () => {
  await daemon?.stop();
  daemon = undefined;
  if (hasOpenssl) {
    front.closeAllConnections();
    await new Promise((resolve) => front.close(resolve));
    await server.close();
  }
  await rm(dir, { recursive: true, force: true });
});

async function settle(done: () => boolean): Promise<void> {
  for (let turn = 0; turn < 20_000; turn += 1) {
    if (done()) return;
    await new Promise((resolve) => setTimeout(resolve, 1));
  }
  throw new Error('the daemon never asked for its next wait');
}

describe.skipIf(!hasOpenssl)('a daemon booted with its clock at 1970 behind TLS', () => {
  it('keeps polling while the certificate is not yet valid and is back within one poll of the clock set right', async () => {
    const clock = new BootClock();
    const config = parseAgentConfig(
      {
        deviceId: 'dvc_1',
        server: { baseUrl: frontUrl, timeoutSeconds: 10 },
        rootDir: path.join(dir, 'root'),
        stateDir: path.join(dir, 'state'),
        poll: { intervalSeconds: POLL_S, jitterRatio: JITTER, fullResyncSeconds: 3600 },
        drift: 'off',
      },
      'tls-boot-clock.adv27.test',
    );
    await nodeFs.mkdir(config.rootDir, { recursive: true });
    await nodeFs.mkdir(config.stateDir, { recursive: true, mode: 0o700 });
    const deps = { fs: nodeFs, clock, random: () => 0.5, logger: silentLogger() };
    const client = createClient({
      baseUrl: frontUrl,
      apiKey: API_KEY,
      timeoutMs: 10_000,
      maxResponseBytes: 1 << 20,
      dispatcherCa: [certs.notYet, certs.valid],
      proxy: { env: {} },
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

    // NTP steps the clock 30 minutes after boot: from then on the certificate is valid.
    const stepAt = START + 30 * 60 * 1000;
    const passesAt: number[] = [];
    let deployedAt: number | undefined;
    let waited = 0;
    while (deployedAt === undefined && clock.mono < stepAt + 60 * 60 * 1000) {
      await settle(() => clock.sleeps.length > waited);
      const wait = clock.sleeps[waited++]!;
      if (!clock.right && clock.mono + wait.ms >= stepAt) {
        clock.right = true;
        front.setSecureContext({ key: certs.key, cert: certs.valid });
        front.closeAllConnections();
      }
      wait.release();
      passesAt.push(clock.mono);
      await settle(() => clock.sleeps.length > waited);
      if (
        server.state.reports.some((r) => r.config_instance_id === 'cfg_a' && r.activity_status === 'deployed')
      ) {
        deployedAt = clock.mono;
      }
    }
    const failing = passesAt.filter((at) => at < stepAt);

    // While the clock was wrong: polled on (a pass at least every 15 minutes, no storm), nothing reported.
    expect(failing.length).toBeGreaterThanOrEqual(3);
    expect(failing.length).toBeLessThanOrEqual((30 * 60) / (POLL_S * (1 - JITTER)) + 1);
    expect(server.state.reports.filter((r) => r.error_status === 'failed')).toEqual([]);
    // Back within one poll (its jitter included) of the clock being right; before: 450 s, the outage backoff.
    expect(deployedAt).toBeDefined();
    expect(deployedAt! - stepAt).toBeLessThanOrEqual(POLL_S * (1 + JITTER) * 1000);
    const file = await nodeFs.readFile(
      path.join(config.rootDir, mockRecord('cfg_a').relative_filepath),
      'utf8',
    );
    expect(JSON.parse(file)).toEqual(mockRecord('cfg_a').content);

    await daemon.stop();
    await runner.close();
    daemon = undefined;
  });
});
