import { createFsFromVolume, Volume } from 'memfs';
import { describe, expect, it } from 'vitest';
import type { FsPort } from '../lib/fs-port.js';
import {
  acquireStateLock,
  LOCK_FILE,
  linuxProcessProbe,
  type ProcessProbe,
  StateLockedError,
} from './lock.js';

const STATE = '/var/lib/config-agent';

function memfs(files: Record<string, string> = {}) {
  const vol = Volume.fromJSON(files);
  vol.mkdirSync(STATE, { recursive: true });
  return { vol, fs: createFsFromVolume(vol).promises as unknown as FsPort };
}

function probe(pid: number, alivePids: number[]): ProcessProbe {
  return {
    self: async () => ({ pid, procStart: `start-${pid}` }),
    alive: async (content) => alivePids.includes(content.pid) && content.procStart === `start-${content.pid}`,
  };
}

describe('acquireStateLock', () => {
  it('takes a free state directory and releases it', async () => {
    const { vol, fs } = memfs();
    const lock = await acquireStateLock(fs, STATE, probe(100, [100]));
    expect(JSON.parse(vol.readFileSync(`${STATE}/${LOCK_FILE}`, 'utf8') as string)).toMatchObject({
      pid: 100,
      procStart: 'start-100',
    });
    await lock.release();
    expect(vol.existsSync(`${STATE}/${LOCK_FILE}`)).toBe(false);
  });

  it('refuses while another live agent holds it, naming its pid', async () => {
    const { fs } = memfs();
    await acquireStateLock(fs, STATE, probe(100, [100, 200]));
    const second = acquireStateLock(fs, STATE, probe(200, [100, 200]));
    await expect(second).rejects.toBeInstanceOf(StateLockedError);
    await expect(second).rejects.toThrow(/pid 100/);
  });

  it('takes over a lock left by a dead agent, or by a recycled pid (other start time)', async () => {
    const dead = memfs({ [`${STATE}/${LOCK_FILE}`]: JSON.stringify({ pid: 100, procStart: 'start-100' }) });
    await expect(acquireStateLock(dead.fs, STATE, probe(200, [200]))).resolves.toBeDefined();
    const recycled = memfs({
      [`${STATE}/${LOCK_FILE}`]: JSON.stringify({ pid: 100, procStart: 'an-older-boot' }),
    });
    await expect(acquireStateLock(recycled.fs, STATE, probe(200, [100, 200]))).resolves.toBeDefined();
  });

  it('takes over a corrupt lock file, and its own process may take it again (a reload)', async () => {
    const { fs } = memfs({ [`${STATE}/${LOCK_FILE}`]: 'garbage' });
    await acquireStateLock(fs, STATE, probe(100, [100]));
    await expect(acquireStateLock(fs, STATE, probe(100, [100]))).resolves.toBeDefined();
  });

  it('a reload that reopens the same state directory keeps the lock: the old release leaves the new one', async () => {
    const { vol, fs } = memfs();
    const before = await acquireStateLock(fs, STATE, probe(100, [100]));
    const after = await acquireStateLock(fs, STATE, probe(100, [100]));
    await before.release();
    expect(vol.existsSync(`${STATE}/${LOCK_FILE}`)).toBe(true);
    await after.release();
    expect(vol.existsSync(`${STATE}/${LOCK_FILE}`)).toBe(false);
  });

  it('never releases a lock that another agent took over meanwhile', async () => {
    const { vol, fs } = memfs();
    const mine = await acquireStateLock(fs, STATE, probe(100, [100]));
    vol.writeFileSync(`${STATE}/${LOCK_FILE}`, JSON.stringify({ pid: 300, procStart: 'start-300' }));
    await mine.release();
    expect(vol.existsSync(`${STATE}/${LOCK_FILE}`)).toBe(true);
  });

  it('the Linux probe sees this process as alive and a gone pid as dead', async () => {
    const self = await linuxProcessProbe.self();
    expect(self.pid).toBe(process.pid);
    expect(await linuxProcessProbe.alive(self)).toBe(true);
    expect(await linuxProcessProbe.alive({ pid: 2 ** 22 + 1 })).toBe(false);
  });
});
