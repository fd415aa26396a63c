// The service fault matrix against real `--once` runs: 5xx bursts, 429/503 with Retry-After (seconds, HTTP date,
// negative, huge), refused connections, resets, headers that never come, a byte a second, cut and malformed
// bodies, flapping. Each case asserts the end state, the requests the mock counted and a deadline: a fault the
// retries absorb converges; one they cannot ends the run (exit 3) with every file byte-identical and nothing
// reported, and the next run converges. The canary key runs through every case and every CLI command.

import { spawn } from 'node:child_process';
import { mkdtemp, readFile, rm } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { FaultRequest } from '../../src/api/admin-schemas.js';
import { AGENT_BIN, collect, snapshotTree } from '../helpers/harness.js';
import { waitFor } from '../helpers/wait-for.js';
import { type FaultProxy, startFaultProxy } from './support/fault-proxy.js';
import { CANARY_KEY, Fleet } from './support/fleet.js';
import { runSeed, seededRandom } from './support/random.js';

const SEED = runSeed();
const LIST = '^/v1/config_instances$';
const LIST_ROUTE = 'GET /v1/config_instances';
/** Request timeout of these runs: a hanging or trickling service is cut after this, per try. */
const TIMEOUT_SECONDS = 2;
/** Tries of one request in a `--once` run (ONCE_REQUEST_RETRIES + 1, src/cli/compose.ts). */
const ONCE_ATTEMPTS = 3;

let base = '';
let worlds = 0;
const cleanups: Array<() => Promise<void>> = [];
beforeAll(async () => {
  base = await mkdtemp(path.join(os.tmpdir(), 'config-agent-svcfaults-'));
});
afterAll(async () => {
  for (const cleanup of cleanups) await cleanup();
  if (base) await rm(base, { recursive: true, force: true });
});

interface World {
  fleet: Fleet;
  proxy: FaultProxy;
  /** List requests a fault-free full pass makes here. */
  baselineLists: number;
}

/** A world converged on version 1, with version 2 of every path waiting, the agent talking through a proxy. */
async function world(name: string): Promise<World> {
  // Short names: the agent's socket path lives in this dir and has a 107-byte limit.
  worlds += 1;
  const dir = path.join(base, `w${worlds}-${name.replace(/\W+/g, '-').slice(0, 12)}`);
  const fleet = await Fleet.create({
    dir,
    rootDir: path.join(dir, 'root'),
    stateDir: path.join(dir, 'state'),
    bigFileBytes: 0,
    server: { timeoutSeconds: TIMEOUT_SECONDS },
  });
  const proxy = await startFaultProxy(fleet.server.url);
  cleanups.push(
    () => proxy.close(),
    () => fleet.close(),
  );
  await fleet.writeConfig(proxy.url);
  const random = seededRandom(SEED);
  fleet.deployAll(random);
  const before = listRequests(fleet);
  const first = await fleet.runOnce();
  expect(first.code, first.stdout + first.stderr).toBe(0);
  const baselineLists = listRequests(fleet) - before;
  for (const relativePath of fleet.paths) fleet.deployVersion(relativePath, random);
  return { fleet, proxy, baselineLists };
}

function listRequests(fleet: Fleet): number {
  return fleet.server.state.stats.get(LIST_ROUTE) ?? 0;
}

function addFault(fleet: Fleet, fault: Omit<FaultRequest, 'match'> & { match?: string }): void {
  fleet.server.state.addFault({ match: LIST, ...fault });
}

interface Case {
  name: string;
  arm: (w: World) => void;
  /** `converges`: this run absorbs the fault; `fails`: it ends with exit 3 and changes nothing. */
  outcome: 'converges' | 'fails';
  /**
   * Bounds on the list requests beyond a fault-free pass (counted by the mock, proxy faults included), or
   * `gives-up`: the run ends after the tries of its first list request, so it sends at least one and at most
   * ONCE_ATTEMPTS lists in all, however many a fault-free pass would send.
   */
  extraRequests: [number, number] | 'gives-up';
  deadlineMs: number;
}

