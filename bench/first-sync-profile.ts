// One first sync of N by one agent build, profiled: the agent's main thread by --cpu-prof, the mock's by the inspector.
// Usage: node dist-bench/bench/first-sync-profile.js <main.cjs> <out dir> [runs] (N: BENCH_INSTANCES). Writes
// agent-<run>.cpuprofile and mock-<run>.cpuprofile into <out dir> and prints, per run, the wall time, the agent's
// user and system CPU (GNU time) and the mock's (this process's CPU while the agent ran: the mock is in it), so the
// mock's share of the two cores in a first sync is known. PROFILE_MOCK=0 skips the mock's profile (its CPU only).
import { writeFile } from 'node:fs/promises';
import { Session } from 'node:inspector/promises';
import path from 'node:path';
import { AGENT_ENV, AGENT_NODE_FLAGS } from './lib/first-sync.js';
import { benchFixtures, expectedFiles } from './lib/fixtures.js';
import { runTimed, settleDisk } from './lib/proc.js';
import { createWorld, verifyTree } from './lib/world.js';

const [bin, outDir, runsArg] = process.argv.slice(2);
if (bin === undefined || outDir === undefined) {
  process.stderr.write('usage: first-sync-profile <main.cjs> <out dir> [runs]\n');
  process.exit(2);
}
const runs = Number(runsArg ?? 1);
const count = Number(process.env.BENCH_INSTANCES ?? 1000);
const profileMock = process.env.PROFILE_MOCK !== '0';
const fixtures = benchFixtures({ count });
const expected = expectedFiles(fixtures);
const session = new Session();
session.connect();

for (let run = 0; run < runs; run += 1) {
  const world = await createWorld(fixtures, { removeAtExit: true });
  try {
    await settleDisk();
    if (profileMock) {
      await session.post('Profiler.enable');
      await session.post('Profiler.setSamplingInterval', { interval: 200 });
      await session.post('Profiler.start');
    }
    const cpuBefore = process.cpuUsage();
    const timed = await runTimed(
      process.execPath,
      [
        ...AGENT_NODE_FLAGS,
        '--cpu-prof',
        '--cpu-prof-interval=200',
        `--cpu-prof-dir=${outDir}`,
        `--cpu-prof-name=agent-${run}.cpuprofile`,
        bin,
        '--config',
        world.configPath,
        '--once',
      ],
      { rss: true, env: AGENT_ENV },
    );
    const mockCpu = process.cpuUsage(cpuBefore);
    if (profileMock) {
      const { profile } = await session.post('Profiler.stop');
      await writeFile(path.join(outDir, `mock-${run}.cpuprofile`), JSON.stringify(profile));
    }
    const wrong =
      timed.code !== 0
        ? `exit ${timed.code}: ${timed.stderr.slice(0, 400)}`
        : await verifyTree(world.rootDir, expected);
    if (wrong !== undefined) throw new Error(wrong);
    process.stdout.write(
      `run ${run}: ${timed.ms.toFixed(0)} ms; agent user ${((timed.userSeconds ?? 0) * 1000).toFixed(0)} ms, ` +
        `system ${((timed.systemSeconds ?? 0) * 1000).toFixed(0)} ms; mock (this process) user ` +
        `${(mockCpu.user / 1000).toFixed(0)} ms, system ${(mockCpu.system / 1000).toFixed(0)} ms\n`,
    );
  } finally {
    await world.close();
  }
}
session.disconnect();
