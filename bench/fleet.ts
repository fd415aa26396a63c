// Fleet simulation: 10,000 agents' real poll loops (AgentDaemon) on one virtual clock, through a service outage.
import * as fsp from 'node:fs/promises';
import { AgentConfigSchema } from '../src/config/schema.js';
import { type AgentComponents, AgentDaemon } from '../src/daemon/agent.js';
import type { AgentMetrics } from '../src/daemon/metrics.js';
import type { Clock } from '../src/lib/clock.js';
import { silentLogger } from '../src/lib/logger.js';
import type { PassOptions, PassResult, PassRunner } from '../src/reconcile/pass-runner.js';
import { emptyState } from '../src/store/state.js';

interface Timer {
  at: number;
  seq: number;
  resolve: () => void;
  done: boolean;
}

/** A binary heap of timers by due time (then by creation order). */
class TimerHeap {
  readonly #items: Timer[] = [];
  get size(): number {
    return this.#items.length;
  }
  peek(): Timer | undefined {
    return this.#items[0];
  }
  push(timer: Timer): void {
    const items = this.#items;
    items.push(timer);
    let i = items.length - 1;
    while (i > 0) {
      const parent = (i - 1) >> 1;
      if (!before(items[i]!, items[parent]!)) break;
      [items[i], items[parent]] = [items[parent]!, items[i]!];
      i = parent;
    }
  }
  pop(): Timer | undefined {
    const items = this.#items;
    const top = items[0];
    const last = items.pop();
    if (items.length > 0 && last !== undefined) {
      items[0] = last;
      let i = 0;
      for (;;) {
        const left = 2 * i + 1;
        const right = left + 1;
        let smallest = i;
        if (left < items.length && before(items[left]!, items[smallest]!)) smallest = left;
        if (right < items.length && before(items[right]!, items[smallest]!)) smallest = right;
        if (smallest === i) break;
        [items[i], items[smallest]] = [items[smallest]!, items[i]!];
        i = smallest;
      }
    }
    return top;
  }
}

function before(a: Timer, b: Timer): boolean {
  return a.at < b.at || (a.at === b.at && a.seq < b.seq);
}

/** The clock's resolution: a woken agent acts at most this late, far below the histogram's bins. */
const TICK_MS = 100;

/** One clock for the whole fleet: time only moves when `advanceTo` says so. */
export class VirtualClock implements Clock {
  #now = 0;
  #seq = 0;
  readonly #timers = new TimerHeap();

