// The state directory's pid lock (lock.ts): acquired, held, raced, taken over when stale, refused when planted.
import { execFileSync } from 'node:child_process';
import nodeFs, { mkdtemp, readdir, readFile, rm, symlink, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { createFsFromVolume, Volume } from 'memfs';
import { afterEach, describe, expect, it } from 'vitest';
import { memfsPort } from '../../test/helpers/memfs.js';
import { PowerCutFs } from '../../test/helpers/power-cut-fs.js';
import type { FsPort } from '../lib/fs-port.js';
import { DirectorySyncLedger } from './directory-syncs.js';
import { writeDurableJson } from './durable-writer.js';
import {
  acquireStateLock,
  LOCK_FILE,
  linuxProcessProbe,
  type ProcessProbe,
  StateDirError,
  type StateLock,
  StateLockedError,
} from './lock.js';
import { TEMP_PREFIX } from './path-guard.js';

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

  it('the Linux probe sees a lock of another boot as dead, even when its pid and start time are live now', async () => {
    const self = await linuxProcessProbe.self();
    expect(self.bootId).toMatch(/^[0-9a-f-]{36}$/);
    // After a power cut the next boot gave the dead agent's pid, at the same tick, to another process.
    const earlierBoot = { ...self, bootId: '00000000-0000-4000-8000-000000000000' };
    expect(await linuxProcessProbe.alive(earlierBoot)).toBe(false);
    const { bootId: _none, ...withoutBoot } = self;
    expect(await linuxProcessProbe.alive(withoutBoot)).toBe(true);
  });

  it('a lock of an earlier boot is taken over on a real directory', async () => {
    const dir = await mkdtemp(path.join(os.tmpdir(), 'lock-boot-'));
    try {
      // The holder's pid and start time are those of a live process (this one, seen as another pid's holder).
      const self = await linuxProcessProbe.self();
      const probe: ProcessProbe = {
        self: async () => ({ ...self, pid: self.pid + 1 }),
        alive: (content) => linuxProcessProbe.alive({ ...content, pid: self.pid }),
      };
      await writeFile(
        path.join(dir, LOCK_FILE),
        JSON.stringify({ ...self, bootId: '00000000-0000-4000-8000-000000000000' }),
      );
      const lock = await acquireStateLock(nodeFs, dir, probe);
      await lock.release();
      expect(await readdir(dir)).toEqual([]);
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  });
});

