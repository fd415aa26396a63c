// A PassRunner that keeps a real state.json as the reconciler does, for daemon tests of what survives a crash.
import { Volume } from 'memfs';
import type { FsPort } from '../../src/lib/fs-port.js';
import { silentLogger } from '../../src/lib/logger.js';
import type { PassOptions, PassResult, PassRunner } from '../../src/reconcile/pass-runner.js';
import {
  type HookProcessLeftBehind,
  type LocalState,
  loadLocalState,
  type OwedHookPaths,
  saveLocalState,
} from '../../src/store/state.js';
import { memfsPort } from './memfs.js';
import type { PowerCutFs } from './power-cut-fs.js';

export const RUNNER_ROOT = '/srv/root';
export const RUNNER_STATE_DIR = '/var/lib/config-agent';

/**
 * state.json as the reconciler keeps it: loaded at open, each pass's writes pending for their hooks and the state
 * saved after the pass (compared with the file first: an unchanged state writes nothing), as pass.ts persists.
 * Owed paths and hook processes left behind are recorded as the Reconciler records them.
 */
export class StateFileRunner implements PassRunner {
  /** Each pass's written paths (one path, or a batch). */
  readonly writes: (string | string[])[] = [];
  passes = 0;
  /** Saves of state.json that wrote bytes. */
  stateWrites = 0;
  pendingReports = 0;

  private constructor(
    private readonly fs: FsPort,
    readonly state: LocalState,
  ) {}

  static async open(fs: FsPort): Promise<StateFileRunner> {
    const { state } = await loadLocalState(fs, RUNNER_STATE_DIR, 'dvc_unit', silentLogger(), RUNNER_ROOT);
    return new StateFileRunner(fs, state);
  }

  async runPass(options: PassOptions): Promise<PassResult> {
    this.passes += 1;
    const next = this.writes.shift();
    const files = next === undefined ? [] : typeof next === 'string' ? [next] : next;
    for (const file of files) this.state.pendingHookPaths.add(file);
    await this.flushState();
    return {
      mode: options.mode,
      dryRun: false,
      startedAt: '2030-06-01T12:00:00.000Z',
      durationMs: 1,
      reachable: true,
      steps: [],
      outcomes: files.map((file) => ({
        instanceId: `ins_${file}`,
        path: file,
        action: 'written',
        converged: true,
        reason: 'new',
      })),
      reports: { delivered: 0, rejected: 0, pending: 0 },
      sweptTempFiles: [],
      converged: true,
    };
  }
  hasDueRetries(): boolean {
    return false;
  }
  nextRetryAt(): number | undefined {
    return undefined;
  }
  pendingHookPaths(): string[] {
    return [...this.state.pendingHookPaths];
  }
  settleHookPaths(paths: readonly string[]): void {
    for (const changed of paths) this.state.pendingHookPaths.delete(changed);
  }
  keepHookPaths(paths: readonly string[]): void {
    for (const changed of paths) this.state.pendingHookPaths.add(changed);
  }
  recordOwedHookPaths(owed: readonly OwedHookPaths[]): void {
    if (owed.length > 0) this.state.owedHookPaths = owed;
    else delete this.state.owedHookPaths;
  }
  recordHookProcessesLeftBehind(left: readonly HookProcessLeftBehind[]): void {
    if (left.length > 0) this.state.hookProcessesLeftBehind = left;
    else delete this.state.hookProcessesLeftBehind;
  }
  async flushState(): Promise<void> {
    if (await saveLocalState(this.fs, RUNNER_STATE_DIR, this.state)) this.stateWrites += 1;
  }
  async close(): Promise<void> {}
}

/** A memfs holding what `model` says a power cut now would leave under `/`. */
export function volumeAfterPowerCut(model: PowerCutFs): FsPort {
  const vol = new Volume();
  for (const [relative, what] of Object.entries(model.afterPowerCut()).sort(([a], [b]) => (a < b ? -1 : 1))) {
    const absolute = `/${relative}`;
    if (what === 'dir') vol.mkdirSync(absolute, { recursive: true });
    else if (what !== 'symlink') {
      const space = what.indexOf(' ');
      vol.writeFileSync(absolute, what.slice(space + 1), { mode: Number.parseInt(what.slice(0, space), 8) });
    }
  }
  return memfsPort(vol);
}
