// fix30: the shared rootDir lock answers with the newest stateDir; holdsName reads /proc/net/unix a line at a time.
import { spawnSync } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { mkdir, mkdtemp, open, rm, symlink } from 'node:fs/promises';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { afterEach, beforeEach, expect, it } from 'vitest';
import { rootNameOf } from '../../test/helpers/root-lock-holder.js';
import { acquireRootLock, holdsName } from './lock.js';

let dir: string;
const closers: Array<() => Promise<unknown>> = [];

beforeEach(async () => {
  dir = await mkdtemp(path.join(os.tmpdir(), 'root-lock-fix30-'));
});

afterEach(async () => {
  for (const close of closers.splice(0).reverse()) await close().catch(() => undefined);
  await rm(dir, { recursive: true, force: true });
});

/** What the holder of the abstract `name` answers a connection with. */
function askHolder(name: string): Promise<{ pid: number; stateDir: string; rootDir: string }> {
  return new Promise((resolve, reject) => {
    let text = '';
    const socket = net.connect({ path: name });
    socket.setEncoding('utf8');
    socket.on('data', (chunk: string) => {
      text += chunk;
    });
    socket.on('end', () => resolve(JSON.parse(text)));
    socket.on('error', reject);
  });
}

// A reload to another stateDir (the same rootDir) shares the running lock: it still answered with the stateDir of
// the first open, so a second agent refused meanwhile was told the wrong stateDir.
it('answers with the stateDir of the newest open sharing it, and the older one once that is released', async () => {
  const key = `fix30-${randomBytes(6).toString('hex')}`;
  const keyOf = async () => ({ key, uid: process.getuid?.() ?? 0, gid: 0, mode: 0o755 });
  const name = rootNameOf(key);
  const first = await acquireRootLock('/srv/root', keyOf, '/var/lib/a');
  closers.push(() => first.release());
  expect(await askHolder(name)).toMatchObject({ pid: process.pid, stateDir: '/var/lib/a' });
  const reloaded = await acquireRootLock('/srv/root', keyOf, '/var/lib/b');
  closers.push(() => reloaded.release());
  expect(await askHolder(name)).toMatchObject({ pid: process.pid, stateDir: '/var/lib/b' });
  // The reload succeeded: the first open is released; the lock is held, named by the reload's stateDir.
  await first.release();
  expect(await askHolder(name)).toMatchObject({ pid: process.pid, stateDir: '/var/lib/b' });
  // Had the reload failed instead, its release would leave the first's.
  const third = await acquireRootLock('/srv/root', keyOf, '/var/lib/c');
  await third.release();
  expect(await askHolder(name)).toMatchObject({ stateDir: '/var/lib/b' });
});

// holdsName read all of /proc/net/unix into memory before looking (a line per socket of every process). Now it
// reads a line at a time and stops at the holder's socket: a table that has not ended yet (here a FIFO the test
// keeps open) is answered from the lines read so far; before, it waited for the end (the test's timeout).
it.runIf(spawnSync('mkfifo', ['--version']).status === 0)(
  'holdsName answers at the first line showing the holder’s socket, without reading the rest',
  async () => {
    const proc = path.join(dir, 'proc');
    await mkdir(path.join(proc, 'net'), { recursive: true });
    await mkdir(path.join(proc, '4242', 'fd'), { recursive: true });
    await symlink('/dev/null', path.join(proc, '4242', 'fd', '0'));
    await symlink('socket:[777]', path.join(proc, '4242', 'fd', '5'));
    const table = path.join(proc, 'net', 'unix');
    expect(spawnSync('mkfifo', [table]).status).toBe(0);
    const shown = holdsName('\0config-agent-root-9:9', 4242, proc);
    const writer = await open(table, 'w');
    closers.push(() => writer.close());
    await writer.write(
      'Num       RefCount Protocol Flags    Type St Inode Path\n' +
        '0000000000000000: 00000002 00000000 00010000 0001 01 555 @config-agent-root-9:9@@@\n' +
        '0000000000000000: 00000002 00000000 00010000 0001 01 777 @config-agent-root-9:9@@@\n',
    );
    expect(await shown).toBe(true);
  },
);

it('holdsName: not shown when no line names a socket of the holder, or there is no table', async () => {
  const proc = path.join(dir, 'proc');
  await mkdir(path.join(proc, 'net'), { recursive: true });
  await mkdir(path.join(proc, '4242', 'fd'), { recursive: true });
  await symlink('socket:[777]', path.join(proc, '4242', 'fd', '5'));
  expect(await holdsName('\0config-agent-root-9:9', 4242, proc)).toBe(false);
  const table = await open(path.join(proc, 'net', 'unix'), 'w');
  await table.write(
    'Num       RefCount Protocol Flags    Type St Inode Path\n' +
      '0000000000000000: 00000002 00000000 00010000 0001 01 555 @config-agent-root-9:9@@@\n' +
      '0000000000000000: 00000002 00000000 00010000 0001 01 777 @config-agent-root-8:8@@@\n',
  );
  await table.close();
  expect(await holdsName('\0config-agent-root-9:9', 4242, proc)).toBe(false);
  expect(await holdsName('\0config-agent-root-8:8', 4242, proc)).toBe(true);
  expect(await holdsName('\0config-agent-root-8:8', 4243, proc)).toBe(false);
});