describe('StateLock.ensureHeld: the lock removed under a running agent', () => {
  it('takes it again (stateDir made again) when it was removed, so a second agent is refused', async () => {
    const { vol, fs } = memfs();
    const lock = await acquireStateLock(fs, STATE, probe(100, [100, 200]));
    expect(await lock.ensureHeld()).toBe(false);
    vol.rmSync(STATE, { recursive: true });
    expect(await lock.ensureHeld()).toBe(true);
    expect(JSON.parse(vol.readFileSync(`${STATE}/${LOCK_FILE}`, 'utf8') as string)).toMatchObject({
      pid: 100,
    });
    expect((vol.statSync(STATE).mode as number) & 0o777).toBe(0o700);
    await expect(acquireStateLock(fs, STATE, probe(200, [100, 200]))).rejects.toBeInstanceOf(
      StateLockedError,
    );
    expect(vol.readdirSync(STATE)).toEqual([LOCK_FILE]);
  });

  it('a stateDir made again is made durable in its parent: state written there survives a power cut', async () => {
    const vol = Volume.fromJSON({});
    vol.mkdirSync(STATE, { recursive: true, mode: 0o700 });
    const model = await PowerCutFs.over(memfsPort(vol), '/var');
    const lock = await acquireStateLock(model.fs, STATE, probe(100, [100]));
    // An operator's `rm -rf /var/lib` under the running agent: the lock check makes stateDir (and lib) again.
    vol.rmSync('/var/lib', { recursive: true });
    expect(await lock.ensureHeld()).toBe(true);
    await writeDurableJson(model.fs, STATE, 'outbox.json', { queued: 1 });

    // Before: the new directories' entries were never fsynced, and a power cut took outbox.json with them.
    expect(model.afterPowerCut()['lib/config-agent/outbox.json']).toBe(
      `600 ${JSON.stringify({ queued: 1 }, null, 2)}\n`,
    );
  });

  it('a stateDir made again whose entry a failed fsync of its parent dropped is made anew by the next write', async () => {
    const vol = Volume.fromJSON({});
    vol.mkdirSync(STATE, { recursive: true, mode: 0o700 });
    const model = await PowerCutFs.over(memfsPort(vol), '/var');
    // The agent's fs: its fsync ledger, and the next fsync of /var/lib failing (EIO), dropping its changes.
    let failures = 1;
    const fs: FsPort = {
      ...model.fs,
      directorySyncs: new DirectorySyncLedger(),
      open: (async (...args: Parameters<FsPort['open']>) => {
        const handle = await model.fs.open(...args);
        if (path.resolve(String(args[0])) !== '/var/lib') return handle;
        return new Proxy(handle, {
          get(inner, property) {
            const value = Reflect.get(inner, property) as unknown;
            if (property === 'sync' && failures > 0) {
              return async () => {
                failures -= 1;
                await model.dropUnsynced('/var/lib');
                throw Object.assign(new Error('EIO'), { code: 'EIO' });
              };
            }
            return typeof value === 'function' ? (value as () => unknown).bind(inner) : value;
          },
        });
      }) as FsPort['open'],
    };
    // An operator's `rm -rf` of stateDir under the running agent; the state write that makes it again fails.
    vol.rmSync(STATE, { recursive: true });
    await expect(writeDurableJson(fs, STATE, 'outbox.json', { queued: 1 })).rejects.toMatchObject({
      code: 'disk_error',
    });
    await writeDurableJson(fs, STATE, 'outbox.json', { queued: 2 });

    // Before: the second write found stateDir there and wrote into it, its entry never written again, so a
    // power cut took stateDir and the queued reports reported durable.
    expect(model.afterPowerCut()['lib/config-agent/outbox.json']).toBe(
      `600 ${JSON.stringify({ queued: 2 }, null, 2)}\n`,
    );
  });

  it('a stateDir made again whose entry was dropped and whose removal fails is not written into until removed', async () => {
    const vol = Volume.fromJSON({});
    vol.mkdirSync(STATE, { recursive: true, mode: 0o700 });
    const model = await PowerCutFs.over(memfsPort(vol), '/var');
    let syncFailures = 1;
    let rmdirFailures = 2;
    const fs: FsPort = {
      ...model.fs,
      directorySyncs: new DirectorySyncLedger(),
      rmdir: (async (...args: Parameters<FsPort['rmdir']>) => {
        if (path.resolve(String(args[0])) === STATE && rmdirFailures > 0) {
          rmdirFailures -= 1;
          throw Object.assign(new Error('EIO'), { code: 'EIO' });
        }
        return model.fs.rmdir(...args);
      }) as FsPort['rmdir'],
      open: (async (...args: Parameters<FsPort['open']>) => {
        const handle = await model.fs.open(...args);
        if (path.resolve(String(args[0])) !== '/var/lib') return handle;
        return new Proxy(handle, {
          get(inner, property) {
            const value = Reflect.get(inner, property) as unknown;
            if (property === 'sync' && syncFailures > 0) {
              return async () => {
                syncFailures -= 1;
                await model.dropUnsynced('/var/lib');
                throw Object.assign(new Error('EIO'), { code: 'EIO' });
              };
            }
            return typeof value === 'function' ? (value as () => unknown).bind(inner) : value;
          },
        });
      }) as FsPort['open'],
    };
    vol.rmSync(STATE, { recursive: true });
    await expect(writeDurableJson(fs, STATE, 'outbox.json', { queued: 1 })).rejects.toMatchObject({
      code: 'disk_error',
    });
    // The rmdir after the failed fsync failed, and fails once more: this write fails too (before: written,
    // reported durable, below an entry a power cut could take).
    await expect(writeDurableJson(fs, STATE, 'outbox.json', { queued: 2 })).rejects.toMatchObject({
      code: 'disk_error',
    });
    expect(model.afterPowerCut()['lib/config-agent/outbox.json']).toBeUndefined();
    await writeDurableJson(fs, STATE, 'outbox.json', { queued: 3 });
    expect(model.afterPowerCut()['lib/config-agent/outbox.json']).toBe(
      `600 ${JSON.stringify({ queued: 3 }, null, 2)}\n`,
    );
  });

  it('refuses while another live agent took it meanwhile, and leaves that agent its lock', async () => {
    const { vol, fs } = memfs();
    const first = await acquireStateLock(fs, STATE, probe(100, [100, 200]));
    vol.unlinkSync(`${STATE}/${LOCK_FILE}`);
    const second = await acquireStateLock(fs, STATE, probe(200, [100, 200]));
    await expect(first.ensureHeld()).rejects.toBeInstanceOf(StateLockedError);
    expect(JSON.parse(vol.readFileSync(`${STATE}/${LOCK_FILE}`, 'utf8') as string)).toMatchObject({
      pid: 200,
    });
    await second.release();
    expect(await first.ensureHeld()).toBe(true);
    expect(JSON.parse(vol.readFileSync(`${STATE}/${LOCK_FILE}`, 'utf8') as string)).toMatchObject({
      pid: 100,
    });
  });

  it('a lock of another process with the same pid (another container, pid 1 in both) is not taken for its own', async () => {
    const { vol, fs } = memfs();
    const inContainer = (instance: string): ProcessProbe => ({
      self: async () => ({ pid: 1, procStart: 'start-1', instance }),
      alive: async (content) => content.pid === 1 && content.procStart === 'start-1',
    });
    const first = await acquireStateLock(fs, STATE, inContainer('container-a'));
    vol.unlinkSync(`${STATE}/${LOCK_FILE}`);
    const second = await acquireStateLock(fs, STATE, inContainer('container-b'));
    const taken = vol.readFileSync(`${STATE}/${LOCK_FILE}`, 'utf8') as string;
    await expect(first.ensureHeld()).rejects.toBeInstanceOf(StateLockedError);
    expect(vol.readFileSync(`${STATE}/${LOCK_FILE}`, 'utf8')).toBe(taken);
    expect(vol.readdirSync(STATE)).toEqual([LOCK_FILE]);
    // A reload of container b's agent (a second lock of the same process) still holds it for that agent.
    const reloaded = await acquireStateLock(fs, STATE, inContainer('container-b'));
    expect(await second.ensureHeld()).toBe(false);
    await second.release();
    expect(vol.existsSync(`${STATE}/${LOCK_FILE}`)).toBe(true);
    await reloaded.release();
  });

  it('a lock replaced by garbage or by a dead agent is taken again', async () => {
    const { vol, fs } = memfs();
    const lock = await acquireStateLock(fs, STATE, probe(100, [100]));
    vol.writeFileSync(`${STATE}/${LOCK_FILE}`, JSON.stringify({ pid: 300, procStart: 'start-300' }));
    expect(await lock.ensureHeld()).toBe(true);
    vol.writeFileSync(`${STATE}/${LOCK_FILE}`, 'garbage');
    expect(await lock.ensureHeld()).toBe(true);
    expect(JSON.parse(vol.readFileSync(`${STATE}/${LOCK_FILE}`, 'utf8') as string)).toMatchObject({
      pid: 100,
    });
    await lock.release();
    expect(vol.existsSync(`${STATE}/${LOCK_FILE}`)).toBe(false);
  });
});

