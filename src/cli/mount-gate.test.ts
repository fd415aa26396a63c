// A mount below rootDir that stops answering (a dead NFS server, a wedged FUSE daemon) fails its files alone, bounded.
import type { ChildProcess } from 'node:child_process';
import { spawnSync } from 'node:child_process';
import * as nodeFs from 'node:fs/promises';
import { chmod, mkdir, mkdtemp, readdir, readFile, rm } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { controlledClock, steppedClock } from '../../test/helpers/gate-clocks.js';
import { canMountFuse, hungFuseMount } from '../../test/helpers/hung-fuse.js';
import { canPauseFuse, type PausableMount, pausableFuseMount } from '../../test/helpers/pausable-fuse.js';
import { waitFor } from '../../test/helpers/wait-for.js';
import { nodeDescriptorCalls } from '../lib/descriptor-calls.js';
import type { FsPort } from '../lib/fs-port.js';
import { observeDisk } from '../reconcile/observe.js';
import { publishFile, removeManagedFile, writeDurableJson } from '../store/durable-writer.js';
import { TEMP_PREFIX } from '../store/path-guard.js';
import { hangSafeFs } from './hang-safe-fs.js';
import { gateMountsThatMayHang, MountLanes, STOP_RESERVE_MS } from './mount-gate.js';

const ROOT = '/srv/root';

/** A call's outcome, kept, with whether it has come yet. */
function settledLater(call: Promise<unknown>) {
  let done = false;
  const result = call.then(
    (value) => {
      done = true;
      return value;
    },
    (error: unknown) => {
      done = true;
      return error;
    },
  );
  return { result, settled: () => done };
}

/** An fs whose lstat of a path under ROOT/share never answers until `answer()`: a mount nobody serves. */
function hangingShare() {
  const held: (() => void)[] = [];
  let hanging = true;
  const fs = {
    lstat: (file: string) =>
      file.startsWith(`${ROOT}/share/`) && hanging
        ? new Promise((resolve) => held.push(() => resolve({ file })))
        : Promise.resolve({ file }),
  } as unknown as FsPort;
  return {
    fs,
    /** Calls made into the share and not answered yet. */
    pending: () => held.length,
    answer: () => {
      hanging = false;
      for (const finish of held.splice(0)) finish();
    },
  };
}

describe('gateMountsThatMayHang', () => {
  it('a call past the bound fails with ETIMEDOUT, later ones into that mount fail at once, others answer; once it answers, calls go in again', async () => {
    const { clock, expire } = controlledClock();
    const world = hangingShare();
    const fs = gateMountsThatMayHang(world.fs, ROOT, () => new Set(['share']), clock, 15_000);
    const first = fs.lstat(`${ROOT}/share/a.json`).catch((error: unknown) => error);
    // Queued behind the call in progress, not sent: one call at a time into the mount.
    const queued = fs.lstat(`${ROOT}/share/b.json`).catch((error: unknown) => error);
    expect(await fs.lstat(`${ROOT}/app/c.json`)).toEqual({ file: `${ROOT}/app/c.json` });
    expire();
    expect(await first).toMatchObject({ code: 'ETIMEDOUT', mountPoint: `${ROOT}/share` });
    expect(await queued).toMatchObject({ code: 'ETIMEDOUT' });
    // Until the late call comes back, none goes in.
    await expect(fs.lstat(`${ROOT}/share/d.json`)).rejects.toMatchObject({ code: 'ETIMEDOUT' });
    expect(await fs.lstat(`${ROOT}/shared/e.json`)).toEqual({ file: `${ROOT}/shared/e.json` });
    world.answer();
    await new Promise((resolve) => setImmediate(resolve));
    expect(await fs.lstat(`${ROOT}/share/d.json`)).toEqual({ file: `${ROOT}/share/d.json` });
  });
});

