// Prometheus metrics of the agent (prom-client, private registry), written as a node_exporter textfile.
import path from 'node:path';
// One file each, not prom-client's index: that also loads the Pushgateway (https, and on Node 24 its own undici
// with it), the default metrics (perf_hooks), Summary and the cluster aggregator, none of which the agent uses.
import type { Counter, Gauge, Histogram } from 'prom-client';
import CounterClass from 'prom-client/lib/counter.js';
import GaugeClass from 'prom-client/lib/gauge.js';
import HistogramClass from 'prom-client/lib/histogram.js';
import Registry from 'prom-client/lib/registry.js';
import type { FsPort } from '../lib/fs-port.js';
import { publishFile } from '../store/durable-writer.js';
import { type HookRunResult, hookFailed } from './hooks.js';

export interface PassSummary {
  durationMs: number;
  converged: boolean;
  /** False when the service could not be reached at all during the pass. */
  reachable: boolean;
  /** Wall-clock epoch milliseconds at the end of the pass. */
  finishedAtMs: number;
  managedFiles: number;
  instancesByStatus: Record<string, number>;
  /** Request retries made during the pass. */
  retries: number;
  /** Status reports still queued after the pass (failed ones wait out their backoff: report.ts). */
  pendingReports?: number;
}

/** Matches RequestEvent in src/api/client.ts. */
export interface RequestMetricEvent {
  method: string;
  route: string;
  outcome: string;
  status?: number;
  durationMs: number;
}

export type PassResult = 'converged' | 'not_converged' | 'unreachable';
const PASS_RESULTS: readonly PassResult[] = ['converged', 'not_converged', 'unreachable'];

const PASS_DURATION_BUCKETS = [0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300];
const REQUEST_DURATION_BUCKETS = [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30];

function seconds(ms: number): number {
  return Number.isFinite(ms) ? Math.max(0, ms) / 1000 : 0;
}

/** Recording a metric must never fail a pass: a value that is not a count reads as 0. */
function count(value: number | undefined): number {
  const n = value ?? 1;
  return Number.isFinite(n) && n >= 0 ? n : 0;
}

export function passResult(summary: Pick<PassSummary, 'converged' | 'reachable'>): PassResult {
  if (!summary.reachable) return 'unreachable';
  return summary.converged ? 'converged' : 'not_converged';
}

/**
 * Every metric the agent exports. A private registry per instance: no global state, so two agents (or two
 * tests) in one process never share or clash over series, and nothing is exported that was not asked for.
 */
export class AgentMetrics {
  private readonly registry = new Registry();
  private readonly seenStatuses = new Set<string>();
  private readonly managedFiles: Gauge;
  private readonly instances: Gauge<'status'>;
  private readonly passDuration: Histogram;
  private readonly passes: Counter<'result'>;
  private readonly lastPass: Gauge;
  private readonly lastSuccess: Gauge;
  private readonly retries: Counter;
  private readonly pendingReports: Gauge;
  private readonly driftRepairs: Counter;
  private readonly driftDetected: Counter;
  private readonly hookRuns: Counter;
  private readonly hookFailures: Counter;
  private readonly hooksLeftBehindGauge: Gauge;
  private readonly localApiUp: Gauge;
  private readonly requests: Counter<'method' | 'route' | 'outcome'>;
  private readonly requestDuration: Histogram<'method' | 'route'>;

