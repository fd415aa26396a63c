// The long-running agent: jittered polling, backoff on outages, drift repair, hooks, metrics, local API.
import type { AgentConfig } from '../config/schema.js';
import { fullJitterMs, honourRetryAfter } from '../lib/backoff.js';
import type { Deps } from '../lib/deps.js';
import { AgentError, errnoCode, errorMessage } from '../lib/errors.js';
import type { Logger } from '../lib/logger.js';
import type { InstanceOutcome, PassMode, PassResult, PassRunner } from '../reconcile/pass-runner.js';
import { renewalFailureLog } from '../store/directory-syncs.js';
import { DiskError } from '../store/errors.js';
import type { InstanceRecord } from '../store/state.js';
import { DriftWatcher, type DriftWatcherOptions } from './drift-watcher.js';
import { hookRunProcessTable, type ProcessTable } from './hook-processes.js';
import {
  hookHangs,
  hookPathsOwed,
  hooksLeftBehind,
  leftBehindRecords,
  owedPathList,
  owedRecords,
  restoreLeftBehind,
  restoreOwed,
  runHooks,
  type SpawnHook,
  watchRestoredLeftBehind,
} from './hooks.js';
import type { HealthReport } from './local-api.js';
import { type AgentMetrics, writeMetricsTextfile } from './metrics.js';
import { PassLogPolicy } from './pass-log.js';
import { SingleFlight } from './single-flight.js';

/** Bounds of the outage backoff: it starts at the poll interval and doubles up to this. */
const MAX_OUTAGE_BACKOFF_MS = 15 * 60 * 1000;
/** Health: a pass running longer than this (or 20 request timeouts) is stuck. */
const PASS_STALL_MS = 10 * 60 * 1000;
/** Health: a loop this late past its due time is stuck. */
const LOOP_LATE_MS = 60 * 1000;
/** Shutdown waits this long for the current pass to stop, then flushes anyway (systemd and main give 10 s). */
const STOP_BUDGET_MS = 7_000;
/** A file restored after drift is not restored again before this; the hold-off doubles up to the poll interval. */
const DRIFT_HOLD_OFF_MS = 1_000;
/** The shortest wait between passes, even when a retry is already due: never a busy loop. */
const MIN_POLL_DELAY_MS = 1_000;
/** Directories left renamed aside are tried again this long after the last try, doubling up to the cap. */
const ASIDES_RETRY_FIRST_MS = 60 * 1000;
const ASIDES_RETRY_MAX_MS = 60 * 60 * 1000;

/** What the daemon runs on; a reload swaps in the next set. `R` is the composition root's concrete runner. */
export interface AgentComponents<R extends PassRunner = PassRunner> {
  deps: Deps;
  config: AgentConfig;
  runner: R;
  metrics: AgentMetrics;
  /** Environment hooks inherit (the key is stripped by the hook runner). */
  hookEnv: NodeJS.ProcessEnv;
  /** Removes the API key from text the agent hands to local users (the local API's answers). */
  scrub: (text: string) => string;
  /** Why a hook's program may not run now (another user could change it), asked before each run. */
  vetHookProgram?: (program: string) => Promise<string | undefined>;
  /** Where hook processes are looked up and how they start: /proc and child_process.spawn unless a test stands in. */
  hookProcesses?: ProcessTable;
  hookSpawn?: SpawnHook;
  /** The drift watcher's watch cap and `fs.watch` (tests stand in for a flood at a small cap); defaults otherwise. */
  driftDirectories?: DriftWatcherOptions['directories'];
}

export interface AgentStatus {
  deviceId: string;
  running: boolean;
  lastSuccessfulSyncAt: string | null;
  lastAttemptAt: string | null;
  lastResult: { converged: boolean; reachable: boolean; mode: PassMode; error?: string } | null;
  nextPollAt: string | null;
  consecutiveFailures: number;
  managedFiles: { path: string; instanceId: string; sha256: string; status: string; message?: string }[];
  pendingReports: number;
  errors: { instanceId: string; path: string; status: string; message?: string; nextAttemptAt?: string }[];
  /** What works but not fully (a hook process left behind), while it lasts; absent when nothing is. */
  degraded?: string[];
}