describe('gateMountsThatMayHang: rootDir (or stateDir) itself on a mount that may hang (gate19)', () => {
  /** An fs whose lstat of anything under /srv never answers until `answer()`: rootDir's own mount is dead. */
  function hangingRootMount() {
    const held: (() => void)[] = [];
    let hanging = true;
    const fs = {
      lstat: (file: string) =>
        file.startsWith('/srv/') && hanging
          ? new Promise((resolve) => held.push(() => resolve({ file })))
          : Promise.resolve({ file }),
    } as unknown as FsPort;
    return {
      fs,
      answer: () => {
        hanging = false;
        for (const finish of held.splice(0)) finish();
      },
    };
  }
  const held = () => [{ dir: ROOT, mountPoint: '/srv' }];

  // Before, only mounts strictly below rootDir went through a lane: a call on rootDir's own mount waited for good.
  it('a call on rootDir past the bound fails naming the mount, later ones at once; outside answers; once it answers, calls go in again', async () => {
    const { clock, expire } = controlledClock();
    const world = hangingRootMount();
    const fs = gateMountsThatMayHang(world.fs, ROOT, () => new Set(), clock, 15_000, { held });
    const first = fs.lstat(ROOT).catch((error: unknown) => error);
    const queued = fs.lstat(`${ROOT}/app/a.json`).catch((error: unknown) => error);
    expect(await fs.lstat('/var/lib/agent/state.json')).toEqual({ file: '/var/lib/agent/state.json' });
    expire();
    expect(await first).toMatchObject({ code: 'ETIMEDOUT', mountPoint: '/srv' });
    expect(String(await first)).toMatch(/the mount at \/srv did not answer within 15 s/);
    expect(await queued).toMatchObject({ code: 'ETIMEDOUT' });
    await expect(fs.lstat(`${ROOT}/b.json`)).rejects.toMatchObject({ code: 'ETIMEDOUT' });
    world.answer();
    await new Promise((resolve) => setImmediate(resolve));
    expect(await fs.lstat(`${ROOT}/b.json`)).toEqual({ file: `${ROOT}/b.json` });
  });

  // Start-up's checks, the daemon's port and each reload's each had their own: every start tried again while the
  // mount hung would have held one more thread of libuv's pool (of four) for good.
  it('two gates sharing the process lanes: a call late through one fails the other at once, before any bound passes', async () => {
    const { clock, expire } = controlledClock();
    const world = hangingRootMount();
    const lanes = new MountLanes(clock, 15_000);
    const startUp = gateMountsThatMayHang(world.fs, '/', () => new Set(), clock, 15_000, { held, lanes });
    const port = gateMountsThatMayHang(world.fs, ROOT, () => new Set(), clock, 15_000, { held, lanes });
    const late = startUp.lstat(ROOT).catch((error: unknown) => error);
    expire();
    expect(await late).toMatchObject({ code: 'ETIMEDOUT' });
    await expect(port.lstat(`${ROOT}/app`)).rejects.toMatchObject({ code: 'ETIMEDOUT', mountPoint: '/srv' });
    world.answer();
    await new Promise((resolve) => setImmediate(resolve));
    expect(await port.lstat(`${ROOT}/app`)).toEqual({ file: `${ROOT}/app` });
  });
});