  now(): number {
    return Date.UTC(2026, 10, 1) + this.#now;
  }
  monotonic(): number {
    return this.#now;
  }
  sleep(ms: number, signal?: AbortSignal): Promise<void> {
    return new Promise<void>((resolve, reject) => {
      if (signal?.aborted) {
        reject(signal.reason);
        return;
      }
      const timer: Timer = { at: this.#now + Math.max(0, ms), seq: this.#seq++, resolve, done: false };
      signal?.addEventListener(
        'abort',
        () => {
          timer.done = true;
          reject(signal.reason);
        },
        { once: true },
      );
      this.#timers.push(timer);
    });
  }

  /** Fires every timer due up to `end`, in order, letting the woken code run until it sleeps again. */
  async advanceTo(end: number): Promise<void> {
    for (;;) {
      const next = this.#timers.peek();
      if (next === undefined || next.at > end) break;
      // Everything due within one tick wakes together (at the tick's end), then the event loop runs their
      // passes: 10,000 agents cost one event-loop turn per tick, not one per timer.
      const tickEnd = Math.min(end, next.at + TICK_MS);
      while ((this.#timers.peek()?.at ?? Number.POSITIVE_INFINITY) <= tickEnd) {
        const timer = this.#timers.pop()!;
        this.#now = Math.max(this.#now, timer.at);
        if (!timer.done) {
          timer.done = true;
          timer.resolve();
        }
      }
      await new Promise<void>((resolve) => setImmediate(resolve));
    }
    this.#now = end;
  }
}

export interface FleetOptions {
  agents: number;
  pollIntervalSeconds: number;
  jitterRatio: number;
  fullResyncSeconds: number;
  /** When the outage starts, after the fleet has settled. */
  outageStartSeconds: number;
  outageSeconds: number;
  /** How long after recovery the request rate is watched. */
  afterSeconds: number;
  binSeconds: number;
  seed: number;
}

export const DEFAULT_FLEET: FleetOptions = {
  agents: 10_000,
  pollIntervalSeconds: 30,
  jitterRatio: 0.2,
  fullResyncSeconds: 600,
  outageStartSeconds: 1800,
  outageSeconds: 300,
  afterSeconds: 1800,
  binSeconds: 10,
  seed: 42,
};

export interface FleetResult {
  options: FleetOptions;
  /** Requests per bin from the start; bin i covers [i × binSeconds, (i+1) × binSeconds). */
  histogram: number[];
  /** Over the bins after recovery: the busiest bin's request count over the mean bin's. */
  peakToMeanAfterRecovery: number;
  /** The same over the settled hour before the outage (the fleet's normal unevenness). */
  peakToMeanBefore: number;
  /** Requests per device per poll interval, over the settled time before the outage. */
  steadyRequestsPerDevicePerInterval: number;
  /** How many requests a full pass and a poll cost each simulated device. */
  fullPassRequests: number;
  pollRequests: number;
  /** Seconds after recovery until every agent has reached the service again. */
  recoverySpreadSeconds: number;
  wallMs: number;
}

/** Mulberry32: a seeded PRNG, so two runs of the simulation are the same run. */
function seeded(seed: number): () => number {
  let state = seed >>> 0;
  return () => {
    state = (state + 0x6d2b79f5) >>> 0;
    let t = state;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

/**
 * The service as one device sees it, standing in for the reconciler: a pass costs the requests the real one
 * makes for a device with fewer than 100 instances (a poll: 2 lists; a full pass: 1, the device's whole listing
 * in one page, counted at the mock by test/contract/pager-wide.test.ts), and during the outage the first request
 * fails and ends the pass, as a refused connection does.
 */
class StandInPassRunner implements PassRunner {
  readonly state = emptyState('dvc_fleet');
  readonly pendingReports = 0;
  readonly #clock: VirtualClock;
  readonly #record: (atMs: number, requests: number, reachable: boolean) => void;
  readonly #outage: (atMs: number) => boolean;

  constructor(
    clock: VirtualClock,
    outage: (atMs: number) => boolean,
    record: (atMs: number, requests: number, reachable: boolean) => void,
  ) {
    this.#clock = clock;
    this.#outage = outage;
    this.#record = record;
  }

  async runPass(options: PassOptions): Promise<PassResult> {
    const at = this.#clock.monotonic();
    const reachable = !this.#outage(at);
    this.#record(
      at,
      reachable ? (options.mode === 'full' ? FULL_PASS_REQUESTS : POLL_REQUESTS) : 1,
      reachable,
    );
    return {
      mode: options.mode,
      dryRun: false,
      startedAt: new Date(this.#clock.now()).toISOString(),
      durationMs: 0,
      reachable,
      ...(reachable
        ? {}
        : { error: { code: 'network_error', message: 'connection refused', retryable: true } }),
      steps: [],
      outcomes: [],
      reports: { delivered: 0, rejected: 0, pending: 0 },
      sweptTempFiles: [],
      converged: reachable,
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

const FULL_PASS_REQUESTS = 1;
const POLL_REQUESTS = 2;

/** The daemon only records into its metrics; the simulation has no use for 10,000 Prometheus registries. */
const noMetrics = {
  recordPass() {},
  recordDriftRepair() {},
  recordDriftDetected() {},
  recordHookRun() {},
  recordRequest() {},
  render: async () => '',
} as unknown as AgentMetrics;

export function peakToMean(bins: readonly number[]): number {
  if (bins.length === 0) return Number.NaN;
  const mean = bins.reduce((sum, value) => sum + value, 0) / bins.length;
  return mean === 0 ? Number.NaN : Math.max(...bins) / mean;
}

export async function simulateFleet(options: FleetOptions = DEFAULT_FLEET): Promise<FleetResult> {
  const started = performance.now();
  const clock = new VirtualClock();
  const random = seeded(options.seed);
  const outageStart = options.outageStartSeconds * 1000;
  const outageEnd = outageStart + options.outageSeconds * 1000;
  const end = outageEnd + options.afterSeconds * 1000;
  const binMs = options.binSeconds * 1000;
  const histogram = new Array<number>(Math.ceil(end / binMs)).fill(0);
  const firstReachAfter = new Map<number, number>();
  const config = AgentConfigSchema.parse({
    deviceId: 'dvc_fleet',
    server: { baseUrl: 'http://127.0.0.1:9' },
    rootDir: '/nonexistent/root',
    stateDir: '/nonexistent/state',
    drift: 'off',
    poll: {
      intervalSeconds: options.pollIntervalSeconds,
      jitterRatio: options.jitterRatio,
      fullResyncSeconds: options.fullResyncSeconds,
    },
  });
  const logger = silentLogger();
  const daemons: AgentDaemon[] = [];
  for (let agent = 0; agent < options.agents; agent += 1) {
    const runner = new StandInPassRunner(
      clock,
      (at) => at >= outageStart && at < outageEnd,
      (at, requests, reachable) => {
        const bin = Math.floor(at / binMs);
        if (bin < histogram.length) histogram[bin] = (histogram[bin] ?? 0) + requests;
        if (reachable && at >= outageEnd && !firstReachAfter.has(agent)) firstReachAfter.set(agent, at);
      },
    );
    const components: AgentComponents = {
      // The stand-in runner touches no disk; node's own fs is the honest port to hand the daemon all the same.
      deps: { fs: fsp, clock, random, logger },
      config,
      runner,
      metrics: noMetrics,
      hookEnv: {},
      scrub: (text) => text,
    };
    const daemon = new AgentDaemon(components);
    daemons.push(daemon);
    await daemon.start();
  }
  await clock.advanceTo(end);
  for (const daemon of daemons) void daemon.stop(0).catch(() => undefined);

  const binOf = (ms: number) => Math.floor(ms / binMs);
  const after = histogram.slice(binOf(outageEnd), binOf(end));
  // Settled: from one full-resync period after boot until the outage.
  const settledStart = Math.min(options.fullResyncSeconds * 1000, outageStart / 2);
  const beforeBins = histogram.slice(binOf(settledStart), binOf(outageStart));
  const beforeRequests = beforeBins.reduce((sum, value) => sum + value, 0);
  const beforeIntervals = ((beforeBins.length * binMs) / 1000 / options.pollIntervalSeconds) * options.agents;
  const reach = [...firstReachAfter.values()];
  return {
    options,
    histogram,
    peakToMeanAfterRecovery: peakToMean(after),
    peakToMeanBefore: peakToMean(beforeBins),
    steadyRequestsPerDevicePerInterval: beforeRequests / beforeIntervals,
    fullPassRequests: FULL_PASS_REQUESTS,
    pollRequests: POLL_REQUESTS,
    recoverySpreadSeconds:
      reach.length === options.agents ? (Math.max(...reach) - outageEnd) / 1000 : Number.POSITIVE_INFINITY,
    wallMs: performance.now() - started,
  };
}

/** The histogram as text: one row per `rowSeconds`, a bar scaled to the busiest row. */
export function renderHistogram(result: FleetResult, rowSeconds = 60): string {
  const { binSeconds, outageStartSeconds, outageSeconds } = result.options;
  const perRow = Math.max(1, Math.round(rowSeconds / binSeconds));
  const rows: { start: number; requests: number }[] = [];
  for (let i = 0; i < result.histogram.length; i += perRow) {
    const requests = result.histogram.slice(i, i + perRow).reduce((sum, value) => sum + value, 0);
    rows.push({ start: i * binSeconds, requests });
  }
  const max = Math.max(...rows.map((row) => row.requests), 1);
  const lines = rows.map(({ start, requests }) => {
    const minute = (start / 60).toFixed(0).padStart(4);
    const inOutage = start >= outageStartSeconds && start < outageStartSeconds + outageSeconds;
    const bar = '#'.repeat(Math.round((requests / max) * 50));
    return `${minute} min ${inOutage ? 'X' : ' '} ${String(requests).padStart(7)} ${bar}`;
  });
  return [`requests per ${rowSeconds} s (X = service down)`, ...lines].join('\n');
}
