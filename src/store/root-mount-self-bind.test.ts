// rootDir bound onto itself (systemd's ReadWritePaths= in the unit's namespace) is no mount point of its own.
import * as nodeFs from 'node:fs/promises';
import { mkdir, mkdtemp, readdir, readFile, realpath, rm, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { ROOT_MOUNT_FILE, RootMountWatch } from './root-mount.js';

let dir: string;
let root: string;
let stateDir: string;
/** What /proc/self/mountinfo holds; every other file is the real one. */
let mountinfo: string;
const fs = {
  ...nodeFs,
  readFile: (async (target: string, ...rest: never[]) =>
    target === '/proc/self/mountinfo'
      ? mountinfo
      : nodeFs.readFile(target, ...rest)) as typeof nodeFs.readFile,
};
const rootMount = '20 1 98:0 / / rw,relatime shared:1 - ext4 /dev/vda rw';
/** The unit's namespace: rootDir bound onto itself (its root field is its own path on the same device). */
const selfBind = (real: string) => `31 20 98:0 ${real} ${real} rw,relatime shared:9 - ext4 /dev/vda rw`;

beforeEach(async () => {
  dir = await mkdtemp(path.join(os.tmpdir(), 'config-agent-self-bind-'));
  root = path.join(dir, 'root');
  stateDir = path.join(dir, 'state');
  await mkdir(root);
  await mkdir(stateDir);
});
afterEach(async () => {
  await rm(dir, { recursive: true, force: true });
});

describe("rootDir bound onto itself by the unit's sandbox (lead, the twentieth session's final CI rehearsal)", () => {
  it('is not recorded as a mount point, so an agent outside the unit is not held back', async () => {
    mountinfo = `${rootMount}\n${selfBind(await realpath(root))}\n`;
    expect(await new RootMountWatch(fs, root, { stateDir, readOnly: false }).check()).toBeUndefined();
    expect(await readdir(stateDir)).toEqual([]);
    // Outside the unit: no bind at all.
    mountinfo = `${rootMount}\n`;
    expect(await new RootMountWatch(fs, root, { stateDir, readOnly: false }).check()).toBeUndefined();
  });

  it("a record an older agent made of the unit's bind is forgotten where the bind is seen; a real one still holds", async () => {
    const record = path.join(stateDir, ROOT_MOUNT_FILE);
    await writeFile(record, JSON.stringify({ rootDir: root, mountPoint: true }));
    // Outside the unit, nothing tells the old record apart from a mount gone: refused, as before.
    mountinfo = `${rootMount}\n`;
    expect((await new RootMountWatch(fs, root, { stateDir, readOnly: false }).check())?.mountGone).toContain(
      'was one when the agent last saw it',
    );
    // The daemon in the unit sees rootDir bound onto itself: the record was that bind, and is put right.
    mountinfo = `${rootMount}\n${selfBind(await realpath(root))}\n`;
    expect(await new RootMountWatch(fs, root, { stateDir, readOnly: false }).check()).toBeUndefined();
    expect(JSON.parse(await readFile(record, 'utf8'))).toEqual({ rootDir: root, mountPoint: false });
    mountinfo = `${rootMount}\n`;
    expect(await new RootMountWatch(fs, root, { stateDir, readOnly: false }).check()).toBeUndefined();
  });
});
