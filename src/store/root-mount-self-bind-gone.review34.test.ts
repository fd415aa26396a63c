// A real mount at rootDir, gone before the packaged daemon starts in its unit (which binds rootDir onto itself), is still gone (review34).
import * as nodeFs from 'node:fs/promises';
import { mkdir, mkdtemp, readFile, realpath, rm, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { ROOT_MOUNT_FILE, RootMountWatch } from './root-mount.js';

let dir: string;
let root: string;
let stateDir: string;
/** What /proc/self/mountinfo holds; every other file is the real one. */
let mountinfo: string;
/** Whether a data disk is mounted at rootDir: its own st_dev there. */
let mounted: boolean;
const fs = {
  ...nodeFs,
  readFile: (async (target: string, ...rest: never[]) =>
    target === '/proc/self/mountinfo'
      ? mountinfo
      : nodeFs.readFile(target, ...rest)) as typeof nodeFs.readFile,
  stat: (async (target: string, options?: unknown) => {
    const stats = await nodeFs.stat(target, options as never);
    if (mounted && target === root) Object.assign(stats, { dev: Number(stats.dev) + 1 });
    return stats;
  }) as typeof nodeFs.stat,
};
const rootMount = '20 1 98:0 / / rw,relatime shared:1 - ext4 /dev/vda rw';
/** The data disk at rootDir, and the unit's ReadWritePaths= bind of it onto itself on top. */
const dataDisk = (real: string) =>
  `30 20 8:17 / ${real} rw,relatime shared:8 - ext4 /dev/sdb1 rw\n31 30 8:17 / ${real} rw,relatime shared:9 - ext4 /dev/sdb1 rw`;
/** The unit's namespace with the disk gone: the bare directory bound onto itself. */
const selfBind = (real: string) => `31 20 98:0 ${real} ${real} rw,relatime shared:9 - ext4 /dev/vda rw`;

beforeEach(async () => {
  dir = await mkdtemp(path.join(os.tmpdir(), 'config-agent-self-bind-gone-'));
  root = path.join(dir, 'root');
  stateDir = path.join(dir, 'state');
  await mkdir(root);
  await mkdir(stateDir);
});
afterEach(async () => {
  await rm(dir, { recursive: true, force: true });
});

describe('a data disk at rootDir gone across a restart of the daemon in its unit (review34)', () => {
  it('is gone: the record the disk made is not taken for the self-bind and forgotten', async () => {
    const real = await realpath(root);
    // The daemon in its unit sees the data disk at rootDir and records it.
    mounted = true;
    mountinfo = `${rootMount}\n${dataDisk(real)}\n`;
    expect(await new RootMountWatch(fs, root, { stateDir, readOnly: false }).check()).toBeUndefined();
    const record = path.join(stateDir, ROOT_MOUNT_FILE);
    expect(JSON.parse(await readFile(record, 'utf8'))).toMatchObject({ rootDir: root, mountPoint: true });

    // The disk absent at the next start (a card not inserted at boot): the unit binds the bare directory onto
    // itself. Before, that bind was taken for the one an agent before ownMountPoints recorded, the record
    // forgotten, and every file written into the bare directory on the root filesystem.
    mounted = false;
    mountinfo = `${rootMount}\n${selfBind(real)}\n`;
    for (let start = 0; start < 2; start += 1) {
      expect(
        (await new RootMountWatch(fs, root, { stateDir, readOnly: false }).check())?.mountGone,
      ).toContain('was one when the agent last saw it');
    }
    expect(JSON.parse(await readFile(record, 'utf8'))).toMatchObject({ rootDir: root, mountPoint: true });
  });

  it("an older agent's record is marked as a real mount's once the daemon sees the mount, then held as one", async () => {
    const real = await realpath(root);
    const record = path.join(stateDir, ROOT_MOUNT_FILE);
    await writeFile(record, JSON.stringify({ rootDir: root, mountPoint: true }));
    mounted = true;
    mountinfo = `${rootMount}\n${dataDisk(real)}\n`;
    expect(await new RootMountWatch(fs, root, { stateDir, readOnly: false }).check()).toBeUndefined();

    mounted = false;
    mountinfo = `${rootMount}\n${selfBind(real)}\n`;
    expect((await new RootMountWatch(fs, root, { stateDir, readOnly: false }).check())?.mountGone).toContain(
      'was one when the agent last saw it',
    );
  });
});
