// adv22: SIGKILL at exact syscalls of a real `--once` (strace `inject=...:signal=KILL:when=N`) while it replaces
// files with other instances' (a path taken over), retires files and prunes their directories, swaps a schema
// pair and saves state.json, outbox.json and intent.json: the N-th rename, unlink, rmdir, mkdir or fsync of the
// run is its last. After each kill: no torn file, no foreign file touched, nothing told `deployed` that is not
// on disk with its bytes; the next run converges and every status reaches the service.

import { spawn } from 'node:child_process';
import { lstat, mkdtemp, readFile, rm } from 'node:fs/promises';
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

/** The syscalls a kill lands on. */
const POINTS = ['rename', 'fsync', 'unlink', 'rmdir', 'mkdir'] as const;
type Point = (typeof POINTS)[number];
/** In the run that carries out a change (`change`), or in a first sync (the state directory made too). */
const CASES: { name: Point; change: boolean; reportsDown: boolean }[] = [
  { name: 'rename', change: true, reportsDown: false },
  { name: 'fsync', change: true, reportsDown: false },
  { name: 'unlink', change: true, reportsDown: false },
  { name: 'rmdir', change: true, reportsDown: false },
  { name: 'mkdir', change: false, reportsDown: false },
  { name: 'rename', change: false, reportsDown: false },
  // Every report answered 503 in the run killed: what it has to tell lives in outbox.json alone.
  { name: 'rename', change: true, reportsDown: true },
];

/**
 * Of the calls that are not the first at their site, the share struck too (drawn from the run's seed). Each case
 * first runs its pass once traced, with nothing injected, and names the site of each of its calls: the call and
 * what it acts on (a managed file or its temp, a directory of rootDir, state.json, outbox.json, intent.json,
 * fingerprints.json or their temps, the state directory, the lock), after the call before it on that thread. A
 * site's first call is always struck, and the run's last: so every kind of step at every place in the pass's order
 * is (a file's temp fsynced after a mkdir or after another file's rename, a directory fsynced after an unlink, an
 * rmdir, a mkdir or a batch of renames, each state file's saves and the state directory's fsync after each, the
 * first and the last rmdir of a pruned chain, the lock made and removed). What the share leaves out is a repeat of a
 * site in a run of the same steps, and those leave what their struck neighbours leave: a SIGKILL keeps the page
 * cache, so the state it leaves is set by the writes, renames, unlinks, rmdirs and mkdirs done before it, and the
 * directory fsyncs of a batch follow one another with none of those between them (the third of six leaves what the
 * first does); a chain of mkdirs or rmdirs differs only in how deep it got, its first and last link struck. The
 * seed differs from run to run (RELIABILITY_SEED replays one), so over runs every call is struck. Striking every
 * call took ~100 agent runs under strace, 3.5 of CI's minutes at the last count; this strikes ~70.
 */
const REPEATS_STRUCK = 0.25;

/**
 * Strikes run at once. One strike's processes run one after another and mostly wait: one at a time, the file used
 * 79 s of CPU in 169 s (load ~6, 2 cores); three at once, the same seed's strikes took 73 s with the same CPU.
 */
const STRIKES_AT_ONCE = 3;

describe.skipIf(SKIP !== undefined)('SIGKILL at exact syscalls of a pass', { timeout: 900_000 }, () => {
  it.each(CASES)(
    'at each site of a $name (change: $change, reports refused: $reportsDown): nothing torn or wrongly deleted, nothing told early, converges',
    async ({ name, change, reportsDown }) => {
      const label = `${name}-${String(change)}-${String(reportsDown)}`;
      // The pass run to its end under strace, nothing injected: its calls of `name`, in the order when=N reaches them.
      const calls = await strike({ name, change, reportsDown }, `${label}-traced`, undefined);
      const random = seededRandom(
        SEED ^
          CASES.findIndex((c) => c.name === name && c.change === change && c.reportsDown === reportsDown),
      );
      const struck = chooseStrikes(calls, random);
      process.stderr.write(
        `crash-points.adv22: ${name} (change: ${String(change)}, reports refused: ${String(reportsDown)}): ` +
          `${calls.length} calls at ${new Set(calls.map((call) => call.site)).size} sites, striking #${struck.join(', #')}\n`,
      );
      expect(calls.length, `${label}: the traced pass made no ${name}`).toBeGreaterThan(0);
      // Each strike is a chain of processes (a first sync, the run killed, the run after) in a directory, with a mock
      // service and a proxy, of its own, so STRIKES_AT_ONCE of them run side by side.
      const queue = [...struck];
      const lanes = await Promise.allSettled(
        Array.from({ length: STRIKES_AT_ONCE }, async () => {
          for (let when = queue.shift(); when !== undefined; when = queue.shift())
            await strike({ name, change, reportsDown }, `${label}-${when}`, when);
        }),
      );
      for (const lane of lanes) if (lane.status === 'rejected') throw lane.reason;
    },
  );
});

/** One call of `name` in a traced pass: the N of `when=N` that strikes it, and its site. */
interface TracedCall {
  when: number;
  site: string;
  text: string;
}

/** Every site's first call, the last call, and a seeded share of the rest, in order. */
function chooseStrikes(calls: readonly TracedCall[], random: () => number): number[] {
  const seen = new Set<string>();
  const struck: number[] = [];
  for (const call of calls) {
    const first = !seen.has(call.site);
    seen.add(call.site);
    // The draw is made for every call, so which repeats a seed strikes does not hang on which sites came first.
    const drawn = random() < REPEATS_STRUCK;
    if (first || drawn || call.when === calls.length) struck.push(call.when);
  }
  return struck;
}

