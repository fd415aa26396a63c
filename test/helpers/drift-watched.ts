// A drift watcher over a temp root of managed files changed by hand, its debounce on the test's clock, no kernel events.
import { type FSWatcher, watch } from 'node:fs';
import * as nodeFs from 'node:fs/promises';
import { mkdir, mkdtemp, rm, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { DriftWatcher } from '../../src/daemon/drift-watcher.js';
import { SingleFlight } from '../../src/daemon/single-flight.js';
import type { Clock } from '../../src/lib/clock.js';
import { sha256Hex } from '../../src/lib/hash.js';
import { silentLogger } from '../../src/lib/logger.js';
import type { ManagedFile } from '../../src/store/state.js';

/** What the agent recorded writing at each managed path; every file on disk holds other bytes (drift). */
const RECORDED = '{"a":1}\n';

/**
 * `names` written under `rootDir` (their directories made) with bytes other than those recorded for them: the
 * managed files' records, every one drifted.
 */
export async function driftedFiles(
  rootDir: string,
  names: readonly string[],
): Promise<Map<string, ManagedFile>> {
  const managed = new Map<string, ManagedFile>();
  for (const name of names) {
    await mkdir(path.dirname(path.join(rootDir, name)), { recursive: true });
    await writeFile(path.join(rootDir, name), '{"changed":true}\n', { mode: 0o644 });
    managed.set(name, {
      instanceId: `cfg_${name}`,
      sha256: sha256Hex(Buffer.from(RECORDED)),
      mode: 0o644,
      createdDirs: [],
      writtenAt: '2030-01-01T00:00:00.000Z',
    });
  }
  return managed;
}

/**
 * Time moves only when told; a sleep ends once its deadline is passed, or rejects when its signal aborts; `sleeping`
 * counts the sleeps not yet ended (a sync point, not an assertion).
 */
export function manualClock(): Pick<Clock, 'sleep'> & { advance(ms: number): void; sleeping(): number } {
  let now = 0;
  const sleepers = new Set<{ until: number; resolve: () => void }>();
  return {
    sleep: (ms, signal) =>
      new Promise<void>((resolve, reject) => {
        if (signal?.aborted) {
          reject(signal.reason);
          return;
        }
        const sleeper = { until: now + ms, resolve };
        sleepers.add(sleeper);
        signal?.addEventListener(
          'abort',
          () => {
            sleepers.delete(sleeper);
            reject(signal.reason);
          },
          { once: true },
        );
      }),
    advance(ms) {
      now += ms;
      for (const sleeper of [...sleepers]) {
        if (sleeper.until > now) continue;
        sleepers.delete(sleeper);
        sleeper.resolve();
      }
    },
    sleeping: () => sleepers.size,
  };
}

/** Lets what is under way finish (turns of the event loop and round trips of the thread pool); asserts nothing. */
export async function settle(): Promise<void> {
  for (let turn = 0; turn < 20; turn += 1) {
    await new Promise((resolve) => setImmediate(resolve));
    await nodeFs.stat(os.tmpdir());
  }
}

export interface WatchedRoot {
  rootDir: string;
  watcher: DriftWatcher;
  /** The paths of each drift the watcher judged, in order. */
  drifts: string[][];
  /** Tells the watcher of a change of `name` under the root, as an event of the kernel would. */
  notice(name: string): void;
  /** Closes the watcher and removes the root. */
  close(): Promise<void>;
}

/**
 * `names` written under a new temp root (`prefix`) with bytes other than those recorded for them, and a watcher under
 * `report` whose debounce of `debounceMs` sleeps on `clock`. The kernel's events are left out: changes are told by
 * `notice` alone, at known times. The caller closes it (afterEach).
 */
export async function watchedRoot(options: {
  prefix: string;
  names: readonly string[];
  clock: Pick<Clock, 'sleep'>;
  debounceMs: number;
}): Promise<WatchedRoot> {
  const rootDir = await mkdtemp(path.join(os.tmpdir(), options.prefix));
  const managed = await driftedFiles(rootDir, options.names);
  const drifts: string[][] = [];
  const watcher = new DriftWatcher({
    fs: nodeFs,
    rootDir,
    policy: 'report',
    logger: silentLogger(),
    managedFiles: () => managed,
    passes: new SingleFlight(async () => undefined),
    onDrift: (paths) => drifts.push(paths),
    clock: options.clock,
    debounceMs: options.debounceMs,
    directories: {
      watch: ((target: string, watchOptions: object): FSWatcher =>
        watch(target, watchOptions, () => undefined)) as unknown as typeof watch,
    },
  });
  try {
    await watcher.start();
  } catch (error) {
    await rm(rootDir, { recursive: true, force: true });
    throw error;
  }
  return {
    rootDir,
    watcher,
    drifts,
    notice: (name) => watcher.noticeChange(path.join(rootDir, name)),
    close: async () => {
      await watcher.close();
      await rm(rootDir, { recursive: true, force: true });
    },
  };
}