const CASES: Case[] = [
  {
    name: '5xx burst the retries absorb (two 500s)',
    arm: (w) => addFault(w.fleet, { count: 2, status: 500 }),
    outcome: 'converges',
    extraRequests: [2, 2],
    deadlineMs: 20_000,
  },
  {
    name: '5xx burst longer than the retries (502 for good)',
    arm: (w) => addFault(w.fleet, { count: 1000, status: 502 }),
    outcome: 'fails',
    extraRequests: 'gives-up',
    deadlineMs: 20_000,
  },
  {
    name: '429 with Retry-After: 1 (seconds)',
    arm: (w) => addFault(w.fleet, { count: 1, status: 429, retry_after: 1 }),
    outcome: 'converges',
    extraRequests: [1, 1],
    deadlineMs: 20_000,
  },
  {
    name: '503 with a huge Retry-After (a billion seconds): no wait, the run ends',
    arm: (w) => addFault(w.fleet, { count: 1, status: 503, retry_after: 1_000_000_000 }),
    outcome: 'fails',
    extraRequests: [-Infinity, 0],
    deadlineMs: 15_000,
  },
  {
    name: '503 with Retry-After as an HTTP date 1 s ahead',
    arm: (w) =>
      w.proxy.add({
        match: /^\/v1\/config_instances$/,
        count: 1,
        status: 503,
        headers: { 'retry-after': new Date(Date.now() + 1000).toUTCString() },
      }),
    outcome: 'converges',
    extraRequests: [1, 1],
    deadlineMs: 20_000,
  },
  {
    name: '503 with a negative Retry-After',
    arm: (w) =>
      w.proxy.add({
        match: /^\/v1\/config_instances$/,
        count: 1,
        status: 503,
        headers: { 'retry-after': '-5' },
      }),
    outcome: 'converges',
    extraRequests: [1, 1],
    deadlineMs: 20_000,
  },
  {
    name: '503 with a Retry-After beyond any integer',
    arm: (w) =>
      w.proxy.add({
        match: /^\/v1\/config_instances$/,
        count: 1,
        status: 503,
        headers: { 'retry-after': '99999999999999999999999' },
      }),
    outcome: 'converges',
    extraRequests: [1, 1],
    deadlineMs: 20_000,
  },
  {
    name: 'connection reset before the answer, twice',
    arm: (w) => addFault(w.fleet, { count: 2, mode: 'reset' }),
    outcome: 'converges',
    extraRequests: [2, 2],
    deadlineMs: 20_000,
  },
  {
    name: 'connection reset for good',
    arm: (w) => addFault(w.fleet, { count: 1000, mode: 'reset' }),
    outcome: 'fails',
    extraRequests: 'gives-up',
    deadlineMs: 20_000,
  },
  {
    name: 'headers that never come (once)',
    arm: (w) => addFault(w.fleet, { count: 1, mode: 'hang' }),
    outcome: 'converges',
    extraRequests: [1, 1],
    deadlineMs: 30_000,
  },
  {
    name: 'a byte a second (once)',
    arm: (w) => addFault(w.fleet, { count: 1, mode: 'slow', chunk_bytes: 1, interval_ms: 1000 }),
    outcome: 'converges',
    extraRequests: [1, 1],
    deadlineMs: 30_000,
  },
  {
    name: 'headers that never come, for good',
    arm: (w) => addFault(w.fleet, { count: 1000, mode: 'hang' }),
    outcome: 'fails',
    extraRequests: 'gives-up',
    deadlineMs: 45_000,
  },
];

