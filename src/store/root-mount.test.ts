// RootMountWatch on a real directory: a rootDir gone for a moment is left to the writes, one moved behind a symlink is refused.
import { spawnSync } from 'node:child_process';
import { constants } from 'node:fs';
import * as nodeFs from 'node:fs/promises';
import { lstat, mkdir, mkdtemp, readdir, readFile, rm, symlink, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { setTimeout as delay } from 'node:timers/promises';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { skipWithoutRoot } from '../../test/helpers/built-packages.js';
import { tryMount, unmount } from '../../test/helpers/harness.js';
import { PATIENCE_MS } from '../../test/helpers/wait-for.js';
import { ROOT_MOUNT_FILE, RootMountWatch } from './root-mount.js';

let dir: string;
beforeEach(async () => {
  dir = await mkdtemp(path.join(os.tmpdir(), 'config-agent-root-mount-'));
});
afterEach(async () => {
  await rm(dir, { recursive: true, force: true });
});

describe('RootMountWatch', () => {
  it('a rootDir removed after its first check is not "moved" (realpath fails: left to the writes); made again where it was, accepted', async () => {
    const root = path.join(dir, 'root');
    await mkdir(root);
    const watch = new RootMountWatch(nodeFs, root);
    expect(await watch.check()).toBeUndefined();
    await rm(root, { recursive: true });
    expect(await watch.check()).toBeUndefined();
    await mkdir(root);
    expect(await watch.check()).toBeUndefined();
  });

  it('a rootDir swapped for a symlink to another directory is refused as moved, and accepted once back', async () => {
    const root = path.join(dir, 'root');
    const elsewhere = path.join(dir, 'elsewhere');
    await mkdir(root);
    await mkdir(elsewhere);
    const watch = new RootMountWatch(nodeFs, root);
    expect(await watch.check()).toBeUndefined();
    await rm(root, { recursive: true });
    await symlink(elsewhere, root);
    const refused = await watch.check();
    expect(refused?.rootMoved).toContain(`resolves to ${elsewhere} now`);
    await rm(root);
    await mkdir(root);
    expect(await watch.check()).toBeUndefined();
  });
});

describe('RootMountWatch: a bind mount of a directory of the same filesystem (same st_dev as its parent)', () => {
  it('is told by /proc/self/mountinfo: gone (umount -l), it is refused as a mount gone; mounted again, accepted (root only)', async (ctx) => {
    const source = path.join(dir, 'source');
    // A name with a space: mountinfo writes it as \040.
    const root = path.join(dir, 'root dir');
    await mkdir(source);
    await mkdir(root);
    const refused = tryMount(['--bind', source, root]);
    if (refused !== undefined) {
      ctx.skip(skipWithoutRoot(refused));
      return;
    }
    let mounted = true;
    try {
      const watch = new RootMountWatch(nodeFs, root);
      expect(await watch.check()).toBeUndefined();
      expect(spawnSync('umount', ['-l', root]).status).toBe(0);
      mounted = false;
      // Before: the bare directory under the mount was taken as rootDir, and written.
      expect((await watch.check())?.mountGone).toContain(`rootDir ${root} is no mount point any more`);
      expect(tryMount(['--bind', source, root])).toBeUndefined();
      mounted = true;
      expect(await watch.check()).toBeUndefined();
    } finally {
      if (mounted) unmount(root);
    }
  });

  it('an agent started while it is gone finds the record and waits; a plain directory is never taken for one', async (ctx) => {
    const source = path.join(dir, 'source');
    const root = path.join(dir, 'root');
    const state = path.join(dir, 'state');
    await Promise.all([mkdir(source), mkdir(root), mkdir(state)]);
    const plain = new RootMountWatch(nodeFs, root, { stateDir: state, readOnly: false });
    expect(await plain.check()).toBeUndefined();
    expect(await nodeFs.readdir(state)).toEqual([]);
    const refused = tryMount(['--bind', source, root]);
    if (refused !== undefined) {
      ctx.skip(skipWithoutRoot(refused));
      return;
    }
    let mounted = true;
    try {
      expect(
        await new RootMountWatch(nodeFs, root, { stateDir: state, readOnly: false }).check(),
      ).toBeUndefined();
      expect(await nodeFs.readdir(state)).toEqual([ROOT_MOUNT_FILE]);
      unmount(root);
      mounted = false;
      const restarted = new RootMountWatch(nodeFs, root, { stateDir: state, readOnly: false });
      expect((await restarted.check())?.mountGone).toContain('was one when the agent last saw it');
    } finally {
      if (mounted) unmount(root);
    }
  });
});

describe('RootMountWatch with a MountMemory in stateDir', () => {
  let root: string;
  let stateDir: string;
  /** rootDir is a mount point: its st_dev differs from its parent's (the fs below says so). */
  let mounted = true;
  const fs = {
    ...nodeFs,
    stat: (async (target: string, ...rest: never[]) => {
      const stats = await nodeFs.stat(target, ...rest);
      return mounted && target === root ? Object.assign(stats, { dev: 4242 }) : stats;
    }) as typeof nodeFs.stat,
  };
  const record = path.join('state', ROOT_MOUNT_FILE);

  beforeEach(async () => {
    root = path.join(dir, 'root');
    stateDir = path.join(dir, 'state');
    await mkdir(root);
    await mkdir(stateDir);
    mounted = true;
  });

  it('records a mount point seen; a restart that finds the bare directory refuses it, naming the record', async () => {
    expect(await new RootMountWatch(fs, root, { stateDir, readOnly: false }).check()).toBeUndefined();
    expect(JSON.parse(await readFile(path.join(dir, record), 'utf8'))).toEqual({
      rootDir: root,
      mountPoint: true,
      ownMount: true,
    });

    mounted = false;
    const refused = await new RootMountWatch(fs, root, { stateDir, readOnly: false }).check();
    expect(refused?.mountGone).toContain(`was one when the agent last saw it (${path.join(dir, record)})`);
  });

  it('a watch without a MountMemory takes a mount point as it finds it', async () => {
    expect(await new RootMountWatch(fs, root).check()).toBeUndefined();
    expect(await readdir(stateDir)).toEqual([]);
  });

  it('a read-only watch (a dry run) records nothing', async () => {
    expect(await new RootMountWatch(fs, root, { stateDir, readOnly: true }).check()).toBeUndefined();
    expect(await readdir(stateDir)).toEqual([]);
  });

  it('a record of another rootDir, or one not saying mountPoint true, does not hold the bare directory back', async () => {
    mounted = false;
    for (const other of [
      { rootDir: path.join(dir, 'other'), mountPoint: true },
      { rootDir: root, mountPoint: false },
      { rootDir: root, mountPoint: 'true' },
      { mountPoint: true },
    ]) {
      await writeFile(path.join(dir, record), JSON.stringify(other));
      expect(await new RootMountWatch(fs, root, { stateDir, readOnly: false }).check()).toBeUndefined();
    }
  });
});

describe('RootMountWatch: something other than its own record at root-mount.json', () => {
  /** rootDir is a mount point (the fs below says so), so the first check reads the record before writing it. */
  const fs = {
    ...nodeFs,
    stat: (async (target: string, ...rest: never[]) => {
      const stats = await nodeFs.stat(target, ...rest);
      return target.endsWith(`${path.sep}root`) ? Object.assign(stats, { dev: 4242 }) : stats;
    }) as typeof nodeFs.stat,
  };

  it('a FIFO, a symlink to /dev/zero, a directory or a 1 MiB file is no record: the check answers (a 1 MiB file is replaced by the record)', async () => {
    const root = path.join(dir, 'root');
    await mkdir(root);
    const plants: Record<string, (file: string) => Promise<unknown>> = {
      fifo: async (file) => spawnSync('mkfifo', [file]),
      'symlink to /dev/zero': (file) => symlink('/dev/zero', file),
      directory: (file) => mkdir(file),
      'huge file': (file) => writeFile(file, ' '.repeat(1024 * 1024)),
    };
    for (const [kind, plant] of Object.entries(plants)) {
      const stateDir = path.join(dir, `state-${kind.replaceAll(/[ /]/g, '-')}`);
      await mkdir(stateDir);
      const record = path.join(stateDir, ROOT_MOUNT_FILE);
      await plant(record);
      try {
        const checked = new RootMountWatch(fs, root, { stateDir, readOnly: false }).check();
        // Before, a FIFO's read waited for a writer for good: bounded here, and the FIFO unblocked after.
        const answer = await Promise.race([
          checked.then((error) => ({ error })),
          delay(PATIENCE_MS).then(() => 'no answer' as const),
        ]);
        expect(answer, kind).toEqual({ error: undefined });
        // The writer never replaces a FIFO, symlink or directory (the watch then holds in memory only); a file it does.
        const left = await lstat(record);
        if (kind === 'huge file') {
          expect(JSON.parse(await readFile(record, 'utf8'))).toEqual({
            rootDir: root,
            mountPoint: true,
            ownMount: true,
          });
        } else {
          expect(left.isFile(), kind).toBe(false);
        }
      } finally {
        // A reader still waiting on the FIFO (the code before) gets its end of file.
        if (kind === 'fifo') await unblockFifo(record);
      }
    }
  });
});

/** Opens a FIFO for writing without blocking and closes it: a reader waiting in open(2) gets end of file. */
async function unblockFifo(file: string): Promise<void> {
  const handle = await nodeFs.open(file, constants.O_WRONLY | constants.O_NONBLOCK).catch(() => undefined);
  await handle?.close();
}

describe('RootMountWatch: a mount point of its parent’s st_dev, told by a mountinfo the fs gives', () => {
  let root: string;
  let stateDir: string;
  /** What /proc/self/mountinfo holds (undefined: it cannot be read); every other file is the real one. */
  let mountinfo: string | undefined;
  const fs = {
    ...nodeFs,
    readFile: (async (target: string, ...rest: never[]) => {
      if (target !== '/proc/self/mountinfo') return nodeFs.readFile(target, ...rest);
      if (mountinfo === undefined) throw Object.assign(new Error('ENOENT: no /proc'), { code: 'ENOENT' });
      return mountinfo;
    }) as typeof nodeFs.readFile,
  };
  const escaped = (mountPoint: string) => mountPoint.replaceAll(' ', '\\040');
  const line = (mountPoint: string) => `36 35 98:0 /src ${escaped(mountPoint)} rw,noatime - ext4 /dev/vda rw`;

  beforeEach(async () => {
    // A name with a space: mountinfo writes it as \040.
    root = path.join(dir, 'root dir');
    stateDir = path.join(dir, 'state');
    await mkdir(root);
    await mkdir(stateDir);
    mountinfo = `${line('/')}\n${line(root)}\n`;
  });

  it('is a mount point while listed (recorded), and gone once no longer listed', async () => {
    const watch = new RootMountWatch(fs, root, { stateDir, readOnly: false });
    expect(await watch.check()).toBeUndefined();
    expect(await readdir(stateDir)).toEqual([ROOT_MOUNT_FILE]);
    mountinfo = `${line('/')}\n`;
    expect((await watch.check())?.mountGone).toContain(`rootDir ${root} is no mount point any more`);
  });

  it('a restart finding the record takes the directory as a mount point while listed, waits while not, until listed again', async () => {
    await new RootMountWatch(fs, root, { stateDir, readOnly: false }).check();
    expect(await new RootMountWatch(fs, root, { stateDir, readOnly: false }).check()).toBeUndefined();
    mountinfo = `${line('/')}\n`;
    const restarted = new RootMountWatch(fs, root, { stateDir, readOnly: false });
    expect((await restarted.check())?.mountGone).toContain('was one when the agent last saw it');
    // Bound there again while the restarted agent waits: taken at its next check.
    mountinfo = `${line('/')}\n${line(root)}\n`;
    expect(await restarted.check()).toBeUndefined();
  });

  it('a rootDir configured as a symlink is looked up where it resolves', async () => {
    const link = path.join(dir, 'link');
    await symlink(root, link);
    expect(await new RootMountWatch(fs, link, { stateDir, readOnly: false }).check()).toBeUndefined();
    expect(await readdir(stateDir)).toEqual([ROOT_MOUNT_FILE]);
  });

  it('without a readable mountinfo a directory of its parent’s st_dev is a plain directory: nothing recorded', async () => {
    mountinfo = undefined;
    expect(await new RootMountWatch(fs, root, { stateDir, readOnly: false }).check()).toBeUndefined();
    expect(await readdir(stateDir)).toEqual([]);
  });
});
