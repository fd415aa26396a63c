// `--once` with nothing to do by two agent builds, CPU time (all threads) in interleaved pairs: a before/after comparison.
// Usage: node dist-bench/bench/once-pair.js <before main.cjs> <after main.cjs> [pairs per series] [series]
// (N: BENCH_INSTANCES; PAIR_AFTER_FLAGS: Node flags given to the after build only, space-separated, to compare
// flags with one build twice). Each build runs in a world of its own (two builds cannot share one: each start that writes
// its code cache removes the other's), synced by it first; the worlds are swapped between series, so that what
// differs between the two worlds cancels. CPU from `perf stat -e task-clock` when perf is there, else GNU time.
import { execFileSync } from 'node:child_process';
import { mkdtemp, readFile, rm } from 'node:fs/promises';
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

const afterFlags = (process.env.PAIR_AFTER_FLAGS ?? '').split(' ').filter((flag) => flag !== '');

/** One `--once` of `bin` in `world`: its CPU time in ms (task-clock of all its threads, or user + system). */
async function once(bin: string, world: BenchWorld, flags: readonly string[]): Promise<number> {
  const args = [...AGENT_NODE_FLAGS, ...flags, bin, '--config', world.configPath, '--once'];
  if (!hasPerf) {
    const run = await runTimed(process.execPath, args, { rss: true, env: AGENT_ENV });
    if (run.code !== 0) throw new Error(`exit ${run.code}: ${run.stderr.slice(0, 400)}`);
    return (run.cpuSeconds ?? Number.NaN) * 1000;
  }
  const out = path.join(scratch, 'perf.csv');
  const run = await runTimed(
    'perf',
    ['stat', '-x,', '-e', 'task-clock', '-o', out, process.execPath, ...args],
    { env: AGENT_ENV },
  );
  if (run.code !== 0) throw new Error(`exit ${run.code}: ${run.stderr.slice(0, 400)}`);
  const line = (await readFile(out, 'utf8')).split('\n').find((l) => l.includes('task-clock'));
  return Number(line?.split(',')[0]);
}

const worlds = [await createWorld(fixtures), await createWorld(fixtures)] as const;
try {
  const bins = [beforeBin, afterBin] as const;
  // Each world synced by the build that runs in it in the first series, then idle runs that record fingerprints.
  const flagsOf = (build: 0 | 1) => (build === 1 ? afterFlags : []);
  for (const [i, world] of worlds.entries()) await once(bins[i]!, world, flagsOf(i as 0 | 1));
  // A file changed less than 3 s before it is read is never fingerprinted (RACY_MARGIN_MS).
  await new Promise((resolve) => setTimeout(resolve, 3_500));
  const all: number[] = [];
  for (let series = 0; series < seriesCount; series += 1) {
    // Series 0: before in world 0, after in world 1; then swapped. Two warm runs each first (code cache, pages).
    const worldOf = (build: 0 | 1) => worlds[(build + series) % 2]!;
    for (const build of [0, 1] as const) {
      for (let warm = 0; warm < 2; warm += 1) await once(bins[build]!, worldOf(build), flagsOf(build));
    }
    const ratios: number[] = [];
    const cpu: [number[], number[]] = [[], []];
    for (let pair = 0; pair < pairs; pair += 1) {
      // ABBA: neither build always runs first.
      const order: (0 | 1)[] = pair % 2 === 0 ? [0, 1] : [1, 0];
      const ms: number[] = [0, 0];
      for (const build of order) ms[build] = await once(bins[build]!, worldOf(build), flagsOf(build));
      cpu[0].push(ms[0]!);
      cpu[1].push(ms[1]!);
      ratios.push(ms[1]! / ms[0]!);
      process.stderr.write(`series ${series} pair ${pair}: ${ms[0]!.toFixed(1)} ${ms[1]!.toFixed(1)} ms\n`);
    }
    all.push(...ratios);
    const lower = ratios.filter((r) => r < 1).length;
    process.stdout.write(
      `series ${series} (${pairs} pairs, ${hasPerf ? 'task-clock' : 'user+system'}): before ${median(cpu[0]).toFixed(1)} ms, ` +
        `after ${median(cpu[1]).toFixed(1)} ms; after / before pair by pair ${median(ratios).toFixed(3)} (lower in ${lower})\n`,
    );
  }
  const lower = all.filter((r) => r < 1).length;
  process.stdout.write(
    `all ${all.length} pairs: after / before ${median(all).toFixed(3)} (lower in ${lower})\n`,
  );
} finally {
  for (const world of worlds) await world.close();
  await rm(scratch, { recursive: true, force: true });
}