/**
 * Runs the case's pass killed at its `when`-th `name` (or traced to its end, `when` undefined), checks what it left,
 * and runs the next pass, which must converge. Returns the traced pass's calls of `name` (none when killed).
 */
async function strike(
  { name, change, reportsDown }: { name: Point; change: boolean; reportsDown: boolean },
  dirName: string,
  when: number | undefined,
): Promise<TracedCall[]> {
  const fleet = await world(dirName, change);
  const proxy = reportsDown ? await startFaultProxy(fleet.server.url) : undefined;
  try {
    if (proxy !== undefined) {
      proxy.add({ match: /\/config_instances\/[^/]+$/, count: 1_000, status: 503, headers: {} });
      await fleet.writeConfig(proxy.url);
    }
    const traceFile = path.join(fleet.dir, 'strace.txt');
    const run = await strace(fleet, when === undefined ? { traceFile } : { name, when });
    const hit = run.signal === 'SIGKILL' || run.code === 137;
    const label = `${name} #${when ?? 'none'} (exit ${String(run.code)})`;
    expect(await fleet.checkAnyMoment(), label).toEqual([]);
    // A chosen call is one the traced pass made: the kill lands (UV_THREADPOOL_SIZE=1 keeps the count).
    expect(hit, `${label}: killed, ${run.stderr.slice(-1500)}`).toBe(when !== undefined);
    if (proxy === undefined && when === undefined) {
      expect(run.code, `${label}: ${run.stderr.slice(-1500)}`).toBe(0);
      expect(await fleet.checkConverged(), label).toEqual([]);
      if (change)
        expect(await exists(path.join(fleet.rootDir, 'opt/vendor')), `${label}: opt/vendor pruned`).toBe(
          false,
        );
    } else {
      if (!hit) expect(proxy?.counts.faulted, `${label}: reports refused`).toBeGreaterThan(0);
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
    }
    if (when !== undefined) return [];
    return tracedCalls(await readFile(traceFile, 'utf8'), name, fleet);
  } finally {
    await proxy?.close();
    await fleet.close();
  }
}

/**
 * The calls of `name` in a trace (`strace -f -y`), each with the N of `when=N` that strikes it (strace counts per
 * syscall and per thread: the N-th is the first call in time that is some thread's N-th) and its site: the call and
 * what it acts on, after the call before it on the same thread.
 */
function tracedCalls(trace: string, name: Point, fleet: Fleet): TracedCall[] {
  const lines = trace
    .split('\n')
    .map((line) => /^(\d+) +(rename|fsync|unlink|rmdir|mkdir)\((?:\d+<([^>]*)>|"([^"]*)")/.exec(line))
    .filter((match) => match !== null);
  // A temp file's name is read as the file it becomes.
  const renamed = new Map<string, string>();
  for (const line of trace.split('\n')) {
    const match = /^\d+ +rename\("([^"]*)", "([^"]*)"\)/.exec(line);
    if (match?.[1] !== undefined && match[2] !== undefined) renamed.set(match[1], match[2]);
  }
  const managed = new Set(fleet.paths);
  const place = (call: string, raw: string): string => {
    const file = renamed.get(raw) ?? raw;
    if (file === fleet.stateDir) return `${call} the state directory`;
    if (file.startsWith(`${fleet.stateDir}/`))
      return `${call} ${path.basename(file).includes('agent.lock') ? 'the lock' : path.basename(file)}`;
    if (managed.has(path.relative(fleet.rootDir, file))) return `${call} a managed file`;
    if (file === fleet.rootDir || file.startsWith(`${fleet.rootDir}/`))
      return `${call} a directory of rootDir`;
    return `${call} another directory`;
  };
  const last = new Map<string, string>();
  const counts = new Map<string, number>();
  const calls: TracedCall[] = [];
  for (const [text, thread = '', call = '', fd, quoted] of lines) {
    const here = place(call, fd ?? quoted ?? '');
    const site = `${last.get(thread) ?? 'start'}, then ${here}`;
    last.set(thread, here);
    if (call !== name) continue;
    const count = (counts.get(thread) ?? 0) + 1;
    counts.set(thread, count);
    if (count > calls.length) calls.push({ when: count, site, text });
  }
  return calls;
}

async function exists(file: string): Promise<boolean> {
  return lstat(file).then(
    () => true,
    () => false,
  );
}

/**
 * The built `--once` under strace: killed (SIGKILL) as it enters its `when`-th call of `name`, or traced to its end
 * into `traceFile` (`-y`: each descriptor with its path). strace injects only into syscalls it traces (an rmdir
 * outside `-e trace` is never struck), so each is traced; one pool thread (`UV_THREADPOOL_SIZE=1`) makes the count
 * the same from run to run.
 */
function strace(
  fleet: Fleet,
  how: { name: Point; when: number } | { traceFile: string },
): Promise<RunResult> {
  const child = spawn(
    'strace',
    [
      '-f',
      ...('traceFile' in how ? ['-y', '-o', how.traceFile] : ['-o', '/dev/null']),
      '-e',
      `trace=${POINTS.join(',')}`,
      ...('traceFile' in how ? [] : ['-e', `inject=${how.name}:signal=KILL:when=${how.when}`]),
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
