// What a reconcile pass takes and returns, and the `PassRunner` the daemon and the CLI drive it through.
import type { ErrorCode } from '../lib/errors.js';
import type { HookProcessLeftBehind, LocalState, OwedHookPaths } from '../store/state.js';
import type { Step } from './plan.js';

export interface RetryPolicy {
  maxAttempts: number;
  baseDelaySeconds: number;
  maxDelaySeconds: number;
  /**
   * The daemon's poll interval: a write or removal a device condition failed (a full, read-only or failing disk,
   * something in the way) is not tried again sooner (nor sooner than DEVICE_WAIT_MIN_SECONDS), whatever
   * `baseDelaySeconds` says, since each due retry makes the next pass a full listing. Absent for `--once`.
   */
  pollIntervalSeconds?: number;
}

export interface ReconcilerSettings {
  /**
   * Whether a text holds the agent's API key (verbatim or in a spelling the log scrubber knows): an instance whose
   * `relative_filepath` does is refused as invalid (pass.ts `refuseKeyPaths`). Absent: none is.
   */
  holdsApiKey?: (text: string) => boolean;
  deviceId: string;
  rootDir: string;
  stateDir: string;
  fileMode: number;
  dirMode: number;
  retry: RetryPolicy;
  /** In-pass request retries: `--once` has no outer loop, the daemon's poll loop is its own retry layer. */
  requestRetries: number;
  requestRetryBaseMs?: number;
  /** The client's response cap (server.maxResponseBytes): the pull's byte budget is at least twice it. */
  maxResponseBytes?: number;
  /** File bytes a pass holds in memory before it sets the next ones aside (spill.ts; default 16 MiB). */
  inMemoryFileBytes?: number;
  /** Steps per batch of plain writes (apply.ts; default BATCH_STEPS): tests pipeline reports with a few files. */
  batchSteps?: number;
  /**
   * Default true: every file written is copied into the content cache for the drift watcher's local restores.
   * False for `--once`, which runs no watcher: a later daemon finds no entry and repairs such a file with a pass.
   */
  cacheWrittenFiles?: boolean;
  /** False under the `report`/`off` drift policies: full passes leave locally edited managed files alone. */
  restoreDrift?: boolean;
  /** Keep the changed paths for hooks, durably, until `settleHookPaths` (the daemon with hooks). */
  trackHookPaths?: boolean;
  /** files.rules, resolved (config/file-rules.ts): the mode and group per path; absent: fileMode. */
  fileMeta?: (path: string) => { mode: number; gid: number };
}

/**
 * `full` asks for every instance targeting `deployed` and checks their bytes on disk; `incremental` asks only
 * for what changed (queued instances and pending removals), which is all a steady-state poll needs.
 */
export type PassMode = 'full' | 'incremental';

export interface PassOptions {
  mode: PassMode;
  dryRun?: boolean;
  signal?: AbortSignal;
}

export interface PassError {
  code: ErrorCode;
  message: string;
  retryable: boolean;
  /** The service's Retry-After, when it sent one. */
  retryAfterMs?: number;
  /** The HTTP status, when the service answered with an error status. */
  status?: number;
  /** TLS refused the service's certificate by its dates (api/errors.ts isCertificateClockError): the clock's fault. */
  certificateClock?: true;
}

/** What happened to one instance in a pass: the summary, the exit code and the tests all read this. */
export type InstanceAction =
  | 'written'
  | 'unchanged'
  | 'removed'
  | 'archived'
  | 'reported'
  | 'failed'
  | 'retrying'
  | 'waiting'
  | 'refused'
  | 'replaced'
  | 'untouched';

export interface InstanceOutcome {
  instanceId: string;
  path: string;
  action: InstanceAction;
  /** Whether this instance is where the service wants it once queued reports are delivered. */
  converged: boolean;
  message?: string;
  /** Set on writes: why the file was (re)written. */
  reason?: string;
}

export interface PassResult {
  mode: PassMode;
  dryRun: boolean;
  startedAt: string;
  durationMs: number;
  /** False when the instances could not be pulled: nothing on disk was touched. */
  reachable: boolean;
  error?: PassError;
  steps: Step[];
  outcomes: InstanceOutcome[];
  reports: { delivered: number; rejected: number; pending: number; deliveryError?: PassError };
  sweptTempFiles: string[];
  /** Set when state.json or the outbox could not be written after the files were applied. */
  persistError?: PassError;
  /** Every instance where the service wants it and every report delivered. */
  converged: boolean;
}

/**
 * What the daemon (and `--once`) needs from the reconciler: run one pass at a time, and read what the agent
 * knows between passes. Tests pass a typed fake of this.
 */
export interface PassRunner {
  runPass(options: PassOptions): Promise<PassResult>;
  /** What the agent recorded: managed files, per-instance records, cooldowns. */
  readonly state: Readonly<LocalState>;
  /** Status reports queued and not yet delivered. */
  readonly pendingReports: number;
  /**
   * A count that changes as passes record what they do (every report queued: a file written or removed, a
   * failure): the daemon's health takes a change as progress of the running pass (adv34). Absent: pendingReports.
   */
  readonly progress?: number;
  /** Whether some instance waits for a cooldown that has now elapsed (the daemon then runs a full pass). */
  hasDueRetries(): boolean;
  /** The earliest monotonic time at which a cooling-down instance may be retried, or held reports may go. */
  nextRetryAt(): number | undefined;
  /** Paths changed since their hooks last ran (kept across restarts). */
  pendingHookPaths(): string[];
  /** The hooks for `paths` ran (or failed and were logged): forget them; persisted with the next save. */
  settleHookPaths(paths: readonly string[]): void;
  /**
   * `paths` are pending for hooks again (settled before, owed to a hook held back: the daemon's stop hands them
   * back so the first run after a restart has them); persisted with the next save.
   */
  keepHookPaths?(paths: readonly string[]): void;
  /**
   * Each hook's paths owed by its runs not started, as they are now (replacing what was recorded): persisted with
   * the next save, so a crash or a power cut keeps them (state.ts `OwedHookPaths`).
   */
  recordOwedHookPaths?(owed: readonly OwedHookPaths[]): void;
  /**
   * The hook processes left behind, as they are now (replacing what was recorded): persisted with the next save,
   * so an agent started after a crash still holds their hooks back (state.ts `HookProcessLeftBehind`).
   */
  recordHookProcessesLeftBehind?(left: readonly HookProcessLeftBehind[]): void;
  /**
   * The mode and group `files.rules` give `path`, when rules apply (a local restore must put a file back with
   * the group a pass gives it).
   */
  fileMeta?(path: string): { mode: number; gid: number } | undefined;
  /**
   * Whether rootDir's mount went away under this process (store/root-mount.ts), or one below it holding `relative`
   * (any, without it): nothing may be written there.
   */
  rootMountGone?(relative?: string): Promise<boolean>;
  /** rootDir's mounts checked once, then `rootMountGone` of each path without another check (a batch: fix36). */
  rootMountJudge?(): Promise<(relative: string) => boolean>;
  /** The mounts below rootDir the last check found gone, each as its condition's message (health's `degraded`). */
  mountsGoneBelow?(): readonly string[];
  /** Makes state and queued reports durable (after a pass and at shutdown). */
  flushState(): Promise<void>;
  /**
   * Releases the state directory; the runner must not be used afterwards. `clean`: this process wrote nothing
   * into rootDir (StateDir.close: the next start may then skip rootDir's sweep).
   */
  close(options?: { clean?: boolean }): Promise<void>;
}
