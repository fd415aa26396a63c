// A pass first makes sure the state lock is still this agent's: `rm -rf stateDir` under a running agent let a second one in.
import * as nodeFs from 'node:fs/promises';
import { mkdir, mkdtemp, readFile, rm } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { afterEach, beforeEach, expect, it } from 'vitest';
import { createClient } from '../api/client.js';
import type { Clock } from '../lib/clock.js';
import type { Deps } from '../lib/deps.js';
import { silentLogger } from '../lib/logger.js';
import { type RunningMockServer, startMockServer } from '../mock-server/server.js';
import { acquireStateLock, LOCK_FILE, linuxProcessProbe, StateLockedError } from '../store/lock.js';
import { Reconciler } from './reconcile.js';

const API_KEY = 'sk_test_lockheld_0123456789abcdef';
const clock: Clock = {
  now: () => Date.parse('2026-06-01T00:00:00.000Z'),
  monotonic: () => 1_000,
  sleep: async () => undefined,
};

let dir: string;
let stateDir: string;
let server: RunningMockServer;
let reconciler: Reconciler;

beforeEach(async () => {
  dir = await mkdtemp(path.join(os.tmpdir(), 'config-agent-lockheld-'));
  stateDir = path.join(dir, 'state');
  await mkdir(path.join(dir, 'root'));
  await mkdir(stateDir, { mode: 0o700 });
  server = await startMockServer({ apiKeys: [API_KEY] });
  const deps: Deps = { fs: nodeFs, clock, random: () => 0.5, logger: silentLogger() };
  const client = createClient({
    baseUrl: server.url,
    apiKey: API_KEY,
    timeoutMs: 10_000,
    maxResponseBytes: 1 << 20,
  });
  reconciler = await Reconciler.open(
    deps,
    {
      deviceId: 'dvc_1',
      rootDir: path.join(dir, 'root'),
      stateDir,
      fileMode: 0o640,
      dirMode: 0o750,
      retry: { maxAttempts: 3, baseDelaySeconds: 10, maxDelaySeconds: 60 },
      requestRetries: 0,
      maxResponseBytes: 1 << 20,
    },
    client,
  );
});

afterEach(async () => {
  await reconciler.close();
  await server.close();
  await rm(dir, { recursive: true, force: true });
});

/** The start time field of /proc/<pid>/stat, as the lock records it. */
async function procStart(pid: number): Promise<string | undefined> {
  const stat = await readFile(`/proc/${pid}/stat`, 'utf8');
  return stat.slice(stat.lastIndexOf(')') + 2).split(' ')[19];
}

/** Another live agent on the same stateDir: it takes the lock as the parent process (alive to every probe). */
const otherAgent = {
  self: async () => {
    const self = await linuxProcessProbe.self();
    const start = await procStart(process.ppid);
    return {
      ...self,
      pid: process.ppid,
      instance: 'parent',
      ...(start === undefined ? {} : { procStart: start }),
    };
  },
  alive: linuxProcessProbe.alive,
};

it('stateDir removed under a running agent: its next pass takes the lock again and writes state.json again; a second agent is refused', async () => {
  server.state.instances.set('cfg_a', {
    id: 'cfg_a',
    device_id: 'dvc_1',
    relative_filepath: 'a.json',
    config_schema_id: 'sch_a',
    config_type_id: 'typ',
    target_status: 'deployed',
    activity_status: 'queued',
    error_status: 'none',
    content: { a: 1 },
    created_at: '2026-01-01T00:00:00.000Z',
    updated_at: '2026-01-01T00:00:00.000Z',
  });
  const first = await reconciler.runPass({ mode: 'full' });
  expect(first.converged).toBe(true);
  await rm(stateDir, { recursive: true });
  const result = await reconciler.runPass({ mode: 'full' });
  expect(result.converged).toBe(true);
  expect(JSON.parse(await readFile(path.join(stateDir, LOCK_FILE), 'utf8'))).toMatchObject({
    pid: process.pid,
  });
  // The record that a.json is the agent's (so it removes it when retired) is on disk again, not only in memory.
  expect(await readFile(path.join(stateDir, 'state.json'), 'utf8')).toContain('"a.json"');
  await expect(acquireStateLock(nodeFs, stateDir, otherAgent)).rejects.toBeInstanceOf(StateLockedError);
});

it('a pass writes nothing while another live agent holds the lock it lost', async () => {
  await rm(path.join(stateDir, LOCK_FILE));
  const other = await acquireStateLock(nodeFs, stateDir, otherAgent);
  const before = await nodeFs.readdir(stateDir);
  await expect(reconciler.runPass({ mode: 'full' })).rejects.toBeInstanceOf(StateLockedError);
  expect(await nodeFs.readdir(stateDir)).toEqual(before);
  await other.release();
});

it('a pass writes nothing while the lock is held by another process with this pid (another container sharing stateDir, pid 1 in both)', async () => {
  server.state.instances.set('cfg_a', {
    id: 'cfg_a',
    device_id: 'dvc_1',
    relative_filepath: 'a.json',
    config_schema_id: 'sch_a',
    config_type_id: 'typ',
    target_status: 'deployed',
    activity_status: 'queued',
    error_status: 'none',
    content: { a: 1 },
    created_at: '2026-01-01T00:00:00.000Z',
    updated_at: '2026-01-01T00:00:00.000Z',
  });
  await rm(path.join(stateDir, LOCK_FILE));
  // Same pid, same start time and boot (what the probe can see of pid 1 in another pid namespace), another process.
  const sameProcessNumber = {
    self: async () => ({ ...(await linuxProcessProbe.self()), instance: 'another-container' }),
    alive: linuxProcessProbe.alive,
  };
  const other = await acquireStateLock(nodeFs, stateDir, sameProcessNumber);
  const lockBefore = await readFile(path.join(stateDir, LOCK_FILE), 'utf8');
  const before = await nodeFs.readdir(stateDir);
  await expect(reconciler.runPass({ mode: 'full' })).rejects.toBeInstanceOf(StateLockedError);
  expect(await nodeFs.readdir(stateDir)).toEqual(before);
  expect(await readFile(path.join(stateDir, LOCK_FILE), 'utf8')).toBe(lockBefore);
  expect(await nodeFs.readdir(path.join(dir, 'root'))).toEqual([]);
  expect(server.state.instances.get('cfg_a')?.activity_status).toBe('queued');
  await other.release();
});
