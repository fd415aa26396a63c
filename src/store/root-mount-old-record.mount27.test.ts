// An older agent's record of rootDir's mount (no ownMount) is told from its unit's self-bind by where its files lay (mount27).
import * as nodeFs from 'node:fs/promises';
import { mkdir, mkdtemp, readFile, realpath, rm, stat, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { ROOT_MOUNT_FILE, RootMountWatch } from './root-mount.js';

let dir: string;
let root: string;
let stateDir: string;
let record: string;
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
/** The unit's namespace: the bare directory at rootDir (no disk there) bound onto itself (ReadWritePaths=). */
const selfBind = (real: string) => `31 20 98:0 ${real} ${real} rw,relatime shared:9 - ext4 /dev/vda rw`;

beforeEach(async () => {
  dir = await mkdtemp(path.join(os.tmpdir(), 'config-agent-old-record-'));
  root = path.join(dir, 'root');
  stateDir = path.join(dir, 'state');
  record = path.join(stateDir, ROOT_MOUNT_FILE);
  await mkdir(root);
  await mkdir(stateDir);
  mountinfo = `${rootMount}\n${selfBind(await realpath(root))}\n`;
  // What an agent before review34 wrote, of a data disk or of its unit's self-bind alike.
  await writeFile(record, JSON.stringify({ rootDir: root, mountPoint: true }));
});
afterEach(async () => {
  await rm(dir, { recursive: true, force: true });
});

const watch = (devices?: ReadonlySet<string>) =>
  new RootMountWatch(fs, root, {
    stateDir,
    readOnly: false,
    ...(devices === undefined ? {} : { managedDevices: () => devices }),
  });

describe("an older agent's record of rootDir's mount at the first start after the upgrade, rootDir bound onto itself (review34)", () => {
  it('whose files lay on another device (the data disk, now missing) is a mount gone, and marked so for later starts', async () => {
    const bare = String((await stat(root)).dev);
    const disk = `${bare}1`;
    expect((await watch(new Set([disk])).check())?.mountGone).toContain('was one when the agent last saw it');
    expect(JSON.parse(await readFile(record, 'utf8'))).toEqual({
      rootDir: root,
      mountPoint: true,
      ownMount: true,
    });
    // A later start whose fingerprints hold copies read from the bare directory is held back all the same.
    expect((await watch(new Set([bare])).check())?.mountGone).toContain('was one when the agent last saw it');
  });

  it('a read-only watch (a dry run) is held back the same way and leaves the record as it was', async () => {
    const bare = String((await stat(root)).dev);
    const readOnly = new RootMountWatch(fs, root, {
      stateDir,
      readOnly: true,
      managedDevices: () => new Set([`${bare}1`]),
    });
    expect((await readOnly.check())?.mountGone).toContain('was one when the agent last saw it');
    expect((await readOnly.check())?.mountGone).toContain('was one when the agent last saw it');
    expect(JSON.parse(await readFile(record, 'utf8'))).toEqual({ rootDir: root, mountPoint: true });
  });

  it('whose files lay on this very directory (the self-bind it recorded) is forgotten, as before', async () => {
    const bare = String((await stat(root)).dev);
    expect(await watch(new Set([`${bare}1`, bare])).check()).toBeUndefined();
    expect(JSON.parse(await readFile(record, 'utf8'))).toEqual({ rootDir: root, mountPoint: false });
  });

  it('with no fingerprints to tell (no file verified) is forgotten, as before (Known gaps)', async () => {
    expect(await watch(new Set()).check()).toBeUndefined();
    expect(JSON.parse(await readFile(record, 'utf8'))).toEqual({ rootDir: root, mountPoint: false });
  });
});
