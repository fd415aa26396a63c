// The per-batch cache of stable directories: what it trusts (only chains nobody else can write) and that a
// symlink swapped into any other chain during a batch is still refused, before the write and before the rename.
import type { Stats } from 'node:fs';
import * as nodeFs from 'node:fs/promises';
import { chmod, chown, mkdir, mkdtemp, readdir, rename, rm, symlink, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import type { FsPort } from '../lib/fs-port.js';
import { publishFile } from './durable-writer.js';
import { PathRejectedError } from './errors.js';
import { inspectPath, TEMP_PREFIX, VerifiedDirectories } from './path-guard.js';

const UID = process.geteuid?.() ?? 0;
const isRoot = UID === 0;

function stats(uid: number, mode: number): Stats {
  return { uid, mode: 0o040000 | mode } as Stats;
}

describe('VerifiedDirectories.sealed', () => {
  it("trusts a directory owned by the agent's user or root and writable by neither group nor others", () => {
    const verified = new VerifiedDirectories(1000);
    expect(verified.sealed(stats(1000, 0o755))).toBe(true);
    expect(verified.sealed(stats(0, 0o755))).toBe(true);
    expect(verified.sealed(stats(1000, 0o700))).toBe(true);
    expect(verified.sealed(stats(1000, 0o1755))).toBe(true);
    expect(verified.sealed(stats(1001, 0o755))).toBe(false);
    expect(verified.sealed(stats(1000, 0o775))).toBe(false);
    expect(verified.sealed(stats(1000, 0o757))).toBe(false);
    expect(verified.sealed(stats(0, 0o1777))).toBe(false);
    expect(verified.sealed(stats(0, 0o770))).toBe(false);
  });
});

let dir: string;
let root: string;
let outside: string;

beforeEach(async () => {
  dir = await mkdtemp(path.join(os.tmpdir(), 'config-agent-verified-'));
  root = path.join(dir, 'root');
  outside = path.join(dir, 'outside');
  await mkdir(root, { mode: 0o755 });
  await chmod(root, 0o755);
  await mkdir(outside, { mode: 0o777 });
});

afterEach(async () => {
  await rm(dir, { recursive: true, force: true });
});

const publish = (fs: FsPort, relativePath: string, verified: VerifiedDirectories, text = 'v1\n') =>
  publishFile(fs, {
    rootDir: root,
    relativePath,
    data: Buffer.from(text),
    mode: 0o644,
    dirMode: 0o755,
    syncDirectory: false,
    verified,
  });

/** An fs that, once, replaces `victim` (relative to the root) by a symlink to `outside` right after a temp file is created. */
function swappingFs(victim: string): FsPort & { swapped: () => boolean } {
  let done = false;
  const open = (async (file: string, ...rest: unknown[]) => {
    const handle = await (nodeFs.open as (...args: unknown[]) => Promise<nodeFs.FileHandle>)(file, ...rest);
    if (!done && path.basename(String(file)).startsWith(TEMP_PREFIX)) {
      done = true;
      const target = path.join(root, victim);
      await rename(target, `${target}-moved`);
      await symlink(outside, target);
    }
    return handle;
  }) as FsPort['open'];
  return { ...nodeFs, open, swapped: () => done };
}

describe('publishFile with a batch of verified directories', () => {
  it('a sealed tree: every file of the batch lands with its bytes; the cache knows the chain as stable', async () => {
    const verified = new VerifiedDirectories(UID);
    const paths = ['a/b/one.json', 'a/b/two.json', 'a/c/three.json', 'top.json'];
    for (const relativePath of paths) await publish(nodeFs, relativePath, verified, `${relativePath}\n`);
    for (const relativePath of paths) {
      expect(await nodeFs.readFile(path.join(root, relativePath), 'utf8')).toBe(`${relativePath}\n`);
    }
    expect(['', 'a', 'a/b', 'a/c'].map((relative) => verified.has(relative))).toEqual([
      true,
      true,
      true,
      true,
    ]);
    expect((await inspectPath(nodeFs, root, 'a/b/one.json', verified)).stableParent).toBe(true);
  });

  it('a directory writable by others is never trusted: a symlink swapped in under it before the rename is refused', async () => {
    const verified = new VerifiedDirectories(UID);
    await mkdir(path.join(root, 'shared/app'), { recursive: true });
    await chmod(path.join(root, 'shared'), 0o777);
    await publish(nodeFs, 'shared/app/first.json', verified);
    expect(verified.has('shared')).toBe(false);
    expect(verified.has('shared/app')).toBe(false);

    const fs = swappingFs('shared/app');
    await expect(publish(fs, 'shared/app/second.json', verified)).rejects.toBeInstanceOf(PathRejectedError);
    expect(fs.swapped()).toBe(true);
    expect(await readdir(outside)).toEqual([]);
    // And a later walk of the same batch sees the symlink too.
    await expect(publish(nodeFs, 'shared/app/third.json', verified)).rejects.toBeInstanceOf(
      PathRejectedError,
    );
    expect(await readdir(outside)).toEqual([]);
  });

  it('a root writable by others: its children are checked on every walk', async () => {
    await chmod(root, 0o1777);
    const verified = new VerifiedDirectories(UID);
    await publish(nodeFs, 'app/first.json', verified);
    expect(verified.has('')).toBe(false);
    expect(verified.has('app')).toBe(false);
    const fs = swappingFs('app');
    await expect(publish(fs, 'app/second.json', verified)).rejects.toBeInstanceOf(PathRejectedError);
    expect(await readdir(outside)).toEqual([]);
  });

  it.skipIf(!isRoot)(
    'a directory owned by another user (who could swap what is in it) is checked on every walk',
    async () => {
      const verified = new VerifiedDirectories(UID);
      await mkdir(path.join(root, 'theirs/app'), { recursive: true });
      await chown(path.join(root, 'theirs'), 65534, 65534);
      await publish(nodeFs, 'theirs/app/first.json', verified);
      expect(verified.has('theirs')).toBe(false);
      const fs = swappingFs('theirs/app');
      await expect(publish(fs, 'theirs/app/second.json', verified)).rejects.toBeInstanceOf(PathRejectedError);
      expect(await readdir(outside)).toEqual([]);
    },
  );

  it('only directories are remembered: a parent that is missing, then made by another write, is found', async () => {
    const verified = new VerifiedDirectories(UID);
    const first = await inspectPath(nodeFs, root, 'late/x.json', verified);
    expect(first.existingParents).toBe(0);
    await publish(nodeFs, 'late/y.json', verified);
    const second = await inspectPath(nodeFs, root, 'late/x.json', verified);
    expect(second.existingParents).toBe(1);
    await writeFile(path.join(root, 'late/x.json'), 'x');
    expect((await inspectPath(nodeFs, root, 'late/x.json', verified)).final?.isFile()).toBe(true);
  });
});
