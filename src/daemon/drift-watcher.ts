// Watches rootDir for changes to managed files made by someone else, and asks for a repair pass.
import path from 'node:path';
import { type FSWatcher, watch } from 'chokidar';
import type { DriftPolicy } from '../config/schema.js';
import type { FsPort } from '../lib/fs-port.js';
import type { Logger } from '../lib/logger.js';
import { readRegularFile } from '../store/durable-writer.js';
import { TEMP_PREFIX } from '../store/path-guard.js';
import type { ManagedFile } from '../store/state.js';

/** What the watcher reads of the daemon's `SingleFlight`. */
export interface PassActivity {
  readonly busy: boolean;
  readonly generation: number;
  idle(): Promise<void>;
}

export interface DriftWatcherOptions {
  fs: FsPort;
  rootDir: string;
  policy: Exclude<DriftPolicy, 'off'>;
  logger: Logger;
  /** The files the agent manages now, by relative path. */
  managedFiles: () => ReadonlyMap<string, ManagedFile>;
  /**
   * The daemon's pass runner: a file is judged only while no pass runs (the agent's own writes are never
   * drift), and a verdict reached while a pass started is judged again after it.
   */
  passes: PassActivity;
  /** Called with the drifted paths, once per debounce window. */
  onDrift: (paths: string[]) => void;
  debounceMs?: number;
}

export class DriftWatcher {
  readonly #options: DriftWatcherOptions;
  readonly #pending = new Set<string>();
  #watcher: FSWatcher | undefined;
  #timer: NodeJS.Timeout | undefined;
  #closed = false;

  constructor(options: DriftWatcherOptions) {
    this.#options = options;
  }

  async start(): Promise<void> {
    const watcher = watch(this.#options.rootDir, {
      ignoreInitial: true,
      followSymlinks: false,
      // The agent's temp files appear and vanish on every write: they are never drift.
      ignored: (file: string) => path.basename(file).startsWith(TEMP_PREFIX),
    });
    for (const event of ['add', 'change', 'unlink'] as const) {
      watcher.on(event, (file: string) => this.#onEvent(file));
    }
    watcher.on('error', (error: unknown) => this.#options.logger.warn({ err: error }, 'file watcher error'));
    await new Promise<void>((resolve) => watcher.once('ready', () => resolve()));
    this.#watcher = watcher;
  }

  async close(): Promise<void> {
    this.#closed = true;
    if (this.#timer !== undefined) clearTimeout(this.#timer);
    await this.#watcher?.close();
  }

  #onEvent(file: string): void {
    const relative = path.relative(this.#options.rootDir, file).split(path.sep).join('/');
    if (relative === '' || relative.startsWith('..')) return;
    if (!this.#options.managedFiles().has(relative)) return;
    this.#pending.add(relative);
    this.#schedule();
  }

  #schedule(): void {
    if (this.#closed) return;
    if (this.#timer !== undefined) clearTimeout(this.#timer);
    this.#timer = setTimeout(() => void this.#evaluate(), this.#options.debounceMs ?? 300);
  }

  /** A managed file drifted when its bytes or mode no longer match what the agent recorded writing. */
  async #evaluate(): Promise<void> {
    this.#timer = undefined;
    const { passes } = this.#options;
    // idle() resolves a turn later, and a pass may have started in that turn: wait until none runs.
    while (passes.busy) await passes.idle();
    if (this.#closed) return;
    const generation = passes.generation;
    const candidates = [...this.#pending];
    this.#pending.clear();
    const drifted: string[] = [];
    for (const relative of candidates) {
      const managed = this.#options.managedFiles().get(relative);
      if (managed === undefined) continue;
      const current = await readRegularFile(this.#options.fs, this.#options.rootDir, relative).catch(
        () => null,
      );
      if (
        current !== undefined &&
        current !== null &&
        current.sha256 === managed.sha256 &&
        current.mode === managed.mode
      ) {
        continue;
      }
      drifted.push(relative);
    }
    if (passes.generation !== generation) {
      // A pass started while we were reading: what we saw may be its own write. Judge again after it.
      for (const relative of candidates) this.#pending.add(relative);
      this.#schedule();
      return;
    }
    if (drifted.length === 0) return;
    for (const relative of drifted) {
      this.#options.logger.warn(
        { path: relative, policy: this.#options.policy },
        this.#options.policy === 'restore'
          ? 'managed file changed by someone else: restoring it'
          : 'managed file changed by someone else (drift policy "report": left as it is)',
      );
    }
    this.#options.onDrift(drifted);
  }
}
