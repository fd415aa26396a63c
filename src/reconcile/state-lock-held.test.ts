// A pass first makes sure the state lock is still this agent's: `rm -rf stateDir` under a running agent let a second one in.
import * as nodeFs from 'node:fs/promises';
import { readFile, rm } from 'node:fs/promises';
import path from 'node:path';
import { afterEach, beforeEach, expect, it } from 'vitest';
import { createPassWorld, type PassWorld } from '../../test/helpers/pass-world.js';
import { acquireStateLock, LOCK_FILE, linuxProcessProbe, StateLockedError } from '../store/lock.js';

let world: PassWorld;
let dir: string;
let stateDir: string;

beforeEach(async () => {
  world = await createPassWorld({ name: 'lockheld', maxResponseBytes: 1 << 20 });
  dir = world.dir;
  stateDir = world.stateDir;
});

afterEach(() => world.close());

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
  world.put({ id: 'cfg_a', relative_filepath: 'a.json', config_schema_id: 'sch_a', content: { a: 1 } });
  const first = await world.pass();
  expect(first.converged).toBe(true);
  await rm(stateDir, { recursive: true });
  const result = await world.pass();
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
  await expect(world.pass()).rejects.toBeInstanceOf(StateLockedError);
  expect(await nodeFs.readdir(stateDir)).toEqual(before);
  await other.release();
});

it('a pass writes nothing while the lock is held by another process with this pid (another container sharing stateDir, pid 1 in both)', async () => {
  world.put({ id: 'cfg_a', relative_filepath: 'a.json', config_schema_id: 'sch_a', content: { a: 1 } });
  await rm(path.join(stateDir, LOCK_FILE));
  // Same pid, same start time and boot (what the probe can see of pid 1 in another pid namespace), another process.
  const sameProcessNumber = {
    self: async () => ({ ...(await linuxProcessProbe.self()), instance: 'another-container' }),
    alive: linuxProcessProbe.alive,
  };
  const other = await acquireStateLock(nodeFs, stateDir, sameProcessNumber);
  const lockBefore = await readFile(path.join(stateDir, LOCK_FILE), 'utf8');
  const before = await nodeFs.readdir(stateDir);
  await expect(world.pass()).rejects.toBeInstanceOf(StateLockedError);
  expect(await nodeFs.readdir(stateDir)).toEqual(before);
  expect(await readFile(path.join(stateDir, LOCK_FILE), 'utf8')).toBe(lockBefore);
  expect(await nodeFs.readdir(path.join(dir, 'root'))).toEqual([]);
  expect(world.server.state.instances.get('cfg_a')?.activity_status).toBe('queued');
  await other.release();
});
