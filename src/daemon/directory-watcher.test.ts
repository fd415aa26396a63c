// The directory watcher's bound: a local process making directories under rootDir without end cannot grow the agent with them.
import { watch } from 'node:fs';
import * as nodeFs from 'node:fs/promises';
import { mkdir, mkdtemp, rm } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { afterEach, beforeEach, expect, it } from 'vitest';
import { DirectoryWatcher } from './directory-watcher.js';

let dir: string;

beforeEach(async () => {
  dir = await mkdtemp(path.join(os.tmpdir(), 'config-agent-dirwatch-'));
});

afterEach(async () => {
  await rm(dir, { recursive: true, force: true });
});

it('watches at most maxDirectories directories, tells it once, and raises no error for the rest', async () => {
  for (let n = 0; n < 30; n += 1) await mkdir(path.join(dir, `junk${n}`, 'deeper'), { recursive: true });
  const limits: number[] = [];
  const errors: unknown[] = [];
  const watcher = new DirectoryWatcher({
    fs: nodeFs,
    rootDir: dir,
    onChange: () => undefined,
    onError: (error) => errors.push(error),
    maxDirectories: 10,
    onLimit: (watched) => limits.push(watched),
  });
  try {
    await watcher.start();
    // rootDir (always watched, outside the cap) and 10 of the 60 below it.
    expect(watcher.size).toBe(11);
    expect(limits).toEqual([11]);
    expect(errors).toEqual([]);
  } finally {
    watcher.close();
  }
});

it('watches every directory of a tree under the limit', async () => {
  for (let n = 0; n < 5; n += 1) await mkdir(path.join(dir, `app${n}`, 'conf.d'), { recursive: true });
  const limits: number[] = [];
  const watcher = new DirectoryWatcher({
    fs: nodeFs,
    rootDir: dir,
    onChange: () => undefined,
    onError: () => undefined,
    onLimit: (watched) => limits.push(watched),
  });
  try {
    await watcher.start();
    expect(watcher.size).toBe(11);
    expect(limits).toEqual([]);
  } finally {
    watcher.close();
  }
});

it("at the kernel's inotify limit (watch throws ENOSPC): tells it once, raises no error, keeps the watches it has", async () => {
  for (let n = 0; n < 8; n += 1) await mkdir(path.join(dir, `app${n}`), { recursive: true });
  const limits: number[] = [];
  const errors: unknown[] = [];
  let room = 4;
  const watcher = new DirectoryWatcher({
    fs: nodeFs,
    rootDir: dir,
    onChange: () => undefined,
    onError: (error) => errors.push(error),
    onLimit: (watched) => limits.push(watched),
    // The root and three directories below it fit; every further watch finds max_user_watches used up.
    watch: ((...args: Parameters<typeof watch>) => {
      if (room === 0)
        throw Object.assign(new Error('ENOSPC: System limit for number of file watchers reached'), {
          code: 'ENOSPC',
        });
      room -= 1;
      return watch(...args);
    }) as typeof watch,
  });
  try {
    await watcher.start();
    expect(watcher.size).toBe(4);
    expect(limits).toEqual([4]);
    expect(errors).toEqual([]);
  } finally {
    watcher.close();
  }
});
