// The state lock's edges that mutation testing found unpinned: races on the lock file, the error's shape, the probe.
import { readdirSync } from 'node:fs';
import nodeFs, { mkdtemp, readFile, rm, stat, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import type { FsPort } from '../lib/fs-port.js';
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

const DEAD_HOLDER = JSON.stringify({ pid: 999, procStart: 'start-999' });

function errnoError(code: string): NodeJS.ErrnoException {
  return Object.assign(new Error(`${code}: simulated`), { code });
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

  it('an error other than "exists" (a missing state directory) is thrown as it is', async () => {
    const dir = await stateDir();
    await expect(
      acquireStateLock(nodeFs, path.join(dir, 'missing'), probe(100, [100])),
    ).rejects.toMatchObject({
      code: 'ENOENT',
    });
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

describe('acquireStateLock racing another agent', () => {
  it('takes the lock when a dead holder file disappears before it could remove it (ENOENT is fine)', async () => {
    const dir = await stateDir();
    await writeFile(path.join(dir, LOCK_FILE), DEAD_HOLDER);
    const racing: FsPort = {
      ...nodeFs,
      unlink: async (file) => {
        await nodeFs.unlink(file);
        return nodeFs.unlink(file);
      },
    };
    const lock = await acquireStateLock(racing, dir, probe(100, [100]));
    expect(JSON.parse(await readFile(path.join(dir, LOCK_FILE), 'utf8'))).toMatchObject({ pid: 100 });
    await lock.release();
  });

  it('a failure to remove a dead holder file other than ENOENT is thrown', async () => {
    const dir = await stateDir();
    await writeFile(path.join(dir, LOCK_FILE), DEAD_HOLDER);
    const refusing: FsPort = {
      ...nodeFs,
      unlink: async () => {
        throw errnoError('EPERM');
      },
    };
    await expect(acquireStateLock(refusing, dir, probe(100, [100]))).rejects.toMatchObject({ code: 'EPERM' });
    expect(await readFile(path.join(dir, LOCK_FILE), 'utf8')).toBe(DEAD_HOLDER);
  });

  it('gives up after three takeovers lost to a racing agent (pid 0), and wins after two', async () => {
    // Before each of the first `races` exclusive opens, another agent (dead by the time it is read) recreates it.
    const racingFs = (races: number): FsPort => {
      let left = races;
      return {
        ...nodeFs,
        open: (async (file: string, flags: number, mode?: number) => {
          if (left > 0) {
            left -= 1;
            await writeFile(file, DEAD_HOLDER);
          }
          return nodeFs.open(file, flags, mode);
        }) as FsPort['open'],
      };
    };
    const lost = await stateDir();
    const error = await acquireStateLock(racingFs(3), lost, probe(100, [100])).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(StateLockedError);
    expect((error as StateLockedError).pid).toBe(0);
    // Each dead holder it met was removed; the last one left nothing behind, and nothing of its own.
    await expect(stat(path.join(lost, LOCK_FILE))).rejects.toMatchObject({ code: 'ENOENT' });

    const won = await stateDir();
    await acquireStateLock(racingFs(2), won, probe(100, [100]));
    expect(JSON.parse(await readFile(path.join(won, LOCK_FILE), 'utf8'))).toMatchObject({ pid: 100 });
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
