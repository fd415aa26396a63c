// The drift watcher on a mount that may hang (NFS, FUSE): no synchronous fs.watch there, its files judged on the poll.
import type { watch } from 'node:fs';
import * as nodeFs from 'node:fs/promises';
import { mkdtemp, rm } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { driftedFiles, manualClock, settle } from '../../test/helpers/drift-watched.js';
import type { FsPort } from '../lib/fs-port.js';
import { silentLogger } from '../lib/logger.js';
import { DriftWatcher } from './drift-watcher.js';
import { SingleFlight } from './single-flight.js';

const POLL_MS = 60_000;
const DEBOUNCE_MS = 300;
const cleanups: Array<() => Promise<void>> = [];

afterEach(async () => {
  for (const cleanup of cleanups.splice(0).reverse()) await cleanup();
});

/**
 * `names` under a new temp root, each holding bytes other than those recorded (drift), watched under `report` on a
 * manual clock. `fs` says which paths lie on a mount that may hang (`mayHangAt`); `watch` stands in for node:fs's,
 * and throws for those paths: a real one there could hold the event loop for good, which no test can wait out.
 */
async function world(options: {
  names: readonly string[];
  mayHangAt: (rootDir: string, file: string) => boolean;
  fs?: (base: FsPort, rootDir: string) => FsPort;
}) {
  const rootDir = await mkdtemp(path.join(os.tmpdir(), 'config-agent-drift-hang-'));
  const managed = await driftedFiles(rootDir, options.names);
  const mayHangAt = (file: string) => options.mayHangAt(rootDir, file);
  const base: FsPort = { ...(nodeFs as unknown as FsPort), mayHangAt };
  const fs = options.fs?.(base, rootDir) ?? base;
  const clock = manualClock();
  const drifts: string[][] = [];
  const watchStandIn = ((target: string) => {
    if (mayHangAt(target))
      throw new Error(`fs.watch on ${target}, a mount that may hang: the event loop held`);
    return { on: () => undefined, close: () => undefined };
  }) as unknown as typeof watch;
  const watcher = new DriftWatcher({
    fs,
    rootDir,
    policy: 'report',
    logger: silentLogger(),
    managedFiles: () => managed,
    passes: new SingleFlight(async () => undefined),
    onDrift: (paths) => drifts.push(paths),
    clock,
    debounceMs: DEBOUNCE_MS,
    pollMs: POLL_MS,
    directories: { watch: watchStandIn, maxQueuedEvents: 16_384 },
  });
  cleanups.push(async () => {
    await watcher.close();
    await rm(rootDir, { recursive: true, force: true });
  });
  return { rootDir, watcher, clock, drifts };
}

type World = Awaited<ReturnType<typeof world>>;

/**
 * Debounce windows passed on the clock until a drift beyond `before` is judged, or 40 of them (12 s, less than a
 * poll interval: no poll comes meanwhile) when none comes. The reads a poll or a change starts and the debounce
 * they arm take turns a busy machine may not give within one settle(): one window only (before) left a drift
 * unjudged at a load of ~20.
 */
async function debounceWindows(w: World, before: number): Promise<void> {
  await settle();
  for (let window = 0; window < 40 && w.drifts.length === before; window += 1) {
    w.clock.advance(DEBOUNCE_MS);
    await settle();
  }
}

/** One poll passed on the clock, and the debounce windows it needs. */
async function onePoll(w: World): Promise<void> {
  const before = w.drifts.length;
  w.clock.advance(POLL_MS);
  await debounceWindows(w, before);
}

describe('the drift watcher on a mount that may hang (mount22)', () => {
  // Before: DirectoryWatcher called fs.watch on rootDir (a synchronous lookup there: a mount that started hanging
  // after its lstat held the event loop); the stand-in's throw failed the start, and no drift was ever seen.
  it('rootDir on one: it starts with no fs.watch there, and a drifted file is judged on the next poll, not before', async () => {
    const w = await world({ names: ['app/a.json'], mayHangAt: () => true });
    await w.watcher.start();
    w.clock.advance(POLL_MS - 1);
    await settle();
    expect(w.drifts).toEqual([]);
    w.clock.advance(1);
    await debounceWindows(w, 0);
    expect(w.drifts).toEqual([['app/a.json']]);
  });

  // Before: the priority directory share/ got its fs.watch (the stand-in's throw only logged), and the file there
  // was never judged between passes.
  it('a mount below rootDir: its file is judged on the poll, the local one by its events as ever', async () => {
    const w = await world({
      names: ['share/s.json', 'app/a.json'],
      mayHangAt: (rootDir, file) =>
        file === path.join(rootDir, 'share') || file.startsWith(`${rootDir}/share/`),
    });
    await w.watcher.start();
    await onePoll(w);
    expect(w.drifts).toEqual([['share/s.json']]);
    w.watcher.noticeChange(path.join(w.rootDir, 'app/a.json'));
    await debounceWindows(w, 1);
    expect(w.drifts).toEqual([['share/s.json'], ['app/a.json']]);
  });

  it('a file whose mount does not answer (ETIMEDOUT) is no drift; judged again on the poll once it answers', async () => {
    let answering = false;
    const w = await world({
      names: ['app/a.json'],
      mayHangAt: () => true,
      fs: (base, rootDir) => {
        const timedOut = (file: unknown) =>
          !answering && typeof file === 'string' && file.startsWith(`${rootDir}/`)
            ? Promise.reject(
                Object.assign(new Error('ETIMEDOUT: the mount did not answer'), { code: 'ETIMEDOUT' }),
              )
            : undefined;
        return {
          ...base,
          open: ((file: string, ...rest: unknown[]) =>
            timedOut(file) ?? (base.open as (...a: unknown[]) => unknown)(file, ...rest)) as FsPort['open'],
          lstat: ((file: string, ...rest: unknown[]) =>
            timedOut(file) ?? (base.lstat as (...a: unknown[]) => unknown)(file, ...rest)) as FsPort['lstat'],
        };
      },
    });
    await w.watcher.start();
    await onePoll(w);
    expect(w.drifts).toEqual([]);
    answering = true;
    await onePoll(w);
    expect(w.drifts).toEqual([['app/a.json']]);
  });
});
