// One reconcile pass — pull → plan → apply → report — over the state the Reconciler keeps between passes.

import type { ServiceClient } from '../api/client.js';
import { HttpStatusError, NetworkError, TimeoutError } from '../api/errors.js';
import { withRequestRetry } from '../api/retry.js';
import type { ConfigInstance, ConfigInstanceFilters } from '../api/schemas.js';
import type { Deps } from '../lib/deps.js';
import { errorMessage, isAgentError } from '../lib/errors.js';
import type { Logger } from '../lib/logger.js';
import { ContentCache } from '../store/content-cache.js';
import { readRegularFile, sweepTempFiles } from '../store/durable-writer.js';
import { DiskError, PathRejectedError } from '../store/errors.js';
import { acquireStateLock, type StateLock } from '../store/lock.js';
import { type DeliveryVerdict, StatusOutbox } from '../store/outbox.js';
import { emptyState, type LocalState, loadLocalState, saveLocalState } from '../store/state.js';
import { applySteps } from './apply.js';
import type {
  PassError,
  PassMode,
  PassOptions,
  PassResult,
  PassRunner,
  ReconcilerSettings,
} from './pass-runner.js';
import { type DiskObservation, planSteps } from './plan.js';

const PAGE_LIMIT = 100;

export class Reconciler implements PassRunner {
  #deps: Deps;
  #settings: ReconcilerSettings;
  #client: ServiceClient;
  #logger: Logger;
  readonly #state: LocalState;
  readonly #outbox: StatusOutbox;
  readonly #cache: ContentCache;
  readonly #readOnly: boolean;
  #sweptTempFiles: string[];
  /** The `updated_at` of each instance as last pulled (or as our last report left it). */
  readonly #lastSeenUpdatedAt = new Map<string, string>();
  #lock: StateLock | undefined;

  private constructor(
    deps: Deps,
    settings: ReconcilerSettings,
    client: ServiceClient,
    parts: {
      state: LocalState;
      outbox: StatusOutbox;
      readOnly: boolean;
      swept: string[];
      lock: StateLock | undefined;
    },
  ) {
    this.#deps = deps;
    this.#settings = settings;
    this.#client = client;
    this.#logger = deps.logger.child({ component: 'reconcile' });
    this.#state = parts.state;
    this.#outbox = parts.outbox;
    this.#cache = new ContentCache(deps.fs, settings.stateDir);
    this.#readOnly = parts.readOnly;
    this.#sweptTempFiles = parts.swept;
    this.#lock = parts.lock;
  }

  /**
   * Loads local state and the outbox. Unless `readOnly` (dry runs), it first sweeps temp files a crash
   * left behind: the directories must already exist.
   */
  static async open(
    deps: Deps,
    settings: ReconcilerSettings,
    client: ServiceClient,
    options: { readOnly?: boolean } = {},
  ): Promise<Reconciler> {
    const readOnly = options.readOnly ?? false;
    const logger = deps.logger.child({ component: 'reconcile' });
    let swept: string[] = [];
    let lock: StateLock | undefined;
    if (!readOnly) {
      // Before the sweep: the temp files of another agent's write in progress are not leftovers.
      lock = await acquireStateLock(deps.fs, settings.stateDir);
      try {
        swept = await sweepTempFiles(deps.fs, settings.rootDir);
        const sweptState = await sweepTempFiles(deps.fs, settings.stateDir);
        if (sweptState.length > 0) {
          logger.warn(
            { stateFiles: sweptState },
            'removed temp files of the state directory left by a crash',
          );
        }
      } catch (error) {
        await lock.release();
        throw error;
      }
      if (swept.length > 0) logger.warn({ files: swept }, 'removed temp files left by an interrupted write');
    }
    try {
      const { state, outcome } = await loadLocalState(
        deps.fs,
        settings.stateDir,
        settings.deviceId,
        logger,
        settings.rootDir,
      ).catch((error: unknown) => {
        if (!readOnly) throw error;
        return { state: emptyState(settings.deviceId, settings.rootDir), outcome: 'missing' as const };
      });
      logger.debug({ outcome, managedFiles: state.files.size }, 'local state loaded');
      const outbox = readOnly
        ? StatusOutbox.ephemeral(deps.fs, settings.stateDir, logger)
        : await StatusOutbox.open(deps.fs, settings.stateDir, logger);
      return new Reconciler(deps, settings, client, { state, outbox, readOnly, swept, lock });
    } catch (error) {
      await lock?.release();
      throw error;
    }
  }

