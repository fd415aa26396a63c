// The state lock's edges mutation testing found unpinned: its file, release, errors, the probe, a lock that moves.
import { readdirSync } from 'node:fs';
import nodeFs, { mkdtemp, readFile, rm, stat, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { createFsFromVolume, Volume } from 'memfs';
import { afterEach, describe, expect, it } from 'vitest';
import type { FsPort } from '../lib/fs-port.js';
import {
  acquireStateLock,
  LOCK_FILE,
  linuxProcessProbe,
  type ProcessProbe,
  StateLockedError,
} from './lock.js';
import { TEMP_PREFIX } from './path-guard.js';

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

describe('acquireStateLock when the lock moves under it (memfs)', () => {
  const STATE = '/var/lib/config-agent';
  const lockPath = `${STATE}/${LOCK_FILE}`;

  function memfs(files: Record<string, string> = {}) {
    const vol = Volume.fromJSON(files);
    vol.mkdirSync(STATE, { recursive: true });
    return { vol, fs: createFsFromVolume(vol).promises as unknown as FsPort };
  }

  /** Every other process is alive: only a lock that is gone or is our own pid's may be taken. */
  const everyoneAlive: ProcessProbe = {
    self: async () => ({ pid: 100, procStart: 'start-100' }),
    alive: async () => true,
  };

  it('a lock released between our link and our read is taken on the next round, whoever else runs', async () => {
    const { vol, fs } = memfs();
    let collisions = 1;
    const racing: FsPort = {
      ...fs,
      // The first link meets a lock that its holder removes before we read it.
      link: (async (from: string, to: string) => {
        if (collisions > 0) {
          collisions -= 1;
          throw Object.assign(new Error('EEXIST: simulated'), { code: 'EEXIST' });
        }
        return fs.link(from, to);
      }) as FsPort['link'],
    };
    const lock = await acquireStateLock(racing, STATE, everyoneAlive);
    expect(JSON.parse(vol.readFileSync(lockPath, 'utf8') as string)).toMatchObject({ pid: 100 });
    await lock.release();
    expect(vol.readdirSync(STATE)).toEqual([]);
  });

  it('gives up after five rounds of a lock that keeps appearing and vanishing: state_locked, no pid', async () => {
    const { vol, fs } = memfs();
    const flapping = (rounds: number): FsPort => {
      let collisions = rounds;
      return {
        ...fs,
        link: (async (from: string, to: string) => {
          if (collisions > 0) {
            collisions -= 1;
            throw Object.assign(new Error('EEXIST: simulated'), { code: 'EEXIST' });
          }
          return fs.link(from, to);
        }) as FsPort['link'],
      };
    };
    const error = await acquireStateLock(flapping(5), STATE, everyoneAlive).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(StateLockedError);
    expect(error).toMatchObject({ code: 'state_locked', pid: 0, retryable: false });
    expect(vol.readdirSync(STATE)).toEqual([]);
    // Four rounds are not enough to give up.
    const lock = await acquireStateLock(flapping(4), STATE, everyoneAlive);
    expect(vol.readdirSync(STATE)).toEqual([LOCK_FILE]);
    await lock.release();
  });

  it('a link failure other than EEXIST names stateDir, the lock and the errno', async () => {
    const { vol, fs } = memfs();
    const broken: FsPort = {
      ...fs,
      link: (async () => {
        throw Object.assign(new Error('EIO: simulated'), { code: 'EIO' });
      }) as FsPort['link'],
    };
    const error = await acquireStateLock(broken, STATE, everyoneAlive).catch((e: unknown) => e);
    expect(error).toMatchObject({
      code: 'state_dir_unusable',
      errno: 'EIO',
      retryable: true,
      message: `stateDir ${STATE} is not usable: cannot create ${LOCK_FILE}: input/output error (EIO)`,
    });
    expect(vol.readdirSync(STATE)).toEqual([]);
  });

  /**
   * The fs as it is when another agent replaces the stale lock by its own fresh `fresh` lock just before we
   * move the stale one aside: what we move is that fresh lock.
   */
  function replacedBeforeMove(fs: FsPort, vol: InstanceType<typeof Volume>, fresh: object): FsPort {
    let replaced = false;
    return {
      ...fs,
      rename: (async (from: string, to: string) => {
        if (!replaced && from === lockPath) {
          replaced = true;
          vol.writeFileSync(lockPath, JSON.stringify(fresh));
        }
        return fs.rename(from, to);
      }) as FsPort['rename'],
    };
  }

  it.each([
    [
      'another pid, another token',
      { pid: 300, procStart: 'start-300', token: 'dead' },
      { pid: 200, token: 'fresh' },
    ],
    [
      'the same pid, another token',
      { pid: 200, procStart: 'old', token: 'dead' },
      { pid: 200, token: 'fresh' },
    ],
    ['locks without tokens (an older agent), another pid', { pid: 300 }, { pid: 200 }],
    ['a corrupt stale lock', 'garbage', { pid: 200, token: 'fresh' }],
  ])('a fresh lock moved aside instead of the stale one is put back: %s', async (_name, stale, fresh) => {
    const { vol, fs } = memfs({ [lockPath]: typeof stale === 'string' ? stale : JSON.stringify(stale) });
    const live = { ...fresh, procStart: 'start-200' };
    const racing = replacedBeforeMove(fs, vol, live);
    const error = await acquireStateLock(racing, STATE, probe(100, [100, 200])).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(StateLockedError);
    expect(error).toMatchObject({ pid: 200 });
    expect(vol.readdirSync(STATE)).toEqual([LOCK_FILE]);
    expect(JSON.parse(vol.readFileSync(lockPath, 'utf8') as string)).toEqual(live);
  });

  it('a directory in place of the lock (unreadable, not a lock) is moved aside under a temp name and taken over', async () => {
    const { vol, fs } = memfs();
    vol.mkdirSync(`${lockPath}/inside`, { recursive: true });
    const lock = await acquireStateLock(fs, STATE, probe(100, [100]));
    expect(JSON.parse(vol.readFileSync(lockPath, 'utf8') as string)).toMatchObject({ pid: 100 });
    // The directory cannot be unlinked: it stays under a temp name, for the start-up sweep.
    const left = (vol.readdirSync(STATE) as string[]).filter((name) => name !== LOCK_FILE);
    expect(left).toHaveLength(1);
    expect(left[0]?.startsWith(`${TEMP_PREFIX}${LOCK_FILE}-stale-`)).toBe(true);
    expect(vol.readdirSync(`${STATE}/${left[0]}`)).toEqual(['inside']);
    await lock.release();
  });

  it('a stale lock that cannot be moved aside: StateDirError naming it, the stale lock left in place', async () => {
    const stale = JSON.stringify({ pid: 300, procStart: 'start-300', token: 'dead' });
    const { vol, fs } = memfs({ [lockPath]: stale });
    const stuck: FsPort = {
      ...fs,
      rename: (async () => {
        throw Object.assign(new Error('EACCES: simulated'), { code: 'EACCES' });
      }) as FsPort['rename'],
    };
    const error = await acquireStateLock(stuck, STATE, probe(100, [100])).catch((e: unknown) => e);
    expect(error).toMatchObject({
      code: 'state_dir_unusable',
      errno: 'EACCES',
      retryable: false,
      message:
        `stateDir ${STATE} is not usable: cannot replace the stale ${LOCK_FILE}: permission denied: ` +
        "the agent's user must own stateDir (chown it, mode 0700) (EACCES)",
    });
    expect(vol.readdirSync(STATE)).toEqual([LOCK_FILE]);
    expect(vol.readFileSync(lockPath, 'utf8')).toBe(stale);
  });
});