describe('MountLanes with the process stop: a stop gives up on the calls waiting on a hung mount at once (stop21)', () => {
  // Before: a stop of the daemon (the pass aborted) left its pass waiting on the mount until the 15 s bound, past
  // the stop's 7 s budget: the daemon ended by SIGTERM 8-9 s after the signal.
  it('the call waiting on its bound and the one queued behind it fail at once, no bound passed; the lane is late until the call comes back', async () => {
    const { clock } = controlledClock();
    const world = hangingShare();
    const stop = new AbortController();
    const lanes = new MountLanes(clock, 15_000, stop.signal);
    const fs = gateMountsThatMayHang(world.fs, ROOT, () => new Set(['share']), clock, 15_000, { lanes });
    const first = fs.lstat(`${ROOT}/share/a.json`).catch((error: unknown) => error);
    const queued = fs.lstat(`${ROOT}/share/b.json`).catch((error: unknown) => error);
    stop.abort();
    // The clock's sleeps are never ended: only the stop can have ended these.
    expect(await first).toMatchObject({ code: 'ETIMEDOUT', mountPoint: `${ROOT}/share` });
    expect(String(await first)).toMatch(/had not answered when the agent was told to stop/);
    expect(await queued).toMatchObject({ code: 'ETIMEDOUT', mountPoint: `${ROOT}/share` });
    // The stop's own calls: at once into the mount still holding a call, as ever elsewhere.
    await expect(fs.lstat(`${ROOT}/share/c.json`)).rejects.toMatchObject({ code: 'ETIMEDOUT' });
    expect(await fs.lstat(`${ROOT}/app/d.json`)).toEqual({ file: `${ROOT}/app/d.json` });
    world.answer();
    await new Promise((resolve) => setImmediate(resolve));
    expect(await fs.lstat(`${ROOT}/share/c.json`)).toEqual({ file: `${ROOT}/share/c.json` });
  });

  // Before: a call begun after the stop (its flush of state) kept its 15 s bound, and the 10 s stop deadline cut
  // the process first ("shutdown took too long"), the journal never naming the mount.
  it('a call made after the stop is bounded by what is left of the stop deadline, less what the stop needs after it', async () => {
    const time = steppedClock();
    const world = hangingShare();
    const stop = new AbortController();
    const lanes = new MountLanes(time.clock, 15_000, stop.signal, 10_000);
    const fs = gateMountsThatMayHang(world.fs, ROOT, () => new Set(['share']), time.clock, 15_000, { lanes });
    stop.abort();
    // Answering calls go in as ever.
    expect(await fs.lstat(`${ROOT}/app/a.json`)).toEqual({ file: `${ROOT}/app/a.json` });
    await time.advance(1_000);
    const flush = settledLater(fs.lstat(`${ROOT}/share/state.json`));
    // 10 s from the stop, less the reserve, less the second gone before the call.
    const left = 10_000 - STOP_RESERVE_MS - 1_000;
    await time.advance(left - 1);
    expect(flush.settled()).toBe(false);
    await time.advance(1);
    expect(flush.settled()).toBe(true);
    expect(await flush.result).toMatchObject({ code: 'ETIMEDOUT', mountPoint: `${ROOT}/share` });
    expect(String(await flush.result)).toContain(`did not answer within ${left / 1000} s`);
  });

  it('a call made once the stop deadline less the reserve has passed is given up on at once; before the stop, the 15 s bound holds', async () => {
    const time = steppedClock();
    const world = hangingShare();
    const stop = new AbortController();
    const lanes = new MountLanes(time.clock, 15_000, stop.signal, 10_000);
    const fs = gateMountsThatMayHang(world.fs, ROOT, () => new Set(['share']), time.clock, 15_000, { lanes });
    const before = settledLater(fs.lstat(`${ROOT}/share/a.json`));
    await time.advance(14_999);
    expect(before.settled()).toBe(false);
    await time.advance(1);
    expect(await before.result).toMatchObject({ code: 'ETIMEDOUT' });
    world.answer();
    await new Promise((resolve) => setImmediate(resolve));
    const other = hangingShare();
    const lanes2 = new MountLanes(time.clock, 15_000, stop.signal, 10_000);
    const fs2 = gateMountsThatMayHang(other.fs, ROOT, () => new Set(['share']), time.clock, 15_000, {
      lanes: lanes2,
    });
    stop.abort();
    await time.advance(10_000);
    const late = settledLater(fs2.lstat(`${ROOT}/share/b.json`));
    await time.advance(0);
    expect(await late.result).toMatchObject({ code: 'ETIMEDOUT' });
    // Not made at all (review29): made, it held a pool thread in the hung mount until the process ended.
    expect(other.pending()).toBe(0);
  });

  describe('a write held in the kernel when the stop comes', () => {
    let dir: string | undefined;
    afterEach(async () => {
      if (dir !== undefined) await rm(dir, { recursive: true, force: true });
      dir = undefined;
    });

    // The held call is a real open (or fsync) on the local disk whose answer the test holds back: what a call into
    // a hung mount is to the agent, a thread of the pool that has not come back.
    for (const holdAt of ['open', 'fsync'] as const) {
      it(`a temp file's ${holdAt}: the write fails at once; once the call comes back its descriptor is closed and the temp file removed`, async () => {
        dir = await mkdtemp(path.join(os.tmpdir(), 'config-agent-mount-gate-stop-'));
        const root = path.join(dir, 'root');
        await mkdir(path.join(root, 'app'), { recursive: true });
        let release: () => void = () => undefined;
        const released = new Promise<void>((resolve) => {
          release = resolve;
        });
        let reached: () => void = () => undefined;
        const holding = new Promise<void>((resolve) => {
          reached = resolve;
        });
        let armed = true;
        let answered = false;
        const hold = async <T>(call: () => Promise<T>): Promise<T> => {
          if (!armed) return call();
          armed = false;
          const value = await call();
          reached();
          await released;
          answered = true;
          return value;
        };
        const descriptors = {
          ...nodeDescriptorCalls,
          open: (file: string, flags: number, mode: number) =>
            holdAt === 'open' && path.basename(file).startsWith(TEMP_PREFIX)
              ? hold(() => nodeDescriptorCalls.open(file, flags, mode))
              : nodeDescriptorCalls.open(file, flags, mode),
          fsync: (fd: number) =>
            holdAt === 'fsync' ? hold(() => nodeDescriptorCalls.fsync(fd)) : nodeDescriptorCalls.fsync(fd),
        };
        const { clock } = controlledClock();
        const stop = new AbortController();
        const lanes = new MountLanes(clock, 15_000, stop.signal);
        const base = { ...(nodeFs as unknown as FsPort), descriptors } as FsPort;
        const fs = gateMountsThatMayHang(base, root, () => new Set(), clock, 15_000, {
          held: () => [{ dir: root, mountPoint: root }],
          lanes,
        });
        const writing = publishFile(fs, {
          rootDir: root,
          relativePath: 'app/a.json',
          data: Buffer.from('{"a":1}\n'),
          mode: 0o644,
          dirMode: 0o755,
        }).catch((error: unknown) => error);
        await holding;
        stop.abort();
        // No bound passed (the clock's sleeps never end): the stop alone ended it.
        expect(await writing).toMatchObject({ code: 'disk_error', errno: 'ETIMEDOUT' });
        expect(answered).toBe(false);
        release();
        await waitFor(
          async () =>
            answered &&
            (await descriptorsUnder(root)).length === 0 &&
            !(await readdir(path.join(root, 'app'))).some((name) => name.startsWith(TEMP_PREFIX)),
          30_000,
          { what: 'the held call cleaned up' },
        );
        expect(await readdir(path.join(root, 'app'))).toEqual([]);
        expect(await descriptorsUnder(root)).toEqual([]);
      }, 60_000);
    }
  });
});