  /** Releases the state directory for another agent; the reconciler must not be used afterwards. */
  async close(): Promise<void> {
    await this.#lock?.release();
    this.#lock = undefined;
  }

  /**
   * Takes a reloaded configuration without reopening: keeps in-memory cooldowns and the outbox. Returns false
   * when the device, root or state directory changed: those need a reconciler of their own.
   */
  reconfigure(deps: Deps, settings: ReconcilerSettings, client: ServiceClient): boolean {
    const current = this.#settings;
    if (
      settings.deviceId !== current.deviceId ||
      settings.rootDir !== current.rootDir ||
      settings.stateDir !== current.stateDir
    ) {
      return false;
    }
    this.#deps = deps;
    this.#logger = deps.logger.child({ component: 'reconcile' });
    this.#settings = settings;
    this.#client = client;
    return true;
  }

  get state(): Readonly<LocalState> {
    return this.#state;
  }

  /** Paths changed since their hooks last ran (kept across restarts in state.json). */
  pendingHookPaths(): string[] {
    return [...this.#state.pendingHookPaths];
  }

  /**
   * The hooks for `paths` ran (or failed and were logged): forget them. Persisted with the next pass or at
   * shutdown — never concurrently with a pass's own save — so hooks run at least once, rarely twice.
   */
  settleHookPaths(paths: readonly string[]): void {
    for (const path of paths) this.#state.pendingHookPaths.delete(path);
  }

  get pendingReports(): number {
    return this.#outbox.size;
  }

  /** Whether some instance waits for a cooldown that has now elapsed (the daemon then runs a full pass). */
  hasDueRetries(): boolean {
    const now = this.#deps.clock.monotonic();
    for (const until of this.#state.cooldowns.values()) if (until <= now) return true;
    return false;
  }

  /** The earliest monotonic time at which a cooling-down instance may be retried. */
  nextRetryAt(): number | undefined {
    let earliest: number | undefined;
    for (const until of this.#state.cooldowns.values())
      if (earliest === undefined || until < earliest) earliest = until;
    return earliest;
  }

  async runPass(options: PassOptions): Promise<PassResult> {
    const { clock } = this.#deps;
    const started = clock.monotonic();
    const dryRun = options.dryRun ?? false;
    if (this.#readOnly && !dryRun) throw new Error('a read-only reconciler can only dry-run');
    const result: PassResult = {
      mode: options.mode,
      dryRun,
      startedAt: new Date(clock.now()).toISOString(),
      durationMs: 0,
      reachable: false,
      steps: [],
      outcomes: [],
      reports: { delivered: 0, rejected: 0, pending: this.#outbox.size },
      sweptTempFiles: this.#sweptTempFiles,
      converged: false,
    };
    this.#sweptTempFiles = [];
    const finish = (): PassResult => {
      result.durationMs = Math.round(clock.monotonic() - started);
      result.reports.pending = this.#outbox.size;
      result.converged =
        result.reachable &&
        result.outcomes.every((outcome) => outcome.converged) &&
        result.reports.pending === 0 &&
        result.reports.rejected === 0 &&
        result.persistError === undefined &&
        !dryRun;
      return result;
    };

    // Reports from an earlier pass go first, so the pull below sees the statuses they carry.
    if (!dryRun && this.#outbox.size > 0) await this.#deliverReports(result, options.signal);

    let instances: ConfigInstance[];
    let mode = options.mode;
    try {
      instances = await this.#pull(mode, options.signal);
      if (mode === 'incremental' && this.#removesRecordedFile(instances)) {
        // Whether anyone else still wants a path can only be told from every instance targeting `deployed`.
        mode = 'full';
        result.mode = 'full';
        instances = await this.#pull(mode, options.signal);
      } else if (mode === 'incremental') {
        instances.push(...(await this.#fetchUnpulledOwners(instances, options.signal)));
      }
      result.reachable = true;
    } catch (error) {
      options.signal?.throwIfAborted();
      result.error = toPassError(error);
      this.#logger.warn({ err: error }, 'could not pull config instances: files left as they are');
      return finish();
    }

    for (const instance of instances) this.#lastSeenUpdatedAt.set(instance.id, instance.updated_at);
    const disk = await this.#observe(instances, options.signal);
    result.steps = planSteps({
      instances,
      local: this.#state,
      disk,
      now: clock.monotonic(),
      fileMode: this.#settings.fileMode,
      restoreDrift: this.#settings.restoreDrift ?? true,
      complete: mode === 'full',
      reportEchoes: new Map(
        [...this.#state.instances].flatMap(([id, record]) =>
          record.reportEcho === undefined ? [] : [[id, record.reportEcho] as const],
        ),
      ),
    });
    if (dryRun) return finish();
    this.#dropElapsedCooldowns(instances, clock.monotonic());

    result.outcomes = await applySteps(result.steps, {
      fs: this.#deps.fs,
      clock,
      random: this.#deps.random,
      logger: this.#logger,
      rootDir: this.#settings.rootDir,
      fileMode: this.#settings.fileMode,
      dirMode: this.#settings.dirMode,
      retry: this.#settings.retry,
      state: this.#state,
      cache: this.#cache,
      outbox: this.#outbox,
      trackHookPaths: this.#settings.trackHookPaths ?? false,
      ...(options.signal === undefined ? {} : { signal: options.signal }),
    });
    if (mode === 'full') this.#forgetUnseen(instances);
    try {
      await this.#persist(mode);
    } catch (error) {
      // Files changed on disk all the same: the caller must still learn which (hooks), and reports still go.
      options.signal?.throwIfAborted();
      result.persistError = toPassError(error);
      this.#logger.error({ err: error }, 'could not persist local state');
    }
    if (this.#outbox.size > 0) await this.#deliverReports(result, options.signal);
    return finish();
  }

  /** Makes state and queued reports durable; used after a pass and at shutdown. */
  async flushState(): Promise<void> {
    if (this.#readOnly) return;
    await saveLocalState(this.#deps.fs, this.#settings.stateDir, this.#state);
    await this.#outbox.persist();
  }

  async #persist(mode: PassMode): Promise<void> {
    await this.flushState();
    if (mode === 'full') {
      const keep = new Set([...this.#state.files.values()].map((file) => file.sha256));
      await this.#cache.prune(keep).catch((error: unknown) => {
        this.#logger.warn({ err: error }, 'could not prune the content cache');
      });
    }
  }

  async #pull(mode: PassMode, signal: AbortSignal | undefined): Promise<ConfigInstance[]> {
    const device = { device_id: this.#settings.deviceId };
    const queries: ConfigInstanceFilters[] = [
      { ...device, activity_status: 'queued' },
      { ...device, target_status: 'removed', activity_status: 'deployed' },
    ];
    if (mode === 'full') {
      queries.unshift({ ...device, target_status: 'deployed' });
      // Rarer cases, asked only on full passes: a file to remove whose target went back to `created`, and
      // removals of instances the device never received (archived without touching the disk).
      queries.push(
        { ...device, target_status: 'created', activity_status: 'deployed' },
        ...(['created', 'validating', 'validated'] as const).map((activity) => ({
          ...device,
          target_status: 'removed' as const,
          activity_status: activity,
        })),
      );
    }
    const byId = new Map<string, ConfigInstance>();
    for (const filters of queries) {
      const page = await withRequestRetry(
        'list config instances',
        async () => {
          const items: ConfigInstance[] = [];
          const iterator = this.#client.iterateConfigInstances(filters, {
            limit: PAGE_LIMIT,
            orderBy: 'id:asc',
            ...(signal === undefined ? {} : { signal }),
          });
          for await (const instance of iterator) items.push(instance);
          return items;
        },
        this.#retryOptions(signal),
      );
      for (const instance of page) {
        // Defence in depth: a server bug must not make this device write another device's files.
        if (instance.device_id !== this.#settings.deviceId) {
          this.#logger.error(
            { instanceId: instance.id },
            'service returned an instance of another device: ignored',
          );
          continue;
        }
        if (!byId.has(instance.id)) byId.set(instance.id, instance);
      }
    }
    return [...byId.values()];
  }

  async #observe(
    instances: readonly ConfigInstance[],
    signal: AbortSignal | undefined,
  ): Promise<Map<string, DiskObservation>> {
    const disk = new Map<string, DiskObservation>();
    for (const instance of instances) {
      signal?.throwIfAborted();
      const path = instance.relative_filepath;
      if (disk.has(path)) continue;
      try {
        const file = await readRegularFile(this.#deps.fs, this.#settings.rootDir, path);
        disk.set(
          path,
          file === undefined ? { kind: 'absent' } : { kind: 'file', sha256: file.sha256, mode: file.mode },
        );
      } catch (error) {
        if (error instanceof PathRejectedError) disk.set(path, { kind: 'rejected', reason: error.message });
        // A root that does not exist yet (first dry run) holds no file at all.
        else if (error instanceof DiskError && error.errno === 'ENOENT') disk.set(path, { kind: 'absent' });
        else disk.set(path, { kind: 'unreadable', reason: errorMessage(error) });
      }
    }
    return disk;
  }

  /**
   * Remembers the `updated_at` our own report gave an instance, with the one it had before: a report is not
   * an operator's update, so it must not change which of two instances at one path was "updated last".
   */
  #recordReportEcho(updated: ConfigInstance): boolean {
    const record = this.#state.instances.get(updated.id);
    const before = this.#lastSeenUpdatedAt.get(updated.id);
    if (record === undefined || before === undefined || before === updated.updated_at) return false;
    const operatorUpdatedAt =
      record.reportEcho?.updatedAt === before ? record.reportEcho.operatorUpdatedAt : before;
    this.#state.instances.set(updated.id, {
      ...record,
      reportEcho: { updatedAt: updated.updated_at, operatorUpdatedAt },
    });
    this.#lastSeenUpdatedAt.set(updated.id, updated.updated_at);
    return true;
  }

  /** Whether a pulled instance no longer targets `deployed` and its path holds a file this agent wrote. */
  #removesRecordedFile(instances: readonly ConfigInstance[]): boolean {
    return instances.some(
      (instance) =>
        instance.target_status !== 'deployed' && this.#state.files.has(instance.relative_filepath),
    );
  }

  /**
   * The recorded owners of the paths a poll's instances want, when the poll did not fetch them (they are
   * deployed and unchanged): without them a newcomer would win a path it should be refused. One small
   * request per such owner, and only while a conflict is open.
   */
  async #fetchUnpulledOwners(
    instances: readonly ConfigInstance[],
    signal: AbortSignal | undefined,
  ): Promise<ConfigInstance[]> {
    const pulled = new Set(instances.map((instance) => instance.id));
    const owners = new Set<string>();
    for (const instance of instances) {
      const owner = this.#state.files.get(instance.relative_filepath)?.instanceId;
      if (owner !== undefined && owner !== instance.id && !pulled.has(owner)) owners.add(owner);
    }
    const fetched: ConfigInstance[] = [];
    for (const id of owners) {
      const found = await withRequestRetry(
        'get the owner of a path',
        () =>
          this.#client.listConfigInstances(
            { device_id: this.#settings.deviceId, id },
            signal === undefined ? {} : { signal },
          ),
        this.#retryOptions(signal),
      );
      fetched.push(...found.data.filter((instance) => instance.device_id === this.#settings.deviceId));
    }
    return fetched;
  }

  /**
   * A cooldown whose time has come has done its job once planned past: the pass acts on the instance, and a
   * new failure sets a new one. Left in place, it would keep asking the daemon for an immediate pass.
   */
  #dropElapsedCooldowns(planned: readonly ConfigInstance[], now: number): void {
    for (const instance of planned) {
      const until = this.#state.cooldowns.get(instance.id);
      if (until !== undefined && until <= now) this.#state.cooldowns.delete(instance.id);
    }
  }

  /** After a full pass, records of instances the service no longer lists and that own no file are dropped. */
  #forgetUnseen(instances: readonly ConfigInstance[]): void {
    const seen = new Set(instances.map((instance) => instance.id));
    const owners = new Set([...this.#state.files.values()].map((file) => file.instanceId));
    for (const id of this.#state.instances.keys()) {
      if (!seen.has(id)) this.#state.cooldowns.delete(id);
      if (!seen.has(id) && !owners.has(id)) this.#state.instances.delete(id);
    }
  }

  async #deliverReports(result: PassResult, signal: AbortSignal | undefined): Promise<void> {
    try {
      await this.#outbox.persist();
    } catch (error) {
      this.#logger.error({ err: error }, 'could not persist the status outbox; delivering from memory');
    }
    let echoed = false;
    const flushed = await this.#outbox.flush(async (entry) => {
      const updated = await withRequestRetry(
        'report status',
        () =>
          this.#client.reportConfigInstanceStatus(
            entry.instanceId,
            entry.report,
            signal === undefined ? {} : { signal },
          ),
        this.#retryOptions(signal),
      );
      echoed = (updated !== undefined && this.#recordReportEcho(updated)) || echoed;
    }, deliveryVerdict);
    result.reports.delivered += flushed.delivered.length;
    result.reports.rejected += flushed.rejected.length;
    if (flushed.persistError !== undefined) {
      result.persistError = toPassError(flushed.persistError);
      this.#logger.error({ err: flushed.persistError }, 'could not rewrite the status outbox');
    }
    if (echoed) {
      await saveLocalState(this.#deps.fs, this.#settings.stateDir, this.#state).catch((error: unknown) => {
        result.persistError = toPassError(error);
        this.#logger.error({ err: error }, 'could not persist local state');
      });
    }
    if (flushed.deferredBy !== undefined) {
      signal?.throwIfAborted();
      result.reports.deliveryError = toPassError(flushed.deferredBy);
      this.#logger.warn(
        { err: flushed.deferredBy, pending: this.#outbox.size },
        'status reports kept for later',
      );
    }
  }

