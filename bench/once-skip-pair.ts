// One agent build, one world: idle `--once` with the clean-exit marker the run before left (the sweep skipped) against the marker removed first (the sweep run), in ABBA pairs.
// Usage: node dist-bench/bench/once-skip-pair.js <main.cjs> [pairs] (N: BENCH_INSTANCES). Needs perf (task-clock of
// all threads). Run it under `chrt -r 1` on a busy machine, as once-pair.ts.
import { readFile, rm } from 'node:fs/promises';
import path from 'node:path';
import { AGENT_ENV, AGENT_NODE_FLAGS } from './lib/first-sync.js';
import { benchFixtures } from './lib/fixtures.js';
import { median, runTimed } from './lib/proc.js';
import { createWorld } from './lib/world.js';

const [bin, pairsArg] = process.argv.slice(2);
if (bin === undefined) {
  process.stderr.write('usage: once-skip-pair <main.cjs> [pairs]\n');
  process.exit(2);
}
const pairs = Number(pairsArg ?? 20);
const world = await createWorld(benchFixtures({ count: Number(process.env.BENCH_INSTANCES ?? 1000) }));
const out = path.join(world.dir, 'perf.csv');

/** One idle `--once`: its task-clock and wall time, ms; `sweep`: the marker removed first. */
async function once(sweep: boolean): Promise<{ cpu: number; wall: number }> {
  if (sweep) await rm(path.join(world.stateDir, 'clean-exit.json'), { force: true });
  const args = ['stat', '-x,', '-e', 'task-clock', '-o', out, process.execPath, ...AGENT_NODE_FLAGS, bin!];
  const run = await runTimed('perf', [...args, '--config', world.configPath, '--once'], { env: AGENT_ENV });
  if (run.code !== 0) throw new Error(`exit ${run.code}: ${run.stderr.slice(0, 400)}`);
  const line = (await readFile(out, 'utf8')).split('\n').find((l) => l.includes('task-clock'));
  return { cpu: Number(line?.split(',')[0]), wall: run.ms };
}

try {
  // The first sync, then idle runs that record fingerprints (a file changed < 3 s before is not fingerprinted).
  for (let warm = 0; warm < 3; warm += 1) await once(false);
  await new Promise((resolve) => setTimeout(resolve, 3_500));
  for (let warm = 0; warm < 2; warm += 1) await once(false);
  const cpu: number[] = [];
  const wall: number[] = [];
  for (let pair = 0; pair < pairs; pair += 1) {
    const order = pair % 2 === 0 ? [false, true] : [true, false];
    const ms = new Map<boolean, { cpu: number; wall: number }>();
    for (const sweep of order) ms.set(sweep, await once(sweep));
    const skip = ms.get(false)!;
    const swept = ms.get(true)!;
    cpu.push(skip.cpu / swept.cpu);
    wall.push(skip.wall / swept.wall);
    process.stdout.write(
      `pair ${pair}: task-clock skip ${skip.cpu.toFixed(1)} sweep ${swept.cpu.toFixed(1)} ms; wall ${skip.wall.toFixed(1)} ${swept.wall.toFixed(1)} ms\n`,
    );
  }
  const lower = (ratios: readonly number[]) => ratios.filter((r) => r < 1).length;
  process.stdout.write(
    `skip / sweep, pair by pair: task-clock ${median(cpu).toFixed(3)} (lower in ${lower(cpu)} of ${pairs}); wall ${median(wall).toFixed(3)} (lower in ${lower(wall)})\n`,
  );
} finally {
  await world.close();
}