describe('a mkdir that lands after its call was given up on (mount22)', () => {
  let dir: string | undefined;
  afterEach(async () => {
    if (dir !== undefined) await rm(dir, { recursive: true, force: true });
    dir = undefined;
  });

  /**
   * rootDir held on a mount that may hang, over a real temp dir whose first `mkdir` is made and then held back (a
   * call into a hung mount that lands in the kernel but has not come back) until `release()`.
   */
  async function lateMkdirWorld() {
    dir = await mkdtemp(path.join(os.tmpdir(), 'config-agent-mount-gate-mkdir-'));
    const root = path.join(dir, 'root');
    await mkdir(path.join(root, 'app'), { recursive: true });
    let release: () => void = () => undefined;
    const released = new Promise<void>((resolve) => {
      release = resolve;
    });
    let reached: () => void = () => undefined;
    const made = new Promise<void>((resolve) => {
      reached = resolve;
    });
    let armed = true;
    const base = {
      ...(nodeFs as unknown as FsPort),
      mkdir: async (file: string, options?: object) => {
        const made = await nodeFs.mkdir(file, options);
        if (armed) {
          armed = false;
          reached();
          await released;
        }
        return made;
      },
    } as FsPort;
    const { clock, expire } = controlledClock();
    const fs = gateMountsThatMayHang(base, root, () => new Set(), clock, 15_000, {
      held: () => [{ dir: root, mountPoint: root }],
    });
    /** Lets the late answer reach the gate (microtasks only: the held mkdir is done in the kernel already). */
    const answer = async () => {
      await made;
      release();
      await new Promise((resolve) => setImmediate(resolve));
    };
    return { root, fs, expire, answer, made };
  }

  // Before: the late directory stayed, recorded nowhere (the pass had failed that file), until someone removed it.
  it('the directory it made is removed once it answers; a call under it made meanwhile waits for that', async () => {
    const w = await lateMkdirWorld();
    const making = w.fs.mkdir(path.join(w.root, 'app/new'), { mode: 0o755 }).catch((error: unknown) => error);
    w.expire();
    expect(await making).toMatchObject({ code: 'ETIMEDOUT' });
    await w.answer();
    await expect(w.fs.lstat(path.join(w.root, 'app/new'))).rejects.toMatchObject({ code: 'ENOENT' });
    expect(await readdir(path.join(w.root, 'app'))).toEqual([]);
    // Made again, it stays: only the late call's directory is undone.
    await w.fs.mkdir(path.join(w.root, 'app/new'), { mode: 0o755 });
    expect(await readdir(path.join(w.root, 'app'))).toEqual(['new']);
  });

  it('a recursive one: each directory it made goes, deepest first; the one that was there stays', async () => {
    const w = await lateMkdirWorld();
    const making = w.fs
      .mkdir(path.join(w.root, 'app/a/b/c'), { recursive: true, mode: 0o700 })
      .catch((error: unknown) => error);
    w.expire();
    expect(await making).toMatchObject({ code: 'ETIMEDOUT' });
    await w.answer();
    await expect(w.fs.lstat(path.join(w.root, 'app/a'))).rejects.toMatchObject({ code: 'ENOENT' });
    expect(await readdir(w.root)).toEqual(['app']);
    expect(await readdir(path.join(w.root, 'app'))).toEqual([]);
  });

  // review29: a recursive mkdir of a directory that was there answers undefined (it made nothing), which was taken
  // for "made `absolute`": an operator's empty directory (the agent's user's: root's when the agent runs as root) went.
  it('a recursive one that made nothing (the directory was there) removes nothing', async () => {
    const w = await lateMkdirWorld();
    const making = w.fs
      .mkdir(path.join(w.root, 'app'), { recursive: true, mode: 0o755 })
      .catch((error: unknown) => error);
    w.expire();
    expect(await making).toMatchObject({ code: 'ETIMEDOUT' });
    await w.answer();
    // Through the gate: it waits for a clean-up of the directory, if one began.
    expect((await w.fs.lstat(path.join(w.root, 'app'))).isDirectory()).toBe(true);
  });

  it('one that holds something by the time it answers is left as it is, with what it holds', async () => {
    const w = await lateMkdirWorld();
    const making = w.fs.mkdir(path.join(w.root, 'app/new'), { mode: 0o755 }).catch((error: unknown) => error);
    w.expire();
    expect(await making).toMatchObject({ code: 'ETIMEDOUT' });
    // The held mkdir made the directory in the pool, which on a busy machine may come after the give-up above.
    await w.made;
    await nodeFs.writeFile(path.join(w.root, 'app/new/theirs.txt'), 'theirs\n');
    await w.answer();
    expect(await w.fs.readdir(path.join(w.root, 'app/new'))).toEqual(['theirs.txt']);
    expect(await readFile(path.join(w.root, 'app/new/theirs.txt'), 'utf8')).toBe('theirs\n');
  });
});

