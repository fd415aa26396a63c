// A hung FUSE mount under rootDir must not block the event loop: observation through the daemon's fs port.
import { type ChildProcess, spawnSync } from 'node:child_process';
import { closeSync, constants, openSync } from 'node:fs';
import * as nodeFs from 'node:fs/promises';
import { mkdir, mkdtemp, readdir, rm, symlink, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { Writable } from 'node:stream';
import { afterEach, describe, expect, it } from 'vitest';
import { canMountFuse, hungFuseMount } from '../../test/helpers/hung-fuse.js';
import { parseAgentConfig } from '../config/load.js';
import { createSecretRegistry } from '../lib/secrets.js';
import { observeDisk } from '../reconcile/observe.js';
import { sweepTempFiles } from '../store/durable-writer.js';
import { FileFingerprints } from '../store/fingerprints.js';
import { TEMP_PREFIX } from '../store/path-guard.js';
import { createDeps } from './compose.js';
import {
  hangSafeFs,
  mountHoldingThatMayHang,
  mountsKeepingNoChangeTime,
  mountsThatMayHangBelow,
  mountsUnderRootAreLocal,
} from './hang-safe-fs.js';

const line = (id: number, mountPoint: string, type: string) =>
  `${id} 1 0:${id} / ${mountPoint} rw,relatime shared:${id} - ${type} src rw`;

describe('mountsUnderRootAreLocal', () => {
  const table = [line(1, '/', 'ext4'), line(2, '/proc', 'proc'), line(3, '/srv/nfs', 'nfs4')].join('\n');

  it.each([
    ['/srv/config-agent', true, 'on ext4, the nfs mount elsewhere'],
    ['/srv/nfs', false, 'rootDir is the nfs mount'],
    ['/srv/nfs/app', false, 'rootDir inside the nfs mount'],
    ['/srv', false, 'an nfs mount below rootDir'],
    ['/srv/nfsx', true, 'a sibling whose name starts like the mount'],
  ])('%s → %s (%s)', (root, expected) => {
    expect(mountsUnderRootAreLocal(table, root)).toBe(expected);
  });

  it('a FUSE mount (escaped space in its path) under rootDir, and an empty table, are not local', () => {
    const fuse = [line(1, '/', 'ext4'), line(2, '/srv/root/my\\040disk', 'fuse.sshfs')].join('\n');
    expect(mountsUnderRootAreLocal(fuse, '/srv/root')).toBe(false);
    expect(mountsUnderRootAreLocal(fuse, '/srv/root/my disk/x')).toBe(false);
    expect(mountsUnderRootAreLocal(fuse, '/srv/other')).toBe(true);
    expect(mountsUnderRootAreLocal('', '/srv/root')).toBe(false);
  });
});

describe('mountsThatMayHangBelow', () => {
  it('names the mounts strictly below rootDir that are not local, relative to it, escapes undone', () => {
    const table = [
      line(1, '/', 'ext4'),
      line(2, '/srv/root/share', 'nfs4'),
      line(3, '/srv/root/usb', 'ext4'),
      line(4, '/srv/root/a/my\\040disk', 'fuse.sshfs'),
      line(5, '/srv/rootx/share', 'nfs'),
      line(6, '/srv/root', 'cifs'),
    ].join('\n');
    expect(mountsThatMayHangBelow(table, '/srv/root')).toEqual(new Set(['share', 'a/my disk']));
    expect(mountsThatMayHangBelow(table, '/')).toEqual(
      new Set(['srv/root/share', 'srv/root/a/my disk', 'srv/rootx/share', 'srv/root']),
    );
    expect(mountsThatMayHangBelow('', '/srv/root')).toEqual(new Set());
  });
});

describe('mountHoldingThatMayHang (gate19)', () => {
  it("names the mount holding a directory when it may hang (rootDir's, stateDir's own), none when it is local", () => {
    const table = [
      line(1, '/', 'ext4'),
      line(2, '/srv/nfs', 'nfs4'),
      line(3, '/srv/nfs/local', 'ext4'),
      line(4, '/mnt/my\\040disk', 'fuse.sshfs'),
      line(5, '/proc', 'proc'),
    ].join('\n');
    expect(mountHoldingThatMayHang(table, '/srv/nfs')).toBe('/srv/nfs');
    expect(mountHoldingThatMayHang(table, '/srv/nfs/root/app')).toBe('/srv/nfs');
    expect(mountHoldingThatMayHang(table, '/srv/nfs/local/root')).toBeUndefined();
    expect(mountHoldingThatMayHang(table, '/srv/nfsx')).toBeUndefined();
    expect(mountHoldingThatMayHang(table, '/mnt/my disk/state')).toBe('/mnt/my disk');
    expect(mountHoldingThatMayHang('', '/srv/nfs')).toBeUndefined();
  });
});

describe('hangSafeFs: the pool lstat (lstatOrAbsent)', () => {
  let dir: string | undefined;
  afterEach(async () => {
    if (dir !== undefined) await rm(dir, { recursive: true, force: true });
  });

  it.each([
    ['local', line(1, '/', 'ext4')],
    ['behind an nfs mount, where lstatSync is withheld', line(1, '/', 'nfs4')],
  ])(
    'on a root %s: Stats for an entry (a symlink not followed), undefined for nothing, the errno error otherwise',
    async (_name, table) => {
      dir = await mkdtemp(path.join(os.tmpdir(), 'config-agent-poollstat-'));
      await writeFile(path.join(dir, 'file'), 'x');
      await symlink('/nowhere', path.join(dir, 'link'));
      const fs = await hangSafeFs(
        dir,
        { monotonic: () => 0 },
        {
          realpath: async (file) => file,
          mountinfo: async () => table,
        },
      );
      const lstatOrAbsent = fs.lstatOrAbsent!;
      expect((await lstatOrAbsent(path.join(dir, 'file')))?.isFile()).toBe(true);
      expect((await lstatOrAbsent(path.join(dir, 'link')))?.isSymbolicLink()).toBe(true);
      expect(await lstatOrAbsent(path.join(dir, 'missing'))).toBeUndefined();
      expect(await lstatOrAbsent(path.join(dir, 'missing', 'deeper'))).toBeUndefined();
      const error = await lstatOrAbsent(path.join(dir, 'file', 'below')).catch((e: unknown) => e);
      expect((error as { code?: string }).code).toBe('ENOTDIR');
    },
  );
});

describe('hangSafeFs: the start-up sweep of rootDir on the calling thread (sweepPort)', () => {
  let dir: string | undefined;
  /** FIFOs whose readers hold the pool's threads: their writing ends opened here, so a failed test frees them. */
  let fifos: string[] = [];
  afterEach(async () => {
    for (const fifo of fifos) {
      try {
        closeSync(openSync(fifo, constants.O_WRONLY | constants.O_NONBLOCK));
      } catch {
        // ENXIO: no reader holds it any more.
      }
    }
    fifos = [];
    if (dir !== undefined) await rm(dir, { recursive: true, force: true });
  });

  /** A root with temp files at three depths, files and a directory to keep, and a symlink to a directory outside. */
  async function plantTree(root: string, outside: string): Promise<void> {
    await mkdir(path.join(root, 'a', 'b', `${TEMP_PREFIX}dir`), { recursive: true });
    await mkdir(outside, { recursive: true });
    await writeFile(path.join(root, `${TEMP_PREFIX}top`), 'x');
    await writeFile(path.join(root, 'a', `${TEMP_PREFIX}mid`), 'x');
    await writeFile(path.join(root, 'a', 'b', `${TEMP_PREFIX}deep`), 'x');
    await writeFile(path.join(root, 'a', 'b', 'conf.json'), '{}');
    await writeFile(path.join(outside, `${TEMP_PREFIX}outside`), 'x');
    await symlink(outside, path.join(root, 'a', 'link'));
    // More than one read of the listing (64 entries a read): every one is met.
    await mkdir(path.join(root, 'many'));
    for (let index = 0; index < 150; index++) {
      await writeFile(
        path.join(root, 'many', index % 3 === 0 ? `${TEMP_PREFIX}${index}` : `kept${index}`),
        '',
      );
    }
  }

  const MANY_TEMP = Array.from({ length: 50 }, (_, index) => `many/${TEMP_PREFIX}${3 * index}`);
  const MANY_KEPT = Array.from({ length: 150 }, (_, index) => index)
    .filter((index) => index % 3 !== 0)
    .map((index) => `many/kept${index}`);

  async function listTree(root: string): Promise<string[]> {
    const entries = await readdir(root, { recursive: true });
    return entries.map(String).sort();
  }

  it('on a local root: removes what the pool sweep removes, keeps the rest, follows no symlink; none for another directory', async () => {
    dir = await mkdtemp(path.join(os.tmpdir(), 'config-agent-syncsweep-'));
    const root = path.join(dir, 'root');
    const poolRoot = path.join(dir, 'pool-root');
    await plantTree(root, path.join(dir, 'outside'));
    await plantTree(poolRoot, path.join(dir, 'pool-outside'));
    const fs = await hangSafeFs(
      root,
      { monotonic: () => 0 },
      { realpath: async (file) => file, mountinfo: async () => line(1, '/', 'ext4') },
    );
    const port = fs.sweepPort?.(root);
    expect(port).toBeDefined();
    expect(fs.sweepPort?.(poolRoot)).toBeUndefined();
    const removed = await sweepTempFiles(port!, root);
    const poolRemoved = await sweepTempFiles(nodeFs, poolRoot);
    expect(removed).toEqual(
      [`${TEMP_PREFIX}top`, `a/${TEMP_PREFIX}mid`, `a/b/${TEMP_PREFIX}deep`, ...MANY_TEMP].sort(),
    );
    expect(removed).toEqual(poolRemoved);
    expect(await listTree(root)).toEqual(await listTree(poolRoot));
    expect(await listTree(root)).toEqual(
      // readdir's recursive listing goes through the link: what is outside stayed.
      [
        'a',
        'a/b',
        `a/b/${TEMP_PREFIX}dir`,
        'a/b/conf.json',
        'a/link',
        `a/link/${TEMP_PREFIX}outside`,
        'many',
        ...MANY_KEPT,
      ].sort(),
    );
    expect(await readdir(path.join(dir, 'outside'))).toEqual([`${TEMP_PREFIX}outside`]);
    // A root that is not there is nothing to sweep, as through the pool.
    expect(await sweepTempFiles(fs.sweepPort!(root)!, path.join(root, 'missing'))).toEqual([]);
  });

  it('sweeps with every thread of the pool busy: no step of the walk, its listings included, waits on the pool', async () => {
    dir = await mkdtemp(path.join(os.tmpdir(), 'config-agent-syncsweep-'));
    const root = path.join(dir, 'root');
    await plantTree(root, path.join(dir, 'outside'));
    const fs = await hangSafeFs(
      root,
      { monotonic: () => 0 },
      { realpath: async (file) => file, mountinfo: async () => line(1, '/', 'ext4') },
    );
    // Each pool thread held in an open of a FIFO for reading, until its writing end is opened.
    fifos = Array.from({ length: Number(process.env.UV_THREADPOOL_SIZE ?? 4) }, (_, i) =>
      path.join(dir!, `fifo${i}`),
    );
    for (const fifo of fifos) spawnSync('mkfifo', [fifo]);
    const readers = fifos.map((fifo) => nodeFs.readFile(fifo).catch(() => undefined));
    const removed = await sweepTempFiles(fs.sweepPort!(root)!, root);
    expect(removed).toEqual(
      [`${TEMP_PREFIX}top`, `a/${TEMP_PREFIX}mid`, `a/b/${TEMP_PREFIX}deep`, ...MANY_TEMP].sort(),
    );
    for (const fifo of fifos) closeSync(openSync(fifo, 'w'));
    await Promise.all(readers);
  }, 10_000);

  it('behind an nfs mount there is none: the sweep goes through the thread pool', async () => {
    dir = await mkdtemp(path.join(os.tmpdir(), 'config-agent-syncsweep-'));
    const fs = await hangSafeFs(
      dir,
      { monotonic: () => 0 },
      { realpath: async (file) => file, mountinfo: async () => line(1, '/', 'nfs4') },
    );
    expect(fs.sweepPort?.(dir)).toBeUndefined();
  });
});

describe('hangSafeFs.mayHangAt (mount22: where the drift watcher sets no fs.watch)', () => {
  it('names rootDir and stateDir on a mount that may hang, and a mount below rootDir, and nothing local', async () => {
    const table = [
      line(1, '/', 'ext4'),
      line(2, '/srv/root/share', 'fuse.sshfs'),
      line(3, '/srv/nfs', 'nfs4'),
    ].join('\n');
    const port = { realpath: async (file: string) => file, mountinfo: async () => table };
    const local = await hangSafeFs('/srv/root', { monotonic: () => 0, sleep: async () => undefined }, port);
    expect(local.mayHangAt?.('/srv/root')).toBe(false);
    expect(local.mayHangAt?.('/srv/root/app/a.json')).toBe(false);
    expect(local.mayHangAt?.('/srv/root/share')).toBe(true);
    expect(local.mayHangAt?.('/srv/root/share/a/b.json')).toBe(true);
    expect(local.mayHangAt?.('/srv/root/shared/b.json')).toBe(false);
    const held = await hangSafeFs(
      '/srv/nfs/root',
      { monotonic: () => 0, sleep: async () => undefined },
      port,
      undefined,
      { stateDir: '/var/lib/agent' },
    );
    expect(held.mayHangAt?.('/srv/nfs/root')).toBe(true);
    expect(held.mayHangAt?.('/srv/nfs/root/app/a.json')).toBe(true);
    expect(held.mayHangAt?.('/var/lib/agent/state.json')).toBe(false);
  });
});

describe('hangSafeFs.keepsNoChangeTimeAt (where a fingerprint proves nothing)', () => {
  it('names a rootDir on FAT, exFAT or FUSE, and such mounts below it; nothing on ext4, tmpfs or NFS', async () => {
    const table = [
      line(1, '/', 'ext4'),
      line(2, '/media/card', 'vfat'),
      line(3, '/srv/root/usb', 'exfat'),
      line(4, '/srv/root/ntfs', 'fuseblk'),
      line(5, '/srv/root/net', 'nfs4'),
      line(6, '/srv/root/ssh', 'fuse.sshfs'),
      line(7, '/srv/rootx', 'vfat'),
    ].join('\n');
    expect(mountsKeepingNoChangeTime(table, '/srv/root')).toEqual(new Set(['usb', 'ntfs', 'ssh']));
    expect(mountsKeepingNoChangeTime(table, '/media/card/app')).toEqual(new Set(['']));
    expect(mountsKeepingNoChangeTime(table, '/srv/other')).toEqual(new Set());
    const clock = { monotonic: () => 0, sleep: async () => undefined };
    const port = { realpath: async (file: string) => file, mountinfo: async () => table };
    const root = await hangSafeFs('/srv/root', clock, port);
    expect(root.keepsNoChangeTimeAt?.('/srv/root/app/a.json')).toBe(false);
    expect(root.keepsNoChangeTimeAt?.('/srv/root/net/a.json')).toBe(false);
    expect(root.keepsNoChangeTimeAt?.('/srv/root/usb/a.json')).toBe(true);
    expect(root.keepsNoChangeTimeAt?.('/srv/root/ntfs/x/a.json')).toBe(true);
    expect(root.keepsNoChangeTimeAt?.('/srv/root/ssh')).toBe(true);
    expect(root.keepsNoChangeTimeAt?.('/srv/root/usbx/a.json')).toBe(false);
    const card = await hangSafeFs('/media/card/app', clock, port);
    expect(card.keepsNoChangeTimeAt?.('/media/card/app/a.json')).toBe(true);
    // A rootDir configured through a symlink is judged where it resolves.
    const linked = await hangSafeFs('/srv/link', clock, {
      ...port,
      realpath: async (file: string) => (file === '/srv/link' ? '/media/card/app' : file),
    });
    expect(linked.keepsNoChangeTimeAt?.('/srv/link/a.json')).toBe(true);
  });
});

describe('createDeps on a reload (SIGHUP)', () => {
  it('keeps what a failed directory fsync of the process dropped: a file it left in place is not confirmed on a later fsync alone', async () => {
    const config = parseAgentConfig(
      {
        deviceId: 'dvc_1',
        server: { baseUrl: 'https://configs.example.com' },
        rootDir: '/srv/config-agent/root',
        stateDir: '/srv/config-agent/state',
      },
      'test',
    );
    const sink = new Writable({ write: (_chunk, _encoding, done) => done() });
    const running = await createDeps(config, createSecretRegistry(), sink);
    // app.json renamed into the root, then the root's fsync failed (EIO): its entry may be lost.
    running.fs.directorySyncs?.changed('/srv/config-agent/root', 'app.json');
    running.fs.directorySyncs?.failed('/srv/config-agent/root');
    const reloaded = await createDeps(config, createSecretRegistry(), sink, running);
    // A fresh ledger forgot it: the next pass found app.json in place and confirmed it `deployed`.
    expect(reloaded.fs.directorySyncs?.dropped('/srv/config-agent/root', 'app.json')).toBe(true);
    expect(reloaded.fs.directorySyncs?.anyDropped).toBe(true);
  });
});

describe.runIf(canMountFuse)('a hung FUSE mount under rootDir', () => {
  let dir: string | undefined;
  let child: ChildProcess | undefined;
  afterEach(async () => {
    child?.kill('SIGKILL');
    if (dir !== undefined) {
      spawnSync('umount', ['-l', path.join(dir, 'root', 'hung')]);
      await rm(dir, { recursive: true, force: true });
    }
  });

  it('observation waits for it without blocking the event loop (the local API and SIGTERM still run)', async () => {
    dir = await mkdtemp(path.join(os.tmpdir(), 'config-agent-hung-'));
    const root = path.join(dir, 'root');
    await mkdir(path.join(root, 'hung'), { recursive: true });
    child = await hungFuseMount(path.join(root, 'hung'), 8000);
    const config = parseAgentConfig(
      {
        deviceId: 'dvc_1',
        server: { baseUrl: 'https://configs.example.com' },
        rootDir: root,
        stateDir: path.join(dir, 'state'),
      },
      'test',
    );
    const sink = new Writable({ write: (_chunk, _encoding, done) => done() });
    const deps = await createDeps(config, createSecretRegistry(), sink);
    const observed = observeDisk(deps.fs, root, [{ relative_filepath: 'hung/app.json' }], {
      fingerprints: { store: FileFingerprints.empty(root), now: () => Date.now() },
    });
    // The timer stands for everything else the loop serves (the local API, SIGTERM's handler): it ends the
    // hang. With a synchronous lstat it cannot run; the mount then ends only when its child gives up (8 s).
    const mountChild = child;
    const ended = new Promise<NodeJS.Signals | null>((resolve) =>
      mountChild.once('exit', (_code, signal) => resolve(signal)),
    );
    setTimeout(() => mountChild.kill('SIGKILL'), 50);
    expect(await ended).toBe('SIGKILL');
    expect((await observed).get('hung/app.json')?.kind).toBe('unreadable');
  });
});
