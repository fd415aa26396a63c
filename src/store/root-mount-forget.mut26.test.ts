// A record of rootDir's self-bind forgotten (d0e7b68): what a watch does after, and a read-only one (mut26's survivors).
import * as nodeFs from 'node:fs/promises';
import { mkdir, mkdtemp, readFile, realpath, rm, writeFile } from 'node:fs/promises';
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
const selfBind = (real: string) => `31 20 98:0 ${real} ${real} rw,relatime shared:9 - ext4 /dev/vda rw`;
const OLD_RECORD = () => JSON.stringify({ rootDir: root, mountPoint: true });

beforeEach(async () => {
  dir = await mkdtemp(path.join(os.tmpdir(), 'config-agent-forget-mut26-'));
  root = path.join(dir, 'root');
  stateDir = path.join(dir, 'state');
  record = path.join(stateDir, ROOT_MOUNT_FILE);
  await mkdir(root);
  await mkdir(stateDir);
  await writeFile(record, OLD_RECORD());
});
afterEach(async () => {
  await rm(dir, { recursive: true, force: true });
});

describe('a record of the self-bind, forgotten (mut26)', () => {
  it('once forgotten, the same watch is not held back when the bind is no longer listed', async () => {
    const watch = new RootMountWatch(fs, root, { stateDir, readOnly: false });
    mountinfo = `${rootMount}\n${selfBind(await realpath(root))}\n`;
    expect(await watch.check()).toBeUndefined();
    // The bind unmounted under the running agent: rootDir is the same directory it always was.
    mountinfo = `${rootMount}\n`;
    expect(await watch.check()).toBeUndefined();
    expect(await watch.check()).toBeUndefined();
    expect(JSON.parse(await readFile(record, 'utf8'))).toEqual({ rootDir: root, mountPoint: false });
  });

  it('a read-only watch forgets it in memory only: the record keeps its bytes, and it is not held back after', async () => {
    const watch = new RootMountWatch(fs, root, { stateDir, readOnly: true });
    mountinfo = `${rootMount}\n${selfBind(await realpath(root))}\n`;
    expect(await watch.check()).toBeUndefined();
    expect(await readFile(record, 'utf8')).toBe(OLD_RECORD());
    mountinfo = `${rootMount}\n`;
    expect(await watch.check()).toBeUndefined();
    expect(await readFile(record, 'utf8')).toBe(OLD_RECORD());
    // Another read-only watch, outside the unit, still finds the old record (only a writing watch puts it right).
    expect((await new RootMountWatch(fs, root, { stateDir, readOnly: true }).check())?.mountGone).toContain(
      'was one when the agent last saw it',
    );
  });
});
