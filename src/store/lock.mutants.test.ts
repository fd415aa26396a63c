// The state lock's edges that mutation testing found unpinned: the file it leaves, release, the error, the probe.
import { readdirSync } from 'node:fs';
import nodeFs, { mkdtemp, readFile, rm, stat, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import {
  acquireStateLock,
  LOCK_FILE,
  linuxProcessProbe,
  type ProcessProbe,
  StateLockedError,
} from './lock.js';

const dirs: string[] = [];
afterEach(async () => {
  for (const dir of dirs.splice(0)) await rm(dir, { recursive: true, force: true });
});

async function stateDir(): Promise<string> {
  const dir = await mkdtemp(path.join(os.tmpdir(), 'config-agent-lock-'));
  dirs.push(dir);
  return dir;
}

/** A probe in which only `alivePids` run, each with start time `start-<pid>`. */
function probe(pid: number, alivePids: number[]): ProcessProbe {
  return {
    self: async () => ({ pid, procStart: `start-${pid}` }),
    alive: async (content) => alivePids.includes(content.pid) && content.procStart === `start-${content.pid}`,
  };
}

describe('acquireStateLock on a real directory', () => {
  it('writes {pid, procStart, token} to a 0600 file and leaks no file descriptor', async () => {
    const dir = await stateDir();
    const fdsBefore = readdirSync('/proc/self/fd').length;
    const lock = await acquireStateLock(nodeFs, dir, probe(100, [100]));
    const file = path.join(dir, LOCK_FILE);
    const content = JSON.parse(await readFile(file, 'utf8')) as Record<string, unknown>;
    expect(content).toMatchObject({ pid: 100, procStart: 'start-100' });
    expect(content.token).toMatch(/^[0-9a-f]{24}$/);
    expect((await stat(file)).mode & 0o777).toBe(0o600);
    await lock.release();
    expect(readdirSync('/proc/self/fd').length).toBe(fdsBefore);
  });

  it('a release after the lock file vanished does nothing and does not throw', async () => {
    const dir = await stateDir();
    const lock = await acquireStateLock(nodeFs, dir, probe(100, [100]));
    await rm(path.join(dir, LOCK_FILE));
    await expect(lock.release()).resolves.toBeUndefined();
    await writeFile(path.join(dir, LOCK_FILE), 'not json');
    await lock.release();
    expect(await readFile(path.join(dir, LOCK_FILE), 'utf8')).toBe('not json');
  });
});

describe('StateLockedError', () => {
  it('has a stable code, is not retryable, and names the holder and what to do instead', () => {
    const error = new StateLockedError('/var/lib/config-agent', 4242);
    expect(error).toMatchObject({ code: 'state_locked', retryable: false, pid: 4242 });
    expect(error.message).toContain('pid 4242');
    expect(error.message).toContain('/var/lib/config-agent');
    expect(error.message).toContain("'config-agent sync'");
  });
});

describe('linuxProcessProbe', () => {
  it("records this process's start time: field 22 of /proc/self/stat, in clock ticks since boot", async () => {
    const self = await linuxProcessProbe.self();
    expect(self.pid).toBe(process.pid);
    expect(self.procStart).toMatch(/^\d+$/);
    // An independent reading: boot-relative start = system uptime - process uptime (USER_HZ is 100 on Linux).
    const systemUptime = Number((await readFile('/proc/uptime', 'utf8')).split(' ')[0]);
    const expectedTicks = (systemUptime - process.uptime()) * 100;
    expect(Math.abs(Number(self.procStart) - expectedTicks)).toBeLessThan(500);
  });

  it('a live pid is alive when its start time matches or is unknown; a recycled pid (other start) is not', async () => {
    const self = await linuxProcessProbe.self();
    expect(await linuxProcessProbe.alive(self)).toBe(true);
    expect(await linuxProcessProbe.alive({ pid: process.pid })).toBe(true);
    expect(await linuxProcessProbe.alive({ pid: process.pid, procStart: `${self.procStart}0` })).toBe(false);
    expect(await linuxProcessProbe.alive({ pid: 2 ** 22 + 1, procStart: self.procStart })).toBe(false);
  });
});
