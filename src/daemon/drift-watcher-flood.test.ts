// A local flood of directories under rootDir, before and after start, never leaves a managed file's directory unwatched: its drift is restored, and the flood's watches stay capped.
import { type FSWatcher, watch } from 'node:fs';
import * as nodeFs from 'node:fs/promises';
import { mkdir, mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { afterEach, beforeEach, expect, it } from 'vitest';
import { systemClock } from '../lib/clock.js';
import type { FsPort } from '../lib/fs-port.js';
import { sha256Hex } from '../lib/hash.js';
import { silentLogger } from '../lib/logger.js';
import { ContentCache } from '../store/content-cache.js';
import type { ManagedFile } from '../store/state.js';
import { DriftWatcher } from './drift-watcher.js';
import { SingleFlight } from './single-flight.js';

const ORIGINAL = '{"managed":true}\n';
const TAMPERED = '{"managed":false}\n';
const CAP = 10;

let dir: string;
let rootDir: string;
let stateDir: string;
let watcher: DriftWatcher | undefined;

beforeEach(async () => {
  dir = await mkdtemp(path.join(os.tmpdir(), 'config-agent-flood-'));
  rootDir = path.join(dir, 'root');
  stateDir = path.join(dir, 'state');
  await mkdir(rootDir);
});

afterEach(async () => {
  await watcher?.close();
  watcher = undefined;
  await rm(dir, { recursive: true, force: true });
});

/** Turns of the event loop until `done` holds; bounded, and it asserts nothing about how long that took. */
async function eventually(done: () => boolean | Promise<boolean>, what: string): Promise<void> {
  for (let turn = 0; turn < 400; turn += 1) {
    if (await done()) return;
    await new Promise((resolve) => setTimeout(resolve, 10));
  }
  throw new Error(`never happened: ${what}`);
}

/** `count` junk directories under rootDir, each with one below it ('j000/deeper', ...). */
async function flood(count: number, prefix = 'j'): Promise<void> {
  for (let n = 0; n < count; n += 1) {
    await mkdir(path.join(rootDir, `${prefix}${String(n).padStart(3, '0')}`, 'deeper'), { recursive: true });
  }
}

/**
 * A DriftWatcher (policy `restore`) over rootDir managing `files`, whose walks list every directory sorted by
 * name (so the junk 'j...' comes before the managed 'zz...', the order that hid them), counting its live
 * watches; with `kernelWatches`, a watch past that many throws ENOSPC as inotify does at max_user_watches.
 */
async function watchedRoot(
  files: readonly string[],
  options: { kernelWatches?: number; pass?: () => Promise<void> } = {},
) {
  const passes = new SingleFlight(async () => options.pass?.());
  const managed = new Map<string, ManagedFile>();
  const cache = new ContentCache(nodeFs as unknown as FsPort, stateDir);
  await cache.put(Buffer.from(ORIGINAL));
  const addManaged = async (relative: string) => {
    await mkdir(path.dirname(path.join(rootDir, relative)), { recursive: true });
    await writeFile(path.join(rootDir, relative), ORIGINAL, { mode: 0o644 });
    managed.set(relative, {
      instanceId: 'cfg_1',
      sha256: sha256Hex(Buffer.from(ORIGINAL)),
      mode: 0o644,
      createdDirs: [],
      writtenAt: '2030-01-01T00:00:00.000Z',
    });
  };
  for (const file of files) await addManaged(file);
  const sortedFs = {
    ...nodeFs,
    readdir: async (dirPath: string, readdirOptions: { withFileTypes: true }) =>
      (await nodeFs.readdir(dirPath, readdirOptions)).sort((a, b) => a.name.localeCompare(b.name)),
  } as unknown as FsPort;
  const live = new Set<FSWatcher>();
  const countedWatch = ((...args: Parameters<typeof watch>) => {
    if (options.kernelWatches !== undefined && live.size >= options.kernelWatches)
      throw Object.assign(new Error('ENOSPC: System limit for number of file watchers reached'), {
        code: 'ENOSPC',
      });
    const fsWatcher = watch(...args);
    live.add(fsWatcher);
    const close = fsWatcher.close.bind(fsWatcher);
    fsWatcher.close = () => {
      live.delete(fsWatcher);
      close();
    };
    return fsWatcher;
  }) as typeof watch;
  let tick = 0;
  const drift = new DriftWatcher({
    fs: sortedFs,
    rootDir,
    policy: 'restore',
    logger: silentLogger(),
    managedFiles: () => managed,
    passes,
    onDrift: () => undefined,
    restore: {
      stateDir,
      dirMode: 0o755,
      // Each restore far past the last one's hold-off: a tampered file is restored at once.
      clock: { monotonic: () => (tick += 1_000_000), sleep: () => new Promise<void>(() => undefined) },
      minHoldOffMs: 1_000,
      maxHoldOffMs: 1_000,
      onRestored: () => undefined,
    },
    // The debounce on real time (restore's clock never ends a sleep): real kernel events.
    clock: systemClock,
    debounceMs: 1,
    directories: {
      ...(options.kernelWatches === undefined ? { maxDirectories: CAP } : {}),
      watch: countedWatch,
    },
  });
  watcher = drift;
  await drift.start();
  /** Tampers with `relative` and waits until the watcher has put the agent's bytes back. */
  const tamperAndAwaitRestore = async (relative: string) => {
    const file = path.join(rootDir, relative);
    await writeFile(file, TAMPERED);
    await eventually(async () => (await readFile(file, 'utf8')) === ORIGINAL, `${relative} restored`);
  };
  return { drift, live, passes, addManaged, tamperAndAwaitRestore };
}

it('a flood made before start: the managed directories are watched, the flood only up to the cap', async () => {
  await flood(30);
  const { live, tamperAndAwaitRestore } = await watchedRoot(['zz/conf/app.json', 'top.json']);
  await tamperAndAwaitRestore('zz/conf/app.json');
  await tamperAndAwaitRestore('top.json');
  // rootDir, zz and zz/conf, and CAP of the flood's 60 directories.
  expect(live.size).toBe(3 + CAP);
});

it('a flood made after start, then a pass adds a managed file in a new directory: watched, restored, the flood capped', async () => {
  const { drift, live, addManaged, tamperAndAwaitRestore } = await watchedRoot(['zz/conf/app.json']);
  await flood(30);
  await eventually(() => live.size === 3 + CAP, 'the flood watched up to the cap');
  // What a pass does: writes the file (its directories made under the full cap), then the managed set changes.
  await addManaged('zzz/new/app.json');
  await drift.managedFilesChanged();
  expect(live.size).toBe(5 + CAP);
  await tamperAndAwaitRestore('zzz/new/app.json');
  await tamperAndAwaitRestore('zz/conf/app.json');
  await flood(20, 'k');
  await tamperAndAwaitRestore('zzz/new/app.json');
  expect(live.size).toBe(5 + CAP);
});

it('a pass writing a file in a new directory under the full cap: watched once the pass ends, without being told', async () => {
  const pass: { run?: () => Promise<void> } = {};
  const { live, passes, addManaged, tamperAndAwaitRestore } = await watchedRoot(['zz/conf/app.json'], {
    pass: () => pass.run?.() ?? Promise.resolve(),
  });
  await flood(30);
  await eventually(() => live.size === 3 + CAP, 'the flood watched up to the cap');
  pass.run = () => addManaged('zzz/new/app.json');
  await passes.trigger();
  await eventually(() => live.size === 5 + CAP, 'zzz and zzz/new watched');
  await tamperAndAwaitRestore('zzz/new/app.json');
});

it("at the kernel's inotify limit, the managed directories take the flood's watches", async () => {
  await flood(30);
  const { drift, live, addManaged, tamperAndAwaitRestore } = await watchedRoot(['zz/conf/app.json'], {
    kernelWatches: 8,
  });
  expect(live.size).toBe(8);
  await tamperAndAwaitRestore('zz/conf/app.json');
  await addManaged('zzz/new/app.json');
  await drift.managedFilesChanged();
  // Two of the flood's watches given up for zzz and zzz/new: still 8 in all.
  expect(live.size).toBe(8);
  await tamperAndAwaitRestore('zzz/new/app.json');
  await tamperAndAwaitRestore('zz/conf/app.json');
});

it("a managed directory left unwatched at the kernel's limit is watched once a watch is freed", async () => {
  // rootDir, a and b fit; c finds no watch left, and none of the flood's to take.
  const { live, tamperAndAwaitRestore } = await watchedRoot(['a/app.json', 'b/app.json', 'c/app.json'], {
    kernelWatches: 3,
  });
  expect(live.size).toBe(3);
  await rm(path.join(rootDir, 'a'), { recursive: true });
  await tamperAndAwaitRestore('c/app.json');
  expect(live.size).toBe(3);
});
