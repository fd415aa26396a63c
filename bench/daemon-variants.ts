// The daemon under several runtimes, V8 flags and environments, interleaved run by run: idle RSS, or its first sync.
// Usage: node dist-bench/bench/daemon-variants.js <variants.json> [rounds] [idle|first]
// variants.json: [{ "name": "...", "node": "/path/to/node", "args": ["--flag", ...], "entry": "main.cjs" (or "" when
//                   node is /bin/sh and args a launcher: the package's own command line),
//                   "env": { "MALLOC_ARENA_MAX": "1" } }, ...]
// idle: one world of BENCH_INSTANCES (default 1,000) synced once by the first variant's `--once`, then each variant's
// daemon at 1 s polls (no full resync): VmRSS / RssAnon / RssFile read SAMPLE_AFTER_MS (400) after each of POLLS (8)
// polls, CPU (user + system, all threads, /proc/<pid>/stat) of the start-up and first pass, and per poll after it.
// POLL_SECONDS=30 SAMPLE_AFTER_MS=20000 POLLS=2 gives the default poll's measure.
// first: a fresh world per run; the daemon's own first sync: CPU and peak RSS (VmHWM) when its first pass ends.
import { execFileSync, spawn } from 'node:child_process';
import { open, readFile, writeFile } from 'node:fs/promises';
import { createInterface } from 'node:readline';
import { benchFixtures, expectedFiles } from './lib/fixtures.js';
import { median, runTimed } from './lib/proc.js';
import { type BenchWorld, createWorld, verifyTree } from './lib/world.js';

interface Variant {
  name: string;
  node: string;
  args: string[];
  entry: string;
  env?: Record<string, string>;
}

const [variantsFile, roundsArg, modeArg] = process.argv.slice(2);
if (variantsFile === undefined) {
  process.stderr.write('usage: daemon-variants <variants.json> [rounds] [idle|first]\n');
  process.exit(2);
}
const variants = JSON.parse(await readFile(variantsFile, 'utf8')) as Variant[];
const rounds = Number(roundsArg ?? 3);
const mode = modeArg === 'first' ? 'first' : 'idle';
const count = Number(process.env.BENCH_INSTANCES ?? (mode === 'first' ? 10_000 : 1000));
const polls = Number(process.env.POLLS ?? 8);
const pollSeconds = Number(process.env.POLL_SECONDS ?? 1);
const sampleAfterMs = Number(process.env.SAMPLE_AFTER_MS ?? 400);
const fixtures = benchFixtures({ count });
const ticksPerSecond = Number(execFileSync('getconf', ['CLK_TCK'], { encoding: 'utf8' }).trim());

interface Sample {
  rss: number;
  anon: number;
  file: number;
  hwm: number;
}

async function memory(pid: number): Promise<Sample | undefined> {
  const status = await readFile(`/proc/${pid}/status`, 'utf8').catch(() => '');
  const field = (name: string) => Number(new RegExp(`^${name}:\\s+(\\d+)\\s+kB`, 'm').exec(status)?.[1]);
  const sample = {
    rss: field('VmRSS'),
    anon: field('RssAnon'),
    file: field('RssFile'),
    hwm: field('VmHWM'),
  };
  return Number.isNaN(sample.rss) ? undefined : sample;
}

/** User + system CPU of every thread of `pid`, ms. */
async function cpuMs(pid: number): Promise<number> {
  const stat = await readFile(`/proc/${pid}/stat`, 'utf8');
  const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
  return ((Number(fields[11]) + Number(fields[12])) * 1000) / ticksPerSecond;
}

/** The present bits of the pages of every file mapping (pagemap entries), for attributing them to symbols. */
async function dumpPagemap(pid: number, prefix: string): Promise<void> {
  const maps = await readFile(`/proc/${pid}/maps`, 'utf8');
  await writeFile(`${prefix}.maps`, maps);
  const pagemap = await open(`/proc/${pid}/pagemap`, 'r');
  try {
    for (const line of maps.split('\n')) {
      const match = /^([0-9a-f]+)-([0-9a-f]+) \S+ .*\/bin\/node$/.exec(line);
      if (!match) continue;
      const start = Number.parseInt(match[1]!, 16);
      const pages = (Number.parseInt(match[2]!, 16) - start) / 4096;
      const buffer = Buffer.alloc(pages * 8);
      await pagemap.read(buffer, 0, buffer.length, (start / 4096) * 8);
      await writeFile(`${prefix}.pagemap-${match[1]}`, buffer);
    }
  } finally {
    await pagemap.close();
  }
}

interface Run {
  startCpuMs: number;
  pollCpuMs: number;
  rss: number[];
  anon: number[];
  file: number[];
  hwm: number;
  failure?: string;
}