describe('service faults against real --once runs', { timeout: 120_000 }, () => {
  it.each(CASES)('$name', async (fault) => {
    const w = await world(fault.name);
    const { fleet } = w;
    const rootBefore = await snapshotTree(fleet.rootDir, { identity: true });
    const reportsBefore = fleet.server.state.reports.length;
    const listsBefore = listRequests(fleet);
    fault.arm(w);

    const started = performance.now();
    const run = await fleet.runOnce([], fault.deadlineMs + 5_000);
    const elapsedMs = performance.now() - started;
    const output = `${run.stdout}${run.stderr}`;
    expect(output.includes(CANARY_KEY), 'the API key appeared in the output').toBe(false);
    expect(elapsedMs, `the run took ${elapsedMs.toFixed(0)} ms`).toBeLessThan(fault.deadlineMs);
    const sent = listRequests(fleet) - listsBefore + w.proxy.counts.faulted;
    if (fault.extraRequests === 'gives-up') {
      expect(sent, 'list requests of a run that gives up').toBeGreaterThanOrEqual(1);
      expect(sent, 'list requests of a run that gives up').toBeLessThanOrEqual(ONCE_ATTEMPTS);
    } else {
      const extra = sent - w.baselineLists;
      expect(extra, `list requests beyond a fault-free pass`).toBeGreaterThanOrEqual(fault.extraRequests[0]);
      expect(extra, `list requests beyond a fault-free pass`).toBeLessThanOrEqual(fault.extraRequests[1]);
    }

    if (fault.outcome === 'converges') {
      expect(run.code, output.slice(-2000)).toBe(0);
      expect(await fleet.checkConverged()).toEqual([]);
    } else {
      expect(run.code, output.slice(-2000)).toBe(3);
      // Nothing on disk changed (not even a rewrite of identical bytes) and nothing was reported.
      expect(await snapshotTree(fleet.rootDir, { identity: true })).toEqual(rootBefore);
      expect(fleet.server.state.reports.length).toBe(reportsBefore);
      expect(await fleet.tempFiles()).toEqual([]);
      fleet.server.state.clearFaults();
      const after = await fleet.runOnce();
      expect(after.code, after.stdout + after.stderr.slice(-2000)).toBe(0);
      expect(await fleet.checkConverged()).toEqual([]);
    }
    expect(await fleet.canaryHits([run.stdout, run.stderr])).toEqual([]);
  });

  it('refused connections (the service is down): exit 3 within the deadline, nothing changed, converges after', async () => {
    const w = await world('refused');
    const { fleet } = w;
    const rootBefore = await snapshotTree(fleet.rootDir, { identity: true });
    await w.proxy.close();
    const started = performance.now();
    const run = await fleet.runOnce([], 20_000);
    expect(performance.now() - started).toBeLessThan(15_000);
    expect(run.code, run.stdout + run.stderr.slice(-2000)).toBe(3);
    expect(`${run.stdout}${run.stderr}`.includes(CANARY_KEY)).toBe(false);
    expect(await snapshotTree(fleet.rootDir, { identity: true })).toEqual(rootBefore);
    await fleet.writeConfig(fleet.server.url);
    const after = await fleet.runOnce();
    expect(after.code, after.stdout).toBe(0);
    expect(await fleet.checkConverged()).toEqual([]);
  });

  it('a service flapping for "a minute" (every other request fails, 60 requests): runs converge, bounded requests', async () => {
    const w = await world('flapping');
    const { fleet } = w;
    // Faults with skips 0, 2, 4, ...: the 1st, 3rd, 5th... list request fails, the others pass.
    for (let i = 0; i < 30; i += 1) addFault(fleet, { count: 1, skip: 2 * i, status: 503 });
    const listsBefore = listRequests(fleet);
    const run = await fleet.runOnce([], 30_000);
    expect(run.code, run.stdout + run.stderr.slice(-2000)).toBe(0);
    expect(await fleet.checkConverged()).toEqual([]);
    // Each query fails once and passes on its retry: about twice a fault-free pass, never a storm.
    expect(listRequests(fleet) - listsBefore).toBeLessThanOrEqual(2 * w.baselineLists + 1);
    expect(`${run.stdout}${run.stderr}`.includes(CANARY_KEY)).toBe(false);
  });

  it('every CLI command and the daemon (logs, metrics textfile, socket answers) show the canary key nowhere', async () => {
    const w = await world('cli');
    const { fleet } = w;
    const run = (args: readonly string[]) =>
      collect(
        spawn(process.execPath, [AGENT_BIN, ...args], {
          env: { PATH: process.env.PATH, HOME: process.env.HOME },
          stdio: ['ignore', 'pipe', 'pipe'],
        }),
        30_000,
      );
    const config = ['--config', fleet.configPath];
    const outputs: string[] = [];
    for (const args of [
      ['--help'],
      ['--version'],
      [...config, '--once', '--dry-run'],
      [...config, '--once', '--dry-run', '--json'],
      [...config, '--once', '--json'],
      [...config, '--once'],
      [...config, 'status'],
      [...config, 'status', '--json'],
      [...config, 'sync'],
      [...config, 'doctor'],
    ]) {
      const result = await run(args);
      outputs.push(result.stdout, result.stderr);
      expect(`${result.stdout}${result.stderr}`.includes(CANARY_KEY), `config-agent ${args.join(' ')}`).toBe(
        false,
      );
    }
    // A 401 names the problem, never the key that was refused.
    fleet.server.state.addFault({ match: LIST, count: 1000, status: 401 });
    const refused = await run([...config, '--once']);
    outputs.push(refused.stdout, refused.stderr);
    fleet.server.state.clearFaults();

    // The daemon, with its metrics textfile, answering status and sync over its socket.
    const metricsFile = path.join(fleet.dir, 'agent.prom');
    await fleet.writeConfig(fleet.server.url, {
      metrics: { textfile: metricsFile },
      poll: { intervalSeconds: 1 },
    });
    const daemon = spawn(process.execPath, [AGENT_BIN, ...config], {
      env: { PATH: process.env.PATH, HOME: process.env.HOME },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    const daemonExit = collect(daemon, 60_000);
    try {
      await waitFor(() => readFile(metricsFile, 'utf8').then((text) => text.length > 0), 30_000, {
        what: 'the metrics textfile',
      });
      for (const args of [['status'], ['status', '--json'], ['sync']]) {
        const result = await run([...config, ...args]);
        outputs.push(result.stdout, result.stderr);
        expect(
          `${result.stdout}${result.stderr}`.includes(CANARY_KEY),
          `config-agent ${args.join(' ')}`,
        ).toBe(false);
      }
    } finally {
      daemon.kill('SIGTERM');
    }
    const stopped = await daemonExit;
    outputs.push(stopped.stdout, stopped.stderr, await readFile(metricsFile, 'utf8'));
    expect(await fleet.canaryHits(outputs)).toEqual([]);
  });
});