describe('gateMountsThatMayHang on a mount that answers', () => {
  let dir: string | undefined;
  afterEach(async () => {
    if (dir !== undefined) await rm(dir, { recursive: true, force: true });
    dir = undefined;
  });

  it('writes, reads and removes through it as before: its FileHandles, descriptors and pinned parents (a chain others may change)', async () => {
    dir = await mkdtemp(path.join(os.tmpdir(), 'config-agent-mount-gate-ok-'));
    const root = path.join(dir, 'root');
    await mkdir(path.join(root, 'share'), { recursive: true });
    // Writable by others: the writer pins the parent and names the temp file through /proc/self/fd.
    await chmod(path.join(root, 'share'), 0o777);
    const { clock } = controlledClock();
    const base = { ...(nodeFs as unknown as FsPort), descriptors: nodeDescriptorCalls };
    const fs = gateMountsThatMayHang(base, root, () => new Set(['share']), clock);
    for (const content of ['{"v":1}\n', '{"v":2}\n']) {
      await publishFile(fs, {
        rootDir: root,
        relativePath: 'share/deep/b.json',
        data: Buffer.from(content),
        mode: 0o644,
        dirMode: 0o755,
      });
      expect(await readFile(path.join(root, 'share/deep/b.json'), 'utf8')).toBe(content);
    }
    const observed = await observeDisk(fs, root, [{ relative_filepath: 'share/deep/b.json' }]);
    expect(observed.get('share/deep/b.json')).toMatchObject({ kind: 'file' });
    expect(
      await removeManagedFile(fs, {
        rootDir: root,
        relativePath: 'share/deep/b.json',
        pruneDirs: ['share/deep'],
      }),
    ).toBe('removed');
    expect(await readdir(path.join(root, 'share'))).toEqual([]);
  });
});

