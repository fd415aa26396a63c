// The port's metadata calls and small reads on the calling thread only where the mount is local, and kernel filesystems never taken to hang (syncfs28): with the pool held busy and a hung FUSE mount.
import { constants, readFileSync } from 'node:fs';
import * as nodeFs from 'node:fs/promises';
import { mkdir, mkdtemp, rm, symlink, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { canMountFuse, hungFuseDir } from '../../test/helpers/hung-fuse.js';
import { PENDING, settledSoon, usePoolHolds } from '../../test/helpers/pool-hold.js';
import type { FsPort } from '../lib/fs-port.js';
import { sameRoot } from '../store/same-root.js';
import { readStateDirFile } from '../store/state.js';
import { hangSafeConfigCalls, hangSafeFs, mountHoldingThatMayHang } from './hang-safe-fs.js';
import { MountLanes } from './mount-gate.js';

const line = (id: number, mountPoint: string, type: string) =>
  `${id} 1 0:${id} / ${mountPoint} rw,relatime shared:${id} - ${type} src rw`;

describe('hangSafeFs: stateDir and rootDir answered on the calling thread while local (syncfs28)', () => {
  let dir: string | undefined;
  afterEach(async () => {
    if (dir !== undefined) await rm(dir, { recursive: true, force: true });
    dir = undefined;
  });
  // Registered after the removal of dir, so that (after-hooks run last first) it is released before its FIFOs go.
  /** The pool held by a test, released after it (before dir goes) whatever became of it. */
  const pool = usePoolHolds();

  async function world(table: (root: string, state: string) => string) {
    dir = await mkdtemp(path.join(os.tmpdir(), 'config-agent-syncfs28-'));
    const root = path.join(dir, 'root');
    const state = path.join(dir, 'state');
    await mkdir(root);
    await mkdir(state, { mode: 0o700 });
    await writeFile(path.join(state, 'state.json'), '{"version":1}');
    const fs = await hangSafeFs(
      root,
      { monotonic: () => 0 },
      { realpath: async (file) => file, mountinfo: async () => table(root, state) },
      undefined,
      { stateDir: state },
    );
    return { root, state, fs };
  }

  it('with every pool thread busy, stateDir reads, stats, listings and unlinks and rootDir stat/realpath answer, alike', async () => {
    const { root, state, fs } = await world(() => line(1, '/', 'ext4'));
    await writeFile(path.join(state, 'gone.json'), 'x');
    pool.hold(dir!);
    expect(await settledSoon(readStateDirFile(fs, state, 'state.json'))).toBe('{"version":1}');
    expect(await settledSoon(readStateDirFile(fs, state, 'intent.json'))).toBeUndefined();
    expect(await settledSoon(fs.readFile(path.join(state, 'state.json'), 'utf8'))).toBe('{"version":1}');
    expect(((await settledSoon(fs.stat(state))) as { isDirectory(): boolean }).isDirectory()).toBe(true);
    expect(((await settledSoon(fs.stat(root))) as { isDirectory(): boolean }).isDirectory()).toBe(true);
    expect(await settledSoon(fs.realpath!(root))).toBe(root);
    expect(((await settledSoon(fs.readdir(state))) as string[]).sort()).toEqual(['gone.json', 'state.json']);
    expect(await settledSoon(fs.unlink(path.join(state, 'gone.json')))).toBeUndefined();
    // An error is the promise API's: a rejection with the errno code.
    expect(await settledSoon(fs.stat(path.join(state, 'gone.json')))).toMatchObject({ code: 'ENOENT' });
    // procfs's text anywhere; the mount table as node reads it.
    expect(await settledSoon(fs.readFile('/proc/self/mountinfo', 'utf8'))).toBe(
      readFileSync('/proc/self/mountinfo', 'utf8'),
    );
    // Below rootDir, and anywhere else, through the pool: nothing answers while it is held.
    expect(await settledSoon(fs.stat(path.join(root, 'a.json')))).toBe(PENDING);
    expect(await settledSoon(fs.stat(dir!))).toBe(PENDING);
    await pool.release();
    // A directory opened for reading on the calling thread: its chmod, chown and fsync (the pool's) still apply.
    const handle = await fs.open(state, constants.O_RDONLY | constants.O_DIRECTORY);
    await handle.chmod(0o710);
    await handle.chown(-1, -1);
    await handle.sync();
    await handle.close();
    await handle.close();
    expect((await fs.stat(state)).mode & 0o777).toBe(0o710);
  }, 10_000);

  it('stateDir on an nfs mount, rootDir on ext4: stateDir through the pool, rootDir itself not', async () => {
    const { root, state, fs } = await world((_root, at) =>
      [line(1, '/', 'ext4'), line(2, at, 'nfs4')].join('\n'),
    );
    pool.hold(dir!);
    expect(await settledSoon(readStateDirFile(fs, state, 'state.json'))).toBe(PENDING);
    expect(await settledSoon(fs.stat(state))).toBe(PENDING);
    expect(((await settledSoon(fs.stat(root))) as { isDirectory(): boolean }).isDirectory()).toBe(true);
  }, 10_000);

  it('an nfs mount below rootDir: rootDir itself through the pool; stateDir elsewhere not', async () => {
    const { root, state, fs } = await world((at) =>
      [line(1, '/', 'ext4'), line(2, path.join(at, 'share'), 'nfs4')].join('\n'),
    );
    pool.hold(dir!);
    expect(await settledSoon(fs.stat(root))).toBe(PENDING);
    expect(await settledSoon(fs.realpath!(root))).toBe(PENDING);
    expect(await settledSoon(readStateDirFile(fs, state, 'state.json'))).toBe('{"version":1}');
  }, 10_000);

  it("start-up's checks: node's calls answer here while no mount at all may hang, and go through the pool once one may", async () => {
    dir = await mkdtemp(path.join(os.tmpdir(), 'config-agent-syncfs28-'));
    const file = path.join(dir, 'config.json');
    await writeFile(file, '{}');
    const lanes = new MountLanes({ sleep: async () => undefined });
    const table = readFileSync('/proc/self/mountinfo', 'utf8');
    const anyHangs = table.split('\n').some((entry) => / - (nfs|nfs4|cifs|fuse|fuse\.|9p|ceph)/.test(entry));
    const local = await hangSafeConfigCalls(lanes);
    const held = await hangSafeConfigCalls(lanes, nodeFs as unknown as FsPort, {
      mountinfo: async () => [table, line(99, '/srv/nfs', 'nfs4')].join('\n'),
    });
    pool.hold(dir);
    const stat = await settledSoon(local.fs.stat(file));
    if (anyHangs) expect(stat).toBe(PENDING);
    else expect((stat as { size: number }).size).toBe(2);
    if (!anyHangs) {
      expect(await settledSoon(local.ownPathsPort.realpath(file))).toBe(file);
      expect(await settledSoon(local.ownPathsPort.readlink(file))).toMatchObject({ code: 'EINVAL' });
    }
    // A table naming a mount that may hang (given as a port): through the pool, as before.
    expect(await settledSoon(held.fs.stat(file))).toBe(PENDING);
  }, 10_000);
});

describe.runIf(canMountFuse)('stateDir on a hung FUSE mount (syncfs28)', () => {
  const hung = hungFuseDir('config-agent-syncfs28-hung-');
  afterEach(() => hung.clean());

  it('its state reads and stats go through the gated pool: each fails after the bound, the loop never held', async () => {
    const { dir, mountPoint, fuse } = await hung.make(120_000);
    const rootDir = path.join(dir, 'root');
    await mkdir(rootDir);
    const stateDir = path.join(mountPoint, 'state');
    // The bound passes at once: a mount nobody serves never answers before it.
    const fs = await hangSafeFs(
      rootDir,
      { monotonic: () => 0, sleep: () => new Promise<void>((resolve) => setImmediate(resolve)) },
      undefined,
      undefined,
      { stateDir },
    );
    // On the calling thread each of these would hold the loop until the mount's child exits (120 s: the timeout).
    await expect(readStateDirFile(fs, stateDir, 'state.json')).rejects.toMatchObject({
      code: 'state_dir_unusable',
    });
    await expect(fs.stat(stateDir)).rejects.toThrow(`the mount at ${mountPoint} did not answer`);
    await expect(fs.readFile(path.join(stateDir, 'outbox.json'), 'utf8')).rejects.toThrow('did not answer');
    await expect(fs.open(path.join(stateDir, 'intent.json'), constants.O_RDONLY)).rejects.toThrow(
      'did not answer',
    );
    // rootDir, local, is still answered.
    expect((await fs.stat(rootDir)).isDirectory()).toBe(true);
    expect(fuse.exitCode === null && fuse.signalCode === null, 'the mount still hangs').toBe(true);
  }, 60_000);
});

describe('kernel filesystems on the way never may hang (syncfs28)', () => {
  let dir: string | undefined;
  afterEach(async () => {
    if (dir !== undefined) await rm(dir, { recursive: true, force: true });
    dir = undefined;
  });

  it('a former root under /dev/shm (devtmpfs on its way) is the same root as a symlink to it', async () => {
    dir = await mkdtemp('/dev/shm/config-agent-syncfs28-');
    const root = path.join(dir, 'root');
    const link = path.join(dir, 'root-link');
    await mkdir(root);
    await symlink(root, link);
    const table = [
      line(1, '/', 'ext4'),
      line(2, '/dev', 'devtmpfs'),
      line(3, '/dev/shm', 'tmpfs'),
      line(4, '/proc', 'proc'),
      line(5, '/sys', 'sysfs'),
      line(6, '/srv/nfs', 'nfs4'),
    ].join('\n');
    expect(mountHoldingThatMayHang(table, '/dev')).toBeUndefined();
    expect(mountHoldingThatMayHang(table, '/proc/self')).toBeUndefined();
    expect(mountHoldingThatMayHang(table, '/srv/nfs/root')).toBe('/srv/nfs');
    const fs = await hangSafeFs(
      link,
      { monotonic: () => 0 },
      { realpath: async (file) => file, mountinfo: async () => table },
    );
    // Before: '/dev', and the root recorded as `root` was taken for another one (its file left, `retrying`).
    expect(fs.mountThatMayHangAt?.(root)).toBeUndefined();
    expect(await sameRoot(fs, root, link)).toBe(true);
  });
});