  #retryOptions(signal: AbortSignal | undefined) {
    return {
      retries: this.#settings.requestRetries,
      baseDelayMs: this.#settings.requestRetryBaseMs ?? 500,
      maxDelayMs: 10_000,
      maxRetryAfterMs: 60_000,
      clock: this.#deps.clock,
      random: this.#deps.random,
      logger: this.#logger,
      ...(signal === undefined ? {} : { signal }),
    };
  }
}

/**
 * How a failed report is judged. `drop`: the service will never accept it (the instance is gone, the body is
 * invalid) — dropping it is the only way forward. `stop`: the service cannot take any report now (no
 * connection, a rejected key the operator will fix, overload): keep them all. `skip`: this one failed on its
 * own (a 500 for this instance): keep it and deliver the others.
 */
function deliveryVerdict(error: unknown): DeliveryVerdict {
  if (error instanceof HttpStatusError) {
    if ([400, 404, 409, 410, 422].includes(error.status)) return 'drop';
    if ([401, 403, 408, 429, 502, 503, 504].includes(error.status)) return 'stop';
    return 'skip';
  }
  return error instanceof NetworkError || error instanceof TimeoutError ? 'stop' : 'skip';
}

function toPassError(error: unknown): PassError {
  if (error instanceof HttpStatusError) {
    return {
      code: error.code,
      message: error.message,
      retryable: error.retryable,
      status: error.status,
      ...(error.retryAfterMs === undefined ? {} : { retryAfterMs: error.retryAfterMs }),
    };
  }
  if (isAgentError(error)) return { code: error.code, message: error.message, retryable: error.retryable };
  return { code: 'internal', message: errorMessage(error), retryable: false };
}