// Root with /dev/fuse only (hungFuseMount), as hang-safe-fs.test.ts.
describe.runIf(canMountFuse)('hangSafeFs with a hung FUSE mount below rootDir (gaps18)', () => {
  let dir: string | undefined;
  let mount: ChildProcess | undefined;
  afterEach(async () => {
    mount?.kill('SIGKILL');
    if (dir !== undefined) {
      spawnSync('umount', ['-l', path.join(dir, 'root', 'share')]);
      await rm(dir, { recursive: true, force: true, maxRetries: 20, retryDelay: 20 });
    }
    mount = undefined;
    dir = undefined;
  });

  it('observation and a write into it fail that file (ETIMEDOUT) and end; a file beside it is written', async () => {
    dir = await mkdtemp(path.join(os.tmpdir(), 'config-agent-mount-gate-'));
    const root = path.join(dir, 'root');
    await mkdir(path.join(root, 'share'), { recursive: true });
    await mkdir(path.join(root, 'app'));
    mount = await hungFuseMount(path.join(root, 'share'), 120_000);
    // The bound passes at once: a mount nobody serves never answers before it.
    const fs = await hangSafeFs(root, {
      monotonic: () => 0,
      sleep: () => new Promise<void>((resolve) => setImmediate(resolve)),
    });
    const observed = await observeDisk(fs, root, [
      { relative_filepath: 'share/b.json' },
      { relative_filepath: 'app/a.json' },
    ]);
    // Before: observation waited on the mount for good (the test's timeout).
    expect(observed.get('share/b.json')).toMatchObject({ kind: 'unreadable' });
    expect(observed.get('app/a.json')).toEqual({ kind: 'absent' });
    const write = (relativePath: string) =>
      publishFile(fs, {
        rootDir: root,
        relativePath,
        data: Buffer.from('{}\n'),
        mode: 0o644,
        dirMode: 0o755,
      });
    await expect(write('share/b.json')).rejects.toMatchObject({ code: 'disk_error', errno: 'ETIMEDOUT' });
    expect(await write('app/a.json')).toBeDefined();
    expect(await readFile(path.join(root, 'app/a.json'), 'utf8')).toBe('{}\n');
    expect(mount.exitCode === null && mount.signalCode === null, 'the mount still hangs').toBe(true);
  }, 60_000);

  // Before (gate19), only mounts below rootDir had a lane: a state file's write on a hung stateDir waited for good.
  it('stateDir on it (rootDir elsewhere): a state file write fails ETIMEDOUT after the bound naming the mount, rootDir goes on', async () => {
    dir = await mkdtemp(path.join(os.tmpdir(), 'config-agent-mount-gate-'));
    // The mount point is where afterEach unmounts it; rootDir is a sibling on the local disk.
    const hung = path.join(dir, 'root', 'share');
    await mkdir(hung, { recursive: true });
    const rootDir = path.join(dir, 'app-root');
    await mkdir(rootDir);
    mount = await hungFuseMount(hung, 120_000);
    const stateDir = path.join(hung, 'state');
    const fs = await hangSafeFs(
      rootDir,
      { monotonic: () => 0, sleep: () => new Promise<void>((resolve) => setImmediate(resolve)) },
      undefined,
      undefined,
      { stateDir },
    );
    await expect(writeDurableJson(fs, stateDir, 'state.json', { v: 1 })).rejects.toMatchObject({
      code: 'disk_error',
      errno: 'ETIMEDOUT',
    });
    // At once from then on, while the late call has not come back.
    await expect(fs.readFile(path.join(stateDir, 'state.json'), 'utf8')).rejects.toThrow(
      `the mount at ${hung} did not answer`,
    );
    expect(
      await publishFile(fs, {
        rootDir,
        relativePath: 'app/a.json',
        data: Buffer.from('{}\n'),
        mode: 0o644,
        dirMode: 0o755,
      }),
    ).toMatchObject({ outcome: 'written' });
    expect(mount.exitCode === null && mount.signalCode === null, 'the mount still hangs').toBe(true);
  }, 60_000);
});