/** A small seeded generator, so a failing interleaving can be replayed from its seed. */
function seeded(seed: number): () => number {
  let x = seed >>> 0 || 1;
  return () => {
    x ^= x << 13;
    x ^= x >>> 17;
    x ^= x << 5;
    return (x >>> 0) / 2 ** 32;
  };
}

/** The fs with a random number of event-loop turns before every call: two acquirers interleave anywhere. */
function interleaving(fs: FsPort, random: () => number): FsPort {
  const turns = async () => {
    for (let n = Math.floor(random() * 4); n > 0; n -= 1) await new Promise((r) => setImmediate(r));
  };
  const wrapped: Record<string, unknown> = {};
  for (const name of ['open', 'rename', 'unlink', 'link', 'lstat', 'stat', 'readFile'] as const) {
    const original = fs[name] as (...args: unknown[]) => Promise<unknown>;
    wrapped[name] = async (...args: unknown[]) => {
      await turns();
      const result = await original.apply(fs, args);
      await turns();
      return result;
    };
  }
  return { ...fs, ...wrapped } as FsPort;
}

async function race(fs: FsPort, random: () => number) {
  const both = await Promise.allSettled([
    acquireStateLock(interleaving(fs, random), STATE, probe(100, [100, 200])),
    acquireStateLock(interleaving(fs, random), STATE, probe(200, [100, 200])),
  ]);
  const won = both.filter((r): r is PromiseFulfilledResult<StateLock> => r.status === 'fulfilled');
  const lost = both.filter((r): r is PromiseRejectedResult => r.status === 'rejected');
  return { won, lost };
}

