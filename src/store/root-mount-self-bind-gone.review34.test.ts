// A real mount at rootDir, gone before the packaged daemon starts in its unit (which binds rootDir onto itself), is still gone (review34).
import { readFile, realpath, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { mountTableEachTest, ROOT_FS_MOUNT, selfBindMount } from '../../test/helpers/mount-table-fs.js';
import { ROOT_MOUNT_FILE } from './root-mount.js';

/** Whether a data disk is mounted at rootDir (its own st_dev there) is m.mounted. */
const m = mountTableEachTest('config-agent-self-bind-gone-');
/** The data disk at rootDir, and the unit's ReadWritePaths= bind of it onto itself on top. */
const dataDisk = (real: string) =>
  `30 20 8:17 / ${real} rw,relatime shared:8 - ext4 /dev/sdb1 rw\n31 30 8:17 / ${real} rw,relatime shared:9 - ext4 /dev/sdb1 rw`;

describe('a data disk at rootDir gone across a restart of the daemon in its unit (review34)', () => {
  it('is gone: the record the disk made is not taken for the self-bind and forgotten', async () => {
    const real = await realpath(m.root);
    // The daemon in its unit sees the data disk at rootDir and records it.
    m.mounted = true;
    m.mountinfo = `${ROOT_FS_MOUNT}\n${dataDisk(real)}\n`;
    expect(await m.watch().check()).toBeUndefined();
    const record = path.join(m.stateDir, ROOT_MOUNT_FILE);
    expect(JSON.parse(await readFile(record, 'utf8'))).toMatchObject({ rootDir: m.root, mountPoint: true });

    // The disk absent at the next start (a card not inserted at boot): the unit binds the bare directory onto
    // itself. Before, that bind was taken for the one an agent before ownMountPoints recorded, the record
    // forgotten, and every file written into the bare directory on the root filesystem.
    m.mounted = false;
    m.mountinfo = `${ROOT_FS_MOUNT}\n${selfBindMount(real)}\n`;
    for (let start = 0; start < 2; start += 1) {
      expect((await m.watch().check())?.mountGone).toContain('was one when the agent last saw it');
    }
    expect(JSON.parse(await readFile(record, 'utf8'))).toMatchObject({ rootDir: m.root, mountPoint: true });
  });

  it("an older agent's record is marked as a real mount's once the daemon sees the mount, then held as one", async () => {
    const real = await realpath(m.root);
    const record = path.join(m.stateDir, ROOT_MOUNT_FILE);
    await writeFile(record, JSON.stringify({ rootDir: m.root, mountPoint: true }));
    m.mounted = true;
    m.mountinfo = `${ROOT_FS_MOUNT}\n${dataDisk(real)}\n`;
    expect(await m.watch().check()).toBeUndefined();

    m.mounted = false;
    m.mountinfo = `${ROOT_FS_MOUNT}\n${selfBindMount(real)}\n`;
    expect((await m.watch().check())?.mountGone).toContain('was one when the agent last saw it');
  });
});
