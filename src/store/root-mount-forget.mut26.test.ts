// A record of rootDir's self-bind forgotten (d0e7b68): what a watch does after, and a read-only one (mut26's survivors).
import { readFile, realpath, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { beforeEach, describe, expect, it } from 'vitest';
import { mountTableEachTest, ROOT_FS_MOUNT, selfBindMount } from '../../test/helpers/mount-table-fs.js';
import { ROOT_MOUNT_FILE } from './root-mount.js';

const m = mountTableEachTest('config-agent-forget-mut26-');
const record = () => path.join(m.stateDir, ROOT_MOUNT_FILE);
const OLD_RECORD = () => JSON.stringify({ rootDir: m.root, mountPoint: true });

beforeEach(async () => {
  await writeFile(record(), OLD_RECORD());
});

describe('a record of the self-bind, forgotten (mut26)', () => {
  it('once forgotten, the same watch is not held back when the bind is no longer listed', async () => {
    const watch = m.watch();
    m.mountinfo = `${ROOT_FS_MOUNT}\n${selfBindMount(await realpath(m.root))}\n`;
    expect(await watch.check()).toBeUndefined();
    // The bind unmounted under the running agent: rootDir is the same directory it always was.
    m.mountinfo = `${ROOT_FS_MOUNT}\n`;
    expect(await watch.check()).toBeUndefined();
    expect(await watch.check()).toBeUndefined();
    expect(JSON.parse(await readFile(record(), 'utf8'))).toEqual({ rootDir: m.root, mountPoint: false });
  });

  it('a read-only watch forgets it in memory only: the record keeps its bytes, and it is not held back after', async () => {
    const watch = m.watch(true);
    m.mountinfo = `${ROOT_FS_MOUNT}\n${selfBindMount(await realpath(m.root))}\n`;
    expect(await watch.check()).toBeUndefined();
    expect(await readFile(record(), 'utf8')).toBe(OLD_RECORD());
    m.mountinfo = `${ROOT_FS_MOUNT}\n`;
    expect(await watch.check()).toBeUndefined();
    expect(await readFile(record(), 'utf8')).toBe(OLD_RECORD());
    // Another read-only watch, outside the unit, still finds the old record (only a writing watch puts it right).
    expect((await m.watch(true).check())?.mountGone).toContain('was one when the agent last saw it');
  });
});