async function runDaemon(variant: Variant, world: BenchWorld, wantPolls: number): Promise<Run> {
  await world.writeConfig({
    // debug: an idle poll's 'pass finished' line is logged at debug since cit24 (dc629db), and the bench
    // finds each poll by it.
    log: { level: 'debug' },
    poll: { intervalSeconds: pollSeconds, jitterRatio: 0.2, fullResyncSeconds: 86_400 },
  });
  const entry = variant.entry === '' ? [] : [variant.entry];
  const child = spawn(variant.node, [...variant.args, ...entry, '--config', world.configPath], {
    env: { PATH: process.env.PATH, HOME: process.env.HOME, ...variant.env },
    stdio: ['ignore', 'ignore', 'pipe'],
  });
  const exited = new Promise<void>((resolve) => child.once('close', () => resolve()));
  const deadline = setTimeout(() => child.kill('SIGKILL'), 20 * 60_000);
  const run: Run = { startCpuMs: Number.NaN, pollCpuMs: Number.NaN, rss: [], anon: [], file: [], hwm: 0 };
  let seen = 0;
  try {
    for await (const line of createInterface({ input: child.stderr! })) {
      let entry: { msg?: string; mode?: string };
      try {
        entry = JSON.parse(line) as typeof entry;
      } catch {
        continue;
      }
      if (entry.msg === 'pass could not reach the service') {
        run.failure = 'unreachable';
        break;
      }
      if (entry.msg !== 'pass finished') continue;
      if (entry.mode === 'full' && Number.isNaN(run.startCpuMs)) {
        run.startCpuMs = await cpuMs(child.pid!);
        run.hwm = (await memory(child.pid!))?.hwm ?? 0;
        if (wantPolls === 0) break;
        continue;
      }
      await new Promise((resolve) => setTimeout(resolve, sampleAfterMs));
      const sample = await memory(child.pid!);
      if (sample !== undefined) {
        run.rss.push(sample.rss);
        run.anon.push(sample.anon);
        run.file.push(sample.file);
      }
      seen += 1;
      if (seen >= wantPolls) {
        if (process.env.SMAPS_DIR !== undefined) {
          const smaps = await readFile(`/proc/${child.pid}/smaps`, 'utf8');
          await writeFile(`${process.env.SMAPS_DIR}/${variant.name}.smaps`, smaps);
          await dumpPagemap(child.pid!, `${process.env.SMAPS_DIR}/${variant.name}`);
        }
        run.pollCpuMs = ((await cpuMs(child.pid!)) - run.startCpuMs) / seen;
        break;
      }
    }
  } finally {
    clearTimeout(deadline);
    child.kill('SIGTERM');
    await exited;
  }
  if (Number.isNaN(run.startCpuMs) && run.failure === undefined) run.failure = 'no first pass';
  return run;
}

const results = new Map<string, Run[]>(variants.map((v) => [v.name, []]));
const mib = (kib: number) => (kib / 1024).toFixed(1);

if (mode === 'idle') {
  const world = await createWorld(fixtures);
  const first = variants[0]!;
  const sync = await runTimed(
    first.node,
    [...(first.entry === '' ? first.args : [first.entry]), '--config', world.configPath, '--once'],
    {},
  );
  if (sync.code !== 0) throw new Error(`the first sync failed: ${sync.stderr.slice(0, 400)}`);
  await new Promise((resolve) => setTimeout(resolve, 3_500));
  try {
    for (let round = 0; round < rounds; round += 1) {
      for (const variant of variants) {
        const run = await runDaemon(variant, world, polls);
        results.get(variant.name)!.push(run);
        process.stderr.write(
          `${round} ${variant.name}: rss ${mib(median(run.rss))} anon ${mib(median(run.anon))} file ${mib(median(run.file))} start ${run.startCpuMs} ms, poll ${run.pollCpuMs.toFixed(1)} ms${run.failure ? ` FAILED ${run.failure}` : ''}\n`,
        );
      }
    }
  } finally {
    await world.close();
  }
} else {
  const expected = expectedFiles(fixtures);
  for (let round = 0; round < rounds; round += 1) {
    for (const variant of variants) {
      const world = await createWorld(fixtures);
      try {
        const run = await runDaemon(variant, world, 0);
        const wrong = run.failure ?? (await verifyTree(world.rootDir, expected, 'presence'));
        if (wrong !== undefined) run.failure = wrong;
        results.get(variant.name)!.push(run);
        process.stderr.write(
          `${round} ${variant.name}: first sync CPU ${run.startCpuMs} ms, peak ${mib(run.hwm)} MiB${run.failure ? ` FAILED ${run.failure}` : ''}\n`,
        );
      } finally {
        await world.close();
      }
    }
  }
}

for (const [name, runs] of results) {
  const per = (pick: (run: Run) => number) => runs.map(pick);
  const list = (values: number[], format: (v: number) => string) => values.map(format).join(', ');
  if (mode === 'idle') {
    const rss = per((r) => median(r.rss));
    process.stdout.write(
      `${name}: idle RSS ${mib(median(rss))} MiB (${list(rss, mib)}), anon ${mib(median(per((r) => median(r.anon))))}, file ${mib(median(per((r) => median(r.file))))}; start CPU ${median(per((r) => r.startCpuMs))} ms (${list(
        per((r) => r.startCpuMs),
        String,
      )}); poll CPU ${median(per((r) => r.pollCpuMs)).toFixed(1)} ms\n`,
    );
  } else {
    process.stdout.write(
      `${name}: first sync CPU ${median(per((r) => r.startCpuMs))} ms (${list(
        per((r) => r.startCpuMs),
        String,
      )}); peak RSS ${mib(median(per((r) => r.hwm)))} MiB (${list(
        per((r) => r.hwm),
        mib,
      )})\n`,
    );
  }
}
