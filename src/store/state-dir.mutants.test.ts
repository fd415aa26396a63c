// StateDir on a real temp dir: the lock it holds, the temp files it sweeps, what a dry run leaves alone, what
// persisting writes, and what the cache keeps.

import * as nodeFs from 'node:fs/promises';
import { mkdir, mkdtemp, readdir, readFile, rm, stat, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { silentLogger } from '../lib/logger.js';
import { acquireStateLock, linuxProcessProbe } from './lock.js';
import { TEMP_PREFIX } from './path-guard.js';
import { StateDir, type StateDirSettings } from './state-dir.js';

const NOW = new Date('2026-06-01T00:00:00.000Z');
const SHA_A = 'a'.repeat(64);

let dir: string;
let settings: StateDirSettings;
const opened: StateDir[] = [];

/** Files fsynced through a handle since the last reset: the durability model of these tests. */
const synced = new Set<string>();

/** The real fs, except that listing the content cache can be made to fail; fsyncs are noted in `synced`. */
const fs = {
  ...nodeFs,
  failCacheListing: false,
  failOutboxRename: false,
  /** The next fsync of the state directory itself fails (after a rename into it: the new name not durable). */
  failStateDirSync: false,
  /** Opens of state.json itself (not its temp files): reads, since it is only ever written through a temp file. */
  stateOpens: 0,
  rename: (async (from: string, to: string) => {
    if (fs.failOutboxRename && String(to).endsWith('outbox.json')) {
      throw Object.assign(new Error('ENOSPC: simulated failure'), { code: 'ENOSPC' });
    }
    return nodeFs.rename(from, to);
  }) as typeof nodeFs.rename,
  open: (async (target: string, ...rest: never[]) => {
    if (path.basename(String(target)) === 'state.json') fs.stateOpens += 1;
    const handle = await nodeFs.open(target, ...rest);
    const sync = handle.sync.bind(handle);
    handle.sync = async () => {
      if (fs.failStateDirSync && String(target) === settings.stateDir) {
        fs.failStateDirSync = false;
        throw Object.assign(new Error('EIO: simulated failure'), { code: 'EIO' });
      }
      await sync();
      synced.add(path.basename(String(target)));
    };
    return handle;
  }) as typeof nodeFs.open,
  readdir: ((target: string, options?: never) => {
    if (fs.failCacheListing && String(target).endsWith(`${path.sep}cache`)) {
      return Promise.reject(Object.assign(new Error('EIO: simulated failure'), { code: 'EIO' }));
    }
    return nodeFs.readdir(target, options);
  }) as typeof nodeFs.readdir,
};

async function open(options: { readOnly?: boolean } = {}): Promise<StateDir> {
  const stateDir = await StateDir.open(fs, settings, silentLogger(), { ...options, clock: { now: () => 0 } });
  opened.push(stateDir);
  return stateDir;
}

async function names(relative: string): Promise<string[]> {
  return (await readdir(path.join(dir, relative))).sort();
}

beforeEach(async () => {
  dir = await mkdtemp(path.join(os.tmpdir(), 'config-agent-state-dir-'));
  settings = { stateDir: path.join(dir, 'state'), rootDir: path.join(dir, 'root'), deviceId: 'dvc_1' };
  await mkdir(settings.stateDir, { mode: 0o700 });
  await mkdir(path.join(settings.rootDir, 'sub'), { recursive: true });
  fs.failCacheListing = false;
  fs.failOutboxRename = false;
  fs.failStateDirSync = false;
  fs.stateOpens = 0;
});

afterEach(async () => {
  for (const stateDir of opened.splice(0)) await stateDir.close();
  await rm(dir, { recursive: true, force: true });
});

/** The state record of a file deployed at `relativePath` on its first attempt. */
const deployedRecord = (relativePath: string) =>
  ({ relativePath, activity: 'deployed', error: 'none', attempts: 0 }) as const;

describe('StateDir: the lock', () => {
  it('is held from open to close (agent.lock exists exactly then)', async () => {
    const first = await open();
    expect(await names('state')).toContain('agent.lock');
    await first.close();
    expect(await names('state')).not.toContain('agent.lock');
    await first.close();
    const second = await open();
    expect(second.readOnly).toBe(false);
    expect(await names('state')).toContain('agent.lock');
  });

  it('is refused, naming the holder (state_locked), while another live agent holds it; its lock is kept', async () => {
    // Another agent: its lock names the parent process (pid and start time), alive to the agent's probe.
    const stat = await readFile(`/proc/${process.ppid}/stat`, 'utf8');
    const procStart = stat.slice(stat.lastIndexOf(')') + 2).split(' ')[19];
    const parent = {
      self: async () => ({
        ...(await linuxProcessProbe.self()),
        pid: process.ppid,
        instance: 'parent',
        ...(procStart === undefined ? {} : { procStart }),
      }),
      alive: linuxProcessProbe.alive,
    };
    const other = await acquireStateLock(fs, settings.stateDir, parent);
    await expect(
      StateDir.open(fs, settings, silentLogger(), { clock: { now: () => 0 } }),
    ).rejects.toMatchObject({
      code: 'state_locked',
      pid: process.ppid,
    });
    expect(JSON.parse(await readFile(path.join(settings.stateDir, 'agent.lock'), 'utf8'))).toMatchObject({
      pid: process.ppid,
    });
    await other.release();
  });

  it('taken again after stateDir was removed under it: the next persist writes state.json and outbox.json again', async () => {
    const stateDir = await open();
    stateDir.state.instances.set('cfg_a', deployedRecord('a.json'));
    stateDir.outbox.enqueue('cfg_a', { activity_status: 'deployed', error_status: 'none' }, NOW);
    await stateDir.persist();
    await rm(settings.stateDir, { recursive: true });
    await mkdir(settings.stateDir, { mode: 0o700 });

    await stateDir.holdLock();
    await stateDir.persist();

    expect(await names('state')).toEqual(expect.arrayContaining(['agent.lock', 'outbox.json', 'state.json']));
    expect(JSON.parse(await readFile(path.join(settings.stateDir, 'outbox.json'), 'utf8'))).toMatchObject({
      entries: [{ instanceId: 'cfg_a' }],
    });
  });

  it('a dry run declares no write: nothing is written in stateDir', async () => {
    const dry = await open({ readOnly: true });
    await dry.declareWrites([{ path: 'a.json', instanceId: 'cfg_a', sha256: SHA_A }]);
    expect(await dry.adoptDeclaredWrites(NOW.toISOString())).toEqual([]);
    expect(await names('state')).toEqual([]);
  });

  it('is released when loading fails, so the next start can take it', async () => {
    await mkdir(path.join(settings.stateDir, 'state.json'));
    await expect(StateDir.open(fs, settings, silentLogger(), { clock: { now: () => 0 } })).rejects.toThrow(
      /state\.json/,
    );
    expect(await names('state')).toEqual(['state.json']);
  });

  it('is not taken by a dry run, which also tolerates an unreadable state', async () => {
    await mkdir(path.join(settings.stateDir, 'state.json'));
    const dry = await open({ readOnly: true });
    expect(dry.readOnly).toBe(true);
    expect(dry.state.files.size).toBe(0);
    expect(dry.state.deviceId).toBe('dvc_1');
    expect(await names('state')).toEqual(['state.json']);
  });
});

describe('StateDir: temp files a crash left', () => {
  beforeEach(async () => {
    await writeFile(path.join(settings.rootDir, 'sub', `${TEMP_PREFIX}1`), 'partial');
    await writeFile(path.join(settings.rootDir, `${TEMP_PREFIX}2`), 'partial');
    await writeFile(path.join(settings.stateDir, `${TEMP_PREFIX}3`), 'partial');
  });

  it('are removed from root and state dir at open; the root ones are handed out once', async () => {
    const stateDir = await open();
    expect(await names('root')).toEqual(['sub']);
    expect(await names('root/sub')).toEqual([]);
    expect(await names('state')).not.toContain(`${TEMP_PREFIX}3`);
    expect(stateDir.takeSweptTempFiles()).toEqual([`${TEMP_PREFIX}2`, `sub/${TEMP_PREFIX}1`]);
    expect(stateDir.takeSweptTempFiles()).toEqual([]);
  });

  it('are left alone by a dry run', async () => {
    const dry = await open({ readOnly: true });
    expect(dry.takeSweptTempFiles()).toEqual([]);
    expect(await names('root')).toEqual([`${TEMP_PREFIX}2`, 'sub']);
    expect(await names('state')).toEqual([`${TEMP_PREFIX}3`]);
  });
});

describe('StateDir: persisting', () => {
  it('persist writes the state and the queued reports; they load again on the next open', async () => {
    const first = await open();
    first.state.instances.set('cfg_a', deployedRecord('a.json'));
    first.outbox.enqueue('cfg_a', { activity_status: 'deployed', error_status: 'none' }, NOW);
    await first.persist();
    await first.close();

    const second = await open();
    expect(second.state.instances.get('cfg_a')?.relativePath).toBe('a.json');
    expect(second.outbox.pending().map((entry) => entry.instanceId)).toEqual(['cfg_a']);
  });

  it('a new process fsyncs state and outbox at its first persist even when their bytes did not change', async () => {
    const first = await open();
    first.outbox.enqueue('cfg_a', { activity_status: 'deployed', error_status: 'none' }, NOW);
    await first.persist();
    await first.close();
    // A restart after a crash that may have come before the earlier run's fsync: the bytes are the same.
    const second = await open();
    synced.clear();

    await second.persist();
    expect([...synced]).toEqual(expect.arrayContaining(['outbox.json', 'state.json']));

    synced.clear();
    await second.persist();
    expect([...synced].filter((name) => name.endsWith('.json'))).toEqual([]);
  });

  it('persistState, the first save of a new process, fsyncs state.json even when its bytes did not change, while reports are queued', async () => {
    const first = await open();
    await first.persist();
    await first.close();
    const second = await open();
    second.outbox.enqueue('cfg_a', { activity_status: 'deployed', error_status: 'none' }, NOW);
    synced.clear();

    await second.persistState();

    expect([...synced]).toContain('state.json');
  });

  it('a state equal to what state.json holds is not written, read back or fsynced while no report is queued', async () => {
    const first = await open();
    first.state.files.set('a.json', {
      instanceId: 'cfg_a',
      sha256: SHA_A,
      mode: 0o644,
      createdDirs: ['etc'],
      writtenAt: NOW.toISOString(),
    });
    first.state.instances.set('cfg_a', {
      relativePath: 'a.json',
      activity: 'deployed',
      error: 'none',
      attempts: 0,
      reportEcho: { updatedAt: '2026-06-01T00:00:01.000Z', operatorUpdatedAt: '2026-06-01T00:00:00.000Z' },
    });
    first.state.pendingHookPaths.add('a.json');
    await first.persist();
    await first.close();
    const statePath = path.join(settings.stateDir, 'state.json');
    const before = await stat(statePath);
    const bytes = await readFile(statePath);
    // An idle pass: every record replaced by an equal copy, as record.ts does for each instance it confirms.
    const second = await open();
    for (const [id, record] of second.state.instances) second.state.instances.set(id, { ...record });
    for (const [file, record] of second.state.files) {
      second.state.files.set(file, { ...record, createdDirs: [...record.createdDirs] });
    }
    synced.clear();

    await second.persist();
    await second.persistState();

    const after = await stat(statePath);
    expect([after.ino, after.mtimeMs, after.ctimeMs]).toEqual([before.ino, before.mtimeMs, before.ctimeMs]);
    expect(await readFile(statePath)).toEqual(bytes);
    // A new process's first save fsynced even equal bytes before: none happens while nothing is queued.
    expect([...synced]).not.toContain('state.json');
  });

  it('a changed record, a removed one, a hook path or a queued report make the save happen', async () => {
    const first = await open();
    first.state.instances.set('cfg_a', deployedRecord('a.json'));
    await first.persist();
    await first.close();
    const statePath = path.join(settings.stateDir, 'state.json');
    const load = async () => JSON.parse(await readFile(statePath, 'utf8')) as Record<string, unknown>;

    const second = await open();
    second.state.instances.set('cfg_a', {
      relativePath: 'a.json',
      activity: 'deployed',
      error: 'none',
      attempts: 1,
    });
    await second.persist();
    expect(await load()).toMatchObject({ instances: { cfg_a: { attempts: 1 } } });

    second.state.pendingHookPaths.add('a.json');
    await second.persist();
    expect(await load()).toMatchObject({ pendingHookPaths: ['a.json'] });

    second.state.instances.delete('cfg_a');
    await second.persistState();
    expect(await load()).toMatchObject({ instances: {} });
    await second.close();

    // Equal bytes, but a report is queued: a new process makes state.json durable before it can be delivered.
    const third = await open();
    third.outbox.enqueue('cfg_b', { activity_status: 'deployed', error_status: 'none' }, NOW);
    synced.clear();
    await third.persist();
    expect([...synced]).toContain('state.json');
  });

  it('after its own save, a process rewrites a changed state.json without reading it back first', async () => {
    const statePath = path.join(settings.stateDir, 'state.json');
    const load = async () => JSON.parse(await readFile(statePath, 'utf8')) as Record<string, unknown>;
    const record = { relativePath: 'a.json', activity: 'deployed', error: 'none', attempts: 0 } as const;
    const first = await open();
    first.state.instances.set('cfg_a', record);
    await first.persist();
    fs.stateOpens = 0;

    first.state.instances.set('cfg_a', { ...record, attempts: 1 });
    await first.persist();
    first.state.instances.set('cfg_b', { ...record, relativePath: 'b.json' });
    await first.persistState();

    // Before: each save opened state.json to compare it chunk by chunk with the new text (serialised twice).
    expect(fs.stateOpens).toBe(0);
    expect(await load()).toMatchObject({
      instances: { cfg_a: { attempts: 1 }, cfg_b: { relativePath: 'b.json' } },
    });
    // A new process still compares first: equal bytes are not rewritten (the test above).
  });

  it('a state.json whose records carried attempts or a next attempt is written again, as the process holds them', async () => {
    await mkdir(settings.stateDir, { recursive: true });
    const file = {
      version: 1,
      deviceId: settings.deviceId,
      rootDir: settings.rootDir,
      files: {},
      instances: {
        cfg_a: {
          relativePath: 'a.json',
          activity: 'deployed',
          error: 'failed',
          attempts: 3,
          nextAttemptAt: '2026-06-01T00:05:00.000Z',
        },
      },
      pendingHookPaths: [],
    };
    await writeFile(path.join(settings.stateDir, 'state.json'), JSON.stringify(file));
    const stateDir = await open();
    await stateDir.persist();
    const written = JSON.parse(await readFile(path.join(settings.stateDir, 'state.json'), 'utf8'));
    expect(written.instances.cfg_a).toEqual({
      relativePath: 'a.json',
      activity: 'deployed',
      error: 'failed',
      attempts: 0,
    });
  });

  it('after a failed persist, the next one writes what failed again', async () => {
    const stateDir = await open();
    await stateDir.persist();
    stateDir.state.instances.set('cfg_a', deployedRecord('a.json'));
    stateDir.outbox.enqueue('cfg_a', { activity_status: 'deployed', error_status: 'none' }, NOW);
    fs.failOutboxRename = true;
    await expect(stateDir.persist()).rejects.toThrow();
    fs.failOutboxRename = false;
    synced.clear();

    await stateDir.persist();

    // state.json was written durably before the failure and still holds this state: nothing to redo. The outbox,
    // whose rename failed, is written again (a temp file, fsynced, renamed, its directory fsynced).
    expect([...synced]).not.toContain('state.json');
    expect([...synced].some((name) => name.startsWith(TEMP_PREFIX))).toBe(true);
    expect(JSON.parse(await readFile(path.join(settings.stateDir, 'outbox.json'), 'utf8'))).toMatchObject({
      entries: [{ instanceId: 'cfg_a' }],
    });
  });

  it('a state.json renamed in but not made durable (its directory fsync failed) is fsynced by the next save, though its bytes are the same', async () => {
    const stateDir = await open();
    await stateDir.persist();
    stateDir.state.instances.set('cfg_a', deployedRecord('a.json'));
    fs.failStateDirSync = true;
    await expect(stateDir.persistState()).rejects.toThrow();
    const statePath = path.join(settings.stateDir, 'state.json');
    expect(JSON.parse(await readFile(statePath, 'utf8'))).toMatchObject({ instances: { cfg_a: {} } });
    synced.clear();

    await stateDir.persistState();

    expect([...synced]).toEqual(expect.arrayContaining(['state.json', 'state']));
  });

  it('a write declared with the bytes state.json already records is settled by the next persist, with nothing else to save', async () => {
    const stateDir = await open();
    stateDir.state.files.set('a.json', {
      instanceId: 'cfg_a',
      sha256: SHA_A,
      mode: 0o644,
      createdDirs: [],
      writtenAt: NOW.toISOString(),
    });
    await stateDir.persist();
    // Written again with the bytes it had (a local edit put back): the record does not change.
    await stateDir.declareWrites([{ path: 'a.json', instanceId: 'cfg_a', sha256: SHA_A }]);
    expect(stateDir.intents.size).toBe(1);

    await stateDir.persist();

    expect(stateDir.intents.size).toBe(0);
  });

  it('persist saves the fingerprints of managed files only', async () => {
    const stateDir = await open();
    stateDir.state.files.set('a.json', {
      instanceId: 'cfg_a',
      sha256: SHA_A,
      mode: 0o644,
      createdDirs: [],
      writtenAt: NOW.toISOString(),
    });
    const identity = { dev: 1n, ino: 2n, size: 3n, mtimeNs: 4n, ctimeNs: 5n };
    const readFrom = NOW.getTime();
    stateDir.fingerprints.record('a.json', identity, SHA_A, readFrom);
    stateDir.fingerprints.record('gone.json', identity, SHA_A, readFrom);

    await stateDir.persist();

    const saved = JSON.parse(await readFile(path.join(settings.stateDir, 'fingerprints.json'), 'utf8'));
    expect(Object.keys(saved.files)).toEqual(['a.json']);
  });

  it('a dry run leaves a fingerprints.json that is not a regular file where it is', async () => {
    await mkdir(path.join(settings.stateDir, 'fingerprints.json'));
    const dry = await open({ readOnly: true });
    expect(dry.fingerprints.size).toBe(0);
    expect(await names('state')).toEqual(['fingerprints.json']);
  });

  it('persistState writes the state only', async () => {
    const stateDir = await open();
    stateDir.state.instances.set('cfg_a', deployedRecord('a.json'));
    stateDir.outbox.enqueue('cfg_a', { activity_status: 'deployed', error_status: 'none' }, NOW);
    await stateDir.persistState();
    const files = await names('state');
    expect(files).toContain('state.json');
    expect(files).not.toContain('outbox.json');
    expect(JSON.parse(await readFile(path.join(settings.stateDir, 'state.json'), 'utf8'))).toMatchObject({
      instances: { cfg_a: { relativePath: 'a.json' } },
    });
  });

  it('a dry run persists nothing, and its queued reports stay in memory', async () => {
    const dry = await open({ readOnly: true });
    dry.state.instances.set('cfg_a', deployedRecord('a.json'));
    dry.outbox.enqueue('cfg_a', { activity_status: 'deployed', error_status: 'none' }, NOW);
    await dry.persist();
    await dry.persistState();
    await dry.outbox.persist();
    expect(await names('state')).toEqual([]);
  });

  it('a dry run does not see reports a real run queued (its outbox starts empty)', async () => {
    const real = await open();
    real.outbox.enqueue('cfg_a', { activity_status: 'deployed', error_status: 'none' }, NOW);
    await real.persist();
    await real.close();
    const dry = await open({ readOnly: true });
    expect(dry.outbox.size).toBe(0);
  });

  it('settings are the ones it was opened with', async () => {
    const stateDir = await open();
    expect(stateDir.settings).toEqual(settings);
  });
});

describe('StateDir: the content cache', () => {
  it('pruneCache keeps the contents managed files reference and drops the rest', async () => {
    const stateDir = await open();
    const kept = await stateDir.cache.put(Buffer.from('kept'));
    const dropped = await stateDir.cache.put(Buffer.from('dropped'));
    stateDir.state.files.set('a.json', {
      instanceId: 'cfg_a',
      sha256: kept,
      mode: 0o640,
      createdDirs: [],
      writtenAt: NOW.toISOString(),
    });
    await stateDir.pruneCache();
    expect(await stateDir.cache.get(kept)).toEqual(Buffer.from('kept'));
    expect(await stateDir.cache.get(dropped)).toBeUndefined();
  });

  it('a cache that cannot be pruned is not an error: the pass goes on', async () => {
    const stateDir = await open();
    await mkdir(path.join(settings.stateDir, 'cache'), { recursive: true });
    await writeFile(path.join(settings.stateDir, 'cache', SHA_A), 'x');
    fs.failCacheListing = true;
    await expect(stateDir.pruneCache()).resolves.toBeUndefined();
    expect(await names('state/cache')).toEqual([SHA_A]);
  });
});
