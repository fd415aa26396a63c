// A change to a managed file lost in an overflow of the kernel's inotify queue (a flood while the agent was busy).
import { type FSWatcher, watch } from 'node:fs';
import * as nodeFs from 'node:fs/promises';
import { mkdir, mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { afterEach, beforeEach, expect, it } from 'vitest';
import type { FsPort } from '../lib/fs-port.js';
import { sha256Hex } from '../lib/hash.js';
import { silentLogger } from '../lib/logger.js';
import { ContentCache } from '../store/content-cache.js';
import type { ManagedFile } from '../store/state.js';
import { BURST_EVENTS } from './directory-watcher.js';
import { DriftWatcher } from './drift-watcher.js';
import { SingleFlight } from './single-flight.js';

const ORIGINAL = '{"managed":true}\n';
const TAMPERED = '{"managed":false}\n';

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
 * The kernel's side, as the watcher sees it: while `overflowing`, real events are lost (inotify's queue is full and
 * libuv drops the overflow's notice); `deliver` hands the watcher `count` queued names of `junk/` in one turn, as
 * one read of a full queue does.
 */
function kernel() {
  const listeners = new Map<string, (event: string, name: string | null) => void>();
  const state = { overflowing: false };
  const fakeWatch = ((
    target: string,
    options: object,
    listener: (event: string, name: string | null) => void,
  ) => {
    listeners.set(target, listener);
    return watch(target, options, (event, name) => {
      if (!state.overflowing) listener(event, name);
    }) as FSWatcher;
  }) as unknown as typeof watch;
  const deliver = (rootDir: string, count: number) => {
    const listener = listeners.get(rootDir);
    for (let n = 0; n < count; n += 1) listener?.('rename', `junk-${n}`);
  };
  return { state, fakeWatch, deliver };
}

async function watchedRoot(fakeWatch: typeof watch) {
  const rootDir = path.join(dir, 'root');
  const stateDir = path.join(dir, 'state');
  const relative = 'app/settings.json';
  await mkdir(path.join(rootDir, 'app'), { recursive: true });
  await writeFile(path.join(rootDir, relative), ORIGINAL, { mode: 0o644 });
  await new ContentCache(nodeFs as unknown as FsPort, stateDir).put(Buffer.from(ORIGINAL));
  const managed = new Map<string, ManagedFile>([
    [
      relative,
      {
        instanceId: 'cfg_1',
        sha256: sha256Hex(Buffer.from(ORIGINAL)),
        mode: 0o644,
        createdDirs: [],
        writtenAt: '2030-01-01T00:00:00.000Z',
      },
    ],
  ]);
  let tick = 0;
  watcher = new DriftWatcher({
    fs: nodeFs as unknown as FsPort,
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
    debounceMs: 1,
    directories: { watch: fakeWatch },
  });
  await watcher.start();
  return { file: path.join(rootDir, relative), rootDir };
}

it('a burst as large as a full queue delivers: every managed file is judged, the change lost with the overflow restored', async () => {
  const k = kernel();
  const { file, rootDir } = await watchedRoot(k.fakeWatch);
  k.state.overflowing = true;
  await writeFile(file, TAMPERED);
  // Let the lost events pass, then the queue's content arrives in one turn.
  await new Promise((resolve) => setTimeout(resolve, 50));
  k.state.overflowing = false;
  k.deliver(rootDir, BURST_EVENTS);
  expect(await eventually(async () => (await readFile(file, 'utf8')) === ORIGINAL)).toBe(true);
});
