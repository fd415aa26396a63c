// A directory renewal cut off between its two renames (kill -9, power cut) is put back by the next start.
import * as nodeFs from 'node:fs/promises';
import { chmod, mkdir, mkdtemp, readdir, readFile, rm, symlink, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { PowerCutFs } from '../../test/helpers/power-cut-fs.js';
import { PATIENCE_MS, waitFor } from '../../test/helpers/wait-for.js';
import type { FsPort } from '../lib/fs-port.js';
import { silentLogger } from '../lib/logger.js';
import { ASIDES_FILE, DirectoryAsides } from './directory-asides.js';
import { DirectorySyncLedger } from './directory-syncs.js';
import { publishFile, removeManagedFile, renewDroppedOnTheWay } from './durable-writer.js';
import { TEMP_PREFIX, VerifiedDirectories } from './path-guard.js';
import { RootMountWatch } from './root-mount.js';
import { StateDir, type StateDirSettings } from './state-dir.js';

const EUID = process.geteuid?.() ?? -1;

let dir: string;
let root: string;
let settings: StateDirSettings;

beforeEach(async () => {
  dir = await mkdtemp(path.join(os.tmpdir(), 'asides-'));
  root = path.join(dir, 'root');
  settings = { stateDir: path.join(dir, 'state'), rootDir: root, deviceId: 'dev-1' };
  await mkdir(path.join(root, 'top/app'), { recursive: true, mode: 0o755 });
  await mkdir(settings.stateDir, { mode: 0o700 });
  await chmod(root, 0o755);
  await chmod(path.join(root, 'top'), 0o755);
  await writeFile(path.join(root, 'top/app/a.json'), 'deployed\n');
  await writeFile(path.join(root, 'top/app/operator.conf'), 'the operator wrote this\n');
});

afterEach(async () => {
  await rm(dir, { recursive: true, force: true });
});

/** A fresh start of the agent on the same disk: the state directory opened (restore and sweep), then closed. */
async function start(fs: FsPort = nodeFs as unknown as FsPort): Promise<void> {
  const state = await StateDir.open(fs, settings, silentLogger(), { euid: EUID, clock: { now: () => 0 } });
  await state.close();
}

/** Everything under `at`, relative path → `dir` or the file's content. */
async function tree(at = root): Promise<Record<string, string>> {
  const out: Record<string, string> = {};
  for (const entry of await readdir(at, { recursive: true, withFileTypes: true })) {
    const absolute = path.join(entry.parentPath, entry.name);
    out[path.relative(at, absolute)] = entry.isDirectory()
      ? 'dir'
      : entry.isSymbolicLink()
        ? 'symlink'
        : await readFile(absolute, 'utf8');
  }
  return out;
}

const KEPT = {
  top: 'dir',
  'top/app': 'dir',
  'top/app/a.json': 'deployed\n',
  'top/app/operator.conf': 'the operator wrote this\n',
};

/** A process whose fsync of `top` failed after `top/app` was made (its entry dropped), with the record open. */
async function processAfterFailedFsync(base: FsPort): Promise<FsPort> {
  const ledger = new DirectorySyncLedger();
  ledger.changed(path.join(root, 'top'), 'app');
  ledger.failed(path.join(root, 'top'));
  ledger.keepAsidesIn(
    await DirectoryAsides.open(base, settings.stateDir, root, ledger, silentLogger(), {
      euid: EUID,
      clock: { now: () => 0 },
    }),
  );
  return { ...base, directorySyncs: ledger };
}

class Killed extends Error {}

describe('a removal below a directory the start could not put back', () => {
  it('is not reported removed: the file comes back with the directory, and a later removal deletes it', async () => {
    await renew(diesBetweenTheRenames(await processAfterFailedFsync(nodeFs as unknown as FsPort)));
    const [aside] = await readdir(path.join(root, 'top'));
    const fs: FsPort = {
      ...(nodeFs as unknown as FsPort),
      directorySyncs: new DirectorySyncLedger(),
      rename: (async (from: string, to: string) => {
        if (String(from) === path.join(root, 'top', aside!))
          throw Object.assign(new Error('EIO'), { code: 'EIO' });
        return nodeFs.rename(from, to);
      }) as FsPort['rename'],
    };
    const state = await StateDir.open(fs, settings, silentLogger(), { euid: EUID, clock: { now: () => 0 } });
    try {
      // Before: `absent`, so `removed` was reported, and the next start brought the file back with its directory.
      await expect(
        removeManagedFile(fs, { rootDir: root, relativePath: 'top/app/a.json', pruneDirs: ['top/app'] }),
      ).rejects.toMatchObject({ code: 'disk_error', path: 'top/app' });
    } finally {
      await state.close();
    }
    await start();
    expect(
      await removeManagedFile(nodeFs as unknown as FsPort, {
        rootDir: root,
        relativePath: 'top/app/a.json',
        pruneDirs: ['top/app'],
      }),
    ).toBe('removed');
    expect(await tree(path.join(root, 'top/app'))).toEqual({ 'operator.conf': 'the operator wrote this\n' });
  });
});

describe('a directory the start could not put back because of a passing failure', () => {
  /** After a crash between the renames: a start whose restore rename fails once (EIO), then works. */
  async function startFailingOnce(): Promise<{ fs: FsPort; state: StateDir }> {
    await renew(diesBetweenTheRenames(await processAfterFailedFsync(nodeFs as unknown as FsPort)));
    const [aside] = await readdir(path.join(root, 'top'));
    let failures = 1;
    const fs: FsPort = {
      ...(nodeFs as unknown as FsPort),
      directorySyncs: new DirectorySyncLedger(),
      rename: (async (from: string, to: string) => {
        if (String(from) === path.join(root, 'top', aside!) && failures > 0) {
          failures -= 1;
          throw Object.assign(new Error('EIO'), { code: 'EIO' });
        }
        return nodeFs.rename(from, to);
      }) as FsPort['rename'],
    };
    const state = await StateDir.open(fs, settings, silentLogger(), { euid: EUID, clock: { now: () => 0 } });
    return { fs, state };
  }

  it('is put back by the first write below its name in that run, not held until the next start', async () => {
    const { fs, state } = await startFailingOnce();
    try {
      // Before: refused (disk_error) for the whole run, however long the daemon ran.
      await publishFile(fs, {
        rootDir: root,
        relativePath: 'top/app/b.json',
        data: Buffer.from('b\n'),
        mode: 0o644,
        dirMode: 0o755,
      });
    } finally {
      await state.close();
    }
    expect(await tree()).toEqual({ ...KEPT, 'top/app/b.json': 'b\n' });
    expect(await readdir(settings.stateDir)).not.toContain(ASIDES_FILE);
  });

  it('is put back by a removal below it, whose next attempt deletes the file', async () => {
    const { fs, state } = await startFailingOnce();
    const request = { rootDir: root, relativePath: 'top/app/a.json', pruneDirs: ['top/app'] };
    try {
      await expect(removeManagedFile(fs, request)).rejects.toMatchObject({ code: 'disk_error' });
      expect(await removeManagedFile(fs, request)).toBe('removed');
    } finally {
      await state.close();
    }
    expect(await tree()).toEqual({
      top: 'dir',
      'top/app': 'dir',
      'top/app/operator.conf': 'the operator wrote this\n',
    });
  });
});

/** `fs` that dies (every later call throws) at the rename that would put a directory back from its aside name. */
function diesBetweenTheRenames(fs: FsPort, atFirstRename: () => void = () => undefined): FsPort {
  let dead = false;
  const guard =
    <A extends unknown[], R>(call: (...args: A) => Promise<R>) =>
    async (...args: A): Promise<R> => {
      if (dead) throw new Killed('the process is gone');
      return call(...args);
    };
  return {
    ...fs,
    open: guard(fs.open) as FsPort['open'],
    lstat: guard(fs.lstat) as FsPort['lstat'],
    rename: (async (from: string, to: string) => {
      if (dead) throw new Killed('the process is gone');
      if (path.basename(String(from)).startsWith(TEMP_PREFIX) && (await nodeFs.lstat(from)).isDirectory()) {
        dead = true;
        throw new Killed('kill -9 between the two renames');
      }
      if (path.basename(String(to)).startsWith(TEMP_PREFIX) && String(from) === path.join(root, 'top/app'))
        atFirstRename();
      return fs.rename(from, to);
    }) as FsPort['rename'],
  };
}

async function renew(fs: FsPort): Promise<void> {
  const verified = new VerifiedDirectories(EUID);
  await renewDroppedOnTheWay(fs, root, 'top/app/a.json', verified, new Set());
}

describe('a directory renewal cut off between its two renames', () => {
  it('kill -9 there: the next start renames the directory back, with every file in it', async () => {
    const fs = diesBetweenTheRenames(await processAfterFailedFsync(nodeFs as unknown as FsPort));
    await renew(fs);
    const asides = (await readdir(path.join(root, 'top'))).filter((name) => name.startsWith(TEMP_PREFIX));
    expect(asides).toHaveLength(1);
    expect(await readdir(path.join(root, 'top'))).toEqual(asides);

    await start();
    expect(await tree()).toEqual(KEPT);
    await expect(readFile(path.join(settings.stateDir, ASIDES_FILE))).rejects.toMatchObject({
      code: 'ENOENT',
    });
  });

  it('a power cut at the first rename finds the aside name already on disk in the record', async () => {
    const model = await PowerCutFs.over(nodeFs as unknown as FsPort, dir);
    let atRename: Record<string, string> = {};
    const fs = diesBetweenTheRenames(await processAfterFailedFsync(model.fs), () => {
      atRename = model.afterPowerCut();
    });
    await renew(fs);
    const [aside] = await readdir(path.join(root, 'top'));
    const record = atRename[`state/${ASIDES_FILE}`] ?? '';
    expect(record).toContain(aside);
    expect(record).toContain('"name": "app"');
  });

  it('something else at the name now: both are left as they are, and put back at a start after it went', async () => {
    await renew(diesBetweenTheRenames(await processAfterFailedFsync(nodeFs as unknown as FsPort)));
    const [aside] = await readdir(path.join(root, 'top'));
    await mkdir(path.join(root, 'top/app'));
    await writeFile(path.join(root, 'top/app/a.json'), 'written again\n');
    await start();
    expect(await tree(path.join(root, 'top'))).toEqual({
      app: 'dir',
      'app/a.json': 'written again\n',
      [aside!]: 'dir',
      [`${aside}/a.json`]: 'deployed\n',
      [`${aside}/operator.conf`]: 'the operator wrote this\n',
    });
    await rm(path.join(root, 'top/app'), { recursive: true });
    await start();
    expect(await tree()).toEqual(KEPT);
  });

  it('an empty directory made at the name meanwhile is replaced by the one aside', async () => {
    await renew(diesBetweenTheRenames(await processAfterFailedFsync(nodeFs as unknown as FsPort)));
    await mkdir(path.join(root, 'top/app'));
    await start();
    expect(await tree()).toEqual(KEPT);
  });

  it('a record never moves what it does not name, nor anything under a parent another user may change', async () => {
    await renew(diesBetweenTheRenames(await processAfterFailedFsync(nodeFs as unknown as FsPort)));
    const [aside] = await readdir(path.join(root, 'top'));
    // A look-alike planted beside it, and a record naming it: neither is the agent's doing.
    const planted = `${TEMP_PREFIX}${'ab'.repeat(12)}`;
    await mkdir(path.join(root, 'top', planted));
    const record = JSON.parse(await readFile(path.join(settings.stateDir, ASIDES_FILE), 'utf8')) as {
      asides: Array<Record<string, string>>;
    };
    const real = record.asides[0]!;
    record.asides.push(
      { ...real, aside: planted, name: '../../escape' },
      { ...real, aside: '../../etc', name: 'x' },
      { ...real, aside: planted, name: TEMP_PREFIX },
    );
    await writeFile(path.join(settings.stateDir, ASIDES_FILE), JSON.stringify(record));
    // The parent now writable by others: the aside there may not be the agent's any more.
    await chmod(path.join(root, 'top'), 0o777);
    await start();
    expect((await readdir(path.join(root, 'top'))).sort()).toEqual([aside, planted].sort());
    expect(await readdir(dir)).toEqual(['root', 'state']);
    // Sealed again: the recorded one (and only it) comes back.
    await chmod(path.join(root, 'top'), 0o755);
    await start();
    expect((await readdir(path.join(root, 'top'))).sort()).toEqual(['app', planted].sort());
    expect(await tree(path.join(root, 'top/app'))).toEqual({
      'a.json': 'deployed\n',
      'operator.conf': 'the operator wrote this\n',
    });
  });

  it('a symlink at the aside name or on the way is never followed', async () => {
    await renew(diesBetweenTheRenames(await processAfterFailedFsync(nodeFs as unknown as FsPort)));
    const [aside] = await readdir(path.join(root, 'top'));
    await mkdir(path.join(dir, 'elsewhere/inside'), { recursive: true });
    await rm(path.join(root, 'top', aside!), { recursive: true });
    await symlink(path.join(dir, 'elsewhere/inside'), path.join(root, 'top', aside!));
    await start();
    expect(await tree(path.join(root, 'top'))).toEqual({ [aside!]: 'symlink' });
    expect(await tree(path.join(dir, 'elsewhere'))).toEqual({ inside: 'dir' });
  });

  it('a record of another root directory is kept for it, and nothing under this root is moved', async () => {
    await renew(diesBetweenTheRenames(await processAfterFailedFsync(nodeFs as unknown as FsPort)));
    const [aside] = await readdir(path.join(root, 'top'));
    const other = path.join(dir, 'other-root');
    settings = { ...settings, rootDir: other };
    await mkdir(other);
    await start();
    expect(await readdir(path.join(root, 'top'))).toEqual([aside]);
    settings = { ...settings, rootDir: root };
    await start();
    expect(await tree()).toEqual(KEPT);
  });

  it('a record of this root spelled another way (a symlink to it, a trailing slash) is put back', async () => {
    await renew(diesBetweenTheRenames(await processAfterFailedFsync(nodeFs as unknown as FsPort)));
    const link = path.join(dir, 'root-link');
    await symlink(root, link);
    settings = { ...settings, rootDir: `${link}/` };
    await start();
    expect(await tree()).toEqual(KEPT);
    await expect(readFile(path.join(settings.stateDir, ASIDES_FILE))).rejects.toMatchObject({
      code: 'ENOENT',
    });
  });

  it('without a record (the state directory not open), no directory is renamed aside', async () => {
    const ledger = new DirectorySyncLedger();
    ledger.changed(path.join(root, 'top'), 'app');
    ledger.failed(path.join(root, 'top'));
    const fs = diesBetweenTheRenames({ ...(nodeFs as unknown as FsPort), directorySyncs: ledger });
    await renew(fs);
    expect(await tree()).toEqual(KEPT);
    expect(ledger.dropped(path.join(root, 'top'), 'app')).toBe(true);
  });

  it('a renewal that completes leaves the directory at its name, and its record is dropped once settled', async () => {
    const fs = await processAfterFailedFsync(nodeFs as unknown as FsPort);
    await renew(fs);
    expect(await tree()).toEqual(KEPT);
    await start();
    expect(await tree()).toEqual(KEPT);
    await expect(readFile(path.join(settings.stateDir, ASIDES_FILE))).rejects.toMatchObject({
      code: 'ENOENT',
    });
  });

  it('a rename back that fails: nothing is made at the name meanwhile, and the next renewal puts the same directory back', async () => {
    const live = await processAfterFailedFsync(nodeFs as unknown as FsPort);
    let failBack = 2;
    const fs: FsPort = {
      ...live,
      rename: (async (from: string, to: string) => {
        if (
          failBack > 0 &&
          path.basename(String(from)).startsWith(TEMP_PREFIX) &&
          String(to) === path.join(root, 'top/app')
        ) {
          failBack -= 1;
          throw Object.assign(new Error('EIO'), { code: 'EIO' });
        }
        return nodeFs.rename(from, to);
      }) as FsPort['rename'],
    };
    await renew(fs);
    const [aside] = await readdir(path.join(root, 'top'));
    expect(aside?.startsWith(TEMP_PREFIX)).toBe(true);
    const ino = (await nodeFs.lstat(path.join(root, 'top', aside!))).ino;
    // The next renewal tries that same aside again (its rename back fails once more): no second aside.
    await renew(fs);
    expect(await readdir(path.join(root, 'top'))).toEqual([aside]);
    // A batch's write below it meanwhile is refused (retried), instead of making `app` anew without its files.
    await expect(
      publishFile(fs, {
        rootDir: root,
        relativePath: 'top/app/b.json',
        data: Buffer.from('b\n'),
        mode: 0o644,
        dirMode: 0o755,
        syncDirectory: false,
        madeDirectories: new Set(),
        verified: new VerifiedDirectories(EUID),
      }),
    ).rejects.toMatchObject({ code: 'disk_error', path: 'top/app' });
    expect(await readdir(path.join(root, 'top'))).toEqual([aside]);
    await renew(fs);
    expect(await tree()).toEqual(KEPT);
    expect((await nodeFs.lstat(path.join(root, 'top/app'))).ino).toBe(ino);
    await start();
    expect(await tree()).toEqual(KEPT);
    await expect(readFile(path.join(settings.stateDir, ASIDES_FILE))).rejects.toMatchObject({
      code: 'ENOENT',
    });
  });

  it('an aside inside a directory that is itself aside is put back after it, whatever the order of the records', async () => {
    const outer = `${TEMP_PREFIX}${'1'.repeat(24)}`;
    const inner = `${TEMP_PREFIX}${'2'.repeat(24)}`;
    await nodeFs.rename(path.join(root, 'top/app'), path.join(root, 'top', inner));
    await nodeFs.rename(path.join(root, 'top'), path.join(root, outer));
    const asides = [
      { rootDir: root, dir: 'top', name: 'app', aside: inner },
      { rootDir: root, dir: '', name: 'top', aside: outer },
    ];
    await writeFile(path.join(settings.stateDir, ASIDES_FILE), JSON.stringify({ version: 1, asides }));
    await start();
    expect(await tree()).toEqual(KEPT);
  });

  it('an aside inside a directory aside that cannot be put back yet keeps its record until it can', async () => {
    const outer = `${TEMP_PREFIX}${'1'.repeat(24)}`;
    const inner = `${TEMP_PREFIX}${'2'.repeat(24)}`;
    await nodeFs.rename(path.join(root, 'top/app'), path.join(root, 'top', inner));
    await nodeFs.rename(path.join(root, 'top'), path.join(root, outer));
    const asides = [
      { rootDir: root, dir: 'top', name: 'app', aside: inner },
      { rootDir: root, dir: '', name: 'top', aside: outer },
    ];
    await writeFile(path.join(settings.stateDir, ASIDES_FILE), JSON.stringify({ version: 1, asides }));
    // Something else is at `top` now: the outer aside is left (occupied), so the inner one is out of sight.
    await mkdir(path.join(root, 'top'), { mode: 0o755 });
    await writeFile(path.join(root, 'top/operator.txt'), 'made meanwhile\n');
    await start();
    await rm(path.join(root, 'top'), { recursive: true });
    await start();

    // Before: the first start took the inner record for one already back and dropped it; `app` stayed aside.
    expect(await tree()).toEqual(KEPT);
  });

  it('a record whose aside and name are both out of sight (a mount not there yet) is kept for a later start', async () => {
    await renew(diesBetweenTheRenames(await processAfterFailedFsync(nodeFs as unknown as FsPort)));
    // `top` is a file system of its own, not mounted at this start: its mount point is an empty directory.
    const unmounted = path.join(dir, 'unmounted-top');
    await nodeFs.rename(path.join(root, 'top'), unmounted);
    await mkdir(path.join(root, 'top'), { mode: 0o755 });
    await start();
    // Mounted again before the next start.
    await rm(path.join(root, 'top'), { recursive: true });
    await nodeFs.rename(unmounted, path.join(root, 'top'));
    await start();

    // Before: the first start took the record for one already back and dropped it; `app` stayed aside for good.
    expect(await tree()).toEqual(KEPT);
  });

  it('a record that cannot be rewritten after the restore does not stop the start', async () => {
    await renew(diesBetweenTheRenames(await processAfterFailedFsync(nodeFs as unknown as FsPort)));
    const full: FsPort = {
      ...(nodeFs as unknown as FsPort),
      rename: (async (from: string, to: string) => {
        if (path.basename(String(to)) === ASIDES_FILE)
          throw Object.assign(new Error('ENOSPC'), { code: 'ENOSPC' });
        return nodeFs.rename(from, to);
      }) as FsPort['rename'],
      unlink: (async (file: string) => {
        if (path.basename(String(file)) === ASIDES_FILE)
          throw Object.assign(new Error('EIO'), { code: 'EIO' });
        return nodeFs.unlink(file);
      }) as FsPort['unlink'],
    };
    const ledger = new DirectorySyncLedger();
    await DirectoryAsides.open(full, settings.stateDir, root, ledger, silentLogger(), {
      euid: EUID,
      clock: { now: () => 0 },
    });
    expect(await tree()).toEqual(KEPT);
  });

  it('an aside the start could not put back: nothing is made at its name in that run, and a later start puts it back', async () => {
    await renew(diesBetweenTheRenames(await processAfterFailedFsync(nodeFs as unknown as FsPort)));
    const [aside] = await readdir(path.join(root, 'top'));
    const fs: FsPort = {
      ...(nodeFs as unknown as FsPort),
      directorySyncs: new DirectorySyncLedger(),
      rename: (async (from: string, to: string) => {
        if (String(from) === path.join(root, 'top', aside!))
          throw Object.assign(new Error('EIO'), { code: 'EIO' });
        return nodeFs.rename(from, to);
      }) as FsPort['rename'],
    };
    const state = await StateDir.open(fs, settings, silentLogger(), { euid: EUID, clock: { now: () => 0 } });
    try {
      await expect(
        publishFile(fs, {
          rootDir: root,
          relativePath: 'top/app/b.json',
          data: Buffer.from('b\n'),
          mode: 0o644,
          dirMode: 0o755,
        }),
      ).rejects.toMatchObject({ code: 'disk_error', path: 'top/app' });
      // Elsewhere, writes go on.
      await publishFile(fs, {
        rootDir: root,
        relativePath: 'top/other/c.json',
        data: Buffer.from('c\n'),
        mode: 0o644,
        dirMode: 0o755,
      });
    } finally {
      await state.close();
    }
    expect((await readdir(path.join(root, 'top'))).sort()).toEqual([aside, 'other'].sort());
    await start();
    expect(await tree(path.join(root, 'top/app'))).toEqual({
      'a.json': 'deployed\n',
      'operator.conf': 'the operator wrote this\n',
    });
  });
});

describe('a directory not put back at start, tried again in the same run (gaps18)', () => {
  /** Open the state directory as a start does, on `fs` (a ledger of its own): the restore runs. */
  async function open(fs: FsPort): Promise<StateDir> {
    return StateDir.open(fs, settings, silentLogger(), { euid: EUID, clock: { now: () => 0 } });
  }

  /** After a crash between the renames, with `top` (a file system of its own) not mounted at the next start. */
  async function startWithTopUnmounted(): Promise<{ fs: FsPort; state: StateDir; mount(): Promise<void> }> {
    await renew(diesBetweenTheRenames(await processAfterFailedFsync(nodeFs as unknown as FsPort)));
    const unmounted = path.join(dir, 'unmounted-top');
    await nodeFs.rename(path.join(root, 'top'), unmounted);
    await mkdir(path.join(root, 'top'), { mode: 0o755 });
    const fs: FsPort = { ...(nodeFs as unknown as FsPort), directorySyncs: new DirectorySyncLedger() };
    const state = await open(fs);
    const mount = async () => {
      await rm(path.join(root, 'top'), { recursive: true });
      await nodeFs.rename(unmounted, path.join(root, 'top'));
    };
    return { fs, state, mount };
  }

  it('out of sight at start (not mounted): the first write below its name once mounted puts it back instead of making a new one', async () => {
    const { fs, state, mount } = await startWithTopUnmounted();
    try {
      await mount();
      await publishFile(fs, {
        rootDir: root,
        relativePath: 'top/app/b.json',
        data: Buffer.from('b\n'),
        mode: 0o644,
        dirMode: 0o755,
      });
    } finally {
      await state.close();
    }
    // Before: a new top/app held b.json, and the directory aside (a.json, operator.conf) stayed beside it.
    expect(await tree()).toEqual({ ...KEPT, 'top/app/b.json': 'b\n' });
    expect(await readdir(settings.stateDir)).not.toContain(ASIDES_FILE);
  });

  it('out of sight at start: retry() once mounted puts it back without any write, and drops the record', async () => {
    const { fs, state, mount } = await startWithTopUnmounted();
    try {
      const asides = fs.directorySyncs?.asides;
      expect(asides?.pending).toBe(1);
      // Still out of sight: kept, nothing made at the name.
      expect(await asides?.retry()).toBe(1);
      await mount();
      expect(await asides?.retry()).toBe(0);
    } finally {
      await state.close();
    }
    expect(await tree()).toEqual(KEPT);
    expect(await readdir(settings.stateDir)).not.toContain(ASIDES_FILE);
  });

  it("rootDir's mount seen again after it was gone: the directory aside is put back in the background, with no write", async () => {
    await renew(diesBetweenTheRenames(await processAfterFailedFsync(nodeFs as unknown as FsPort)));
    const [aside] = await readdir(path.join(root, 'top'));
    // rootDir is a mount point (its st_dev differs from its parent's) while `mounted`; its rename back fails
    // once more at start (EIO): kept, and held.
    let mounted = true;
    let failures = 1;
    const fs: FsPort = {
      ...(nodeFs as unknown as FsPort),
      directorySyncs: new DirectorySyncLedger(),
      stat: (async (target: string) => {
        const stats = await nodeFs.stat(target);
        return mounted && target === root ? Object.assign(stats, { dev: 4242 }) : stats;
      }) as FsPort['stat'],
      rename: (async (from: string, to: string) => {
        if (String(from) === path.join(root, 'top', aside!) && failures > 0) {
          failures -= 1;
          throw Object.assign(new Error('EIO'), { code: 'EIO' });
        }
        return nodeFs.rename(from, to);
      }) as FsPort['rename'],
    };
    const state = await open(fs);
    try {
      const watch = new RootMountWatch(fs, root);
      expect(await watch.check()).toBeUndefined();
      mounted = false;
      expect((await watch.check())?.mountGone).toContain('no mount point any more');
      mounted = true;
      expect(await watch.check()).toBeUndefined();
      // Before: nothing tried it again until a write below top/app or the next start.
      await waitFor(async () => (await readdir(path.join(root, 'top'))).includes('app'), PATIENCE_MS, {
        what: 'the directory put back',
      });
    } finally {
      await state.close();
    }
    expect(await tree()).toEqual(KEPT);
  });
});