export class AgentDaemon<R extends PassRunner = PassRunner> {
  #c: AgentComponents<R>;
  readonly #runner: SingleFlight<PassResult>;
  readonly #stop = new AbortController();
  #wake: (() => void) | undefined;
  #drift: DriftWatcher | undefined;
  #pendingMode: PassMode = 'full';
  /** When the next full resync is due (monotonic ms); the first pass is full anyway. */
  #nextFullAt = Number.NEGATIVE_INFINITY;
  #lastLoopAt: number | undefined;
  #lastAttemptAt: number | undefined;
  /** The runner's progress mark as last seen, and when it was first seen so (health's stall judgement). */
  #progress: { mark: string; at: number } | undefined;
  #lastSuccessAt: number | undefined;
  #nextPollAt: number | undefined;
  #lastResult: PassResult | undefined;
  #failures = 0;
  #loop: Promise<void> | undefined;
  #passAbort: AbortController | undefined;
  /** Hooks run here, one after another, outside the pass: a slow hook never holds up polls or `sync`. */
  #hooks: Promise<void> = Promise.resolve();
  /** Whether a hook run is queued and not started yet: it takes every path pending when it starts. */
  #hookRunQueued = false;
  /** The paths of the hook run in progress. */
  readonly #hookPathsRunning = new Set<string>();
  /** Paths of the run in progress written or removed again meanwhile: that run may have read the version before. */
  readonly #hookPathsRewritten = new Set<string>();
  /** Hook processes given up on and program checks not answered, across runs (a hung mount). */
  readonly #hookHangs = hookHangs();
  /** Paths owed to hooks that state.json kept from before this start: run with the first pass's hook run. */
  #owedFromBefore = false;
  /** The metrics textfile's writes, one after another (`#writeMetrics`); never rejects. */
  #metricsWrites: Promise<void> = Promise.resolve();
  /** The last failure to write the metrics textfile, while it lasts. */
  #metricsFailure: string | undefined;
  /** Whether a write's turn threw past its own handling (#metricsTurnFailure), until one ends well. */
  #metricsTurnFailed = false;
  /** Why the drift watcher could not start (an errno or message), while it cannot: tried again after each pass. */
  #driftDown: string | undefined;
  /**
   * The drift watcher's start after a reload or a pass, while it runs, and the components it is for: never
   * awaited by a pass or a reload (its walk of rootDir waits for ever on a hung mount under it), one at a time.
   */
  #driftStarting: AgentComponents<R> | undefined;
  /** When directories left renamed aside are tried again next (monotonic ms), and the wait after that try. */
  #asidesRetryAt: number | undefined;
  #asidesRetryDelayMs = ASIDES_RETRY_FIRST_MS;
  /** A retry of those in progress: never awaited by a pass (a hung mount holds it), one at a time. */
  #asidesRetrying = false;
  /** Which level each pass's summary is logged at. */
  readonly #passLog = new PassLogPolicy();

  constructor(components: AgentComponents<R>) {
    this.#c = components;
    this.#runner = new SingleFlight(() => this.#pass());
    // A hook process given up on has ended, or a hung program check answered: the paths of the runs they refused
    // are run now, and the metrics say so, without waiting for another change.
    this.#hookHangs.onCleared = () => {
      this.#c.runner.recordHookProcessesLeftBehind?.(
        leftBehindRecords(this.#hookHangs, this.#hookProcessTable()),
      );
      this.#queueHooks([], true);
      this.#c.metrics.setHooksLeftBehind(this.#hooksLeftBehind().length);
      void this.#writeMetrics(this.#c);
    };
    // A hook process given up on is in state.json from when it is found, not from the next pass's write (bound26).
    this.#hookHangs.onLeftBehind = () => this.#recordLeftBehindNow();
    // What hooks were owed when the last process ended, a crash or a power cut included (hook28).
    restoreOwed(this.#hookHangs, components.runner.state.owedHookPaths ?? []);
    this.#owedFromBefore = hookPathsOwed(this.#hookHangs);
    // A hook's process left behind before this start and still there (same pid and start time) holds it back (hook30).
    const kept = components.runner.state.hookProcessesLeftBehind ?? [];
    const restored = restoreLeftBehind(this.#hookHangs, kept, this.#hookProcessTable());
    for (const left of restored)
      this.#logger.warn(
        { hook: left.match, pid: left.pid },
        'a hook process left behind before this start is still there: the hook does not run until it ends',
      );
    if (restored.length > 0) components.metrics.setHooksLeftBehind(restored.length);
    this.#logRenewalFailures();
  }

  /**
   * The process's directory fsync ledger (one across reloads) tells a failed renewal to the running components'
   * logger: one listener, whichever reload last was applied, never one of a reload that failed.
   */
  #logRenewalFailures(): void {
    const ledger = this.#c.deps.fs.directorySyncs;
    if (ledger !== undefined)
      ledger.onRenewalFailure = renewalFailureLog(this.#c.deps.logger.child({ component: 'writer' }));
  }

