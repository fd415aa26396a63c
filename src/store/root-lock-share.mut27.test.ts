// rootDir's lock shared by two stateDirs of one process (a reload) without the perl helper (mut27): held until the last lets go.
import { mkdir, mkdtemp, rm, stat } from 'node:fs/promises';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { afterEach, beforeEach, expect, it } from 'vitest';
import { acquireRootLock, holdsName, rootLockNames } from './lock.js';

let dir: string;
let rootDir: string;
const keyOf = async (at: string) => {
  const stats = await stat(at);
  return { key: `${stats.dev}:${stats.ino}`, uid: stats.uid, gid: stats.gid, mode: stats.mode };
};

beforeEach(async () => {
  dir = await mkdtemp(path.join(os.tmpdir(), 'root-lock-mut27-'));
  rootDir = path.join(dir, 'root');
  await mkdir(rootDir);
});

afterEach(async () => {
  await rm(dir, { recursive: true, force: true });
});

it('two holders without a helper: the name stays held until both let go, and a second release changes nothing', async () => {
  const { name } = rootLockNames((await keyOf(rootDir)).key);
  const first = await acquireRootLock(rootDir, keyOf, path.join(dir, 'state-a'));
  const reload = await acquireRootLock(rootDir, keyOf, path.join(dir, 'state-b'));
  expect(await holdsName(name, process.pid)).toBe(true);
  // The newer lets go first (a reload whose new stateDir was given up): the older still holds rootDir.
  await reload.release();
  expect(await holdsName(name, process.pid)).toBe(true);
  await reload.release();
  expect(await holdsName(name, process.pid)).toBe(true);
  await first.release();
  expect(await holdsName(name, process.pid)).toBe(false);
  await expect(first.release()).resolves.toBeUndefined();
  expect(await holdsName(name, process.pid)).toBe(false);
});

/** What the holder of the abstract `name` answers a connection with. */
async function askHolder(name: string): Promise<{ stateDir?: string }> {
  return new Promise((resolve, reject) => {
    let text = '';
    const socket = net.createConnection(name);
    socket.setEncoding('utf8');
    socket.on('data', (chunk: string) => {
      text += chunk;
    });
    socket.once('error', reject);
    socket.once('close', () => resolve(JSON.parse(text) as { stateDir?: string }));
  });
}

it('three holders: a connection is answered with the newest stateDir', async () => {
  const { name } = rootLockNames((await keyOf(rootDir)).key);
  const locks = [];
  for (const state of ['state-a', 'state-b', 'state-c'])
    locks.push(await acquireRootLock(rootDir, keyOf, path.join(dir, state)));
  try {
    expect((await askHolder(name)).stateDir).toBe(path.join(dir, 'state-c'));
  } finally {
    for (const lock of locks) await lock.release();
  }
  expect(await holdsName(name, process.pid)).toBe(false);
});

it('a rootDir whose key cannot be had gives a lock with nothing held, whose release resolves', async () => {
  const lock = await acquireRootLock(rootDir, async () => undefined, path.join(dir, 'state'));
  await expect(lock.release()).resolves.toBeUndefined();
  expect(lock.unproven).toBeUndefined();
});
