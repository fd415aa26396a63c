// Before/after wall time and CPU (perf's task-clock, all threads) of a first sync of N by two agent builds, ABBA pairs.
// Usage: node dist-bench/bench/first-sync-wall-clock.js <before main.cjs> <after main.cjs> [pairs] (N: BENCH_INSTANCES,
// default 1,000). As first-sync-task-clock.ts (a fresh world per run, disk settled first, tree and reports checked),
// with the run's wall time (perf's elapsed) judged pair by pair beside its CPU: a change that moves work onto another
// thread can lower the wall time and raise the CPU, or the other way round.
import { mkdtemp, readFile, rm } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { AGENT_ENV, AGENT_NODE_FLAGS } from './lib/first-sync.js';
import { benchFixtures, expectedFiles } from './lib/fixtures.js';
import { hasPerf, median, runTimed, settleDisk } from './lib/proc.js';
import { createWorld, verifyTree } from './lib/world.js';

const [beforeBin, afterBin, pairsArg] = process.argv.slice(2);
if (beforeBin === undefined || afterBin === undefined || !hasPerf) {
  process.stderr.write(
    'usage: first-sync-wall-clock <before main.cjs> <after main.cjs> [pairs] (needs perf)\n',
  );
  process.exit(2);
}
const pairs = Number(pairsArg ?? 20);
const count = Number(process.env.BENCH_INSTANCES ?? 1000);
const fixtures = benchFixtures({ count });
const expected = expectedFiles(fixtures);

interface Sample {
  wallMs: number;
  cpuMs: number;
}

async function run(name: string, bin: string): Promise<Sample> {
  const world = await createWorld(fixtures, { removeAtExit: true });
  const dir = await mkdtemp(path.join(os.tmpdir(), 'bench-perf-'));
  try {
    await settleDisk();
    const out = path.join(dir, 'perf.csv');
    const args = [...AGENT_NODE_FLAGS, bin, '--config', world.configPath, '--once'];
    const timed = await runTimed(
      'perf',
      ['stat', '-x,', '-e', 'task-clock', '-o', out, process.execPath, ...args],
      {
        env: AGENT_ENV,
      },
    );
    if (timed.code !== 0) throw new Error(`${name}: the run failed: ${timed.stderr.slice(0, 400)}`);
    const line = (await readFile(out, 'utf8')).split('\n').find((l) => l.includes('task-clock'));
    const cpuMs = Number(line?.split(',')[0]);
    const wrong = await verifyTree(world.rootDir, expected);
    if (wrong !== undefined) throw new Error(`${name}: ${wrong}`);
    if (world.server.state.reports.length !== count) throw new Error(`${name}: reports missing`);
    process.stderr.write(
      `${name.padEnd(7)} wall ${timed.ms.toFixed(1)} ms, task-clock ${cpuMs.toFixed(1)} ms\n`,
    );
    return { wallMs: timed.ms, cpuMs };
  } finally {
    await rm(dir, { recursive: true, force: true });
    await world.close();
  }
}

const before: Sample[] = [];
const after: Sample[] = [];
for (let pair = 0; pair < pairs; pair += 1) {
  if (pair % 2 === 0) {
    before.push(await run('before', beforeBin));
    after.push(await run('after', afterBin));
  } else {
    after.push(await run('after', afterBin));
    before.push(await run('before', beforeBin));
  }
}
function judged(key: keyof Sample) {
  const ratios = after.map((sample, index) => sample[key] / before[index]![key]);
  return {
    ratio: median(ratios),
    lower: ratios.filter((ratio) => ratio < 1).length,
    higher: ratios.filter((ratio) => ratio > 1).length,
    medianMs: { before: median(before.map((s) => s[key])), after: median(after.map((s) => s[key])) },
  };
}
const summary = { instances: count, pairs, wall: judged('wallMs'), cpu: judged('cpuMs'), before, after };
for (const key of ['wall', 'cpu'] as const) {
  const j = summary[key];
  process.stdout.write(
    `${key} of a first sync of ${count}, after / before pair by pair: ${j.ratio.toFixed(3)} (lower in ${j.lower}, ` +
      `higher in ${j.higher} of ${pairs}); medians ${j.medianMs.before.toFixed(0)} → ${j.medianMs.after.toFixed(0)} ms\n`,
  );
}
process.stdout.write(`${JSON.stringify(summary)}\n`);
