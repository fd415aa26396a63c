// Before/after CPU of a first sync of N by two agent builds, from perf's task-clock (all threads), in ABBA pairs.
// Usage: node dist-bench/bench/first-sync-task-clock.js <before main.cjs> <after main.cjs> [pairs] (N: BENCH_INSTANCES,
// default 1,000). first-sync-pair.ts judges GNU time's user and system CPU, in 10 ms steps each truncated: ~1.3 % of
// a first sync of 1,000, the size of the cuts left to measure. perf stat's task-clock has no such steps. Each run is
// in a fresh world of its own (real mock, disk settled first), as the launcher runs `--once`; the tree and the
// reports are checked. Prints after / before pair by pair (median, lower and higher in how many) and the medians.
import { AGENT_ENV, AGENT_NODE_FLAGS } from './lib/first-sync.js';
import { benchFixtures, expectedFiles } from './lib/fixtures.js';
import { hasPerf, median, settleDisk, taskClockMs } from './lib/proc.js';
import { createWorld, verifyTree } from './lib/world.js';

const [beforeBin, afterBin, pairsArg] = process.argv.slice(2);
if (beforeBin === undefined || afterBin === undefined || !hasPerf) {
  process.stderr.write(
    'usage: first-sync-task-clock <before main.cjs> <after main.cjs> [pairs] (needs perf)\n',
  );
  process.exit(2);
}
const pairs = Number(pairsArg ?? 30);
const count = Number(process.env.BENCH_INSTANCES ?? 1000);
const fixtures = benchFixtures({ count });
const expected = expectedFiles(fixtures);

async function run(name: string, bin: string): Promise<number> {
  const world = await createWorld(fixtures, { removeAtExit: true });
  try {
    await settleDisk();
    const ms = await taskClockMs(
      process.execPath,
      [...AGENT_NODE_FLAGS, bin, '--config', world.configPath, '--once'],
      AGENT_ENV,
    );
    if (ms === undefined) throw new Error(`${name}: the run failed`);
    const wrong = await verifyTree(world.rootDir, expected);
    if (wrong !== undefined) throw new Error(`${name}: ${wrong}`);
    if (world.server.state.reports.length !== count) throw new Error(`${name}: reports missing`);
    process.stderr.write(`${name.padEnd(7)} ${ms.toFixed(1)} ms task-clock\n`);
    return ms;
  } finally {
    await world.close();
  }
}

const before: number[] = [];
const after: number[] = [];
for (let pair = 0; pair < pairs; pair += 1) {
  // ABBA: the first of a pair alternates, so neither build always follows the other.
  if (pair % 2 === 0) {
    before.push(await run('before', beforeBin));
    after.push(await run('after', afterBin));
  } else {
    after.push(await run('after', afterBin));
    before.push(await run('before', beforeBin));
  }
}
const ratios = after.map((ms, index) => ms / before[index]!);
const summary = {
  instances: count,
  pairs,
  medianMs: { before: median(before), after: median(after) },
  ratio: median(ratios),
  lower: ratios.filter((ratio) => ratio < 1).length,
  higher: ratios.filter((ratio) => ratio > 1).length,
  before,
  after,
};
process.stdout.write(
  `task-clock of a first sync of ${count}, after / before pair by pair: ${summary.ratio.toFixed(3)} ` +
    `(lower in ${summary.lower}, higher in ${summary.higher} of ${pairs}); medians ` +
    `${summary.medianMs.before.toFixed(0)} → ${summary.medianMs.after.toFixed(0)} ms\n${JSON.stringify(summary)}\n`,
);
