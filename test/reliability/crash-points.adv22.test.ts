// adv22: SIGKILL at exact syscalls of a real `--once` (strace `inject=...:signal=KILL:when=N`) while it replaces
// files with other instances' (a path taken over), retires files and prunes their directories, swaps a schema
// pair and saves state.json, outbox.json and intent.json: the N-th rename, unlink, rmdir, mkdir or fsync of the
// run is its last. After each kill: no torn file, no foreign file touched, nothing told `deployed` that is not
// on disk with its bytes; the next run converges and every status reaches the service.

import { spawn } from 'node:child_process';
import { lstat, mkdtemp, rm } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { AGENT_BIN, collect, type RunResult } from '../helpers/harness.js';
import { startFaultProxy } from './support/fault-proxy.js';
import { Fleet } from './support/fleet.js';
import { runSeed, seededRandom } from './support/random.js';
import { straceUnavailable } from './support/strace.js';

const SKIP = straceUnavailable();
const SEED = runSeed();

let base = '';
beforeAll(async () => {
  base = await mkdtemp(path.join(os.tmpdir(), 'config-agent-crash-points-'));
  process.stderr.write(`crash-points.adv22.test: seed ${SEED} (RELIABILITY_SEED)\n`);
});
afterAll(async () => {
  if (base) await rm(base, { recursive: true, force: true });
});

/** A fleet after a first sync, with the service's next change made: the run under test has it to carry out. */
async function world(name: string, change: boolean): Promise<Fleet> {
  const dir = path.join(base, name);
  const fleet = await Fleet.create({
    dir,
    rootDir: path.join(dir, 'root'),
    stateDir: path.join(dir, 'state'),
    bigFileBytes: 0,
    schemaSwaps: true,
  });
  const random = seededRandom(SEED);
  fleet.deployAll(random);
  // The first sync itself: the state directory and every managed directory made, every file new.
  if (!change) return fleet;
  const first = await fleet.runOnce();
  if (first.code !== 0) throw new Error(`first sync: exit ${first.code}: ${first.stderr.slice(-1500)}`);
  // Another instance takes over each of these paths (the service queues the old one's removal).
  for (const taken of ['etc/app/config.json', 'srv/robot/arm/calibration.json', 'net.yaml'])
    fleet.deployVersion(taken, random);
  // Retired: its file goes and its directories (opt/vendor/a/b/c) are pruned; and one beside a foreign file.
  fleet.retire(fleet.versionsAt('opt/vendor/a/b/c/deep.json').deployed!);
  fleet.retire(fleet.versionsAt('etc/app/flags.yaml').deployed!);
  // The schema pair: deploying at the other path retires the one deployed.
  const swapped = ['srv/motion/left.json', 'srv/motion/right.json'].find(
    (at) => fleet.versionsAt(at).deployed === undefined,
  );
  if (swapped === undefined) throw new Error('the schema pair has both paths deployed');
  fleet.deployVersion(swapped, random);
  return fleet;
}

/** The syscalls a kill lands on, each swept from its first call in the run to its last. */
const POINTS = ['rename', 'fsync', 'unlink', 'rmdir', 'mkdir'] as const;
/** In the run that carries out a change (`change`), or in a first sync (the state directory made too). */
const CASES: { name: (typeof POINTS)[number]; change: boolean; reportsDown: boolean }[] = [
  { name: 'rename', change: true, reportsDown: false },
  { name: 'fsync', change: true, reportsDown: false },
  { name: 'unlink', change: true, reportsDown: false },
  { name: 'rmdir', change: true, reportsDown: false },
  { name: 'mkdir', change: false, reportsDown: false },
  { name: 'rename', change: false, reportsDown: false },
  // Every report answered 503 in the run killed: what it has to tell lives in outbox.json alone.
  { name: 'rename', change: true, reportsDown: true },
];
/** A bound on each sweep: the run under test makes fewer of each (27 fsyncs, 10 renames, 5 unlinks). */
const MAX_CALLS = 60;

describe.skipIf(SKIP !== undefined)('SIGKILL at exact syscalls of a pass', { timeout: 900_000 }, () => {
  it.each(CASES)(
    'at every $name (change: $change, reports refused: $reportsDown): nothing torn or wrongly deleted, nothing told early, converges',
    async ({ name, change, reportsDown }) => {
      let killed = 0;
      for (let when = 1; when <= MAX_CALLS; when += 1) {
        const fleet = await world(`${name}-${String(change)}-${String(reportsDown)}-${when}`, change);
        const proxy = reportsDown === true ? await startFaultProxy(fleet.server.url) : undefined;
        try {
          if (proxy !== undefined) {
            proxy.add({ match: /\/config_instances\/[^/]+$/, count: 1_000, status: 503, headers: {} });
            await fleet.writeConfig(proxy.url);
          }
          const run = await killedAt(fleet, name, when);
          const hit = run.signal === 'SIGKILL' || run.code === 137;
          const label = `${name} #${when} (exit ${String(run.code)})`;
          expect(await fleet.checkAnyMoment(), label).toEqual([]);
          if (!hit && proxy === undefined) {
            // The run made fewer such calls: it ran to its end.
            expect(run.code, `${label}: ${run.stderr.slice(-1500)}`).toBe(0);
            expect(await fleet.checkConverged(), label).toEqual([]);
            if (change)
              expect(
                await exists(path.join(fleet.rootDir, 'opt/vendor')),
                `${label}: opt/vendor pruned`,
              ).toBe(false);
            break;
          }
          if (hit) killed += 1;
          else expect(proxy?.counts.faulted, `${label}: reports refused`).toBeGreaterThan(0);
          // The service takes reports again: everything the killed run had to tell reaches it.
          if (proxy !== undefined) await fleet.writeConfig(fleet.server.url);
          const next = await fleet.runOnce();
          expect(next.code, `${label}, the run after: ${next.stderr.slice(-1500)}`).toBe(0);
          expect(await fleet.checkConverged(), label).toEqual([]);
          expect(await fleet.tempFiles(), label).toEqual([]);
          if (change)
            expect(await exists(path.join(fleet.rootDir, 'opt/vendor')), `${label}: opt/vendor pruned`).toBe(
              false,
            );
          if (!hit) break;
        } finally {
          await proxy?.close();
          await fleet.close();
        }
      }
      process.stderr.write(`crash-points.adv22: ${killed} kills at ${name} (change: ${String(change)})\n`);
      expect(killed).toBeGreaterThan(0);
    },
  );
});

async function exists(file: string): Promise<boolean> {
  return lstat(file).then(
    () => true,
    () => false,
  );
}

/**
 * The built `--once` under strace, killed (SIGKILL) as it enters its `when`-th call of `name`. strace injects only
 * into syscalls it traces (an rmdir outside `-e trace` is never struck), so each is traced; one pool thread
 * (`UV_THREADPOOL_SIZE=1`) makes the count the same from run to run.
 */
function killedAt(fleet: Fleet, name: string, when: number): Promise<RunResult> {
  const child = spawn(
    'strace',
    [
      '-f',
      '-o',
      '/dev/null',
      '-e',
      `trace=${POINTS.join(',')}`,
      '-e',
      `inject=${name}:signal=KILL:when=${when}`,
      process.execPath,
      AGENT_BIN,
      '--config',
      fleet.configPath,
      '--once',
    ],
    {
      env: { PATH: process.env.PATH, HOME: process.env.HOME, UV_THREADPOOL_SIZE: '1' },
      stdio: ['ignore', 'pipe', 'pipe'],
    },
  );
  return collect(child, 60_000);
}
