// fix31: root-mount.json recorded for rootDir spelled one way still holds the bare mountpoint back when the
// configuration names the same directory another way (a trailing slash, a symlink to it): compared by device and
// inode (sameRoot), not as a string, which forgot the record and let a restart write into the bare mountpoint.
import * as nodeFs from 'node:fs/promises';
import { mkdir, mkdtemp, rm, symlink, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { afterEach, beforeEach, expect, it } from 'vitest';
import { ROOT_MOUNT_FILE, RootMountWatch } from './root-mount.js';

let dir: string;
let root: string;
let stateDir: string;

beforeEach(async () => {
  dir = await mkdtemp(path.join('/dev/shm', 'config-agent-fix31-mount-'));
  root = path.join(dir, 'root');
  stateDir = path.join(dir, 'state');
  await mkdir(root);
  await mkdir(stateDir);
  // Recorded when rootDir (spelled `root`) was last seen as a mount point; it is the bare directory now.
  await writeFile(path.join(stateDir, ROOT_MOUNT_FILE), JSON.stringify({ rootDir: root, mountPoint: true }));
});

afterEach(async () => {
  await rm(dir, { recursive: true, force: true });
});

it.each([
  ['a trailing slash', async () => `${root}/`],
  [
    'a symlink to it',
    async () => {
      await symlink(root, path.join(dir, 'link'));
      return path.join(dir, 'link');
    },
  ],
])('spelled with %s: the bare mountpoint is refused, naming the record', async (_name, spell) => {
  const refused = await new RootMountWatch(nodeFs, await spell(), { stateDir, readOnly: false }).check();
  expect(refused?.mountGone).toContain('was one when the agent last saw it');
});

it('a record of a directory that is gone still holds nothing back', async () => {
  await writeFile(
    path.join(stateDir, ROOT_MOUNT_FILE),
    JSON.stringify({ rootDir: path.join(dir, 'gone'), mountPoint: true }),
  );
  expect(await new RootMountWatch(nodeFs, root, { stateDir, readOnly: false }).check()).toBeUndefined();
});
