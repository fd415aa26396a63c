// Changes the kernel never reports to the drift watcher: lost in an overflow of its inotify queue, or made on a filesystem
// mounted anew on rootDir after the watched one was unmounted (its watches end with it).
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
import { TEMP_PREFIX } from '../store/path-guard.js';
import type { ManagedFile } from '../store/state.js';
import { BURST_EVENTS } from './directory-watcher.js';
import { DriftWatcher } from './drift-watcher.js';
import { SingleFlight } from './single-flight.js';

const ORIGINAL = '{"managed":true}\n';
const TAMPERED = '{"managed":false}\n';
/** A second managed file, changed where the watcher sees it. */
const VISIBLE = 'app/visible.json';

let dir: string;
let watcher: DriftWatcher | undefined;

beforeEach(async () => {
  dir = await mkdtemp(path.join(os.tmpdir(), 'config-agent-overflow-'));
});

afterEach(async () => {
  await watcher?.close();
  watcher = undefined;
  await rm(dir, { recursive: true, force: true });
});

/** Turns of the event loop until `done` holds; bounded, and it asserts nothing about how long that took. */
async function eventually(done: () => Promise<boolean>): Promise<boolean> {
  for (let turn = 0; turn < 200; turn += 1) {
    if (await done()) return true;
    await new Promise((resolve) => setTimeout(resolve, 10));
  }
  return false;
}

/**
 * The kernel's side, as the watcher sees it: every real event naming one of `lost` is lost (inotify's queue is full
 * and libuv drops the overflow's notice; the unmounted filesystem's watches are dead), whenever it comes, so no
 * wait for it to pass is needed; `deliver` hands the watcher `count` queued names of `junk/` in one turn, as one
 * read of a full queue does.
 */
function kernel() {
  const listeners = new Map<string, (event: string, name: string | null) => void>();
  const state = { lost: new Set<string>() };
  const fakeWatch = ((
    target: string,
    options: object,
    listener: (event: string, name: string | null) => void,
  ) => {
    listeners.set(target, listener);
    return watch(target, options, (event, name) => {
      if (name === null || !state.lost.has(String(name))) listener(event, name);
    }) as FSWatcher;
  }) as unknown as typeof watch;
  const deliver = (rootDir: string, count: number, prefix = 'junk-') => {
    const listener = listeners.get(rootDir);
    for (let n = 0; n < count; n += 1) listener?.('rename', `${prefix}${n}`);
  };
  const name = (watched: string, entry: string | null) => listeners.get(watched)?.('rename', entry);
  return { state, fakeWatch, deliver, name };
}

async function watchedRoot(
  fakeWatch: typeof watch,
  fs: FsPort = nodeFs as unknown as FsPort,
  maxQueuedEvents?: number,
) {
  const rootDir = path.join(dir, 'root');
  const stateDir = path.join(dir, 'state');
  const relative = 'app/settings.json';
  await mkdir(path.join(rootDir, 'app'), { recursive: true });
  await writeFile(path.join(rootDir, relative), ORIGINAL, { mode: 0o644 });
  await writeFile(path.join(rootDir, VISIBLE), ORIGINAL, { mode: 0o644 });
  await new ContentCache(nodeFs as unknown as FsPort, stateDir).put(Buffer.from(ORIGINAL));
  const record = (instanceId: string): ManagedFile => ({
    instanceId,
    sha256: sha256Hex(Buffer.from(ORIGINAL)),
    mode: 0o644,
    createdDirs: [],
    writtenAt: '2030-01-01T00:00:00.000Z',
  });
  const managed = new Map<string, ManagedFile>([
    [relative, record('cfg_1')],
    [VISIBLE, record('cfg_2')],
  ]);
  let tick = 0;
  watcher = new DriftWatcher({
    fs,
    rootDir,
    policy: 'restore',
    logger: silentLogger(),
    managedFiles: () => managed,
    passes: new SingleFlight(async () => undefined),
    onDrift: () => undefined,
    restore: {
      stateDir,
      dirMode: 0o755,
      clock: { monotonic: () => (tick += 1_000_000), sleep: () => new Promise<void>(() => undefined) },
      minHoldOffMs: 1_000,
      maxHoldOffMs: 1_000,
      onRestored: () => undefined,
    },
    // The debounce on real time (restore's clock never ends a sleep): real kernel events.
    clock: systemClock,
    debounceMs: 1,
    directories: { watch: fakeWatch, ...(maxQueuedEvents === undefined ? {} : { maxQueuedEvents }) },
  });
  await watcher.start();
  return { file: path.join(rootDir, relative), rootDir };
}

