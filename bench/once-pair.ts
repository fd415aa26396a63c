// `--once` with nothing to do by two agent builds, CPU time (all threads) and wall time in interleaved pairs: a before/after comparison.
// Usage: node dist-bench/bench/once-pair.js <before main.cjs> <after main.cjs> [pairs per series] [series]
// (N: BENCH_INSTANCES; PAIR_AFTER_FLAGS: Node flags given to the after build only, space-separated, to compare
// flags with one build twice). Each build runs in a world of its own (two builds cannot share one: each start that writes
// its code cache removes the other's), synced by it first; the worlds are swapped between series, so that what
// differs between the two worlds cancels. CPU from `perf stat -e task-clock` when perf is there, else GNU time; wall
// time from spawn to exit (with perf's own start inside it, the same for both builds), and that wall time less the
// time the agent's main thread and the mock's (this process's) waited for a core (their run delays from
// /proc/thread-self/schedstat, the agent's read at its exit by a `-r` preload): most of what other load adds to
// the wall time, taken out (a wait of both at once twice); what the agent waits for (pages, disk, pool) stays in.
import { execFileSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { AGENT_ENV, AGENT_NODE_FLAGS } from './lib/first-sync.js';
import { benchFixtures } from './lib/fixtures.js';
import { median, runTimed } from './lib/proc.js';
import { type BenchWorld, createWorld } from './lib/world.js';

const [beforeBin, afterBin, pairsArg, seriesArg] = process.argv.slice(2);
if (beforeBin === undefined || afterBin === undefined) {
  process.stderr.write('usage: once-pair <before main.cjs> <after main.cjs> [pairs per series] [series]\n');
  process.exit(2);
}
const pairs = Number(pairsArg ?? 15);
const seriesCount = Number(seriesArg ?? 2);
const count = Number(process.env.BENCH_INSTANCES ?? 1000);
const fixtures = benchFixtures({ count });
const hasPerf = (() => {
  try {
    execFileSync('perf', ['stat', '-x,', '-e', 'task-clock', 'true'], { stdio: 'ignore' });
    return true;
  } catch {
    return false;
  }
})();
const scratch = await mkdtemp(path.join(os.tmpdir(), 'config-agent-once-pair-'));

/** Appends the main thread's run delay (ns) at exit to the file named by PAIR_SCHED_OUT. */
const schedProbe = path.join(scratch, 'sched-probe.cjs');
const schedOut = path.join(scratch, 'sched.txt');
await writeFile(
  schedProbe,
  `process.on('exit', () => { const fs = require('node:fs'); try { const delay = fs.readFileSync('/proc/thread-self/schedstat', 'utf8').split(' ')[1]; fs.writeFileSync(process.env.PAIR_SCHED_OUT, delay); } catch {} });\n`,
);

/** This thread's run delay so far, ns (the second field of its schedstat). */
function ownRunDelayNs(): number {
  return Number(readFileSync('/proc/thread-self/schedstat', 'utf8').split(' ')[1]);
}

const afterFlags = (process.env.PAIR_AFTER_FLAGS ?? '').split(' ').filter((flag) => flag !== '');

/** One `--once` of `bin` in `world`: its CPU time in ms (task-clock of all its threads, or user + system), its wall time. */
async function once(
  bin: string,
  world: BenchWorld,
  flags: readonly string[],
): Promise<{ cpu: number; wall: number; unqueued: number }> {
  const args = [...AGENT_NODE_FLAGS, ...flags, '-r', schedProbe, bin, '--config', world.configPath, '--once'];
  const env = { ...AGENT_ENV, PAIR_SCHED_OUT: schedOut };
  await rm(schedOut, { force: true });
  // The mock serves the pages from this process's main thread: its run delay meanwhile is taken out too.
  const mockDelayBefore = ownRunDelayNs();
  const unqueued = async (wall: number) =>
    wall -
    (Number(await readFile(schedOut, 'utf8').catch(() => Number.NaN)) + ownRunDelayNs() - mockDelayBefore) /
      1e6;
  if (!hasPerf) {
    const run = await runTimed(process.execPath, args, { rss: true, env });
    if (run.code !== 0) throw new Error(`exit ${run.code}: ${run.stderr.slice(0, 400)}`);
    return { cpu: (run.cpuSeconds ?? Number.NaN) * 1000, wall: run.ms, unqueued: await unqueued(run.ms) };
  }
  const out = path.join(scratch, 'perf.csv');
  const run = await runTimed(
    'perf',
    ['stat', '-x,', '-e', 'task-clock', '-o', out, process.execPath, ...args],
    { env },
  );
  if (run.code !== 0) throw new Error(`exit ${run.code}: ${run.stderr.slice(0, 400)}`);
  const line = (await readFile(out, 'utf8')).split('\n').find((l) => l.includes('task-clock'));
  return { cpu: Number(line?.split(',')[0]), wall: run.ms, unqueued: await unqueued(run.ms) };
}

const lowerIn = (ratios: readonly number[]): number => ratios.filter((r) => r < 1).length;

const worlds = [await createWorld(fixtures), await createWorld(fixtures)] as const;
try {
  const bins = [beforeBin, afterBin] as const;
  // Each world synced by the build that runs in it in the first series, then idle runs that record fingerprints.
  const flagsOf = (build: 0 | 1) => (build === 1 ? afterFlags : []);
  for (const [i, world] of worlds.entries()) await once(bins[i]!, world, flagsOf(i as 0 | 1));
  // A file changed less than 3 s before it is read is never fingerprinted (RACY_MARGIN_MS).
  await new Promise((resolve) => setTimeout(resolve, 3_500));
  const all: number[] = [];
  const allWall: number[] = [];
  const allUnqueued: number[] = [];
  for (let series = 0; series < seriesCount; series += 1) {
    // Series 0: before in world 0, after in world 1; then swapped. Two warm runs each first (code cache, pages).
    const worldOf = (build: 0 | 1) => worlds[(build + series) % 2]!;
    for (const build of [0, 1] as const) {
      for (let warm = 0; warm < 2; warm += 1) await once(bins[build]!, worldOf(build), flagsOf(build));
    }
    const ratios: number[] = [];
    const wallRatios: number[] = [];
    const unqueuedRatios: number[] = [];
    const cpu: [number[], number[]] = [[], []];
    const wall: [number[], number[]] = [[], []];
    const unqueued: [number[], number[]] = [[], []];
    for (let pair = 0; pair < pairs; pair += 1) {
      // ABBA: neither build always runs first.
      const order: (0 | 1)[] = pair % 2 === 0 ? [0, 1] : [1, 0];
      const ms = [
        { cpu: 0, wall: 0, unqueued: 0 },
        { cpu: 0, wall: 0, unqueued: 0 },
      ];
      for (const build of order) ms[build] = await once(bins[build]!, worldOf(build), flagsOf(build));
      for (const build of [0, 1] as const) {
        cpu[build].push(ms[build]!.cpu);
        wall[build].push(ms[build]!.wall);
        unqueued[build].push(ms[build]!.unqueued);
      }
      ratios.push(ms[1]!.cpu / ms[0]!.cpu);
      wallRatios.push(ms[1]!.wall / ms[0]!.wall);
      unqueuedRatios.push(ms[1]!.unqueued / ms[0]!.unqueued);
      process.stderr.write(
        `series ${series} pair ${pair}: cpu ${ms[0]!.cpu.toFixed(1)} ${ms[1]!.cpu.toFixed(1)} ms, ` +
          `wall ${ms[0]!.wall.toFixed(1)} ${ms[1]!.wall.toFixed(1)} ms, ` +
          `less run delay ${ms[0]!.unqueued.toFixed(1)} ${ms[1]!.unqueued.toFixed(1)} ms\n`,
      );
    }
    all.push(...ratios);
    allWall.push(...wallRatios);
    allUnqueued.push(...unqueuedRatios);
    process.stdout.write(
      `series ${series} (${pairs} pairs, ${hasPerf ? 'task-clock' : 'user+system'}): before ${median(cpu[0]).toFixed(1)} ms, ` +
        `after ${median(cpu[1]).toFixed(1)} ms; after / before pair by pair ${median(ratios).toFixed(3)} (lower in ${lowerIn(ratios)}); ` +
        `wall ${median(wall[0]).toFixed(1)} → ${median(wall[1]).toFixed(1)} ms, ${median(wallRatios).toFixed(3)} (lower in ${lowerIn(wallRatios)}); ` +
        `less run delay ${median(unqueued[0]).toFixed(1)} → ${median(unqueued[1]).toFixed(1)} ms, ${median(unqueuedRatios).toFixed(3)} (lower in ${lowerIn(unqueuedRatios)})\n`,
    );
  }
  process.stdout.write(
    `all ${all.length} pairs: after / before ${median(all).toFixed(3)} (lower in ${lowerIn(all)}); ` +
      `wall ${median(allWall).toFixed(3)} (lower in ${lowerIn(allWall)}); ` +
      `less run delay ${median(allUnqueued).toFixed(3)} (lower in ${lowerIn(allUnqueued)})\n`,
  );
} finally {
  for (const world of worlds) await world.close();
  await rm(scratch, { recursive: true, force: true });
}
