// The two cores' CPU budget of a first sync of N: the agent's and the mock's CPU beside both floor loops', per repetition.
// Usage: node dist-bench/bench/first-sync-budget.js [reps] (N: BENCH_INSTANCES, default 1,000; needs perf). Each
// repetition runs the agent (`--once`, the launcher's flags, a fresh world, tree and reports checked), then the
// 16-in-flight and the sequential floor loops, each under `perf stat -e task-clock` (all threads), with the mock's
// CPU taken as this process's while the agent ran (the mock is in it). Prints each run and the medians of the
// within-repetition ratios: a wall time on a loaded machine carries the minute's speed; CPU ratios much less so.
// What it bounds: on two cores the agent and the mock cannot finish before (agent CPU + mock CPU) / 2 of wall time.
import { mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { AGENT_BIN, AGENT_ENV, AGENT_NODE_FLAGS, FLOOR_LOOP } from './lib/first-sync.js';
import { benchFixtures, expectedFiles } from './lib/fixtures.js';
import { hasPerf, median, runTimed, settleDisk } from './lib/proc.js';
import { createWorld, verifyTree } from './lib/world.js';

if (!hasPerf) {
  process.stderr.write('usage: first-sync-budget [reps] (needs perf)\n');
  process.exit(2);
}
const reps = Number(process.argv[2] ?? 5);
const count = Number(process.env.BENCH_INSTANCES ?? 1000);
const fixtures = benchFixtures({ count });
const expected = expectedFiles(fixtures);
const scratch = await mkdtemp(path.join(os.tmpdir(), 'config-agent-bench-budget-'));
const manifest = path.join(scratch, 'manifest.json');
await writeFile(
  manifest,
  JSON.stringify(expected.map((f) => ({ path: f.path, text: f.data.toString('utf8') }))),
);

async function perfRun(
  command: string,
  args: readonly string[],
  env?: Readonly<Record<string, string>>,
): Promise<{ wallMs: number; cpuMs: number }> {
  const out = path.join(scratch, 'perf.csv');
  const timed = await runTimed(
    'perf',
    ['stat', '-x,', '-e', 'task-clock', '-o', out, command, ...args],
    env === undefined ? {} : { env },
  );
  if (timed.code !== 0) throw new Error(`${command} failed: ${timed.stderr.slice(0, 400)}`);
  const line = (await readFile(out, 'utf8')).split('\n').find((l) => l.includes('task-clock'));
  return { wallMs: timed.ms, cpuMs: Number(line?.split(',')[0]) };
}

interface Repetition {
  agentWallMs: number;
  agentCpuMs: number;
  mockCpuMs: number;
  floor16WallMs: number;
  floor16CpuMs: number;
  floor1WallMs: number;
  floor1CpuMs: number;
}

const runs: Repetition[] = [];
try {
  for (let rep = 0; rep < reps; rep += 1) {
    const world = await createWorld(fixtures, { removeAtExit: true });
    let agent: { wallMs: number; cpuMs: number };
    let mockCpuMs: number;
    try {
      await settleDisk();
      const before = process.cpuUsage();
      agent = await perfRun(
        process.execPath,
        [...AGENT_NODE_FLAGS, AGENT_BIN, '--config', world.configPath, '--once'],
        AGENT_ENV,
      );
      const used = process.cpuUsage(before);
      mockCpuMs = (used.user + used.system) / 1000;
      const wrong = await verifyTree(world.rootDir, expected);
      if (wrong !== undefined) throw new Error(`agent: ${wrong}`);
      if (world.server.state.reports.length !== count) throw new Error('agent: reports missing');
    } finally {
      await world.close();
    }
    const floors: { wallMs: number; cpuMs: number }[] = [];
    for (const inFlight of ['16', '1']) {
      const root = path.join(scratch, `root-${inFlight}-${rep}`);
      await settleDisk();
      floors.push(await perfRun(process.execPath, [FLOOR_LOOP, manifest, root, inFlight]));
      const wrong = await verifyTree(root, expected);
      if (wrong !== undefined) throw new Error(`floor ${inFlight}: ${wrong}`);
      await rm(root, { recursive: true, force: true });
    }
    const run: Repetition = {
      agentWallMs: agent.wallMs,
      agentCpuMs: agent.cpuMs,
      mockCpuMs,
      floor16WallMs: floors[0]!.wallMs,
      floor16CpuMs: floors[0]!.cpuMs,
      floor1WallMs: floors[1]!.wallMs,
      floor1CpuMs: floors[1]!.cpuMs,
    };
    runs.push(run);
    process.stderr.write(
      `${Object.entries(run)
        .map(([key, value]) => `${key} ${value.toFixed(0)}`)
        .join(', ')}\n`,
    );
  }
} finally {
  await rm(scratch, { recursive: true, force: true });
}

const within = (ratio: (run: Repetition) => number) => median(runs.map(ratio));
const summary = {
  instances: count,
  reps,
  medians: Object.fromEntries(
    (Object.keys(runs[0] ?? {}) as (keyof Repetition)[]).map((key) => [key, median(runs.map((r) => r[key]))]),
  ),
  withinRepetition: {
    agentWallOverFloor16Wall: within((r) => r.agentWallMs / r.floor16WallMs),
    agentCpuOverFloor16Cpu: within((r) => r.agentCpuMs / r.floor16CpuMs),
    agentAndMockCpuOverFloor16Cpu: within((r) => (r.agentCpuMs + r.mockCpuMs) / r.floor16CpuMs),
    floor16CpuOverWall: within((r) => r.floor16CpuMs / r.floor16WallMs),
    agentCpuOverWall: within((r) => r.agentCpuMs / r.agentWallMs),
    twoCoreBoundOverFloor16Wall: within((r) => (r.agentCpuMs + r.mockCpuMs) / 2 / r.floor16WallMs),
  },
};
process.stdout.write(`${JSON.stringify(summary, null, 2)}\n`);