describe('acquireStateLock: two agents racing', () => {
  it('for a free state directory: exactly one wins in every interleaving, the other names it', async () => {
    for (let seed = 1; seed <= 150; seed += 1) {
      const { vol, fs } = memfs();
      const { won, lost } = await race(fs, seeded(seed));
      expect(won, `seed ${seed}`).toHaveLength(1);
      expect(lost[0]?.reason, `seed ${seed}`).toBeInstanceOf(StateLockedError);
      const holder = JSON.parse(vol.readFileSync(`${STATE}/${LOCK_FILE}`, 'utf8') as string);
      expect(lost[0]?.reason).toMatchObject({ pid: holder.pid });
      expect(vol.readdirSync(STATE), `seed ${seed}`).toEqual([LOCK_FILE]);
    }
  });

  it('for a lock left by a dead agent: exactly one takes it over in every interleaving', async () => {
    for (let seed = 1; seed <= 150; seed += 1) {
      const { vol, fs } = memfs({
        [`${STATE}/${LOCK_FILE}`]: JSON.stringify({ pid: 300, procStart: 'start-300', token: 'dead' }),
      });
      const { won, lost } = await race(fs, seeded(seed));
      expect(won, `seed ${seed}`).toHaveLength(1);
      expect(lost[0]?.reason, `seed ${seed}`).toBeInstanceOf(StateLockedError);
      expect(vol.readdirSync(STATE), `seed ${seed}`).toEqual([LOCK_FILE]);
      await won[0]?.value.release();
      expect(vol.readdirSync(STATE)).toEqual([]);
    }
  });

  it('a lock is never visible empty: it is complete from the moment it has its name', async () => {
    const { vol, fs } = memfs();
    const seen: string[] = [];
    const watching: FsPort = {
      ...fs,
      link: async (...args: Parameters<FsPort['link']>) => {
        await fs.link(...args);
        seen.push(vol.readFileSync(`${STATE}/${LOCK_FILE}`, 'utf8') as string);
      },
    };
    await acquireStateLock(watching, STATE, probe(100, [100]));
    expect(seen).toHaveLength(1);
    expect(JSON.parse(seen[0] ?? '')).toMatchObject({ pid: 100 });
  });
});

