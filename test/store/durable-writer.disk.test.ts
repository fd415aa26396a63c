// The durable writer on a real disk: inodes and mtimes, symlink attacks, FIFOs, a full tmpfs, EROFS.
// EACCES for an unprivileged agent needs the built writer: test/integration/unprivileged-writer.test.ts.
import { spawnSync } from 'node:child_process';
import { mkdtempSync, promises as nodeFs, rmSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import type { FsPort } from '../../src/lib/fs-port.js';
import {
  publishFile,
  readRegularFile,
  removeManagedFile,
  sweepTempFiles,
} from '../../src/store/durable-writer.js';
import { DiskError, PathRejectedError } from '../../src/store/errors.js';
import { TEMP_PREFIX } from '../../src/store/path-guard.js';

const fs: FsPort = nodeFs;
const BASE = mkdtempSync(path.join(os.tmpdir(), 'config-agent-disk-'));
const mounted: string[] = [];

function run(command: string, args: string[]): { ok: boolean; output: string } {
  const result = spawnSync(command, args, { encoding: 'utf8' });
  if (result.error) return { ok: false, output: result.error.message };
  return { ok: result.status === 0, output: `${result.stdout}${result.stderr}`.trim() };
}

/** Mounts with `args`; on failure returns why, so the dependent test can say why it was skipped. */
function tryMount(dir: string, ...argSets: string[][]): string | undefined {
  rmSync(dir, { recursive: true, force: true });
  spawnSync('mkdir', ['-p', dir]);
  for (const args of argSets) {
    const result = run('mount', [...args]);
    if (!result.ok) return `mount ${args.join(' ')} not permitted here: ${result.output || 'no output'}`;
    if (!mounted.includes(dir)) mounted.push(dir);
  }
  return undefined;
}

// Vitest decides skipIf at collection time, so the mounts are probed here rather than in beforeAll.
const SMALL = path.join(BASE, 'small');
const smallSkip = tryMount(SMALL, ['-t', 'tmpfs', '-o', 'size=64k,mode=0755', 'tmpfs', SMALL]);
const READ_ONLY = path.join(BASE, 'ro');
const readOnlySkip = (() => {
  rmSync(READ_ONLY, { recursive: true, force: true });
  spawnSync('mkdir', ['-p', READ_ONLY]);
  spawnSync('sh', ['-c', `printf old > '${READ_ONLY}/app.conf'`]);
  const bind = run('mount', ['--bind', READ_ONLY, READ_ONLY]);
  if (!bind.ok) return `bind mount not permitted here: ${bind.output}`;
  mounted.push(READ_ONLY);
  const ro = run('mount', ['-o', 'remount,bind,ro', READ_ONLY]);
  return ro.ok ? undefined : `read-only remount not permitted here: ${ro.output}`;
})();
for (const reason of [smallSkip, readOnlySkip]) {
  if (reason !== undefined) process.stderr.write(`durable-writer.disk.test: skipping a test: ${reason}\n`);
}

afterAll(() => {
  for (const dir of mounted.reverse()) run('umount', [dir]);
  rmSync(BASE, { recursive: true, force: true });
});

let counter = 0;
async function freshRoot(): Promise<string> {
  counter += 1;
  const dir = path.join(BASE, `case-${counter}`);
  await nodeFs.mkdir(path.join(dir, 'root'), { recursive: true });
  return dir;
}

/** Every entry under `dir` with its type, mode, inode, mtime and bytes: equal snapshots mean nothing changed. */
async function snapshot(dir: string): Promise<Record<string, string>> {
  const out: Record<string, string> = {};
  const walk = async (current: string): Promise<void> => {
    for (const entry of await nodeFs.readdir(current, { withFileTypes: true })) {
      const full = path.join(current, entry.name);
      const stats = await nodeFs.lstat(full, { bigint: true });
      const meta = `${stats.mode.toString(8)} ino=${stats.ino} mtime=${stats.mtimeNs}`;
      if (entry.isSymbolicLink()) out[full] = `${meta} -> ${await nodeFs.readlink(full)}`;
      else if (entry.isDirectory()) {
        out[full] = `${meta} dir`;
        await walk(full);
      } else if (entry.isFile()) out[full] = `${meta} ${(await nodeFs.readFile(full)).toString('base64')}`;
      else out[full] = `${meta} special`;
    }
  };
  await walk(dir);
  return out;
}

async function tempFilesUnder(dir: string): Promise<string[]> {
  return Object.keys(await snapshot(dir)).filter((p) => path.basename(p).startsWith(TEMP_PREFIX));
}

const publish = (rootDir: string, relativePath: string, data: Buffer | string, mode = 0o644) =>
  publishFile(fs, { rootDir, relativePath, data: Buffer.from(data), mode, dirMode: 0o770 });

describe('publishFile on a real disk', () => {
  it('writes bytes, mode and dirMode exactly (the umask does not apply) and leaves no temp file', async () => {
    const root = path.join(await freshRoot(), 'root');
    const previousUmask = process.umask(0o077);
    try {
      const result = await publish(root, 'etc/app/config.json', '{"a":1}', 0o644);
      expect(result.createdDirs).toEqual(['etc', 'etc/app']);
    } finally {
      process.umask(previousUmask);
    }
    expect(await nodeFs.readFile(path.join(root, 'etc/app/config.json'), 'utf8')).toBe('{"a":1}');
    expect((await nodeFs.stat(path.join(root, 'etc/app/config.json'))).mode & 0o7777).toBe(0o644);
    expect((await nodeFs.stat(path.join(root, 'etc'))).mode & 0o7777).toBe(0o770);
    expect((await nodeFs.stat(path.join(root, 'etc/app'))).mode & 0o7777).toBe(0o770);
    expect(await tempFilesUnder(root)).toEqual([]);
  });

  it('leaves inode and mtime untouched when unchanged, and replaces the inode when content changes', async () => {
    const root = path.join(await freshRoot(), 'root');
    const file = path.join(root, 'app.conf');
    await publish(root, 'app.conf', 'v1');
    const first = await nodeFs.stat(file, { bigint: true });
    await new Promise((resolve) => setTimeout(resolve, 20));
    expect((await publish(root, 'app.conf', 'v1')).outcome).toBe('unchanged');
    const same = await nodeFs.stat(file, { bigint: true });
    expect([same.ino, same.mtimeNs, same.ctimeNs]).toEqual([first.ino, first.mtimeNs, first.ctimeNs]);
    expect((await publish(root, 'app.conf', 'v2')).outcome).toBe('written');
    const replaced = await nodeFs.stat(file, { bigint: true });
    expect(replaced.ino).not.toBe(first.ino);
    expect(await nodeFs.readFile(file, 'utf8')).toBe('v2');
    expect(await tempFilesUnder(root)).toEqual([]);
  });

  it('removes the file and prunes the dirs it created, keeping a dir someone else filled', async () => {
    const root = path.join(await freshRoot(), 'root');
    const { createdDirs } = await publish(root, 'a/b/c/app.conf', 'x');
    await nodeFs.writeFile(path.join(root, 'a/operator-notes'), 'mine');
    expect(
      await removeManagedFile(fs, { rootDir: root, relativePath: 'a/b/c/app.conf', pruneDirs: createdDirs }),
    ).toBe('removed');
    expect(await nodeFs.readdir(root, { recursive: true })).toEqual(['a', 'a/operator-notes']);
  });
});

describe('hostile filesystem on a real disk', () => {
  it('never writes, reads or deletes through symlinks into a sentinel dir beside the root', async () => {
    const base = await freshRoot();
    const root = path.join(base, 'root');
    const sentinel = path.join(base, 'sentinel');
    await nodeFs.mkdir(path.join(sentinel, 'sub'), { recursive: true });
    await nodeFs.writeFile(path.join(sentinel, 'secret'), 'precious');
    await nodeFs.writeFile(path.join(sentinel, `${TEMP_PREFIX}lookalike`), 'not ours');
    await nodeFs.mkdir(path.join(root, 'real'));
    await nodeFs.symlink('../sentinel', path.join(root, 'evil'));
    await nodeFs.symlink('../../sentinel', path.join(root, 'real', 'deeper'));
    await nodeFs.symlink('../sentinel/secret', path.join(root, 'link.conf'));
    await nodeFs.symlink('../sentinel/created-by-attack', path.join(root, 'dangling.conf'));
    const before = await snapshot(base);

    for (const target of [
      'evil/secret',
      'evil/new.conf',
      'evil/sub/new.conf',
      'evil/x/y/z.conf',
      'real/deeper/secret',
    ]) {
      await expect(publish(root, target, 'pwned')).rejects.toMatchObject({ rule: 'crosses_symlink' });
      await expect(readRegularFile(fs, root, target)).rejects.toBeInstanceOf(PathRejectedError);
      await expect(
        removeManagedFile(fs, { rootDir: root, relativePath: target, pruneDirs: [] }),
      ).rejects.toBeInstanceOf(PathRejectedError);
    }
    for (const target of ['link.conf', 'dangling.conf']) {
      await expect(publish(root, target, 'pwned')).rejects.toMatchObject({ rule: 'crosses_symlink' });
      await expect(readRegularFile(fs, root, target)).rejects.toMatchObject({ rule: 'crosses_symlink' });
      expect(await removeManagedFile(fs, { rootDir: root, relativePath: target, pruneDirs: ['evil'] })).toBe(
        'refused',
      );
    }
    expect(await sweepTempFiles(fs, root)).toEqual([]);
    expect(await snapshot(base)).toEqual(before);
  });

  it('refuses a FIFO at the target without blocking on it', async () => {
    const root = path.join(await freshRoot(), 'root');
    expect(run('mkfifo', [path.join(root, 'pipe.conf')]).ok).toBe(true);
    const before = await snapshot(root);
    await expect(publish(root, 'pipe.conf', 'x')).rejects.toMatchObject({ rule: 'target_not_regular_file' });
    await expect(readRegularFile(fs, root, 'pipe.conf')).rejects.toMatchObject({
      rule: 'target_not_regular_file',
    });
    expect(await removeManagedFile(fs, { rootDir: root, relativePath: 'pipe.conf', pruneDirs: [] })).toBe(
      'refused',
    );
    expect(await snapshot(root)).toEqual(before);
  });

  it('sweeps temp files left in nested dirs and reports their relative paths', async () => {
    const root = path.join(await freshRoot(), 'root');
    await nodeFs.mkdir(path.join(root, 'a/b'), { recursive: true });
    await nodeFs.writeFile(path.join(root, `a/b/${TEMP_PREFIX}0123`), 'torn');
    await nodeFs.writeFile(path.join(root, 'a/b/app.conf'), 'keep');
    expect(await sweepTempFiles(fs, root)).toEqual([`a/b/${TEMP_PREFIX}0123`]);
    expect(await nodeFs.readdir(path.join(root, 'a/b'))).toEqual(['app.conf']);
  });
});

describe('disk failures on a real disk', () => {
  it.skipIf(smallSkip !== undefined)(
    `fails with ENOSPC on a full 64 KiB tmpfs, keeping the old file and no temp file${smallSkip ? ` (skipped: ${smallSkip})` : ''}`,
    async () => {
      const old = Buffer.alloc(8 * 1024, 'o');
      await publish(SMALL, 'app.bin', old);
      const before = await snapshot(SMALL);
      const error = await publish(SMALL, 'app.bin', Buffer.alloc(100 * 1024, 'n')).catch((e: unknown) => e);
      expect(error).toBeInstanceOf(DiskError);
      expect(error).toMatchObject({ code: 'disk_error', errno: 'ENOSPC', retryable: true, path: 'app.bin' });
      expect((error as DiskError).message).toMatch(/"app\.bin".*ENOSPC/);
      expect(await snapshot(SMALL)).toEqual(before);
      // The temp file's blocks were given back: a write that fits succeeds right after.
      expect((await publish(SMALL, 'app.bin', Buffer.alloc(16 * 1024, 'm'))).outcome).toBe('written');
    },
  );

  it.skipIf(readOnlySkip !== undefined)(
    `fails with EROFS on a read-only mount, keeping the old file${readOnlySkip ? ` (skipped: ${readOnlySkip})` : ''}`,
    async () => {
      const before = await snapshot(READ_ONLY);
      await expect(publish(READ_ONLY, 'app.conf', 'new')).rejects.toMatchObject({
        code: 'disk_error',
        errno: 'EROFS',
      });
      await expect(publish(READ_ONLY, 'new/dir/app.conf', 'new')).rejects.toMatchObject({ errno: 'EROFS' });
      await expect(
        removeManagedFile(fs, { rootDir: READ_ONLY, relativePath: 'app.conf', pruneDirs: [] }),
      ).rejects.toMatchObject({ errno: 'EROFS' });
      expect(await snapshot(READ_ONLY)).toEqual(before);
    },
  );
});