/** The descriptors of this process open on a file under `dir` (their /proc/self/fd links). */
async function descriptorsUnder(dir: string): Promise<string[]> {
  const open: string[] = [];
  for (const fd of await readdir('/proc/self/fd')) {
    const target = await nodeFs.readlink(`/proc/self/fd/${fd}`).catch(() => '');
    if (target.startsWith(`${dir}/`) || target === dir) open.push(target);
  }
  return open;
}

// Root with /dev/fuse and exfat-fuse (Debian's exfat-fuse, exfatprogs; .ci/run installs them): a mount made to hang
// and come back by stopping and continuing its FUSE daemon.
describe.runIf(canPauseFuse)('a write given up on in a mount that then answers again (gate19)', () => {
  let dir: string | undefined;
  let mount: PausableMount | undefined;
  afterEach(async () => {
    mount?.close();
    if (dir !== undefined) await rm(dir, { recursive: true, force: true, maxRetries: 20, retryDelay: 20 });
    mount = undefined;
    dir = undefined;
  });

  /**
   * rootDir on a pausable FUSE mount, its port gated as the agent's is, with a fake bound; `pauseAt` stops the
   * mount just before the named descriptor call on a temp file, so that call is the one that waits.
   */
  async function world(pauseAt: 'open' | 'fsync', options: { swapTemp?: boolean } = {}) {
    dir = await mkdtemp(path.join(os.tmpdir(), 'config-agent-mount-gate-late-'));
    const root = path.join(dir, 'root');
    await mkdir(root);
    const paused = pausableFuseMount(path.join(dir, 'root.img'), root);
    mount = await paused;
    const m = mount;
    let reached: () => void = () => undefined;
    const waiting = new Promise<void>((resolve) => {
      reached = resolve;
    });
    let armed = true;
    /** Whether the call the mount was stopped before has come back (the mount answered it). */
    let answered = false;
    const trip = <T>(call: () => Promise<T>): Promise<T> => {
      if (!armed) return call();
      armed = false;
      m.pause();
      // The call goes into the kernel in this turn; the test expires the bound once it waits there.
      setImmediate(reached);
      return call().finally(() => {
        answered = true;
      });
    };
    const descriptors = {
      ...nodeDescriptorCalls,
      open: (file: string, flags: number, mode: number) =>
        pauseAt === 'open' && path.basename(file).startsWith(TEMP_PREFIX)
          ? trip(() => nodeDescriptorCalls.open(file, flags, mode))
          : nodeDescriptorCalls.open(file, flags, mode),
      fsync: (fd: number) =>
        pauseAt === 'fsync' ? trip(() => nodeDescriptorCalls.fsync(fd)) : nodeDescriptorCalls.fsync(fd),
    };
    const { clock, expire } = controlledClock();
    // swapTemp: someone replaces the temp file by another file at its name before the late open's clean-up looks.
    let swapped = false;
    const lstat = async (file: string) => {
      if (options.swapTemp === true && path.basename(file).startsWith(TEMP_PREFIX)) {
        await nodeFs.unlink(file);
        await nodeFs.writeFile(file, 'theirs\n');
        swapped = true;
      }
      return nodeFs.lstat(file);
    };
    const base = { ...(nodeFs as unknown as FsPort), lstat, descriptors } as FsPort;
    const fs = gateMountsThatMayHang(base, root, () => new Set(), clock, 15_000, {
      held: () => [{ dir: root, mountPoint: m.mountPoint }],
    });
    const write = (relativePath: string, content: string) =>
      publishFile(fs, {
        rootDir: root,
        relativePath,
        data: Buffer.from(content),
        mode: 0o644,
        dirMode: 0o755,
      });
    return {
      root,
      mount: m,
      waiting,
      expire,
      write,
      answered: () => answered,
      swapped: () => swapped,
    };
  }

  for (const pauseAt of ['open', 'fsync'] as const) {
    // Before: the temp file stayed until a restart's sweep (never: the sweep does not enter such a mount), and its
    // descriptor (and the pinned parents') until the process ended.
    it(`a temp file's ${pauseAt} that waited past the bound: once the mount answers, its descriptor is closed and the temp file removed; the mount's files are written again`, async () => {
      const w = await world(pauseAt);
      await mkdir(path.join(w.root, 'app'));
      const writing = w.write('app/a.json', '{"a":1}\n').catch((error: unknown) => error);
      await w.waiting;
      w.expire();
      expect(await writing).toMatchObject({ code: 'disk_error', errno: 'ETIMEDOUT' });
      w.mount.resume();
      await waitFor(
        async () =>
          w.answered() &&
          (await descriptorsUnder(w.root)).length === 0 &&
          !(await readdir(path.join(w.root, 'app'))).some((name) => name.startsWith(TEMP_PREFIX)),
        30_000,
        { what: 'the late call cleaned up' },
      );
      expect(await readdir(path.join(w.root, 'app'))).toEqual([]);
      expect(await descriptorsUnder(w.root)).toEqual([]);
      // The mount's lane is free again: the next write lands.
      expect(await w.write('app/a.json', '{"a":2}\n')).toMatchObject({ outcome: 'written' });
      expect(await readFile(path.join(w.root, 'app/a.json'), 'utf8')).toBe('{"a":2}\n');
      expect(await descriptorsUnder(w.root)).toEqual([]);
    }, 60_000);
  }

  it('a file put at the late temp name in its place is never removed: only the file the late open made is', async () => {
    const w = await world('open', { swapTemp: true });
    await mkdir(path.join(w.root, 'app'));
    const writing = w.write('app/a.json', '{"a":1}\n').catch((error: unknown) => error);
    await w.waiting;
    w.expire();
    expect(await writing).toMatchObject({ errno: 'ETIMEDOUT' });
    w.mount.resume();
    await waitFor(async () => w.swapped() && (await descriptorsUnder(w.root)).length === 0, 30_000, {
      what: 'the late descriptor closed after the swap',
    });
    const left = (await readdir(path.join(w.root, 'app'))).filter((name) => name.startsWith(TEMP_PREFIX));
    expect(left).toHaveLength(1);
    expect(await readFile(path.join(w.root, 'app', left[0] as string), 'utf8')).toBe('theirs\n');
  }, 60_000);
});
