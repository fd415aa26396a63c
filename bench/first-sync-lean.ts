// First sync of N against the 16-in-flight floor, served by the real mock and by the lean one, in turns: both ratios.
// Usage: node dist-bench/bench/first-sync-lean.js [reps] [agent main.cjs] (N: BENCH_INSTANCES, default 1,000; the
// agent: the shipped bundle dist-bench/agent/dist/main.cjs unless named). Each repetition runs the agent against
// the real mock (as `npm run bench` does), the agent against the lean mock (lib/lean-mock.ts: the same answers on
// the wire, without hono's routing and the answers' schema checks) and the floor loop with 16 in flight, in an order
// that turns each repetition. It prints each one's median, the two ratios (median over the floor's median, and
// the median of the ratios within a repetition), and the bench process's CPU while each agent ran: the mock's.
import { mkdtemp, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { AGENT_ENV, AGENT_NODE_FLAGS, BUNDLE_BIN, FLOOR_LOOP } from './lib/first-sync.js';
import { BENCH_API_KEY, BENCH_DEVICE, benchFixtures, expectedFiles } from './lib/fixtures.js';
import { startLeanMockServer } from './lib/lean-mock.js';
import { median, runTimed, settleDisk } from './lib/proc.js';
import { removeAtExit } from './lib/scratch.js';
import { createWorld, verifyTree } from './lib/world.js';

const [repsArg, binArg] = process.argv.slice(2);
const reps = Number(repsArg ?? 10);
const bin = binArg ?? BUNDLE_BIN;
const count = Number(process.env.BENCH_INSTANCES ?? 1000);
const fixtures = benchFixtures({ count });
const expected = expectedFiles(fixtures);
const scratch = await mkdtemp(path.join(os.tmpdir(), 'config-agent-lean-'));
removeAtExit(scratch);
const manifest = path.join(scratch, 'manifest.json');
await writeFile(
  manifest,
  JSON.stringify(expected.map((f) => ({ path: f.path, text: f.data.toString('utf8') }))),
);

/** The pages the agent asks for (api/pager.ts: 100 a page, each from the last item of the one before). */
function pagePaths(instances: number): string[] {
  const paths: string[] = [];
  for (let offset = 0; offset <= instances; offset += 99) {
    paths.push(
      `/v1/config_instances?device_id=${BENCH_DEVICE}&offset=${offset}&limit=100&order_by=id%3Aasc&expand[]=total_count`,
    );
  }
  return paths;
}

type Name = 'real' | 'lean' | 'floor16';
const wall: Record<Name, number[]> = { real: [], lean: [], floor16: [] };
const mockCpu: Record<'real' | 'lean', number[]> = { real: [], lean: [] };

async function agent(name: 'real' | 'lean'): Promise<void> {
  const world = await createWorld(fixtures, { removeAtExit: true });
  const lean =
    name === 'lean' ? await startLeanMockServer({ apiKeys: [BENCH_API_KEY], fixtures, port: 0 }) : undefined;
  try {
    if (lean !== undefined) {
      await lean.warm(pagePaths(count));
      await world.writeConfig({}, lean.url);
    }
    await settleDisk();
    const before = process.cpuUsage();
    const run = await runTimed(
      process.execPath,
      [...AGENT_NODE_FLAGS, bin, '--config', world.configPath, '--once'],
      { env: AGENT_ENV },
    );
    const cpu = process.cpuUsage(before);
    const wrong =
      run.code !== 0
        ? `exit ${run.code}: ${run.stderr.slice(0, 400)}`
        : await verifyTree(world.rootDir, expected);
    if (wrong !== undefined) throw new Error(`${name}: ${wrong}`);
    const reports = (lean?.state ?? world.server.state).reports.length;
    if (reports !== count) throw new Error(`${name}: ${reports} reports, expected ${count}`);
    wall[name].push(run.ms);
    mockCpu[name].push((cpu.user + cpu.system) / 1000);
    const served = lean === undefined ? '' : `, lean path ${JSON.stringify(lean.served())}`;
    process.stderr.write(
      `${name.padEnd(8)} ${run.ms.toFixed(0)} ms, mock cpu ${((cpu.user + cpu.system) / 1000).toFixed(0)} ms${served}\n`,
    );
  } finally {
    await lean?.close();
    await world.close();
  }
}

async function floor(rep: number): Promise<void> {
  const root = path.join(scratch, `root-floor16-${rep}`);
  await settleDisk();
  const run = await runTimed(process.execPath, [FLOOR_LOOP, manifest, root, '16']);
  if (run.code !== 0) throw new Error(`floor16: exit ${run.code}`);
  const wrong = await verifyTree(root, expected);
  if (wrong !== undefined) throw new Error(`floor16: ${wrong}`);
  wall.floor16.push(run.ms);
  process.stderr.write(`floor16  ${run.ms.toFixed(0)} ms\n`);
}

const turns: Name[][] = [
  ['real', 'lean', 'floor16'],
  ['lean', 'floor16', 'real'],
  ['floor16', 'real', 'lean'],
];
for (let rep = 0; rep < reps; rep += 1) {
  for (const name of turns[rep % turns.length]!) {
    if (name === 'floor16') await floor(rep);
    else await agent(name);
  }
}

const perRep = (name: 'real' | 'lean') => median(wall[name].map((ms, rep) => ms / wall.floor16[rep]!));
const result = {
  instances: count,
  reps,
  agent: bin,
  medianMs: { real: median(wall.real), lean: median(wall.lean), floor16: median(wall.floor16) },
  ratioOfMedians: {
    real: median(wall.real) / median(wall.floor16),
    lean: median(wall.lean) / median(wall.floor16),
  },
  medianRatioPerRep: { real: perRep('real'), lean: perRep('lean') },
  mockCpuMs: { real: median(mockCpu.real), lean: median(mockCpu.lean) },
  wall,
  mockCpu,
};
process.stdout.write(
  `first sync of ${count} / 16-in-flight floor: real mock ${result.ratioOfMedians.real.toFixed(2)}× ` +
    `(per repetition ${result.medianRatioPerRep.real.toFixed(2)}×), lean mock ${result.ratioOfMedians.lean.toFixed(2)}× ` +
    `(per repetition ${result.medianRatioPerRep.lean.toFixed(2)}×); medians ${result.medianMs.real.toFixed(0)}, ` +
    `${result.medianMs.lean.toFixed(0)}, floor ${result.medianMs.floor16.toFixed(0)} ms; mock CPU while the agent ran ` +
    `${result.mockCpuMs.real.toFixed(0)} and ${result.mockCpuMs.lean.toFixed(0)} ms (${reps} repetitions)\n`,
);
process.stdout.write(`${JSON.stringify(result)}\n`);