  constructor(labels: { deviceId: string }) {
    this.registry.setDefaultLabels({ device_id: labels.deviceId });
    const registers = [this.registry];
    this.managedFiles = new GaugeClass({
      name: 'config_agent_managed_files',
      help: 'Files under rootDir the agent currently manages.',
      registers,
    });
    this.instances = new GaugeClass({
      name: 'config_agent_instances',
      help: "The device's config instances by status, as of the last pass.",
      labelNames: ['status'],
      registers,
    });
    this.passDuration = new HistogramClass({
      name: 'config_agent_pass_duration_seconds',
      help: 'Duration of reconcile passes.',
      buckets: PASS_DURATION_BUCKETS,
      registers,
    });
    this.passes = new CounterClass({
      name: 'config_agent_passes_total',
      help: 'Reconcile passes by result.',
      labelNames: ['result'],
      registers,
    });
    this.lastPass = new GaugeClass({
      name: 'config_agent_last_pass_timestamp_seconds',
      help: 'When the last pass ended, whatever its result (epoch seconds); stale means the loop is stuck.',
      registers,
    });
    this.lastSuccess = new GaugeClass({
      name: 'config_agent_last_success_timestamp_seconds',
      help: 'When the last converged pass ended (epoch seconds); 0 until the first one.',
      registers,
    });
    this.retries = new CounterClass({
      name: 'config_agent_retries_total',
      help: 'Failed instance attempts scheduled for a retry (per-instance backoff), summed over passes.',
      registers,
    });
    this.pendingReports = new GaugeClass({
      name: 'config_agent_reports_pending',
      help: 'Status reports queued and not yet accepted by the service, as of the last pass; one that stays up means reports are failing.',
      registers,
    });
    this.driftRepairs = new CounterClass({
      name: 'config_agent_drift_repairs_total',
      help: 'Managed files rewritten after someone else changed or deleted them.',
      registers,
    });
    this.driftDetected = new CounterClass({
      name: 'config_agent_drift_detected_total',
      help: 'Changes or deletions of managed files by someone else that the watcher noticed.',
      registers,
    });
    this.hookRuns = new CounterClass({
      name: 'config_agent_hook_runs_total',
      help: 'Hook commands run.',
      registers,
    });
    this.hookFailures = new CounterClass({
      name: 'config_agent_hook_failures_total',
      help: 'Hook commands that failed: non-zero exit, killed, timed out or not started.',
      registers,
    });
    this.hooksLeftBehindGauge = new GaugeClass({
      name: 'config_agent_hook_processes_left_behind',
      help: 'Hook processes SIGKILL did not end (uninterruptible sleep on a hung mount), still there; their hooks do not run meanwhile.',
      registers,
    });
    this.localApiUp = new GaugeClass({
      name: 'config_agent_local_api_up',
      help: 'Whether the local API (socketPath) listens: 1, or 0 while it could not start and is tried again every poll interval.',
      registers,
    });
    this.requests = new CounterClass({
      name: 'config_agent_requests_total',
      help: 'Requests to the service by route and outcome.',
      labelNames: ['method', 'route', 'outcome'],
      registers,
    });
    this.requestDuration = new HistogramClass({
      name: 'config_agent_request_duration_seconds',
      help: 'Duration of requests to the service.',
      labelNames: ['method', 'route'],
      buckets: REQUEST_DURATION_BUCKETS,
      registers,
    });
    // Series that exist from the start, so rate() and absence alerts work before the first event.
    for (const result of PASS_RESULTS) this.passes.inc({ result }, 0);
    this.lastSuccess.set(0);
  }

  recordPass(summary: PassSummary): void {
    const result = passResult(summary);
    this.passes.inc({ result });
    this.passDuration.observe(seconds(summary.durationMs));
    this.lastPass.set(Math.floor(summary.finishedAtMs / 1000));
    if (result === 'converged') this.lastSuccess.set(Math.floor(summary.finishedAtMs / 1000));
    this.managedFiles.set(count(summary.managedFiles));
    if (summary.retries > 0) this.retries.inc(count(summary.retries));
    if (summary.pendingReports !== undefined) this.pendingReports.set(count(summary.pendingReports));
    // A status nobody holds any more reads 0 rather than vanishing, so graphs do not keep its last value.
    for (const status of this.seenStatuses) {
      if (!(status in summary.instancesByStatus)) this.instances.set({ status }, 0);
    }
    for (const [status, n] of Object.entries(summary.instancesByStatus)) {
      this.seenStatuses.add(status);
      this.instances.set({ status }, count(n));
    }
  }

  recordRequest(event: RequestMetricEvent): void {
    const { method, route } = event;
    this.requests.inc({ method, route, outcome: event.outcome });
    this.requestDuration.observe({ method, route }, seconds(event.durationMs));
  }

  recordDriftRepair(n?: number): void {
    this.driftRepairs.inc(count(n));
  }

  recordDriftDetected(n?: number): void {
    this.driftDetected.inc(count(n));
  }

  /** Hook processes given up on after SIGKILL and still there (uninterruptible sleep on a hung mount). */
  /** The local API's last start: listening (1) or not (0, tried again every poll interval). */
  setLocalApiUp(up: boolean): void {
    this.localApiUp.set(up ? 1 : 0);
  }

  setHooksLeftBehind(count: number): void {
    this.hooksLeftBehindGauge.set(count);
  }

  recordHookRun(result: HookRunResult): void {
    this.hookRuns.inc();
    if (hookFailed(result)) this.hookFailures.inc();
  }

  /** The Prometheus text exposition format (version 0.0.4) of every metric. */
  render(): Promise<string> {
    return this.registry.metrics();
  }
}

/**
 * Publishes the textfile atomically (temp file + rename) so node_exporter never reads half a file; the temp
 * name starts with a dot and does not end in .prom, so the collector ignores it. Not durably (no fsync): it is
 * rewritten after every pass, and two fsyncs a pass (~5,800 a day at 30 s polls) would wear a device's flash for
 * numbers the next pass writes again; a power cut costs at most the last pass's figures. The directory must
 * exist: it belongs to node_exporter's setup, not to the agent. Throws DiskError / PathRejectedError.
 */
export async function writeMetricsTextfile(fs: FsPort, filePath: string, text: string): Promise<void> {
  await publishFile(fs, {
    rootDir: path.dirname(filePath),
    relativePath: path.basename(filePath),
    data: Buffer.from(text, 'utf8'),
    mode: 0o644,
    dirMode: 0o755,
    durable: false,
  });
}