describe('acquireStateLock: an unusable state directory', () => {
  function failing(code: string): FsPort {
    const { fs } = memfs();
    const error = () => Object.assign(new Error(`${code}: simulated`), { code });
    return {
      ...fs,
      open: (async () => {
        throw error();
      }) as FsPort['open'],
    };
  }

  it.each([
    ['EROFS', 'read-only file system: stateDir must be on a writable file system'],
    ['EACCES', "permission denied: the agent's user must own stateDir"],
  ])('%s: StateDirError naming stateDir and the reason, not retryable (exit 78)', async (code, reason) => {
    const error = await acquireStateLock(failing(code), STATE, probe(100, [100])).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(StateDirError);
    expect(error).toMatchObject({
      code: 'state_dir_unusable',
      retryable: false,
      stateDir: STATE,
      errno: code,
    });
    expect((error as Error).message).toBe(
      `stateDir ${STATE} is not usable: cannot create ${LOCK_FILE}: ${reason}${
        code === 'EROFS'
          ? ' (under systemd: inside StateDirectory= or ReadWritePaths=)'
          : ' (chown it, mode 0700)'
      } (${code})`,
    );
  });

  it('ENOSPC: StateDirError that is retryable (the disk may be cleaned)', async () => {
    const error = await acquireStateLock(failing('ENOSPC'), STATE, probe(100, [100])).catch(
      (e: unknown) => e,
    );
    expect(error).toMatchObject({ code: 'state_dir_unusable', retryable: true, errno: 'ENOSPC' });
  });

  it.each(['EPERM', 'ENOTSUP', 'EOPNOTSUPP'])(
    'a filesystem without hard links (link() %s: exFAT, vfat) is named as such, not as an owner to fix (exit 78)',
    async (code) => {
      const { vol, fs } = memfs();
      const noLinks: FsPort = {
        ...fs,
        link: (async () => {
          throw Object.assign(new Error(`${code}: simulated`), { code });
        }) as FsPort['link'],
      };
      const error = await acquireStateLock(noLinks, STATE, probe(100, [100])).catch((e: unknown) => e);
      expect(error).toBeInstanceOf(StateDirError);
      expect(error).toMatchObject({ code: 'state_dir_unusable', retryable: false, errno: code });
      expect((error as Error).message).toContain('refuses hard links');
      expect((error as Error).message).not.toContain('must own stateDir');
      expect(vol.readdirSync(STATE).filter((name) => String(name).startsWith(TEMP_PREFIX))).toEqual([]);
    },
  );

  it('a write that takes no bytes (a FUSE stateDir answering 0) fails the lock (EIO) instead of looping for good', async () => {
    const { vol, fs } = memfs();
    let calls = 0;
    const writesNothing: FsPort = {
      ...fs,
      open: (async (...args: Parameters<FsPort['open']>) => {
        const handle = await fs.open(...args);
        return Object.assign(handle, {
          write: async (buffer: Uint8Array) => {
            // Past 1,000 calls the loop is taken for one that never ends.
            if (++calls > 1_000) throw Object.assign(new Error('spun'), { code: 'ESPUN' });
            return { bytesWritten: 0, buffer };
          },
        });
      }) as FsPort['open'],
    };
    const error = await acquireStateLock(writesNothing, STATE, probe(100, [100])).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(StateDirError);
    expect(error).toMatchObject({ errno: 'EIO' });
    expect(calls).toBe(1);
    expect(vol.readdirSync(STATE)).toEqual([]);
  });

  it('leaves no temp file when the link fails', async () => {
    const { vol, fs } = memfs();
    const broken: FsPort = {
      ...fs,
      link: (async () => {
        throw Object.assign(new Error('EIO'), { code: 'EIO' });
      }) as FsPort['link'],
    };
    await expect(acquireStateLock(broken, STATE, probe(100, [100]))).rejects.toBeInstanceOf(StateDirError);
    expect(vol.readdirSync(STATE).filter((name) => String(name).startsWith(TEMP_PREFIX))).toEqual([]);
  });
});

describe('acquireStateLock: what a local user can plant as the lock (real directory)', () => {
  const dirs: string[] = [];
  afterEach(async () => {
    for (const dir of dirs.splice(0)) await rm(dir, { recursive: true, force: true });
  });

  async function plantedLock(plant: (lock: string) => Promise<void>) {
    const dir = await mkdtemp(path.join(os.tmpdir(), 'config-agent-lock-'));
    dirs.push(dir);
    await plant(path.join(dir, LOCK_FILE));
    return dir;
  }

  it.each<[string, (lock: string) => Promise<void>]>([
    // Reading a FIFO waits for a writer that never comes: start-up hung forever (systemd sees it running).
    ['a FIFO', async (lock) => void execFileSync('mkfifo', [lock])],
    // Read through, /dev/zero never ends: the agent would fill its memory.
    ['a symlink to /dev/zero', (lock) => symlink('/dev/zero', lock)],
    [
      'a symlink to a live lock elsewhere',
      async (lock) => {
        const elsewhere = `${lock}-elsewhere`;
        await writeFile(elsewhere, JSON.stringify({ pid: 200, procStart: 'start-200' }));
        await symlink(elsewhere, lock);
      },
    ],
    [
      'a regular file larger than any lock',
      (lock) => writeFile(lock, JSON.stringify({ pid: 200, procStart: 'start-200', pad: 'x'.repeat(8192) })),
    ],
  ])('%s is not a lock: taken over at once, never read through', async (_name, plant) => {
    const dir = await plantedLock(plant);
    const lock = await acquireStateLock(nodeFs, dir, probe(100, [100, 200]));
    const file = path.join(dir, LOCK_FILE);
    expect(JSON.parse(await readFile(file, 'utf8'))).toMatchObject({ pid: 100 });
    expect((await readdir(dir)).filter((name) => name.startsWith(TEMP_PREFIX))).toEqual([]);
    await lock.release();
    expect((await readdir(dir)).includes(LOCK_FILE)).toBe(false);
  });
});