  /** Derived per use, so a reloaded `log.level` applies to the daemon's own lines too. */
  get #logger(): Logger {
    return this.#c.deps.logger.child({ component: 'daemon' });
  }

  get config(): AgentConfig {
    return this.#c.config;
  }

  get components(): AgentComponents<R> {
    return this.#c;
  }

  async start(): Promise<void> {
    const { clock, logger } = this.#c.deps;
    void watchRestoredLeftBehind(this.#hookHangs, {
      clock,
      signal: this.#stop.signal,
      processes: this.#hookProcessTable(),
      logger: logger.child({ component: 'hooks' }),
    });
    await this.#startDriftWatcher();
    this.#loop = this.#runLoop();
  }

  /** Triggers a pass now (local API `sync`, drift); resolves with that pass's result. */
  syncNow(mode: PassMode = 'full'): Promise<PassResult> {
    this.#pendingMode = mode === 'full' ? 'full' : this.#pendingMode;
    return this.#runner.trigger();
  }

  /**
   * Swaps in a reloaded configuration while no pass runs (passes wait until it is done). `build` receives
   * the running components and returns the next ones, reusing what the reload does not change; when it
   * throws, the running configuration stays.
   */
  async reload(build: (current: AgentComponents<R>) => Promise<AgentComponents<R>>): Promise<void> {
    await this.#runner.exclusive(async () => {
      if (this.#stop.signal.aborted) return;
      let next: AgentComponents<R>;
      try {
        next = await build(this.#c);
      } catch (error) {
        // The build makes the next deps first (cli/compose.ts createDeps), which points the process's one fsync
        // ledger at their logger: a configuration never applied (its log.level, 'silent' perhaps). Taken back.
        this.#logRenewalFailures();
        throw error;
      }
      // Swapped before any await: a start still running for the running components then closes what it made.
      const previous = this.#drift;
      this.#drift = undefined;
      this.#driftDown = undefined;
      this.#c = next;
      // A reconciler of its own (another stateDir or rootDir) records them from now on.
      next.runner.recordOwedHookPaths?.(owedRecords(this.#hookHangs));
      next.runner.recordHookProcessesLeftBehind?.(
        leftBehindRecords(this.#hookHangs, this.#hookProcessTable()),
      );
      this.#logRenewalFailures();
      await previous?.close();
      this.#startDriftWatcherInBackground();
      this.#pendingMode = 'full';
      this.#passLog.reloaded();
      // An operator who fixed what kept a directory aside (a mount, a parent's mode) reloads: tried now.
      this.#asidesRetryDelayMs = ASIDES_RETRY_FIRST_MS;
      this.#retryAsides(true);
    });
    this.#wake?.();
  }

  /**
   * Records the hook processes left behind and writes state.json once, durably, as soon as no pass runs (a pass
   * running writes state.json at its end anyway, and two writes at once could land the older last): a crash or a
   * power cut right after a hook was given up on no longer forgets its process, and the next agent holds the hook
   * back. Not awaited by the hook run; bounded as every write of state.json is (the mount gate on stateDir); a
   * stop meanwhile writes it itself. Nothing changed since the last write: nothing written (sameAsSnapshot).
   */
  #recordLeftBehindNow(): void {
    this.#c.runner.recordHookProcessesLeftBehind?.(
      leftBehindRecords(this.#hookHangs, this.#hookProcessTable()),
    );
    this.#runner
      .exclusive(async () => {
        if (this.#stop.signal.aborted) return;
        await this.#c.runner.flushState();
      })
      .catch((error: unknown) => {
        this.#logger.warn(
          { err: error },
          'could not write state.json with the hook process left behind: the next write of state.json holds it',
        );
      });
  }

  /**
   * Stops polling, abandons the current pass between atomic steps (queued passes never start), kills running
   * hooks, and flushes state and the outbox — within `budgetMs`, so the process can exit in time.
   */
  async stop(budgetMs = STOP_BUDGET_MS): Promise<void> {
    // An AgentError: the lines that log it as the reason a report or a pass ended (at a plain `systemctl stop`)
    // carry no stack below debug (lib/logger.ts); a plain Error put one in the journal at every stop.
    const reason = new AgentError('stopping', 'agent stopping', { retryable: true });
    this.#stop.abort(reason);
    this.#passAbort?.abort(reason);
    this.#wake?.();
    const settled = Promise.all([
      this.#drift?.close(),
      this.#loop?.catch(() => undefined),
      this.#runner.idle(),
      this.#hooks,
    ]);
    const timer = new Promise<'late'>((resolve) => setTimeout(() => resolve('late'), budgetMs).unref());
    if ((await Promise.race([settled.then(() => 'done' as const), timer])) === 'late') {
      this.#logger.warn('the current pass did not stop in time: flushing state as it is');
    }
    // Paths owed to hooks held back are recorded per hook after each hook run (hook28): again now, for a run the stop
    // cut short. A runner that keeps no such record has them pending again instead (every matching hook reruns).
    if (this.#c.runner.recordOwedHookPaths !== undefined)
      this.#c.runner.recordOwedHookPaths(owedRecords(this.#hookHangs));
    else {
      const owed = owedPathList(this.#hookHangs);
      if (owed.length > 0) this.#c.runner.keepHookPaths?.(owed);
    }
    this.#c.runner.recordHookProcessesLeftBehind?.(
      leftBehindRecords(this.#hookHangs, this.#hookProcessTable()),
    );
    await this.#c.runner.flushState().catch((error: unknown) => {
      this.#logger.error({ err: error }, 'could not flush state at shutdown');
    });
    await this.#c.runner.close();
  }

  /**
   * Healthy while the loop makes progress, whether or not the service answers: a cloud outage must not make
   * a fleet restart its agents. Stalled means a pass that runs far past every timeout, or a loop that did not
   * wake up when it was due.
   */
  health(): HealthReport {
    const now = this.#c.deps.clock.monotonic();
    const lastLoopAt = this.#wallTime(this.#lastLoopAt);
    if (this.#lastLoopAt === undefined) return { healthy: true, reason: 'starting', lastLoopAt };
    const passBudgetMs = Math.max(PASS_STALL_MS, this.#c.config.server.timeoutSeconds * 1000 * 20);
    if (
      this.#runner.busy &&
      this.#lastAttemptAt !== undefined &&
      now - this.#progressSeenAt(now) > passBudgetMs
    ) {
      return { healthy: false, reason: 'a reconcile pass has been running far too long', lastLoopAt };
    }
    if (!this.#runner.busy && this.#nextPollAt !== undefined && now - this.#nextPollAt > LOOP_LATE_MS) {
      return { healthy: false, reason: 'the poll loop did not wake up when due', lastLoopAt };
    }
    const degraded = this.#degraded();
    return degraded.length === 0 ? { healthy: true, lastLoopAt } : { healthy: true, degraded, lastLoopAt };
  }

  /**
   * When the running pass was last seen to make progress (a report queued or delivered: a file written or removed,
   * a status told), as health checks see it: a pass on a slow disk (fsyncs of seconds on a worn SD card) that keeps
   * writing is not stalled however long it runs, and one that stops is told stalled within the budget after the
   * first check that finds it still (adv34).
   */
  #progressSeenAt(now: number): number {
    const mark = this.#progressMark();
    if (this.#progress?.mark !== mark) this.#progress = { mark, at: now };
    return this.#progress.at;
  }

  #progressMark(): string {
    return `${this.#c.runner.progress ?? ''}/${this.#c.runner.pendingReports}`;
  }

  /** Where hook processes are looked up: the injected table, or /proc as runHooks reads it (one for the daemon). */
  #hookProcessTable(): ProcessTable {
    if (this.#c.hookProcesses !== undefined) return this.#c.hookProcesses;
    this.#hookHangs.table ??= hookRunProcessTable();
    return this.#hookHangs.table;
  }

  /** The hook processes given up on after SIGKILL that are still there (uninterruptible sleep on a hung mount). */
  #hooksLeftBehind(): { hook: string; pid: number; command: string }[] {
    return hooksLeftBehind(this.#hookHangs, this.#c.hookProcesses);
  }

  /**
   * What works but not fully: still healthy (a restart would not end a process SIGKILL cannot end, so a watchdog
   * must not restart on it), said in health and status while it lasts.
   */
  #degraded(): string[] {
    return [
      ...this.#hooksLeftBehind().map(
        (left) =>
          `hook ${left.hook}: its process (pid ${left.pid}, ${left.command}) did not end after SIGKILL and is still there (a hung mount?); the hook does not run until it ends`,
      ),
      // Writes and removals under it wait, retrying, while the rest of rootDir goes on (fix34).
      ...(this.#c.runner.mountsGoneBelow?.() ?? []).map((gone) => `${gone}: the files under it wait`),
    ];
  }

  status(): AgentStatus {
    const state = this.#c.runner.state;
    const managedFiles = [...state.files.entries()].map(([path, file]) => {
      const record = state.instances.get(file.instanceId);
      const status =
        record === undefined ? 'deployed' : record.error === 'none' ? record.activity : record.error;
      return {
        path,
        instanceId: file.instanceId,
        sha256: file.sha256,
        status,
        ...(record?.message === undefined ? {} : { message: record.message }),
      };
    });
    const errors = [...state.instances.entries()]
      .filter(([, record]) => record.error !== 'none')
      .map(([instanceId, record]) => ({
        instanceId,
        path: record.relativePath,
        status: record.error,
        ...(record.message === undefined ? {} : { message: record.message }),
        ...(record.nextAttemptAt === undefined ? {} : { nextAttemptAt: record.nextAttemptAt }),
      }));
    const last = this.#lastResult;
    const degraded = this.#degraded();
    return {
      deviceId: this.#c.config.deviceId,
      running: !this.#stop.signal.aborted,
      lastSuccessfulSyncAt: this.#wallTime(this.#lastSuccessAt),
      lastAttemptAt: this.#wallTime(this.#lastAttemptAt),
      lastResult:
        last === undefined
          ? null
          : {
              converged: last.converged,
              reachable: last.reachable,
              mode: last.mode,
              ...(last.error === undefined ? {} : { error: last.error.message }),
            },
      nextPollAt: this.#wallTime(this.#nextPollAt),
      consecutiveFailures: this.#failures,
      managedFiles,
      pendingReports: this.#c.runner.pendingReports,
      errors,
      ...(degraded.length === 0 ? {} : { degraded }),
    };
  }

  async #runLoop(): Promise<void> {
    const { clock, random } = this.#c.deps;
    // A fleet that boots together must not poll together: the very first wait is jittered too.
    await this.#sleep(
      random() * this.#c.config.poll.jitterRatio * this.#c.config.poll.intervalSeconds * 1000,
    );
    while (!this.#stop.signal.aborted) {
      this.#lastLoopAt = clock.monotonic();
      const result = await this.#runner.trigger().catch((error: unknown) => {
        if (!this.#stop.signal.aborted) this.#logger.error({ err: error }, 'reconcile pass crashed');
        return undefined;
      });
      if (this.#stop.signal.aborted) break;
      this.#lastLoopAt = clock.monotonic();
      const delay = this.#nextDelayMs(result);
      this.#releaseMemory(delay);
      await this.#sleep(delay);
    }
  }

  #nextDelayMs(result: PassResult | undefined): number {
    const { clock, random } = this.#c.deps;
    const { intervalSeconds, jitterRatio } = this.#c.config.poll;
    const intervalMs = intervalSeconds * 1000;
    let delay: number;
    if (result === undefined || !result.reachable) {
      // Full jitter over an exponential ceiling, so a fleet recovering from an outage spreads out; never
      // sooner than a normal poll would be.
      // A certificate refused by its dates is the device's clock (booted at 1970, before NTP): no outage's backoff,
      // which reached 15 minutes while the clock was wrong and kept the device waiting that long after NTP set it.
      const maxMs = result?.error?.certificateClock === true ? intervalMs : MAX_OUTAGE_BACKOFF_MS;
      const backoff = { baseMs: intervalMs, maxMs };
      delay = Math.max(intervalMs * (1 - jitterRatio), fullJitterMs(backoff, this.#failures + 1, random));
      delay = honourRetryAfter(delay, result?.error?.retryAfterMs);
    } else {
      delay = intervalMs * (1 + jitterRatio * (2 * random() - 1));
      const nextRetry = this.#c.runner.nextRetryAt();
      if (nextRetry !== undefined) {
        const untilRetry = Math.max(MIN_POLL_DELAY_MS, nextRetry - clock.monotonic());
        // A retry due within the poll's own jitter window is the next poll: drawn a little before it (a device
        // condition's 30 s floor against a poll drawn at 24 s), the poll ran an incremental pass and the retry a
        // full one seconds later. Never later than the latest poll the jitter draws; a retry further off waits.
        delay = untilRetry <= intervalMs * (1 + jitterRatio) ? untilRetry : Math.min(delay, untilRetry);
      }
    }
    this.#nextPollAt = clock.monotonic() + delay;
    return delay;
  }

  /** Idle for `waitMs` until the next poll: memory the pass grew goes back to the system (deps.releaseMemory). */
  #releaseMemory(waitMs: number): void {
    try {
      this.#c.deps.releaseMemory?.(waitMs);
    } catch (error) {
      this.#logger.warn({ err: error }, 'could not release memory after the pass');
    }
  }

  /** Sleeps on the injected clock; `#wake` (sync, reload, stop) ends the sleep early. */
  async #sleep(ms: number): Promise<void> {
    const wake = new AbortController();
    this.#wake = () => wake.abort();
    try {
      await this.#c.deps.clock.sleep(Math.max(0, ms), wake.signal);
    } catch {
      // Woken early: the loop re-checks whether to stop or to run a pass.
    } finally {
      this.#wake = undefined;
    }
  }

  async #pass(): Promise<PassResult> {
    // A pass queued behind the one that was running when the agent was told to stop never starts.
    this.#stop.signal.throwIfAborted();
    const c = this.#c;
    const { clock } = c.deps;
    const now = clock.monotonic();
    const fullDue =
      this.#pendingMode === 'full' ||
      now >= this.#nextFullAt ||
      c.runner.hasDueRetries() ||
      this.#failures > 0;
    const mode: PassMode = fullDue ? 'full' : 'incremental';
    this.#pendingMode = 'incremental';
    this.#lastAttemptAt = now;
    this.#progress = { mark: this.#progressMark(), at: now };
    const abort = new AbortController();
    this.#passAbort = abort;
    let result: PassResult;
    try {
      result = await c.runner.runPass({ mode, signal: abort.signal });
    } finally {
      this.#passAbort = undefined;
    }
    this.#stop.signal.throwIfAborted();
    this.#lastResult = result;
    if (result.reachable) {
      this.#failures = 0;
      this.#lastSuccessAt = clock.monotonic();
      if (mode === 'full')
        this.#nextFullAt = now + fullResyncDelayMs(c.config.poll.fullResyncSeconds, c.deps.random);
    } else {
      this.#failures += 1;
      this.#pendingMode = 'full';
    }
    this.#logPass(result);
    this.#retryAsides(false);
    if (this.#drift === undefined && this.#driftDown !== undefined) this.#startDriftWatcherInBackground();
    else await this.#drift?.managedFilesChanged();
    await this.#afterPass(result);
    return result;
  }

  async #afterPass(result: PassResult): Promise<void> {
    const c = this.#c;
    const drifted = result.outcomes.filter(
      (outcome) => outcome.action === 'written' && outcome.reason === 'drift',
    );
    if (drifted.length > 0) c.metrics.recordDriftRepair(drifted.length);
    if (c.config.hooks.length > 0) this.#queueHooks(result.outcomes);
    c.metrics.recordPass({
      durationMs: result.durationMs,
      converged: result.converged,
      reachable: result.reachable,
      finishedAtMs: c.deps.clock.now(),
      managedFiles: c.runner.state.files.size,
      instancesByStatus: countInstanceStatuses(c.runner.state.instances),
      retries: result.outcomes.filter((outcome) => outcome.action === 'retrying').length,
      pendingReports: result.reports.pending,
    });
    await this.#writeMetrics(c);
  }

  /**
   * Queues one hook run, unless one is queued already: a run takes every changed path pending when it starts, so
   * changes that arrive while a hook runs coalesce into one run after it. The paths live in state.json until their
   * hooks ran, so a run cut short by a stop or a crash happens after the next start.
   */
  #queueHooks(outcomes: readonly InstanceOutcome[], owedDue = false): void {
    // A path of the run in progress is pending until that run ends: run again only when this pass changed it.
    for (const outcome of outcomes) {
      if (
        (outcome.action === 'written' || outcome.action === 'removed') &&
        this.#hookPathsRunning.has(outcome.path)
      )
        this.#hookPathsRewritten.add(outcome.path);
    }
    if (this.#hookRunQueued) return;
    const due =
      ((owedDue || this.#owedFromBefore) && hookPathsOwed(this.#hookHangs)) ||
      this.#c.runner
        .pendingHookPaths()
        .some((path) => !this.#hookPathsRunning.has(path) || this.#hookPathsRewritten.has(path));
    if (!due) return;
    this.#hookRunQueued = true;
    this.#hooks = this.#hooks.then(async () => {
      this.#hookRunQueued = false;
      this.#owedFromBefore = false;
      if (this.#stop.signal.aborted) return;
      // The components of now: a reload since the run was queued applies (its hooks, its rootDir).
      const c = this.#c;
      const changed = c.runner.pendingHookPaths();
      // Paths owed by runs not started (a hook process left behind, a hung check) run even when nothing changed.
      if ((changed.length === 0 && !hookPathsOwed(this.#hookHangs)) || c.config.hooks.length === 0) return;
      this.#hookPathsRewritten.clear();
      for (const path of changed) this.#hookPathsRunning.add(path);
      const runs = await runHooks(c.config.hooks, changed, {
        cwd: c.config.rootDir,
        env: c.hookEnv,
        logger: c.deps.logger.child({ component: 'hooks' }),
        signal: this.#stop.signal,
        hangs: this.#hookHangs,
        ...(c.hookProcesses === undefined ? {} : { processes: c.hookProcesses }),
        ...(c.hookSpawn === undefined ? {} : { spawn: c.hookSpawn }),
        ...(c.vetHookProgram === undefined ? {} : { vetProgram: c.vetHookProgram }),
      });
      // The hook runner logs each failure with its exit code and stderr tail; here it is only counted.
      for (const run of runs) c.metrics.recordHookRun(run);
      c.metrics.setHooksLeftBehind(this.#hooksLeftBehind().length);
      this.#hookPathsRunning.clear();
      // In the same turn as the settling below: any state.json written holds each path pending or owed.
      c.runner.recordOwedHookPaths?.(owedRecords(this.#hookHangs));
      c.runner.recordHookProcessesLeftBehind?.(leftBehindRecords(this.#hookHangs, this.#hookProcessTable()));
      if (!this.#stop.signal.aborted) {
        // One written again while this run went on stays pending for the run queued after it.
        c.runner.settleHookPaths(changed.filter((path) => !this.#hookPathsRewritten.has(path)));
      }
      this.#hookPathsRewritten.clear();
      await this.#writeMetrics(c);
    });
    // Held settled, as the metrics writes are: a run that threw (its runner's state) skipped every later run and
    // made stop() throw before it flushed state (fix32). Its paths stay pending: the next pass's run takes them.
    this.#hooks = this.#hooks.catch((error: unknown) => {
      this.#hookPathsRunning.clear();
      this.#hookPathsRewritten.clear();
      try {
        this.#logger.error({ err: error }, 'hook run failed: its paths stay pending for the next run');
      } catch {
        // The logger is what threw: nothing left to tell it with.
      }
    });
  }

  /**
   * Writes the textfile. A failure that lasts (its directory gone, a symlink or FIFO put at its path, a full
   * disk) is warned about once, then at debug until it changes or the file is written again: it logged a warning
   * with its stack after every pass and every hook run, thousands of lines a day.
   */
  async #writeMetrics(c: AgentComponents<R>): Promise<void> {
    // One at a time, each rendered when its turn comes: a pass's write and a hook run's used to overlap, and one
    // rendered first but renamed last left the older text (its counters going backwards: a reset to Prometheus).
    // The chain holds each turn settled: a turn that rejected (its logger threw) skipped every later write for the
    // life of the process, silently (fix32).
    const turn = this.#metricsWrites
      .then(() => this.#writeMetricsNow(c))
      .then(
        () => {
          this.#metricsTurnFailed = false;
        },
        (error: unknown) => this.#metricsTurnFailure(error),
      );
    this.#metricsWrites = turn;
    return turn;
  }

  /** A write's turn that threw past its own handling: told once until a turn ends well again; never throws. */
  #metricsTurnFailure(error: unknown): void {
    if (this.#metricsTurnFailed) return;
    this.#metricsTurnFailed = true;
    try {
      this.#logger.error(
        { err: error },
        'metrics textfile write failed (told again only after one succeeds)',
      );
    } catch {
      // The logger is what threw: nothing left to tell it with.
    }
  }

  async #writeMetricsNow(c: AgentComponents<R>): Promise<void> {
    const textfile = c.config.metrics.textfile;
    if (textfile === undefined) return;
    try {
      await writeMetricsTextfile(c.deps.fs, textfile, await c.metrics.render());
      if (this.#metricsFailure !== undefined)
        this.#logger.info({ textfile }, 'metrics textfile written again');
      this.#metricsFailure = undefined;
    } catch (error) {
      // By kind (an errno, else the error's code), not by message: a message may name a fresh temp file each time.
      const errno = error instanceof DiskError ? error.errno : undefined;
      const failure = `${textfile}: ${errno ?? errnoCode(error) ?? errorMessage(error)}`;
      if (failure === this.#metricsFailure) {
        this.#logger.debug({ err: error, textfile }, 'could not write the metrics textfile (still)');
        return;
      }
      this.#metricsFailure = failure;
      this.#logger.warn(
        { err: error, textfile },
        'could not write the metrics textfile (told again only once it changes or is written)',
      );
    }
  }

  #logPass(result: PassResult): void {
    const counts = countByStatus(result.outcomes);
    const fields = {
      mode: result.mode,
      converged: result.converged,
      reachable: result.reachable,
      durationMs: result.durationMs,
      counts,
      pendingReports: result.reports.pending,
      ...(result.error === undefined ? {} : { error: result.error.message }),
    };
    // Idle passes at debug, with one at info an hour (daemon/pass-log.ts): the journal is not a poll counter.
    const { level, quietPasses } = this.#passLog.next(result, this.#c.deps.clock.monotonic());
    const logged = level === 'debug' || quietPasses === 0 ? fields : { ...fields, quietPasses };
    if (level === 'warn') this.#logger.warn(logged, 'pass could not reach the service');
    else this.#logger[level](logged, 'pass finished');
  }

  /**
   * Tries again, in the background, to put back the directories a renewal left renamed aside that were not put
   * back (store/directory-asides.ts: the start's rename failed, their file system was not mounted, something
   * else was at the name): `now`, or once due, the wait doubling from 1 min to 1 h while any remain. Nothing
   * awaits it: a try that hangs on a mount holds neither a pass nor a reload, and no second try starts meanwhile.
   */
  #retryAsides(now: boolean): void {
    const asides = this.#c.deps.fs.directorySyncs?.asides;
    const { clock } = this.#c.deps;
    if (asides === undefined || asides.pending === 0) {
      this.#asidesRetryAt = undefined;
      this.#asidesRetryDelayMs = ASIDES_RETRY_FIRST_MS;
      return;
    }
    if (!now) {
      this.#asidesRetryAt ??= clock.monotonic() + this.#asidesRetryDelayMs;
      if (clock.monotonic() < this.#asidesRetryAt) return;
    }
    if (this.#asidesRetrying) return;
    this.#asidesRetrying = true;
    void asides.retry().then((remaining) => {
      this.#asidesRetrying = false;
      if (remaining === 0) {
        this.#asidesRetryAt = undefined;
        this.#asidesRetryDelayMs = ASIDES_RETRY_FIRST_MS;
        return;
      }
      this.#asidesRetryAt = this.#c.deps.clock.monotonic() + this.#asidesRetryDelayMs;
      this.#asidesRetryDelayMs = Math.min(this.#asidesRetryDelayMs * 2, ASIDES_RETRY_MAX_MS);
      this.#logger.debug(
        { remaining, nextTryInMs: this.#asidesRetryAt - this.#c.deps.clock.monotonic() },
        'directories renamed aside not put back yet',
      );
    });
  }

  /** Starts the drift watcher without waiting for it, unless a start for the running components is under way. */
  #startDriftWatcherInBackground(): void {
    const c = this.#c;
    if (this.#driftStarting === c) return;
    this.#driftStarting = c;
    this.#startDriftWatcher()
      .catch((error: unknown) => this.#logger.error({ err: error }, 'could not start the drift watcher'))
      .finally(() => {
        if (this.#driftStarting === c) this.#driftStarting = undefined;
      });
  }

  async #startDriftWatcher(): Promise<void> {
    const c = this.#c;
    if (c.config.drift === 'off') return;
    const policy = c.config.drift;
    const watcher = new DriftWatcher({
      fs: c.deps.fs,
      rootDir: c.config.rootDir,
      policy,
      logger: c.deps.logger.child({ component: 'drift' }),
      managedFiles: () => this.#c.runner.state.files,
      passes: this.#runner,
      // Files on a mount that may hang get no watch: judged every poll interval instead.
      pollMs: c.config.poll.intervalSeconds * 1000,
      ...(c.driftDirectories === undefined ? {} : { directories: c.driftDirectories }),
      // Restores come from the content cache, not a pass: a local drift fight costs the service nothing.
      restore: {
        stateDir: c.config.stateDir,
        dirMode: c.config.files.dirMode,
        clock: c.deps.clock,
        minHoldOffMs: DRIFT_HOLD_OFF_MS,
        maxHoldOffMs: c.config.poll.intervalSeconds * 1000,
        onRestored: (paths) => {
          this.#c.metrics.recordDriftDetected(paths.length);
          this.#c.metrics.recordDriftRepair(paths.length);
        },
        fileMeta: (relative) => this.#c.runner.fileMeta?.(relative),
        rootMountsGone: async () => (await this.#c.runner.rootMountJudge?.()) ?? (() => false),
      },
      onDrift: (paths) => {
        this.#c.metrics.recordDriftDetected(paths.length);
        if (policy === 'restore') {
          this.syncNow('full').catch((error: unknown) => {
            if (this.#stop.signal.aborted) return;
            this.#logger.error({ err: errorMessage(error) }, 'drift repair pass failed');
          });
        }
      },
    });
    try {
      await watcher.start();
    } catch (error) {
      // Stopped or reloaded meanwhile: the failure is no longer the running watcher's.
      if (this.#stop.signal.aborted || this.#c !== c) return;
      // Inotify's instances or watches used up by other processes (EMFILE, ENOSPC), descriptors short, rootDir
      // not there yet: all can clear, so the watcher is tried again after every pass instead of staying off.
      const why = errnoCode(error) ?? errorMessage(error);
      const fields = { err: error };
      const message =
        'could not watch the root directory: drift is repaired by full passes only, tried again after each pass';
      if (why === this.#driftDown) this.#logger.debug(fields, message);
      else this.#logger.error(fields, message);
      this.#driftDown = why;
      return;
    }
    // Stopped, or reloaded meanwhile (the reload started a watcher of its own): this one is not wanted.
    if (this.#stop.signal.aborted || this.#c !== c || this.#drift !== undefined) {
      await watcher.close();
      return;
    }
    this.#drift = watcher;
    if (this.#driftDown !== undefined) {
      this.#driftDown = undefined;
      this.#logger.warn(
        'watching the root directory again: drift repair is on; every managed file is judged once',
      );
      // A change made while nothing watched is seen by no event: every managed file is judged now.
      watcher.noticeChange(c.config.rootDir);
    }
  }

  #wallTime(monotonicMs: number | undefined): string | null {
    if (monotonicMs === undefined) return null;
    const { clock } = this.#c.deps;
    return new Date(clock.now() - (clock.monotonic() - monotonicMs)).toISOString();
  }
}

/**
 * The wait from one full resync to the next: uniform between 0.5 and 1.5 × `fullResyncSeconds` (the mean is
 * the setting). A fleet that boots or recovers together runs its first full pass together; drawing each next
 * deadline over a whole period spreads the following ones evenly instead of keeping them in step.
 */
function fullResyncDelayMs(fullResyncSeconds: number, random: () => number): number {
  return fullResyncSeconds * 1000 * (0.5 + random());
}

/** The device's instances by merged status as the agent last knew them (an incremental pass sees few). */
function countInstanceStatuses(records: ReadonlyMap<string, InstanceRecord>): Record<string, number> {
  const counts: Record<string, number> = {};
  for (const record of records.values()) {
    const status = record.error === 'none' ? record.activity : record.error;
    counts[status] = (counts[status] ?? 0) + 1;
  }
  return counts;
}

function countByStatus(outcomes: readonly InstanceOutcome[]): Record<string, number> {
  const counts: Record<string, number> = {};
  for (const outcome of outcomes) counts[outcome.action] = (counts[outcome.action] ?? 0) + 1;
  return counts;
}
