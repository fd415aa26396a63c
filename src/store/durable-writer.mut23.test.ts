// durable-writer.ts against the mutants Stryker left alive (mut23): syncDirectories' walks on a port without /proc, a deeper failed publish's rollback, both after a power cut.
import path from 'node:path';
import { Volume } from 'memfs';
import { expect, it } from 'vitest';
import { memfsPort } from '../../test/helpers/memfs.js';
import { PowerCutFs } from '../../test/helpers/power-cut-fs.js';
import type { FsPort } from '../lib/fs-port.js';
import { publishFile, syncDirectories } from './durable-writer.js';
import { VerifiedDirectories } from './path-guard.js';

const ROOT = '/srv/config';

async function world() {
  const vol = new Volume();
  vol.mkdirSync(ROOT, { recursive: true });
  const model = await PowerCutFs.over(memfsPort(vol), ROOT);
  return { vol, model };
}

it('the root alone, not a stable directory of the batch: its new entries survive a power cut', async () => {
  const { model } = await world();
  await model.fs.mkdir(path.join(ROOT, 'x'), { mode: 0o755 });

  const failures = await syncDirectories(model.fs, ROOT, [''], { verified: new VerifiedDirectories(0) });

  expect([...failures.keys()]).toEqual([]);
  // Before any fsync the cut takes it: the root's walk is what fsynced it.
  expect(model.afterPowerCut()).toMatchObject({ x: 'dir' });
});

it('the root and a chain below it on one walk: each one fsynced, every new entry survives a power cut', async () => {
  const { model } = await world();
  await model.fs.mkdir(path.join(ROOT, 'a'), { mode: 0o755 });
  await model.fs.mkdir(path.join(ROOT, 'a', 'b'), { mode: 0o755 });
  await model.fs.mkdir(path.join(ROOT, 'a', 'b', 'c'), { mode: 0o755 });

  const failures = await syncDirectories(model.fs, ROOT, ['', 'a', 'a/b'], {
    verified: new VerifiedDirectories(0),
  });

  expect([...failures.keys()]).toEqual([]);
  expect(model.afterPowerCut()).toMatchObject({ a: 'dir', 'a/b': 'dir', 'a/b/c': 'dir' });
});

it('a failed publish three directories deep removes all three durably: none comes back after a power cut', async () => {
  const { vol, model } = await world();
  const fs: FsPort = {
    ...model.fs,
    rename: (async (from: string, to: string) => {
      if (path.relative(ROOT, String(to)) === 'a/b/c/x.json')
        throw Object.assign(new Error('ENOSPC: no space left on device, rename'), { code: 'ENOSPC' });
      return model.fs.rename(from, to);
    }) as FsPort['rename'],
  };
  await expect(
    publishFile(fs, {
      rootDir: ROOT,
      relativePath: 'a/b/c/x.json',
      data: Buffer.from('{}\n'),
      mode: 0o640,
      dirMode: 0o750,
    }),
  ).rejects.toMatchObject({ code: 'disk_error', errno: 'ENOSPC' });
  expect(vol.existsSync(path.join(ROOT, 'a'))).toBe(false);
  // The top one's removal is fsynced in the root, not in a directory removed with it.
  expect(Object.keys(model.afterPowerCut()).filter((entry) => entry.startsWith('a'))).toEqual([]);
});
