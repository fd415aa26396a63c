// A mount below rootDir that stops answering (a dead NFS server, a wedged FUSE daemon) fails its files alone, bounded.
import type { ChildProcess } from 'node:child_process';
import { spawnSync } from 'node:child_process';
import * as nodeFs from 'node:fs/promises';
import { chmod, mkdir, mkdtemp, readdir, readFile, rm } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { canMountFuse, hungFuseMount } from '../../test/helpers/hung-fuse.js';
import { nodeDescriptorCalls } from '../lib/descriptor-calls.js';
import type { FsPort } from '../lib/fs-port.js';
import { observeDisk } from '../reconcile/observe.js';
import { publishFile, removeManagedFile } from '../store/durable-writer.js';
import { hangSafeFs } from './hang-safe-fs.js';
import { gateMountsThatMayHang } from './mount-gate.js';

const ROOT = '/srv/root';

/** Sleeps that end only when the test says: `expire()` ends every sleep begun so far (the bound has passed). */
function controlledClock() {
  const pending: (() => void)[] = [];
  return {
    clock: {
      sleep: (_ms: number, signal?: AbortSignal) =>
        new Promise<void>((resolve, reject) => {
          pending.push(resolve);
          signal?.addEventListener('abort', () => reject(signal.reason), { once: true });
        }),
    },
    expire: () => {
      for (const end of pending.splice(0)) end();
    },
  };
}

/** An fs whose lstat of a path under ROOT/share never answers until `answer()`: a mount nobody serves. */
function hangingShare() {
  const held: (() => void)[] = [];
  let hanging = true;
  const fs = {
    lstat: (file: string) =>
      file.startsWith(`${ROOT}/share/`) && hanging
        ? new Promise((resolve) => held.push(() => resolve({ file })))
        : Promise.resolve({ file }),
  } as unknown as FsPort;
  return {
    fs,
    answer: () => {
      hanging = false;
      for (const finish of held.splice(0)) finish();
    },
  };
}

describe('gateMountsThatMayHang', () => {
  it('a call past the bound fails with ETIMEDOUT, later ones into that mount fail at once, others answer; once it answers, calls go in again', async () => {
    const { clock, expire } = controlledClock();
    const world = hangingShare();
    const fs = gateMountsThatMayHang(world.fs, ROOT, () => new Set(['share']), clock, 15_000);
    const first = fs.lstat(`${ROOT}/share/a.json`).catch((error: unknown) => error);
    // Queued behind the call in progress, not sent: one call at a time into the mount.
    const queued = fs.lstat(`${ROOT}/share/b.json`).catch((error: unknown) => error);
    expect(await fs.lstat(`${ROOT}/app/c.json`)).toEqual({ file: `${ROOT}/app/c.json` });
    expire();
    expect(await first).toMatchObject({ code: 'ETIMEDOUT', mountPoint: `${ROOT}/share` });
    expect(await queued).toMatchObject({ code: 'ETIMEDOUT' });
    // Until the late call comes back, none goes in.
    await expect(fs.lstat(`${ROOT}/share/d.json`)).rejects.toMatchObject({ code: 'ETIMEDOUT' });
    expect(await fs.lstat(`${ROOT}/shared/e.json`)).toEqual({ file: `${ROOT}/shared/e.json` });
    world.answer();
    await new Promise((resolve) => setImmediate(resolve));
    expect(await fs.lstat(`${ROOT}/share/d.json`)).toEqual({ file: `${ROOT}/share/d.json` });
  });
});

describe('gateMountsThatMayHang on a mount that answers', () => {
  let dir: string | undefined;
  afterEach(async () => {
    if (dir !== undefined) await rm(dir, { recursive: true, force: true });
    dir = undefined;
  });

  it('writes, reads and removes through it as before: its FileHandles, descriptors and pinned parents (a chain others may change)', async () => {
    dir = await mkdtemp(path.join(os.tmpdir(), 'config-agent-mount-gate-ok-'));
    const root = path.join(dir, 'root');
    await mkdir(path.join(root, 'share'), { recursive: true });
    // Writable by others: the writer pins the parent and names the temp file through /proc/self/fd.
    await chmod(path.join(root, 'share'), 0o777);
    const { clock } = controlledClock();
    const base = { ...(nodeFs as unknown as FsPort), descriptors: nodeDescriptorCalls };
    const fs = gateMountsThatMayHang(base, root, () => new Set(['share']), clock);
    for (const content of ['{"v":1}\n', '{"v":2}\n']) {
      await publishFile(fs, {
        rootDir: root,
        relativePath: 'share/deep/b.json',
        data: Buffer.from(content),
        mode: 0o644,
        dirMode: 0o755,
      });
      expect(await readFile(path.join(root, 'share/deep/b.json'), 'utf8')).toBe(content);
    }
    const observed = await observeDisk(fs, root, [{ relative_filepath: 'share/deep/b.json' }]);
    expect(observed.get('share/deep/b.json')).toMatchObject({ kind: 'file' });
    expect(
      await removeManagedFile(fs, {
        rootDir: root,
        relativePath: 'share/deep/b.json',
        pruneDirs: ['share/deep'],
      }),
    ).toBe('removed');
    expect(await readdir(path.join(root, 'share'))).toEqual([]);
  });
});

// Root with /dev/fuse only (hungFuseMount), as hang-safe-fs.test.ts.
describe.runIf(canMountFuse)('hangSafeFs with a hung FUSE mount below rootDir (gaps18)', () => {
  let dir: string | undefined;
  let mount: ChildProcess | undefined;
  afterEach(async () => {
    mount?.kill('SIGKILL');
    if (dir !== undefined) {
      spawnSync('umount', ['-l', path.join(dir, 'root', 'share')]);
      await rm(dir, { recursive: true, force: true, maxRetries: 20, retryDelay: 20 });
    }
    mount = undefined;
    dir = undefined;
  });

  it('observation and a write into it fail that file (ETIMEDOUT) and end; a file beside it is written', async () => {
    dir = await mkdtemp(path.join(os.tmpdir(), 'config-agent-mount-gate-'));
    const root = path.join(dir, 'root');
    await mkdir(path.join(root, 'share'), { recursive: true });
    await mkdir(path.join(root, 'app'));
    mount = await hungFuseMount(path.join(root, 'share'), 120_000);
    // The bound passes at once: a mount nobody serves never answers before it.
    const fs = await hangSafeFs(root, {
      monotonic: () => 0,
      sleep: () => new Promise<void>((resolve) => setImmediate(resolve)),
    });
    const observed = await observeDisk(fs, root, [
      { relative_filepath: 'share/b.json' },
      { relative_filepath: 'app/a.json' },
    ]);
    // Before: observation waited on the mount for good (the test's timeout).
    expect(observed.get('share/b.json')).toMatchObject({ kind: 'unreadable' });
    expect(observed.get('app/a.json')).toEqual({ kind: 'absent' });
    const write = (relativePath: string) =>
      publishFile(fs, {
        rootDir: root,
        relativePath,
        data: Buffer.from('{}\n'),
        mode: 0o644,
        dirMode: 0o755,
      });
    await expect(write('share/b.json')).rejects.toMatchObject({ code: 'disk_error', errno: 'ETIMEDOUT' });
    expect(await write('app/a.json')).toBeDefined();
    expect(await readFile(path.join(root, 'app/a.json'), 'utf8')).toBe('{}\n');
    expect(mount.exitCode === null && mount.signalCode === null, 'the mount still hangs').toBe(true);
  }, 60_000);
});
