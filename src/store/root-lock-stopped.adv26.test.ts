// adv26: an agent holding rootDir's lock that cannot answer (SIGSTOP, a blocked event loop) is still an agent: refused.
import * as nodeFs from 'node:fs/promises';
import { mkdir, mkdtemp, readdir, rm, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { afterEach, beforeEach, expect, it } from 'vitest';
import { holdRootName, killRootHolders, type RootHolder } from '../../test/helpers/root-lock-holder.js';
import { silentLogger } from '../lib/logger.js';
import { RootLockedError } from './lock.js';
import { StateDir } from './state-dir.js';

let dir: string;
let rootDir: string;
let stopped: RootHolder | undefined;

beforeEach(async () => {
  dir = await mkdtemp(path.join(os.tmpdir(), 'root-lock-adv26-'));
  rootDir = path.join(dir, 'root');
  await mkdir(rootDir);
});

afterEach(async () => {
  if (stopped !== undefined) process.kill(stopped.pid, 'SIGCONT');
  stopped = undefined;
  killRootHolders();
  await rm(dir, { recursive: true, force: true });
});

const open = async (name: string) => {
  const stateDir = path.join(dir, name);
  await mkdir(stateDir, { mode: 0o700 });
  return StateDir.open(nodeFs, { stateDir, rootDir, deviceId: 'dvc_adv26' }, silentLogger(), {
    clock: { now: () => 0 },
  });
};

it('a holder stopped (SIGSTOP) while holding the name is refused as the agent it is: nothing swept, pid named', async () => {
  const other = await holdRootName(rootDir);
  // An operator's `kill -STOP` (or a debugger, or a loop blocked for more than the 2 s the answer is waited for):
  // the kernel still takes the connection into the listener's backlog, but nothing answers it.
  process.kill(other.pid, 'SIGSTOP');
  stopped = other;
  const inFlight = path.join(rootDir, `.config-agent.tmp-${'ab'.repeat(12)}`);
  await writeFile(inFlight, '{"half":');

  const refused = await open('mine').catch((error: unknown) => error);

  // Taken for a local user's squat before: started without the lock, its start-up sweep deleted the stopped
  // agent's in-flight temp file, and once continued the two wrote the same paths, each reporting its own bytes.
  expect(refused).toBeInstanceOf(RootLockedError);
  expect((refused as RootLockedError).refusal).toContain(`pid ${other.pid}`);
  expect(await readdir(rootDir)).toEqual([path.basename(inFlight)]);
  expect(await readdir(path.join(dir, 'mine'))).toEqual([]);

  // Continued, it answers as before, and once it has ended the lock is free.
  process.kill(other.pid, 'SIGCONT');
  stopped = undefined;
  await expect(open('again')).rejects.toBeInstanceOf(RootLockedError);
  await other.end();
  await (await open('after')).close();
}, 30_000);
