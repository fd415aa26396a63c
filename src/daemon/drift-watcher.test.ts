// DriftWatcher in a real temp dir: a managed file changed by someone else is reported, in any directory, however
// it changed (one watch per directory); one judged while a pass started is judged again after it (the pass
// generation of SingleFlight), so the agent's own write is not drift.
import { writeFileSync } from 'node:fs';
import * as nodeFs from 'node:fs/promises';
import { chmod, mkdir, mkdtemp, rename, rm, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { systemClock } from '../lib/clock.js';
import type { FsPort } from '../lib/fs-port.js';
import { sha256Hex } from '../lib/hash.js';
import { silentLogger } from '../lib/logger.js';
import type { ManagedFile } from '../store/state.js';
import { DriftWatcher } from './drift-watcher.js';
import { SingleFlight } from './single-flight.js';

const ORIGINAL = '{"a":1}\n';
const cleanups: Array<() => Promise<void>> = [];

afterEach(async () => {
  for (const cleanup of cleanups.splice(0).reverse()) await cleanup();
});

/** Turns of the event loop until `done` holds; bounded, and it asserts nothing about how long that took. */
async function eventually(done: () => boolean, what: string): Promise<void> {
  for (let turn = 0; turn < 400; turn += 1) {
    if (done()) return;
    await new Promise((resolve) => setTimeout(resolve, 10));
  }
  throw new Error(`never happened: ${what}`);
}

function managedFile(bytes: string): ManagedFile {
  return {
    instanceId: 'cfg_1',
    sha256: sha256Hex(Buffer.from(bytes)),
    mode: 0o644,
    createdDirs: [],
    writtenAt: '2030-01-01T00:00:00.000Z',
  };
}

/** A root holding `files` (relative path → bytes, mode 0644), all managed, watched under policy `report`. */
async function watchedRoot(
  fs: FsPort,
  passes: SingleFlight<unknown>,
  files: readonly string[] = ['app.json'],
) {
  const rootDir = await mkdtemp(path.join(os.tmpdir(), 'config-agent-drift-'));
  const managed = new Map<string, ManagedFile>();
  for (const file of files) {
    await mkdir(path.dirname(path.join(rootDir, file)), { recursive: true });
    await writeFile(path.join(rootDir, file), ORIGINAL, { mode: 0o644 });
    managed.set(file, managedFile(ORIGINAL));
  }
  const drifts: string[][] = [];
  const watcher = new DriftWatcher({
    fs,
    rootDir,
    policy: 'report',
    logger: silentLogger(),
    managedFiles: () => managed,
    passes,
    onDrift: (paths) => drifts.push(paths),
    // Real kernel events here, merged over real time (drift-debounce.test.ts pins the debounce on a fake clock).
    clock: systemClock,
    debounceMs: 20,
  });
  await watcher.start();
  cleanups.push(async () => {
    await watcher.close();
    await rm(rootDir, { recursive: true, force: true });
  });
  /** The paths reported (since the `since`-th report), each once, sorted. */
  const reported = (since = 0) => [...new Set(drifts.slice(since).flat())].sort();
  return { rootDir, drifts, managed, reported };
}

const NESTED = ['top.json', 'a/one.json', 'a/two.json', 'a/b/three.json', 'a/b/four.json', 'c/five.json'];

describe('DriftWatcher', () => {
  it('reports a managed file whose bytes someone else changed', async () => {
    const passes = new SingleFlight(async () => undefined);
    const { rootDir, drifts, reported } = await watchedRoot(nodeFs, passes);
    await writeFile(path.join(rootDir, 'app.json'), '{"a":2}\n');
    await eventually(() => drifts.length > 0, 'a drift report');
    // writeFile truncates, then writes: on a busy machine the two inotify events can fall into two debounce
    // windows, and each judgement finds the file drifted (empty, then other bytes).
    expect(reported()).toEqual(['app.json']);
  });

  it('a verdict reached while a pass started is judged again: the pass restored the file, no drift', async () => {
    const passes = new SingleFlight(async () => undefined);
    let rootDir = '';
    let opens = 0;
    // The first read of the file sees the drifted bytes; meanwhile a pass starts and writes the file back
    // (a rename over it, as the durable writer does), so the verdict on those bytes is stale.
    const racingFs: FsPort = {
      ...nodeFs,
      open: (async (...args: Parameters<typeof nodeFs.open>) => {
        const handle = await nodeFs.open(...args);
        opens += 1;
        if (opens === 1) {
          void passes.trigger();
          writeFileSync(path.join(rootDir, '.restore'), ORIGINAL, { mode: 0o644 });
          await nodeFs.rename(path.join(rootDir, '.restore'), path.join(rootDir, 'app.json'));
        }
        return handle;
      }) as typeof nodeFs.open,
    };
    const watched = await watchedRoot(racingFs, passes);
    rootDir = watched.rootDir;
    await writeFile(path.join(rootDir, 'app.json'), '{"a":2}\n');
    await eventually(() => opens >= 2 || watched.drifts.length > 0, 'a second judgement or a verdict');
    await new Promise((resolve) => setTimeout(resolve, 100));
    expect(watched.drifts).toEqual([]);
    expect(passes.generation).toBe(1);
  });

  it('sees every managed file in every directory: written, re-moded, deleted, replaced by a rename', async () => {
    const passes = new SingleFlight(async () => undefined);
    const { rootDir, reported } = await watchedRoot(nodeFs, passes, NESTED);
    await writeFile(path.join(rootDir, 'top.json'), '{"a":2}\n');
    await writeFile(path.join(rootDir, 'a/one.json'), '{"a":2}\n');
    await chmod(path.join(rootDir, 'a/two.json'), 0o600);
    await rm(path.join(rootDir, 'a/b/three.json'));
    await writeFile(path.join(rootDir, 'a/b/new.json'), '{"a":3}\n');
    await rename(path.join(rootDir, 'a/b/new.json'), path.join(rootDir, 'a/b/four.json'));
    await writeFile(path.join(rootDir, 'c/five.json'), ORIGINAL, { flag: 'a' });
    await eventually(() => reported().length === NESTED.length, 'every managed file reported');
    expect(reported()).toEqual([...NESTED].sort());
  });

  it('a directory above managed files renamed away or removed: each managed file in it is reported', async () => {
    const passes = new SingleFlight(async () => undefined);
    const { rootDir, reported } = await watchedRoot(nodeFs, passes, NESTED);
    await rename(path.join(rootDir, 'a'), path.join(rootDir, 'a.moved'));
    await rm(path.join(rootDir, 'c'), { recursive: true });
    const expected = NESTED.filter((file) => file !== 'top.json').sort();
    await eventually(() => reported().length === expected.length, 'the files under both directories');
    expect(reported()).toEqual(expected);
  });

  it('a directory made after the start, and one put back in place of a removed one, are watched', async () => {
    const passes = new SingleFlight(async () => undefined);
    const { rootDir, managed, drifts, reported } = await watchedRoot(nodeFs, passes, NESTED);
    // The agent's pass makes a new directory and a file in it, and puts back a directory someone removed.
    await rm(path.join(rootDir, 'c'), { recursive: true });
    await eventually(() => reported().includes('c/five.json'), 'the removed directory');
    for (const file of ['new/deep/six.json', 'c/five.json']) {
      await mkdir(path.dirname(path.join(rootDir, file)), { recursive: true });
      await writeFile(path.join(rootDir, file), ORIGINAL, { mode: 0o644 });
      managed.set(file, managedFile(ORIGINAL));
    }
    // Judged, unchanged: not drift. Then someone edits both.
    await new Promise((resolve) => setTimeout(resolve, 200));
    expect(reported()).toEqual(['c/five.json']);
    const mark = drifts.length;
    await writeFile(path.join(rootDir, 'new/deep/six.json'), '{"a":2}\n');
    await writeFile(path.join(rootDir, 'c/five.json'), '{"a":2}\n');
    await eventually(() => reported(mark).length === 2, 'both files');
    expect(reported(mark)).toEqual(['c/five.json', 'new/deep/six.json']);
  });

  it('a file of another length than the one written is drift, found without reading it', async () => {
    const passes = new SingleFlight(async () => undefined);
    const bytesRead = new Map<string, number>();
    const meteredFs: FsPort = {
      ...nodeFs,
      open: (async (...args: Parameters<typeof nodeFs.open>) => {
        const handle = await nodeFs.open(...args);
        const read = handle.read.bind(handle);
        const name = path.basename(String(args[0]));
        return Object.assign(handle, {
          read: async (...rest: unknown[]) => {
            const result = await (read as (...a: unknown[]) => Promise<{ bytesRead: number }>)(...rest);
            bytesRead.set(name, (bytesRead.get(name) ?? 0) + result.bytesRead);
            return result;
          },
        });
      }) as typeof nodeFs.open,
    };
    const { rootDir, drifts, managed, reported } = await watchedRoot(meteredFs, passes, [
      'big.json',
      'same.json',
    ]);
    for (const [file, record] of managed) managed.set(file, { ...record, size: ORIGINAL.length });
    // A sparse file of 64 MiB stands for a terabyte one: read to the end, it held the watcher most of an hour.
    await nodeFs.truncate(path.join(rootDir, 'big.json'), 64 * 1024 * 1024);
    await writeFile(path.join(rootDir, 'same.json'), '{"a":2}\n');
    await eventually(() => reported().length === 2, 'both files');
    expect(reported()).toEqual(['big.json', 'same.json']);
    expect(drifts.length).toBeGreaterThan(0);
    expect(bytesRead.get('big.json') ?? 0).toBe(0);
    expect(bytesRead.get('same.json')).toBeGreaterThan(0);
  });
});