it('a burst as large as a full queue delivers: every managed file is judged, the change lost with the overflow restored', async () => {
  const k = kernel();
  const { file, rootDir } = await watchedRoot(k.fakeWatch);
  k.state.lost.add(path.basename(file));
  await writeFile(file, TAMPERED);
  k.deliver(rootDir, BURST_EVENTS);
  expect(await eventually(async () => (await readFile(file, 'utf8')) === ORIGINAL)).toBe(true);
});

it('a kernel queue set smaller than BURST_EVENTS (fs.inotify.max_queued_events 1000): a turn delivering as many is a burst', async () => {
  const k = kernel();
  const { file, rootDir } = await watchedRoot(k.fakeWatch, undefined, 1000);
  k.state.lost.add(path.basename(file));
  await writeFile(file, TAMPERED);
  // All that a full queue of 1,000 holds: before, fewer than 4,096 names were never taken as a burst.
  k.deliver(rootDir, 1000);
  expect(await eventually(async () => (await readFile(file, 'utf8')) === ORIGINAL)).toBe(true);
});

it('rootDir unmounted, then a filesystem mounted anew on it: watched again and every managed file judged', async () => {
  const k = kernel();
  // rootDir's device as lstat shows it: another once "unmounted" (the bare mountpoint), another again once "mounted".
  const root = { dev: 0 };
  const fs = {
    ...nodeFs,
    lstat: async (target: string) => {
      const stats = await nodeFs.lstat(target);
      if (target === path.join(dir, 'root') && root.dev !== 0) return Object.assign(stats, { dev: root.dev });
      return stats;
    },
  } as unknown as FsPort;
  const { file, rootDir } = await watchedRoot(k.fakeWatch, fs);
  // The old filesystem's watches are dead: nothing on the new one is reported, the change by hand included.
  k.state.lost.add(path.basename(file));
  root.dev = 4242;
  await writeFile(file, TAMPERED);
  // What libuv hands over as the kernel ends the watch (IN_UNMOUNT, IN_IGNORED): an event named after rootDir.
  k.name(rootDir, path.basename(rootDir));
  expect(await eventually(async () => (await readFile(file, 'utf8')) === ORIGINAL)).toBe(true);
});

it('rootDir found to be another directory after a pass (a mount the kernel told nothing of): watched again, judged', async () => {
  const k = kernel();
  const root = { dev: 0 };
  const fs = {
    ...nodeFs,
    lstat: async (target: string) => {
      const stats = await nodeFs.lstat(target);
      if (target === path.join(dir, 'root') && root.dev !== 0) return Object.assign(stats, { dev: root.dev });
      return stats;
    },
  } as unknown as FsPort;
  const { file } = await watchedRoot(k.fakeWatch, fs);
  k.state.lost.add(path.basename(file));
  root.dev = 4243;
  await writeFile(file, TAMPERED);
  // After every pass the daemon hands the managed set over again.
  await watcher?.managedFilesChanged();
  expect(await eventually(async () => (await readFile(file, 'utf8')) === ORIGINAL)).toBe(true);
});

it('an event on rootDir without a name (anything in it may have changed): every managed file judged', async () => {
  const k = kernel();
  const { file, rootDir } = await watchedRoot(k.fakeWatch);
  k.state.lost.add(path.basename(file));
  await writeFile(file, TAMPERED);
  k.name(rootDir, null);
  expect(await eventually(async () => (await readFile(file, 'utf8')) === ORIGINAL)).toBe(true);
});

it('events of several turns never add up to a burst: fewer than BURST_EVENTS in each turn judge only what they name', async () => {
  const k = kernel();
  const { file, rootDir } = await watchedRoot(k.fakeWatch);
  k.state.lost.add(path.basename(file));
  await writeFile(file, TAMPERED);
  // One event in a turn, then one short of a burst in the next: 4,096 over two turns. Named as the agent's temp
  // files, which the watcher ignores but counts (they fill the kernel's queue all the same).
  k.deliver(rootDir, 1, TEMP_PREFIX);
  await new Promise((resolve) => setImmediate(resolve));
  k.deliver(rootDir, BURST_EVENTS - 1, TEMP_PREFIX);
  await new Promise((resolve) => setImmediate(resolve));
  // A change the watcher does see: once it is restored, a judging of every managed file would have come first.
  const visible = path.join(rootDir, VISIBLE);
  await writeFile(visible, TAMPERED);
  expect(await eventually(async () => (await readFile(visible, 'utf8')) === ORIGINAL)).toBe(true);
  expect(await readFile(file, 'utf8')).toBe(TAMPERED);
  // A burst in one turn: judged.
  k.deliver(rootDir, BURST_EVENTS, TEMP_PREFIX);
  expect(await eventually(async () => (await readFile(file, 'utf8')) === ORIGINAL)).toBe(true);
});
