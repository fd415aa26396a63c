// The reconciler: a state directory, a service client and settings, running one pass at a time over them.
import type { ServiceClient } from '../api/client.js';
import type { Deps } from '../lib/deps.js';
import { RootMountWatch } from '../store/root-mount.js';
import type { HookProcessLeftBehind, LocalState, OwedHookPaths } from '../store/state.js';
import { StateDir } from '../store/state-dir.js';
import { type PassContext, runPass } from './pass.js';
import type { PassOptions, PassResult, PassRunner, ReconcilerSettings } from './pass-runner.js';
import { UnrecordedReports } from './report.js';
import { ToldItems } from './told-items.js';

export class Reconciler implements PassRunner {
  #ctx: PassContext;

  private constructor(ctx: PassContext) {
    this.#ctx = ctx;
  }

  /**
   * Opens the state directory (see `StateDir.open`); `readOnly` reconcilers only dry-run; `legacyLockHelper`: the
   * daemon's (rootDir's lock name as old agents on Node 24 bound it, held on Node 20 too).
   */
  static async open(
    deps: Deps,
    settings: ReconcilerSettings,
    client: ServiceClient,
    options: { readOnly?: boolean; legacyLockHelper?: boolean } = {},
  ): Promise<Reconciler> {
    const logger = deps.logger.child({ component: 'reconcile' });
    const dir = await StateDir.open(deps.fs, settings, logger, { ...options, clock: deps.clock });
    const rootMount = new RootMountWatch(deps.fs, settings.rootDir, {
      stateDir: settings.stateDir,
      readOnly: options.readOnly === true,
      holdsManaged: (mountPoint) => dir.holdsUnder(mountPoint),
      managedDevices: () => dir.fingerprints.loadedDevices,
    });
    return new Reconciler({
      deps,
      settings,
      client,
      dir,
      logger,
      lastSeenUpdatedAt: new Map(),
      listedVersions: new Map(),
      rootMount,
      toldItems: new ToldItems(),
      unrecorded: new UnrecordedReports(),
      followUp: { fullPassDue: false },
    });
  }

  /**
   * Takes a reloaded configuration without reopening: keeps in-memory cooldowns and the outbox. Returns false
   * when the device, root or state directory changed: those need a reconciler of their own.
   */
  reconfigure(deps: Deps, settings: ReconcilerSettings, client: ServiceClient): boolean {
    const current = this.#ctx.settings;
    if (
      settings.deviceId !== current.deviceId ||
      settings.rootDir !== current.rootDir ||
      settings.stateDir !== current.stateDir
    ) {
      return false;
    }
    this.#ctx = {
      ...this.#ctx,
      deps,
      settings,
      client,
      logger: deps.logger.child({ component: 'reconcile' }),
    };
    return true;
  }

  runPass(options: PassOptions): Promise<PassResult> {
    if (this.#ctx.dir.readOnly && !options.dryRun) throw new Error('a read-only reconciler can only dry-run');
    if (options.dryRun === true) return runPass(this.#ctx, options);
    // Another agent may have run on stateDir since the last pass if its lock was removed (`rm -rf stateDir`).
    return this.#ctx.dir.holdLock().then(() => runPass(this.#ctx, options));
  }

  get state(): Readonly<LocalState> {
    return this.#ctx.dir.state;
  }

  get pendingReports(): number {
    return this.#ctx.dir.outbox.size;
  }

  get progress(): number {
    return this.#ctx.dir.outbox.queuedEver;
  }

  pendingHookPaths(): string[] {
    return [...this.#ctx.dir.state.pendingHookPaths];
  }

  /** Persisted with the next pass or at shutdown, never concurrently with a pass's own save. */
  settleHookPaths(paths: readonly string[]): void {
    for (const path of paths) this.#ctx.dir.state.pendingHookPaths.delete(path);
  }

  /** Persisted with the next pass or at shutdown, as settleHookPaths. */
  keepHookPaths(paths: readonly string[]): void {
    for (const path of paths) this.#ctx.dir.state.pendingHookPaths.add(path);
  }

  /** Persisted with the next pass or at shutdown, as settleHookPaths: both change in the same turn. */
  recordOwedHookPaths(owed: readonly OwedHookPaths[]): void {
    const state = this.#ctx.dir.state;
    if (owed.length > 0) state.owedHookPaths = owed;
    else delete state.owedHookPaths;
  }

  /** Persisted with the next pass or at shutdown, as recordOwedHookPaths. */
  recordHookProcessesLeftBehind(left: readonly HookProcessLeftBehind[]): void {
    const state = this.#ctx.dir.state;
    if (left.length > 0) state.hookProcessesLeftBehind = left;
    else delete state.hookProcessesLeftBehind;
  }

  hasDueRetries(): boolean {
    // A report landed on another version (pass.ts `supersededBy`): a full pass writes what the service holds.
    if (this.#ctx.followUp?.fullPassDue === true) return true;
    const now = this.#ctx.deps.clock.monotonic();
    for (const until of this.#ctx.dir.state.cooldowns.values()) if (until <= now) return true;
    return false;
  }

  nextRetryAt(): number | undefined {
    // Reports held by the service's Retry-After go when it ends, not with the next poll after it.
    const now = this.#ctx.deps.clock.monotonic();
    if (this.#ctx.followUp?.fullPassDue === true) return now;
    let earliest = this.#ctx.dir.outbox.heldUntil(now);
    for (const until of this.#ctx.dir.state.cooldowns.values()) {
      if (earliest === undefined || until < earliest) earliest = until;
    }
    return earliest;
  }

  async rootMountGone(relative?: string): Promise<boolean> {
    const watch = this.#ctx.rootMount;
    if (watch === undefined) return false;
    if ((await watch.check()) !== undefined) return true;
    // Only the mounts below rootDir holding the path (fix34): one gone elsewhere holds nothing here back.
    return relative === undefined ? watch.anyGoneBelow() : watch.goneAt(relative) !== undefined;
  }

  /**
   * rootDir's mounts checked once, then a judge of each path as `rootMountGone(relative)` answers it: a batch of the
   * drift watcher's restores costs one read of the mount table, not one per path (fix36).
   */
  async rootMountJudge(): Promise<(relative: string) => boolean> {
    const watch = this.#ctx.rootMount;
    if (watch === undefined) return () => false;
    if ((await watch.check()) !== undefined) return () => true;
    return (relative) => watch.goneAt(relative) !== undefined;
  }

  mountsGoneBelow(): string[] {
    return this.#ctx.rootMount?.goneBelow() ?? [];
  }

  fileMeta(path: string): { mode: number; gid: number } | undefined {
    return this.#ctx.settings.fileMeta?.(path);
  }

  flushState(): Promise<void> {
    if (this.#ctx.dir.readOnly) return this.#ctx.dir.persist();
    // As before a pass: never over another live agent's state, nor through a symlink swapped in for stateDir.
    return this.#ctx.dir.holdLock().then(() => this.#ctx.dir.persist());
  }

  close(options?: { clean?: boolean }): Promise<void> {
    return this.#ctx.dir.close(options);
  }
}
