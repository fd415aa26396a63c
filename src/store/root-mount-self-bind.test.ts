// rootDir bound onto itself (systemd's ReadWritePaths= in the unit's namespace) is no mount point of its own.
import { readdir, readFile, realpath, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { mountTableEachTest, ROOT_FS_MOUNT, selfBindMount } from '../../test/helpers/mount-table-fs.js';
import { ROOT_MOUNT_FILE } from './root-mount.js';

const m = mountTableEachTest('config-agent-self-bind-');

describe("rootDir bound onto itself by the unit's sandbox (lead, the twentieth session's final CI rehearsal)", () => {
  it('is not recorded as a mount point, so an agent outside the unit is not held back', async () => {
    m.mountinfo = `${ROOT_FS_MOUNT}\n${selfBindMount(await realpath(m.root))}\n`;
    expect(await m.watch().check()).toBeUndefined();
    expect(await readdir(m.stateDir)).toEqual([]);
    // Outside the unit: no bind at all.
    m.mountinfo = `${ROOT_FS_MOUNT}\n`;
    expect(await m.watch().check()).toBeUndefined();
  });

  it("a record an older agent made of the unit's bind is forgotten where the bind is seen; a real one still holds", async () => {
    const record = path.join(m.stateDir, ROOT_MOUNT_FILE);
    await writeFile(record, JSON.stringify({ rootDir: m.root, mountPoint: true }));
    // Outside the unit, nothing tells the old record apart from a mount gone: refused, as before.
    m.mountinfo = `${ROOT_FS_MOUNT}\n`;
    expect((await m.watch().check())?.mountGone).toContain('was one when the agent last saw it');
    // The daemon in the unit sees rootDir bound onto itself: the record was that bind, and is put right.
    m.mountinfo = `${ROOT_FS_MOUNT}\n${selfBindMount(await realpath(m.root))}\n`;
    expect(await m.watch().check()).toBeUndefined();
    expect(JSON.parse(await readFile(record, 'utf8'))).toEqual({ rootDir: m.root, mountPoint: false });
    m.mountinfo = `${ROOT_FS_MOUNT}\n`;
    expect(await m.watch().check()).toBeUndefined();
  });
});
