// AgentDaemon's timing policy and lifecycle: a fake clock and a scripted PassRunner record every wait and pass mode.
import { watch as watchDirectory } from 'node:fs';
import * as nodeFs from 'node:fs/promises';
import { mkdir, mkdtemp, readdir, readFile, rm, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { Writable } from 'node:stream';
import { Volume } from 'memfs';
import { afterEach, describe, expect, it } from 'vitest';
import { memfsPort } from '../../test/helpers/memfs.js';
import { PATIENCE_MS, waitFor } from '../../test/helpers/wait-for.js';
import { createDeps } from '../cli/compose.js';
import { callAgent } from '../cli/local-client.js';
import { parseAgentConfig } from '../config/load.js';
import { type Clock, systemClock } from '../lib/clock.js';
import type { FsPort } from '../lib/fs-port.js';
import { sha256Hex } from '../lib/hash.js';
import { createLogger, type Logger, silentLogger } from '../lib/logger.js';
import { createSecretRegistry } from '../lib/secrets.js';
import type { PassError, PassMode, PassOptions, PassResult, PassRunner } from '../reconcile/pass-runner.js';
import { ContentCache } from '../store/content-cache.js';
import { DirectorySyncLedger } from '../store/directory-syncs.js';
import { emptyState } from '../store/state.js';
import { StateDir } from '../store/state-dir.js';
import { AgentDaemon } from './agent.js';
import { DRIFT_DEBOUNCE_MS } from './drift-watcher.js';
import { LocalApiServer } from './local-api.js';
import { AgentMetrics } from './metrics.js';

const INTERVAL_MS = 30_000;
const JITTER = 0.2;
const SECOND = 1000;
const MINUTE = 60 * SECOND;
const HOUR = 60 * MINUTE;
const DAY = 24 * HOUR;
/** The policy's bounds (agent.ts): outage backoff cap, Retry-After clamp, loop lateness, pass budget, min wait. */
const BACKOFF_CAP_MS = 15 * MINUTE;
const RETRY_AFTER_CLAMP_MS = 30 * MINUTE;
const LOOP_LATE_MS = MINUTE;
const PASS_STALL_MS = 10 * MINUTE;
const MIN_WAIT_MS = SECOND;

interface PendingSleep {
  ms: number;
  /** Ends the sleep at its due time, or now when the test already moved the clock past it. */
  release(): void;
}

/** Time under the test's control: sleeps are recorded and end only when released (or woken by the daemon). */
/** Resolves at the next turn of the event loop, or rejects when `signal` aborts first. */
function nextTurn(signal?: AbortSignal): Promise<void> {
  return new Promise<void>((resolve, reject) => {
    if (signal?.aborted) {
      reject(signal.reason);
      return;
    }
    const onAbort = () => {
      clearImmediate(turn);
      reject(signal?.reason);
    };
    const turn = setImmediate(() => {
      signal?.removeEventListener('abort', onAbort);
      resolve();
    });
    signal?.addEventListener('abort', onAbort, { once: true });
  });
}

class FakeClock implements Clock {
  mono = 5_000_000;
  wall = Date.parse('2030-06-01T12:00:00Z');
  readonly sleeps: PendingSleep[] = [];

  now(): number {
    return this.wall;
  }

  monotonic(): number {
    return this.mono;
  }

  sleep(ms: number, signal?: AbortSignal): Promise<void> {
    // The drift watcher's debounce (deps.clock; drift-debounce.test.ts pins it on a clock of its own) ends at the
    // next turn, so the daemon's own waits are the sleeps these tests count and release.
    if (ms === DRIFT_DEBOUNCE_MS) return nextTurn(signal);
    return new Promise<void>((resolve, reject) => {
      const startedAt = this.mono;
      const onAbort = () => reject(signal?.reason);
      this.sleeps.push({
        ms,
        release: () => {
          signal?.removeEventListener('abort', onAbort);
          this.mono = Math.max(this.mono, startedAt + ms);
          resolve();
        },
      });
      if (signal?.aborted) onAbort();
      else signal?.addEventListener('abort', onAbort, { once: true });
    });
  }
}

/** What the next runPass() returns; `hold` keeps the pass running until `finishHeldPass()`. */
interface Scripted {
  reachable: boolean;
  retryAfterMs?: number;
  hold?: boolean;
  crash?: boolean;
  /** The pass wrote a file. */
  wrote?: boolean;
}

/** The PassRunner the daemon drives, scripted: it records what it was asked and answers what the test says. */
class ScriptedRunner implements PassRunner {
  readonly state = emptyState('dvc_unit', '/srv/config');
  readonly modes: PassMode[] = [];
  readonly signals: AbortSignal[] = [];
  /** flushState and close, in the order the daemon called them, with the passes run by then. */
  readonly lifecycle: string[] = [];
  pendingReports = 0;
  dueRetries = false;
  nextRetry: () => number | undefined = () => undefined;
  readonly #script: Scripted[] = [];
  #held: (() => void) | undefined;

  script(...passes: Scripted[]): void {
    this.#script.push(...passes);
  }

  get holding(): boolean {
    return this.#held !== undefined;
  }

  finishHeldPass(): void {
    const held = this.#held;
    this.#held = undefined;
    held?.();
  }

  async runPass(options: PassOptions): Promise<PassResult> {
    this.modes.push(options.mode);
    if (options.signal !== undefined) this.signals.push(options.signal);
    const next = this.#script.shift() ?? { reachable: true };
    if (next.hold === true) await new Promise<void>((resolve) => (this.#held = resolve));
    if (next.crash === true) throw new Error('scripted crash');
    return passResult(options.mode, next);
  }

  hasDueRetries(): boolean {
    return this.dueRetries;
  }

  nextRetryAt(): number | undefined {
    return this.nextRetry();
  }

  async flushState(): Promise<void> {
    this.lifecycle.push(`flush after ${this.modes.length} passes`);
  }

  async close(): Promise<void> {
    this.lifecycle.push('close');
  }

  pendingHookPaths(): string[] {
    return [];
  }

  settleHookPaths(_paths: readonly string[]): void {}
}

function passResult(mode: PassMode, scripted: Scripted): PassResult {
  const error: PassError | undefined = scripted.reachable
    ? undefined
    : {
        code: 'http_status',
        message: 'service unavailable (503)',
        retryable: true,
        status: 503,
        ...(scripted.retryAfterMs === undefined ? {} : { retryAfterMs: scripted.retryAfterMs }),
      };
  return {
    mode,
    dryRun: false,
    startedAt: '2030-06-01T12:00:00.000Z',
    durationMs: 12,
    reachable: scripted.reachable,
    ...(error === undefined ? {} : { error }),
    steps: [],
    outcomes:
      scripted.wrote === true
        ? [{ instanceId: 'cfg_1', path: 'app.json', action: 'written', converged: true }]
        : [],
    reports: { delivered: 0, rejected: 0, pending: 0 },
    sweptTempFiles: [],
    converged: scripted.reachable,
  };
}

interface Agent {
  daemon: AgentDaemon<ScriptedRunner>;
  clock: FakeClock;
  reconciler: ScriptedRunner;
  /** What `random()` returns from now on. */
  random: number;
}

const started: AgentDaemon<ScriptedRunner>[] = [];
const realFs = nodeFs as unknown as FsPort;

afterEach(async () => {
  await Promise.all(started.splice(0).map((daemon) => daemon.stop()));
});

async function startAgent(
  options: {
    random?: number;
    timeoutSeconds?: number;
    releaseMemory?: (waitMs: number) => void;
    metricsTextfile?: string;
    volume?: Volume;
    logger?: Logger;
    /** The process's directory fsync ledger (cli/compose.ts keeps one across reloads). */
    directorySyncs?: DirectorySyncLedger;
  } = {},
): Promise<Agent> {
  const config = parseAgentConfig(
    {
      deviceId: 'dvc_unit',
      server: { baseUrl: 'https://dcds.example.com', timeoutSeconds: options.timeoutSeconds ?? 30 },
      rootDir: '/srv/config',
      stateDir: '/var/lib/config-agent',
      poll: { intervalSeconds: INTERVAL_MS / 1000, jitterRatio: JITTER, fullResyncSeconds: 600 },
      drift: 'off',
      ...(options.metricsTextfile === undefined ? {} : { metrics: { textfile: options.metricsTextfile } }),
    },
    'agent.test',
  );
  const clock = new FakeClock();
  const reconciler = new ScriptedRunner();
  const randomness = { value: options.random ?? 1 };
  const daemon = new AgentDaemon({
    deps: {
      fs: {
        ...memfsPort(options.volume ?? new Volume()),
        ...(options.directorySyncs === undefined ? {} : { directorySyncs: options.directorySyncs }),
      },
      clock,
      random: () => randomness.value,
      logger: options.logger ?? silentLogger(),
      ...(options.releaseMemory === undefined ? {} : { releaseMemory: options.releaseMemory }),
    },
    config,
    runner: reconciler,
    metrics: new AgentMetrics({ deviceId: config.deviceId }),
    hookEnv: {},
    scrub: (text) => text,
  });
  const agent: Agent = {
    daemon,
    clock,
    reconciler,
    get random() {
      return randomness.value;
    },
    set random(value: number) {
      randomness.value = value;
    },
  };
  started.push(agent.daemon);
  await agent.daemon.start();
  await settle(() => clock.sleeps.length === 1, 'the boot wait');
  return agent;
}

/** Lets the daemon's promise chains run until `done` holds; bounded, since nothing here waits on real time. */
async function settle(done: () => boolean, what: string): Promise<void> {
  for (let turn = 0; turn < 500; turn += 1) {
    if (done()) return;
    await new Promise((resolve) => setImmediate(resolve));
  }
  throw new Error(`the daemon never reached: ${what}`);
}

/** Ends the current wait; the daemon runs one pass and asks for its next wait. */
async function nextPass(agent: Agent): Promise<{ mode: PassMode; waitMs: number }> {
  const { clock, reconciler } = agent;
  const sleeps = clock.sleeps.length;
  const passes = reconciler.modes.length;
  clock.sleeps.at(-1)?.release();
  await settle(() => clock.sleeps.length > sleeps, 'the wait after a pass');
  expect(reconciler.modes).toHaveLength(passes + 1);
  return { mode: reconciler.modes.at(-1)!, waitMs: clock.sleeps.at(-1)!.ms };
}

async function passes(agent: Agent, count: number): Promise<{ modes: PassMode[]; waits: number[] }> {
  const modes: PassMode[] = [];
  const waits: number[] = [];
  for (let k = 0; k < count; k += 1) {
    const { mode, waitMs } = await nextPass(agent);
    modes.push(mode);
    waits.push(waitMs);
  }
  return { modes, waits };
}

const unreachable = (retryAfterMs?: number): Scripted =>
  retryAfterMs === undefined ? { reachable: false } : { reachable: false, retryAfterMs };

describe('AgentDaemon: the pass summary (cit24)', () => {
  it('an idle poll is summarised at debug; a change, a recovery and an hourly heartbeat at info', async () => {
    let text = '';
    const destination = new Writable({
      write(chunk, _encoding, done) {
        text += String(chunk);
        done();
      },
    });
    const logger = createLogger({ level: 'debug', secrets: createSecretRegistry(), destination });
    const summaries = () =>
      text
        .split('\n')
        .filter((line) => line.includes('"msg":"pass'))
        .map((line) => JSON.parse(line) as { level: string; msg: string; quietPasses?: number });
    const levels = () => summaries().map((line) => line.level);
    const agent = await startAgent({ logger });
    await passes(agent, 4);
    // The first pass of the process, then three idle polls.
    expect(levels()).toEqual(['info', 'debug', 'debug', 'debug']);
    agent.reconciler.script({ reachable: true, wrote: true }, { reachable: false }, { reachable: true });
    await passes(agent, 4);
    expect(levels().slice(4)).toEqual(['info', 'warn', 'info', 'debug']);
    expect(summaries()[4]?.quietPasses).toBe(3);
    // An hour of idle polls later, one summary at info says how many went to debug.
    agent.clock.mono += HOUR;
    await passes(agent, 2);
    expect(levels().slice(8)).toEqual(['info', 'debug']);
    expect(summaries()[8]).toMatchObject({ msg: 'pass finished', quietPasses: 1 });
  });
});

describe('AgentDaemon: the metrics textfile', () => {
  it('a failure that lasts is warned about once, again once it changes, and its end is told', async () => {
    let text = '';
    const destination = new Writable({
      write(chunk, _encoding, done) {
        text += String(chunk);
        done();
      },
    });
    const logger = createLogger({ level: 'info', secrets: createSecretRegistry(), destination });
    const warnings = () =>
      text.split('\n').filter((line) => line.includes('could not write the metrics textfile'));
    const volume = new Volume();
    // Its directory is missing: every write fails the same way.
    const agent = await startAgent({ metricsTextfile: '/metrics/agent.prom', volume, logger });
    await passes(agent, 5);
    expect(warnings()).toHaveLength(1);
    volume.mkdirSync('/metrics');
    await passes(agent, 1);
    expect(volume.existsSync('/metrics/agent.prom')).toBe(true);
    expect(text).toContain('metrics textfile written again');
    // A directory put at its path: another failure, warned about once more.
    volume.unlinkSync('/metrics/agent.prom');
    volume.mkdirSync('/metrics/agent.prom');
    await passes(agent, 3);
    expect(warnings()).toHaveLength(2);
  });
});

describe('AgentDaemon: the wait at boot', () => {
  it('is jittered: random · jitterRatio · interval, and no pass runs before it ends', async () => {
    const high = await startAgent({ random: 1 });
    const middle = await startAgent({ random: 0.5 });
    expect(high.clock.sleeps[0]?.ms).toBe(INTERVAL_MS * JITTER);
    expect(middle.clock.sleeps[0]?.ms).toBe(INTERVAL_MS * JITTER * 0.5);
    expect(high.reconciler.modes).toEqual([]);
    expect((await nextPass(high)).mode).toBe('full');
  });
});

describe('AgentDaemon: memory between polls', () => {
  it('is given back once after each pass, before the wait for the next poll, whatever the pass did', async () => {
    const timeline: string[] = [];
    const waits: number[] = [];
    let agent: Agent | undefined;
    agent = await startAgent({
      releaseMemory: (waitMs) => {
        waits.push(waitMs);
        timeline.push(`after ${agent?.reconciler.modes.length} passes, ${agent?.clock.sleeps.length} waits`);
      },
    });
    agent.reconciler.script({ reachable: true }, { reachable: false }, { reachable: true, crash: true });
    await passes(agent, 4);
    // The boot wait is the first: the release after pass k comes before its wait, the (k + 1)th.
    expect(timeline.slice(0, 3)).toEqual([
      'after 1 passes, 1 waits',
      'after 2 passes, 2 waits',
      'after 3 passes, 3 waits',
    ]);
    // Each is told the wait it precedes (the release runs whatever the heap grew before a long one).
    expect(waits.slice(0, 3)).toEqual(agent.clock.sleeps.slice(1, 4).map((sleep) => sleep.ms));
  });

  it('a release that throws leaves the daemon polling', async () => {
    const agent = await startAgent({
      releaseMemory: () => {
        throw new Error('no gc here');
      },
    });
    const { modes } = await passes(agent, 2);
    expect(modes).toEqual(['full', 'incremental']);
  });
});

describe('AgentDaemon: steady polling', () => {
  it('waits interval · (1 ± jitterRatio); the first pass is full, the next ones incremental', async () => {
    const agent = await startAgent({ random: 1 });
    const high = await passes(agent, 3);
    expect(high.modes).toEqual(['full', 'incremental', 'incremental']);
    expect(high.waits).toEqual([36_000, 36_000, 36_000]);
    agent.random = 0;
    expect((await nextPass(agent)).waitMs).toBe(24_000);
    agent.random = 0.5;
    expect(await nextPass(agent)).toEqual({ mode: 'incremental', waitMs: INTERVAL_MS });
  });

  it('runs the next full pass 0.5–1.5 × fullResyncSeconds after the last one, drawn per agent', async () => {
    // random() = 0.5: polls 30 s apart, the next full pass due 600 s after the first one (the 20th poll).
    const middle = await startAgent({ random: 0.5 });
    const even = await passes(middle, 22);
    expect(even.modes[0]).toBe('full');
    expect(even.modes.slice(1, 20)).toEqual(Array(19).fill('incremental'));
    expect(even.modes.slice(20)).toEqual(['full', 'incremental']);

    // random() = 0: polls 24 s apart, the next full pass due after 300 s: the 13th poll (312 s).
    const early = await startAgent({ random: 0 });
    const soon = await passes(early, 15);
    expect(soon.modes.slice(1, 13)).toEqual(Array(12).fill('incremental'));
    expect(soon.modes.slice(13)).toEqual(['full', 'incremental']);

    // random() = 1: polls 36 s apart, due after 900 s: the 25th poll (900 s).
    const late = await startAgent({ random: 1 });
    const far = await passes(late, 26);
    expect(far.modes.slice(1, 25)).toEqual(Array(24).fill('incremental'));
    expect(far.modes.slice(25)).toEqual(['full']);
  });

  it('draws the deadline again after every full pass, including one forced by a failure', async () => {
    const agent = await startAgent({ random: 0.5 });
    await nextPass(agent);
    agent.reconciler.script(unreachable());
    expect((await nextPass(agent)).mode).toBe('incremental');
    // Back after the outage: a full pass, then the next full one a drawn period after it (random() = 0: 300 s).
    agent.random = 0;
    const after = await passes(agent, 15);
    expect(after.modes[0]).toBe('full');
    // Waits of 24 s from here: the full pass falls on the first poll at or past 300 s, the 13th.
    expect(after.modes.slice(1, 13)).toEqual(Array(12).fill('incremental'));
    expect(after.modes[13]).toBe('full');
  });

  it('a trigger during a pass schedules exactly one more pass, never two', async () => {
    const agent = await startAgent({ random: 1 });
    await nextPass(agent);
    agent.reconciler.script({ reachable: true, hold: true });
    agent.clock.sleeps.at(-1)?.release();
    await settle(() => agent.reconciler.holding, 'the held pass');
    const triggers = [agent.daemon.syncNow(), agent.daemon.syncNow('incremental'), agent.daemon.syncNow()];
    agent.reconciler.finishHeldPass();
    const results = await Promise.all(triggers);
    expect(results.map((result) => result.mode)).toEqual(['full', 'full', 'full']);
    expect(agent.reconciler.modes).toEqual(['full', 'incremental', 'full']);
  });
});

describe('AgentDaemon: outages', () => {
  it('backs off with a ceiling that doubles from interval · 2 and caps at 15 min; passes after a failure are full', async () => {
    const agent = await startAgent({ random: 1 });
    await nextPass(agent);
    agent.reconciler.script(...Array.from({ length: 7 }, () => unreachable()));
    const outage = await passes(agent, 7);
    // random() = 1: each wait is the ceiling itself.
    expect(outage.waits).toEqual([
      INTERVAL_MS * 2,
      INTERVAL_MS * 4,
      INTERVAL_MS * 8,
      INTERVAL_MS * 16,
      BACKOFF_CAP_MS,
      BACKOFF_CAP_MS,
      BACKOFF_CAP_MS,
    ]);
    expect(outage.modes).toEqual(['incremental', ...Array(6).fill('full')]);
    expect(agent.daemon.status().consecutiveFailures).toBe(7);

    // One success: back to the normal interval, and the pass after it is incremental again.
    const recovery = await passes(agent, 2);
    expect(recovery.modes).toEqual(['full', 'incremental']);
    expect(recovery.waits).toEqual([36_000, 36_000]);
    expect(agent.daemon.status().consecutiveFailures).toBe(0);

    // A new outage starts from the bottom of the ladder, not where the last one ended.
    agent.reconciler.script(unreachable());
    expect(await nextPass(agent)).toEqual({ mode: 'incremental', waitMs: INTERVAL_MS * 2 });
  });

  it('spreads the fleet with full jitter (random · ceiling), never below interval · (1 − jitterRatio)', async () => {
    const agent = await startAgent({ random: 0.25 });
    await nextPass(agent);
    agent.reconciler.script(...Array.from({ length: 6 }, () => unreachable()));
    const { waits } = await passes(agent, 6);
    expect(waits).toEqual([
      INTERVAL_MS * (1 - JITTER),
      INTERVAL_MS * 4 * 0.25,
      INTERVAL_MS * 8 * 0.25,
      INTERVAL_MS * 16 * 0.25,
      BACKOFF_CAP_MS * 0.25,
      BACKOFF_CAP_MS * 0.25,
    ]);
  });

  it('honours Retry-After (the wait is at least that long) and clamps a huge one to 30 min', async () => {
    const agent = await startAgent({ random: 0 });
    await nextPass(agent);
    agent.reconciler.script(unreachable(100 * SECOND));
    expect((await nextPass(agent)).waitMs).toBe(100 * SECOND);
    agent.reconciler.script(unreachable(10 * HOUR));
    expect((await nextPass(agent)).waitMs).toBe(RETRY_AFTER_CLAMP_MS);
    // A short Retry-After never shortens the backoff.
    agent.random = 1;
    agent.reconciler.script(unreachable(5 * SECOND));
    expect((await nextPass(agent)).waitMs).toBe(INTERVAL_MS * 8);
    // Past the backoff cap, up to the clamp.
    agent.reconciler.script(unreachable(9 * DAY));
    expect((await nextPass(agent)).waitMs).toBe(RETRY_AFTER_CLAMP_MS);
    agent.reconciler.script(unreachable(20 * MINUTE));
    expect((await nextPass(agent)).waitMs).toBe(20 * MINUTE);
  });

  it('a pass that throws does not stop the loop: it backs off and polls again', async () => {
    const agent = await startAgent({ random: 1 });
    await nextPass(agent);
    agent.reconciler.script({ reachable: true, crash: true });
    const { waitMs } = await nextPass(agent);
    expect(waitMs).toBeGreaterThanOrEqual(INTERVAL_MS * (1 - JITTER));
    expect(waitMs).toBeLessThanOrEqual(BACKOFF_CAP_MS);
    expect(await nextPass(agent)).toMatchObject({ waitMs: 36_000 });
    expect(agent.daemon.status().running).toBe(true);
  });

  it('a jump of the wall clock changes no wait and no mode: backoff runs on monotonic time', async () => {
    const script = [
      { reachable: true },
      unreachable(),
      unreachable(),
      unreachable(40 * SECOND),
      { reachable: true },
      { reachable: true },
    ];
    const steady = await startAgent({ random: 1 });
    steady.reconciler.script(...script);
    const reference = await passes(steady, script.length);

    const jumpy = await startAgent({ random: 1 });
    jumpy.reconciler.script(...script);
    const jumped: { modes: PassMode[]; waits: number[] } = { modes: [], waits: [] };
    for (let k = 0; k < script.length; k += 1) {
      // NTP steps, a dead RTC battery: a day forward, a day back, while the agent sleeps.
      jumpy.clock.wall += k % 2 === 0 ? DAY : -2 * DAY;
      const { mode, waitMs } = await nextPass(jumpy);
      jumped.modes.push(mode);
      jumped.waits.push(waitMs);
      expect(jumpy.daemon.health()).toMatchObject({ healthy: true });
    }
    expect(jumped).toEqual(reference);
    expect(reference.waits).toEqual([36_000, 60_000, 120_000, 240_000, 36_000, 36_000]);
    expect(reference.modes).toEqual(['full', 'incremental', 'full', 'full', 'full', 'incremental']);
  });
});

describe('AgentDaemon: per-instance retries', () => {
  it('a due retry makes the next pass full', async () => {
    const agent = await startAgent({ random: 1 });
    expect((await passes(agent, 2)).modes).toEqual(['full', 'incremental']);
    agent.reconciler.dueRetries = true;
    expect((await nextPass(agent)).mode).toBe('full');
    agent.reconciler.dueRetries = false;
    expect((await nextPass(agent)).mode).toBe('incremental');
  });

  it('nextRetryAt shortens the wait to the retry, but never below 1 s', async () => {
    const agent = await startAgent({ random: 1 });
    await nextPass(agent);
    const { clock, reconciler } = agent;
    reconciler.nextRetry = () => clock.monotonic() + 5 * SECOND;
    expect((await nextPass(agent)).waitMs).toBe(5 * SECOND);
    reconciler.nextRetry = () => clock.monotonic() + 300;
    expect((await nextPass(agent)).waitMs).toBe(MIN_WAIT_MS);
    reconciler.nextRetry = () => clock.monotonic() - MINUTE;
    expect((await nextPass(agent)).waitMs).toBe(MIN_WAIT_MS);
    // A retry further away than the next poll does not lengthen the wait.
    reconciler.nextRetry = () => clock.monotonic() + 10 * MINUTE;
    expect((await nextPass(agent)).waitMs).toBe(36_000);
  });
});

describe('AgentDaemon: health', () => {
  it('is healthy while sleeping on time, unhealthy when the loop is more than 60 s late, healthy after it wakes', async () => {
    const agent = await startAgent({ random: 1 });
    const { clock, daemon } = agent;
    expect(daemon.health()).toMatchObject({ healthy: true });
    const { waitMs } = await nextPass(agent);
    expect(daemon.health()).toEqual({ healthy: true, lastLoopAt: expect.any(String) });
    clock.mono += waitMs + LOOP_LATE_MS - SECOND;
    expect(daemon.health()).toMatchObject({ healthy: true });
    clock.mono += 2 * SECOND;
    const late = daemon.health();
    expect(late.healthy).toBe(false);
    expect(late.reason).toMatch(/did not wake up/);

    await nextPass(agent);
    expect(daemon.health()).toEqual({ healthy: true, lastLoopAt: expect.any(String) });
  });

  it('is unhealthy when one pass runs past max(10 min, 20 request timeouts), healthy after it ends', async () => {
    for (const [timeoutSeconds, budgetMs] of [
      [30, PASS_STALL_MS],
      [60, 20 * 60 * SECOND],
    ] as const) {
      const agent = await startAgent({ random: 1, timeoutSeconds });
      const { clock, daemon, reconciler } = agent;
      await nextPass(agent);
      reconciler.script({ reachable: true, hold: true });
      clock.sleeps.at(-1)?.release();
      await settle(() => reconciler.holding, 'the held pass');
      clock.mono += budgetMs - SECOND;
      expect(daemon.health(), `timeout ${timeoutSeconds}s`).toMatchObject({ healthy: true });
      clock.mono += 2 * SECOND;
      const stalled = daemon.health();
      expect(stalled.healthy, `timeout ${timeoutSeconds}s`).toBe(false);
      expect(stalled.reason).toMatch(/running far too long/);

      const sleeps = clock.sleeps.length;
      reconciler.finishHeldPass();
      await settle(() => clock.sleeps.length > sleeps, 'the wait after the held pass');
      expect(daemon.health()).toMatchObject({ healthy: true });
    }
  });

  it('the local API answers 503 with the reason while unhealthy, 200 again after progress', async () => {
    const agent = await startAgent({ random: 1 });
    const { clock, daemon } = agent;
    const dir = await mkdtemp(path.join(os.tmpdir(), 'config-agent-health-'));
    const socketPath = path.join(dir, 'agent.sock');
    const api = new LocalApiServer(
      socketPath,
      {
        health: () => daemon.health(),
        status: () => daemon.status(),
        sync: async () => ({ converged: true, exitCode: 0, result: null }),
      },
      silentLogger(),
      {},
      systemClock,
    );
    await api.start();
    try {
      const { waitMs } = await nextPass(agent);
      expect(await callAgent(socketPath, 'GET', '/v1/health', PATIENCE_MS)).toMatchObject({
        status: 200,
        body: { healthy: true },
      });
      clock.mono += waitMs + LOOP_LATE_MS + SECOND;
      expect(await callAgent(socketPath, 'GET', '/v1/health', PATIENCE_MS)).toMatchObject({
        status: 503,
        body: { healthy: false, reason: expect.stringMatching(/did not wake up/) },
      });
      await nextPass(agent);
      expect(await callAgent(socketPath, 'GET', '/v1/health', PATIENCE_MS)).toMatchObject({
        status: 200,
        body: { healthy: true },
      });
    } finally {
      await api.close();
      await rm(dir, { recursive: true, force: true });
    }
  });
});

describe('AgentDaemon: stop', () => {
  it('while sleeping: resolves, flushes state then closes the reconciler, and polls no more', async () => {
    const agent = await startAgent({ random: 1 });
    await passes(agent, 2);
    await agent.daemon.stop();
    expect(agent.reconciler.lifecycle).toEqual(['flush after 2 passes', 'close']);
    expect(agent.daemon.status().running).toBe(false);
    // The wait it was in ended with the stop; releasing it late starts nothing.
    agent.clock.sleeps.at(-1)?.release();
    for (let turn = 0; turn < 20; turn += 1) await new Promise((resolve) => setImmediate(resolve));
    expect(agent.reconciler.modes).toHaveLength(2);
    expect(agent.clock.sleeps).toHaveLength(3);
  });

  it('during a pass: the pass is told to abort, the queued follow-up never starts, state is flushed', async () => {
    const agent = await startAgent({ random: 1 });
    const { clock, daemon, reconciler } = agent;
    await nextPass(agent);
    reconciler.script({ reachable: true, hold: true });
    clock.sleeps.at(-1)?.release();
    await settle(() => reconciler.holding, 'the held pass');
    const followUp = daemon.syncNow();
    const followUpSettled = followUp.then(
      () => 'ran',
      () => 'rejected',
    );

    const stopping = daemon.stop();
    expect(reconciler.signals.at(-1)?.aborted).toBe(true);
    // This stand-in ignores the abort and finishes the pass anyway: the follow-up must still not run.
    reconciler.finishHeldPass();
    await stopping;

    expect(await followUpSettled).toBe('rejected');
    expect(reconciler.modes).toEqual(['full', 'incremental']);
    expect(reconciler.lifecycle).toEqual(['flush after 2 passes', 'close']);
    expect(clock.sleeps).toHaveLength(2);
  });
});

describe('AgentDaemon: the drift watcher after a pass', () => {
  it('hands the managed set over: a file a pass wrote below a directory left unwatched at the cap is restored', async () => {
    const base = await mkdtemp(path.join(os.tmpdir(), 'config-agent-handover-'));
    try {
      const rootDir = path.join(base, 'root');
      const stateDir = path.join(base, 'state');
      // 30 foreign directories, a cap of 10: listed in name order, j010 to j029 are left unwatched.
      for (let n = 0; n < 30; n += 1)
        await mkdir(path.join(rootDir, `j${String(n).padStart(3, '0')}`), { recursive: true });
      const original = '{"managed":true}\n';
      await new ContentCache(realFs, stateDir).put(Buffer.from(original));
      const sortedFs = {
        ...realFs,
        readdir: async (dir: string, options: { withFileTypes: true }) =>
          (await nodeFs.readdir(dir, options)).sort((a, b) => a.name.localeCompare(b.name)),
      } as unknown as FsPort;
      const config = parseAgentConfig(
        {
          deviceId: 'dvc_unit',
          server: { baseUrl: 'https://dcds.example.com' },
          rootDir,
          stateDir,
          poll: { intervalSeconds: INTERVAL_MS / 1000, jitterRatio: JITTER, fullResyncSeconds: 600 },
          drift: 'restore',
        },
        'agent.test',
      );
      const clock = new FakeClock();
      const reconciler = new ScriptedRunner();
      const daemon = new AgentDaemon({
        deps: { fs: sortedFs, clock, random: () => 1, logger: silentLogger() },
        config,
        runner: reconciler,
        metrics: new AgentMetrics({ deviceId: config.deviceId }),
        hookEnv: {},
        scrub: (text) => text,
        driftDirectories: { maxDirectories: 10 },
      });
      started.push(daemon);
      const agent: Agent = { daemon, clock, reconciler, random: 1 };
      await daemon.start();
      await settle(() => clock.sleeps.length === 1, 'the boot wait');

      // A pass writes a new managed file below j025, which no watch sees.
      reconciler.script({ reachable: true, hold: true });
      clock.sleeps.at(-1)?.release();
      await settle(() => reconciler.holding, 'the pass running');
      const relative = 'j025/new/app.json';
      await mkdir(path.join(rootDir, 'j025/new'));
      await writeFile(path.join(rootDir, relative), original, { mode: 0o644 });
      reconciler.state.files.set(relative, {
        instanceId: 'cfg_1',
        sha256: sha256Hex(Buffer.from(original)),
        mode: 0o644,
        createdDirs: [],
        writtenAt: '2030-06-01T12:00:00.000Z',
      });
      reconciler.finishHeldPass();
      // The handover walks the real directories: real time, not turns of the event loop.
      await waitFor(() => clock.sleeps.length === 2 || undefined, PATIENCE_MS, {
        what: 'the wait after the pass',
      });
      expect(agent.reconciler.modes).toEqual(['full']);

      await writeFile(path.join(rootDir, relative), '{"managed":false}\n');
      await waitFor(
        async () => ((await readFile(path.join(rootDir, relative), 'utf8')) === original ? true : undefined),
        PATIENCE_MS,
        { what: `${relative} restored` },
      );
    } finally {
      await Promise.all(started.splice(0).map((daemon) => daemon.stop()));
      await rm(base, { recursive: true, force: true });
    }
  });
});

/** Watches used up at start (ENOSPC), then the instances too (EMFILE); or a failure that names no errno. */
const WATCH_REFUSALS = [
  {
    refused: 'ENOSPC, then EMFILE',
    refusal: (refusals: number): Error => {
      const errno = refusals === 0 ? 'ENOSPC' : 'EMFILE';
      return Object.assign(new Error(`${errno}: watch`), { code: errno });
    },
  },
  // Its message marks the watcher down as well: without an errno it was still tried again after each pass.
  { refused: 'an error without an errno', refusal: (): Error => new Error('the watch was refused') },
];

describe('AgentDaemon: a drift watcher that could not start', () => {
  it.each(WATCH_REFUSALS)(
    'is started after the next pass once the kernel gives watches again, and restores what changed meanwhile ($refused)',
    async ({ refusal }) => {
      const base = await mkdtemp(path.join(os.tmpdir(), 'config-agent-drift-down-'));
      try {
        const rootDir = path.join(base, 'root');
        const stateDir = path.join(base, 'state');
        const relative = 'app/settings.json';
        const original = '{"managed":true}\n';
        await mkdir(path.join(rootDir, 'app'), { recursive: true });
        await writeFile(path.join(rootDir, relative), original, { mode: 0o644 });
        await new ContentCache(realFs, stateDir).put(Buffer.from(original));
        // Refused at start and at the first pass, then given back.
        const kernel = { refuses: true, refusals: 0 };
        const watch = ((...args: Parameters<typeof watchDirectory>) => {
          if (kernel.refuses) {
            const error = refusal(kernel.refusals);
            kernel.refusals += 1;
            throw error;
          }
          return watchDirectory(...args);
        }) as typeof watchDirectory;
        const config = parseAgentConfig(
          {
            deviceId: 'dvc_unit',
            server: { baseUrl: 'https://dcds.example.com' },
            rootDir,
            stateDir,
            poll: { intervalSeconds: INTERVAL_MS / 1000, jitterRatio: JITTER, fullResyncSeconds: 600 },
            drift: 'restore',
          },
          'agent.test',
        );
        const clock = new FakeClock();
        const reconciler = new ScriptedRunner();
        reconciler.state.files.set(relative, {
          instanceId: 'cfg_1',
          sha256: sha256Hex(Buffer.from(original)),
          mode: 0o644,
          createdDirs: [],
          writtenAt: '2030-06-01T12:00:00.000Z',
        });
        const daemon = new AgentDaemon({
          deps: { fs: realFs, clock, random: () => 1, logger: silentLogger() },
          config,
          runner: reconciler,
          metrics: new AgentMetrics({ deviceId: config.deviceId }),
          hookEnv: {},
          scrub: (text) => text,
          driftDirectories: { watch },
        });
        started.push(daemon);
        await daemon.start();
        await settle(() => clock.sleeps.length === 1, 'the boot wait');
        expect(kernel.refusals).toBeGreaterThan(0);

        // Still refused at the first pass: tried again, nothing breaks, the daemon polls on.
        clock.sleeps.at(-1)?.release();
        await waitFor(() => clock.sleeps.length === 2 || undefined, PATIENCE_MS, { what: 'the first pass' });

        // The other processes let go; the file is changed by hand before any watch exists.
        kernel.refuses = false;
        await writeFile(path.join(rootDir, relative), '{"managed":false}\n');
        clock.sleeps.at(-1)?.release();
        await waitFor(() => clock.sleeps.length === 3 || undefined, PATIENCE_MS, { what: 'the second pass' });
        expect(reconciler.modes).toEqual(['full', 'incremental']);
        await waitFor(
          async () =>
            (await readFile(path.join(rootDir, relative), 'utf8')) === original ? true : undefined,
          PATIENCE_MS,
          { what: `${relative} restored` },
        );

        // And watched from then on: a later change is restored without any pass.
        clock.mono += 60_000; // past the restore's hold-off
        await writeFile(path.join(rootDir, relative), '{"managed":"again"}\n');
        await waitFor(
          async () =>
            (await readFile(path.join(rootDir, relative), 'utf8')) === original ? true : undefined,
          PATIENCE_MS,
          { what: `${relative} restored again` },
        );
        expect(reconciler.modes).toEqual(['full', 'incremental']);
      } finally {
        await Promise.all(started.splice(0).map((daemon) => daemon.stop()));
        await rm(base, { recursive: true, force: true });
      }
    },
  );
});

describe('AgentDaemon: a hung mount at or under rootDir', () => {
  /**
   * The real fs, but an lstat of a path in `hung` never settles until `release()`: a dead NFS server or a
   * wedged FUSE daemon, where each such call holds a thread of libuv's pool (four by default) for as long.
   * `watches` are the inotify watches the agent holds open now.
   */
  function hangingWorld() {
    const hung = new Set<string>();
    const held: (() => void)[] = [];
    const open = new Set<string>();
    let refuseWatches = false;
    const fs = {
      ...realFs,
      lstat: (file: string) =>
        hung.has(file)
          ? new Promise((resolve, reject) => held.push(() => nodeFs.lstat(file).then(resolve, reject)))
          : nodeFs.lstat(file),
    } as unknown as FsPort;
    let nextId = 0;
    const watch = ((dir: string, ...rest: unknown[]) => {
      if (refuseWatches) throw Object.assign(new Error('ENOSPC: watch'), { code: 'ENOSPC' });
      const watcher = (watchDirectory as (...args: unknown[]) => ReturnType<typeof watchDirectory>)(
        dir,
        ...rest,
      );
      const id = `${dir}#${nextId++}`;
      open.add(id);
      watcher.once('close', () => open.delete(id));
      return watcher;
    }) as typeof watchDirectory;
    return {
      fs,
      watch,
      hung,
      /** The pool threads the hung mount holds now. */
      get held(): number {
        return held.length;
      },
      set refuseWatches(value: boolean) {
        refuseWatches = value;
      },
      /** The directories watched now (one entry per open watch). */
      watched: (): string[] => [...open].map((id) => id.slice(0, id.lastIndexOf('#'))),
      /** The mount answers again: every held lstat completes. */
      release(): void {
        hung.clear();
        for (const finish of held.splice(0)) finish();
      },
    };
  }

  async function driftAgent(base: string, world: ReturnType<typeof hangingWorld>) {
    const rootDir = path.join(base, 'root');
    const stateDir = path.join(base, 'state');
    const relative = 'app/settings.json';
    const original = '{"managed":true}\n';
    await mkdir(path.join(rootDir, 'app'), { recursive: true });
    await mkdir(path.join(rootDir, 'mnt'), { recursive: true });
    await writeFile(path.join(rootDir, relative), original, { mode: 0o644 });
    await new ContentCache(realFs, stateDir).put(Buffer.from(original));
    const configOf = (root: string) =>
      parseAgentConfig(
        {
          deviceId: 'dvc_unit',
          server: { baseUrl: 'https://dcds.example.com' },
          rootDir: root,
          stateDir,
          poll: { intervalSeconds: INTERVAL_MS / 1000, jitterRatio: JITTER, fullResyncSeconds: 600 },
          drift: 'restore',
        },
        'agent.test',
      );
    const config = configOf(rootDir);
    const clock = new FakeClock();
    const reconciler = new ScriptedRunner();
    reconciler.state.files.set(relative, {
      instanceId: 'cfg_1',
      sha256: sha256Hex(Buffer.from(original)),
      mode: 0o644,
      createdDirs: [],
      writtenAt: '2030-06-01T12:00:00.000Z',
    });
    const daemon = new AgentDaemon({
      deps: { fs: world.fs, clock, random: () => 1, logger: silentLogger() },
      config,
      runner: reconciler,
      metrics: new AgentMetrics({ deviceId: config.deviceId }),
      hookEnv: {},
      scrub: (text) => text,
      driftDirectories: { watch: world.watch },
    });
    started.push(daemon);
    await daemon.start();
    await settle(() => clock.sleeps.length === 1, 'the boot wait');
    const file = path.join(rootDir, relative);
    /** Ends the wait, and waits for the pass and the wait after it. */
    const poll = async () => {
      const sleeps = clock.sleeps.length;
      clock.sleeps.at(-1)?.release();
      await waitFor(() => clock.sleeps.length > sleeps || undefined, PATIENCE_MS, {
        what: `the wait after pass ${reconciler.modes.length}`,
      });
    };
    const restored = (target = file) =>
      waitFor(async () => ((await readFile(target, 'utf8')) === original ? true : undefined), PATIENCE_MS, {
        what: `${target} restored`,
      });
    return { daemon, clock, reconciler, rootDir, file, original, configOf, poll, restored };
  }

  it("rootDir's lstat hanging after a pass: polls go on, one lstat held however many passes, drift still restored once it answers", async () => {
    const base = await mkdtemp(path.join(os.tmpdir(), 'config-agent-hung-root-'));
    const world = hangingWorld();
    try {
      const agent = await driftAgent(base, world);
      world.hung.add(agent.rootDir);
      for (let n = 0; n < 6; n += 1) await agent.poll();
      expect(agent.reconciler.modes).toHaveLength(6);
      expect(world.held).toBe(1);

      world.release();
      await writeFile(agent.file, '{"managed":false}\n');
      await agent.restored();
    } finally {
      world.release();
      await Promise.all(started.splice(0).map((daemon) => daemon.stop()));
      await rm(base, { recursive: true, force: true });
    }
  });

  it('a watcher started again after a pass, its walk hanging on a mount under rootDir: polls go on, one walk held, a reload meanwhile watches the new root, the late start is closed', async () => {
    const base = await mkdtemp(path.join(os.tmpdir(), 'config-agent-hung-walk-'));
    const world = hangingWorld();
    try {
      // No watch to be had at start: the watcher is started again after each pass.
      world.refuseWatches = true;
      const agent = await driftAgent(base, world);
      expect(world.watched()).toEqual([]);
      world.refuseWatches = false;
      world.hung.add(path.join(agent.rootDir, 'mnt'));
      await agent.poll();
      // The start after the pass runs in the background: its walk reaches the mount when it does.
      await waitFor(() => world.held === 1 || undefined, PATIENCE_MS, { what: 'the walk held on the mount' });
      for (let n = 1; n < 6; n += 1) await agent.poll();
      expect(agent.reconciler.modes).toHaveLength(6);
      expect(world.held).toBe(1);

      // A reload to another rootDir while that start hangs: the new root is watched and restored.
      const newRoot = path.join(base, 'root2');
      await mkdir(path.join(newRoot, 'app'), { recursive: true });
      const newFile = path.join(newRoot, 'app/settings.json');
      await writeFile(newFile, agent.original, { mode: 0o644 });
      await agent.daemon.reload(async (current) => ({ ...current, config: agent.configOf(newRoot) }));
      await agent.poll();
      // The file's own directory too: the watcher watches rootDir first, then app/, and a change made in between
      // is seen by no watch (the test then waited for a restore that only a full pass would make).
      const newApp = path.join(newRoot, 'app');
      await waitFor(
        () => (world.watched().includes(newRoot) && world.watched().includes(newApp)) || undefined,
        PATIENCE_MS,
        {
          what: 'the new root and app/ watched',
        },
      );
      await writeFile(newFile, '{"managed":false}\n');
      await agent.restored(newFile);

      // The mount answers: the start it held finishes for a configuration no longer running, and is closed.
      world.release();
      await waitFor(() => world.watched().every((dir) => dir.startsWith(newRoot)) || undefined, PATIENCE_MS, {
        what: 'no watch left under the old root',
      });
      await agent.daemon.stop();
      // A closed watch says so a tick later.
      await settle(() => world.watched().length === 0, 'every watch closed after the stop');
    } finally {
      world.release();
      await Promise.all(started.splice(0).map((daemon) => daemon.stop()));
      await rm(base, { recursive: true, force: true });
    }
  });

  it('stopped while a start hangs on a mount under rootDir: once the mount answers, no watch is left open', async () => {
    const base = await mkdtemp(path.join(os.tmpdir(), 'config-agent-hung-stop-'));
    const world = hangingWorld();
    try {
      world.refuseWatches = true;
      const agent = await driftAgent(base, world);
      world.refuseWatches = false;
      world.hung.add(path.join(agent.rootDir, 'mnt'));
      await agent.poll();
      // The watcher's start after the pass runs in the background: its walk reaches the mount when it does.
      await waitFor(() => world.held === 1 || undefined, PATIENCE_MS, { what: 'the walk held on the mount' });
      await agent.daemon.stop();
      expect(agent.reconciler.lifecycle).toEqual(['flush after 1 passes', 'close']);

      world.release();
      await waitFor(() => world.watched().length === 0 || undefined, PATIENCE_MS, {
        what: 'every watch closed',
      });
    } finally {
      world.release();
      await Promise.all(started.splice(0).map((daemon) => daemon.stop()));
      await rm(base, { recursive: true, force: true });
    }
  });
});

describe('AgentDaemon: directories a renewal left aside that the start could not put back (gaps18)', () => {
  const ASIDE = `.config-agent.tmp-${'ab'.repeat(12)}`;

  /**
   * A crash left `top/app` (with a.json) at its aside name, recorded in renewal-asides.json; the start's rename
   * back fails (EIO) while `failing`, and hangs while `hanging` (a mount that stopped answering) until released.
   */
  async function asideWorld(base: string) {
    const rootDir = path.join(base, 'root');
    const stateDir = path.join(base, 'state');
    await mkdir(path.join(rootDir, 'top', ASIDE), { recursive: true, mode: 0o755 });
    await nodeFs.chmod(rootDir, 0o755);
    await nodeFs.chmod(path.join(rootDir, 'top'), 0o755);
    await writeFile(path.join(rootDir, 'top', ASIDE, 'a.json'), 'deployed\n');
    await mkdir(stateDir, { mode: 0o700 });
    await writeFile(
      path.join(stateDir, 'renewal-asides.json'),
      JSON.stringify({ version: 1, asides: [{ rootDir, dir: 'top', name: 'app', aside: ASIDE }] }),
    );
    /** `failures`: renames that fail (EIO) once `failing` is off, before they work. */
    const world = { failing: true, failures: 0, hanging: false, held: [] as (() => void)[] };
    const fs: FsPort = {
      ...realFs,
      directorySyncs: new DirectorySyncLedger(),
      rename: (async (from: string, to: string) => {
        if (path.basename(String(from)) === ASIDE) {
          if (world.failing) throw Object.assign(new Error('EIO'), { code: 'EIO' });
          if (world.failures > 0) {
            world.failures -= 1;
            throw Object.assign(new Error('EIO'), { code: 'EIO' });
          }
          if (world.hanging) await new Promise<void>((resolve) => world.held.push(resolve));
        }
        return nodeFs.rename(from, to);
      }) as FsPort['rename'],
    };
    const state = await StateDir.open(fs, { stateDir, rootDir, deviceId: 'dvc_unit' }, silentLogger(), {
      euid: process.geteuid?.() ?? -1,
      clock: { now: () => 0 },
    });
    const config = parseAgentConfig(
      {
        deviceId: 'dvc_unit',
        server: { baseUrl: 'https://dcds.example.com' },
        rootDir,
        stateDir,
        poll: { intervalSeconds: INTERVAL_MS / 1000, jitterRatio: JITTER, fullResyncSeconds: 600 },
        drift: 'off',
      },
      'agent.test',
    );
    const clock = new FakeClock();
    const reconciler = new ScriptedRunner();
    const daemon = new AgentDaemon({
      deps: { fs, clock, random: () => 1, logger: silentLogger() },
      config,
      runner: reconciler,
      metrics: new AgentMetrics({ deviceId: config.deviceId }),
      hookEnv: {},
      scrub: (text) => text,
    });
    started.push(daemon);
    await daemon.start();
    await settle(() => clock.sleeps.length === 1, 'the boot wait');
    const agent: Agent = { daemon, clock, reconciler, random: 1 };
    const back = () => readdir(path.join(rootDir, 'top')).then((names) => names.includes('app'));
    const putBack = () =>
      waitFor(async () => ((await back()) ? true : undefined), PATIENCE_MS, { what: 'top/app put back' });
    return { world, state, agent, rootDir, stateDir, back, putBack };
  }

  it('a reload (SIGHUP) tries it again at once: put back, with its file, and the record dropped', async () => {
    const base = await mkdtemp(path.join(os.tmpdir(), 'config-agent-asides-reload-'));
    try {
      const { world, state, agent, rootDir, stateDir, back, putBack } = await asideWorld(base);
      try {
        expect(await back()).toBe(false);
        world.failing = false;
        await agent.daemon.reload(async (current) => current);
        // Before: left aside until a write below top/app or the next start.
        await putBack();
        expect(await readFile(path.join(rootDir, 'top/app/a.json'), 'utf8')).toBe('deployed\n');
        expect(await readdir(stateDir)).not.toContain('renewal-asides.json');
      } finally {
        await state.close();
      }
    } finally {
      await rm(base, { recursive: true, force: true });
    }
  });

  it('tried again after a pass once a minute has passed, the wait doubling while it fails', async () => {
    const base = await mkdtemp(path.join(os.tmpdir(), 'config-agent-asides-backoff-'));
    try {
      const { world, state, agent, back, putBack } = await asideWorld(base);
      try {
        // Passes every 36 s (random 1): the first sets the retry 1 min on, the third (72 s) tries it: EIO again.
        world.failing = false;
        world.failures = 1;
        await passes(agent, 3);
        await waitFor(() => world.failures === 0 || undefined, PATIENCE_MS, { what: 'the try at 72 s' });
        expect(await back()).toBe(false);
        // The next try is due 2 min after that one: the pass at 216 s tries it and puts it back. Before: aside
        // for the whole run.
        await passes(agent, 4);
        await putBack();
      } finally {
        await state.close();
      }
    } finally {
      await rm(base, { recursive: true, force: true });
    }
  });

  it('a try that hangs (its mount stopped answering) holds no poll, and no second try starts meanwhile', async () => {
    const base = await mkdtemp(path.join(os.tmpdir(), 'config-agent-asides-hung-'));
    try {
      const { world, state, agent, putBack } = await asideWorld(base);
      try {
        world.failing = false;
        world.hanging = true;
        await agent.daemon.reload(async (current) => current);
        await waitFor(() => world.held.length === 1 || undefined, PATIENCE_MS, { what: 'the try hanging' });
        // Six polls, over 3 min: each pass ends; the hung try is the only one.
        const { modes } = await passes(agent, 6);
        expect(modes).toHaveLength(6);
        expect(world.held).toHaveLength(1);
        world.hanging = false;
        for (const release of world.held.splice(0)) release();
        await putBack();
      } finally {
        await state.close();
      }
    } finally {
      await rm(base, { recursive: true, force: true });
    }
  });
});

describe('AgentDaemon: a retry due just after the next poll (gaps18)', () => {
  it('is that poll: one full pass at the retry, not an incremental pass and a full one seconds later', async () => {
    // random 0: polls 24 s apart (interval 30 s, jitter 0.2); a device condition's floor holds a retry 30 s.
    const agent = await startAgent({ random: 0 });
    const { clock, reconciler } = agent;
    const retryAt = clock.monotonic() + 30 * SECOND;
    reconciler.nextRetry = () => (clock.monotonic() < retryAt ? retryAt : undefined);
    Object.defineProperty(reconciler, 'dueRetries', { get: () => clock.monotonic() >= retryAt });
    const first = await nextPass(agent);
    // Before: 24 s, then an incremental pass, a wait of 6 s and the retry's full pass.
    expect(first.waitMs).toBe(30 * SECOND);
    expect(await nextPass(agent)).toEqual({ mode: 'full', waitMs: 24 * SECOND });
    expect(reconciler.modes).toEqual(['full', 'full']);
  });

  it('a retry past the latest poll the jitter draws does not hold the poll back', async () => {
    const agent = await startAgent({ random: 0 });
    const { clock, reconciler } = agent;
    reconciler.nextRetry = () => clock.monotonic() + 37 * SECOND;
    expect((await nextPass(agent)).waitMs).toBe(24 * SECOND);
  });
});

describe('AgentDaemon: the renewal-failure log across reloads (gaps19)', () => {
  /** A stream whose lines land in `lines`, and a logger at `level` writing to it. */
  function captured(level: 'info' | 'silent' = 'info') {
    const lines: string[] = [];
    const destination = new Writable({
      write(chunk: Buffer, _encoding, done) {
        lines.push(...chunk.toString('utf8').split('\n').filter(Boolean));
        done();
      },
    });
    return {
      destination,
      lines,
      logger: createLogger({ level, secrets: createSecretRegistry(), destination }),
    };
  }
  const renewalLines = (lines: readonly string[]) =>
    lines.filter((line) => line.includes('could not write again a directory entry'));
  const configAt = (level: 'info' | 'silent') =>
    parseAgentConfig(
      {
        deviceId: 'dvc_unit',
        server: { baseUrl: 'https://dcds.example.com' },
        rootDir: '/srv/config',
        stateDir: '/var/lib/config-agent',
        drift: 'off',
        log: { level },
      },
      'agent.test',
    );
  const failure = (code: string) => Object.assign(new Error(`${code}: renewal-asides.json`), { code });

  it('twenty failed reloads leave it with the running configuration: exactly one line per failure', async () => {
    const ledger = new DirectorySyncLedger();
    const running = captured();
    const agent = await startAgent({ logger: running.logger, directorySyncs: ledger });
    const failed: string[][] = [];
    for (let i = 0; i < 20; i += 1) {
      // What compose.ts's builder does: the next deps (their logger, at the new log.level, on the process's one
      // ledger) first, then something refuses the reload (a files.rules group the agent cannot use, a stateDir
      // that will not open).
      const next = captured();
      failed.push(next.lines);
      const reload = agent.daemon.reload(async (current) => {
        await createDeps(
          configAt(i % 2 === 0 ? 'silent' : 'info'),
          createSecretRegistry(),
          next.destination,
          current.deps,
        );
        throw new Error('files.rules: group "nobody-here" is not a group of this system');
      });
      await expect(reload).rejects.toThrow(/nobody-here/);
    }
    ledger.renewalFailed('/srv/config/top', 'app', failure('ENOSPC'));
    ledger.renewalFailed('/srv/config/top', 'web', failure('EIO'));

    // Before: both went to the last failed reload's logger (at its level), none to the running one's.
    expect(renewalLines(running.lines)).toHaveLength(2);
    expect(failed.flatMap(renewalLines)).toEqual([]);

    // A reload that is applied hands it to the new configuration's logger.
    const applied = captured();
    await agent.daemon.reload(async (current) => ({
      ...current,
      deps: { ...current.deps, logger: applied.logger },
    }));
    ledger.renewalFailed('/srv/config/top', 'app', failure('EIO'));
    expect(renewalLines(applied.lines)).toHaveLength(1);
    expect(renewalLines(running.lines)).toHaveLength(2);
  });
});
