// First sync of N by two agent builds and both floor loops, interleaved run by run: a before/after comparison.
// Usage: node dist-bench/bench/first-sync-pair.js <before main.js> <after main.js> [reps] (N: BENCH_INSTANCES;
// PAIR_RTT_MS: the agents reach the mock through a proxy that delays each direction by half of it, as a service
// that is not on loopback would; PAIR_FLOORS=0: the agents alone, for CPU-time pairs on a loaded machine;
// PAIR_AFTER_FLAGS: Node flags for the after build only, space-separated, to compare flags with one build twice).
import { mkdtemp, writeFile } from 'node:fs/promises';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { AGENT_ENV, AGENT_NODE_FLAGS, FLOOR_LOOP } from './lib/first-sync.js';
import { benchFixtures, expectedFiles } from './lib/fixtures.js';
import { median, runTimed, settleDisk } from './lib/proc.js';
import { removeAtExit } from './lib/scratch.js';
import { createWorld, verifyTree } from './lib/world.js';

const [beforeBin, afterBin, repsArg] = process.argv.slice(2);
if (beforeBin === undefined || afterBin === undefined) {
  process.stderr.write('usage: first-sync-pair <before main.js> <after main.js> [reps]\n');
  process.exit(2);
}
const reps = Number(repsArg ?? 5);
const count = Number(process.env.BENCH_INSTANCES ?? 1000);
const fixtures = benchFixtures({ count });
const expected = expectedFiles(fixtures);
const scratch = await mkdtemp(path.join(os.tmpdir(), 'config-agent-pair-'));
const manifest = path.join(scratch, 'manifest.json');
await writeFile(
  manifest,
  JSON.stringify(expected.map((f) => ({ path: f.path, text: f.data.toString('utf8') }))),
);

type Name = 'before' | 'after' | 'floor1' | 'floor16';
const wall = new Map<Name, number[]>();
const cpu = new Map<Name, number[]>();
const push = (name: Name, ms: number, cpuSeconds: number | undefined) => {
  wall.set(name, [...(wall.get(name) ?? []), ms]);
  if (cpuSeconds !== undefined) cpu.set(name, [...(cpu.get(name) ?? []), cpuSeconds * 1000]);
};
/** Each agent run's user and system CPU (ms), by repetition: the pairs are judged pair by pair. */
const cpuParts = new Map<'before' | 'after', { user: number; system: number }[]>();
const floors = process.env.PAIR_FLOORS !== '0';
const afterFlags = (process.env.PAIR_AFTER_FLAGS ?? '').split(' ').filter((flag) => flag !== '');

const rttMs = Number(process.env.PAIR_RTT_MS ?? 0);

/** A TCP proxy to `port` that holds every chunk for `delayMs` in each direction, in order. */
async function delayingProxy(
  port: number,
  delayMs: number,
): Promise<{ url: string; close(): Promise<void> }> {
  const sockets = new Set<net.Socket>();
  const relay = (from: net.Socket, to: net.Socket) => {
    from.on('data', (chunk) => setTimeout(() => to.write(chunk), delayMs));
    from.on('end', () => setTimeout(() => to.end(), delayMs));
    from.on('error', () => to.destroy());
  };
  const server = net.createServer((client) => {
    const upstream = net.connect(port, '127.0.0.1');
    for (const socket of [client, upstream]) {
      sockets.add(socket);
      socket.on('close', () => sockets.delete(socket));
    }
    relay(client, upstream);
    relay(upstream, client);
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const address = server.address() as net.AddressInfo;
  return {
    url: `http://127.0.0.1:${address.port}`,
    close: async () => {
      for (const socket of sockets) socket.destroy();
      await new Promise((resolve) => server.close(resolve));
    },
  };
}

async function agent(name: Name, bin: string): Promise<void> {
  const world = await createWorld(fixtures, { removeAtExit: true });
  const proxy =
    rttMs > 0 ? await delayingProxy(Number(new URL(world.server.url).port), rttMs / 2) : undefined;
  if (proxy !== undefined) await world.writeConfig({}, proxy.url);
  try {
    await settleDisk();
    // As the packages' launcher runs --once (ONCE_NODE_FLAGS, ONCE_MALLOC_ENV), as the bench does.
    const run = await runTimed(
      process.execPath,
      [
        ...AGENT_NODE_FLAGS,
        ...(name === 'after' ? afterFlags : []),
        bin,
        '--config',
        world.configPath,
        '--once',
      ],
      { rss: true, env: AGENT_ENV },
    );
    const wrong =
      run.code !== 0
        ? `exit ${run.code}: ${run.stderr.slice(0, 400)}`
        : await verifyTree(world.rootDir, expected);
    if (wrong !== undefined) throw new Error(`${name}: ${wrong}`);
    const reports = world.server.state.instances.size;
    push(name, run.ms, run.cpuSeconds);
    if ((name === 'before' || name === 'after') && run.userSeconds !== undefined) {
      const parts = { user: run.userSeconds * 1000, system: (run.systemSeconds ?? 0) * 1000 };
      cpuParts.set(name, [...(cpuParts.get(name) ?? []), parts]);
    }
    process.stderr.write(
      `${name.padEnd(8)} ${run.ms.toFixed(0)} ms, cpu ${((run.cpuSeconds ?? 0) * 1000).toFixed(0)} ms (${reports})\n`,
    );
  } finally {
    await proxy?.close();
    await world.close();
  }
}

async function floor(name: Name, inFlight: number, rep: number): Promise<void> {
  const root = path.join(scratch, `root-${name}-${rep}`);
  await settleDisk();
  const run = await runTimed(process.execPath, [FLOOR_LOOP, manifest, root, String(inFlight)], { rss: true });
  if (run.code !== 0) throw new Error(`${name}: exit ${run.code}`);
  push(name, run.ms, run.cpuSeconds);
  removeAtExit(root);
  process.stderr.write(`${name.padEnd(8)} ${run.ms.toFixed(0)} ms\n`);
}

try {
  for (let rep = 0; rep < reps; rep += 1) {
    // Alternate which build goes first, so neither always follows the same contender.
    const order: [Name, string][] =
      rep % 2 === 0
        ? [
            ['before', beforeBin],
            ['after', afterBin],
          ]
        : [
            ['after', afterBin],
            ['before', beforeBin],
          ];
    await agent(...order[0]!);
    if (floors) await floor('floor1', 1, rep);
    await agent(...order[1]!);
    if (floors) await floor('floor16', 16, rep);
  }
} finally {
  removeAtExit(scratch);
}
const m = (name: Name) => median(wall.get(name) ?? []);
const c = (name: Name) => median(cpu.get(name) ?? []);
const line = (name: 'before' | 'after') =>
  floors
    ? `${name}: ${m(name).toFixed(0)} ms (cpu ${c(name).toFixed(0)} ms); / floor1 ${(m(name) / m('floor1')).toFixed(2)}, / floor16 ${(m(name) / m('floor16')).toFixed(2)}`
    : `${name}: ${m(name).toFixed(0)} ms (cpu ${c(name).toFixed(0)} ms)`;
/** after / before of one CPU part, pair by pair: the median ratio and in how many pairs after was lower. */
const pairwise = (part: (p: { user: number; system: number }) => number) => {
  const before = cpuParts.get('before') ?? [];
  const after = cpuParts.get('after') ?? [];
  const ratios = after.flatMap((a, i) => {
    const b = before[i];
    return b === undefined || part(b) === 0 ? [] : [part(a) / part(b)];
  });
  const lower = ratios.filter((r) => r < 1).length;
  return `${median(ratios).toFixed(3)} (lower in ${lower} of ${ratios.length})`;
};
const floorLine = floors ? ` floor1 ${m('floor1').toFixed(0)} ms, floor16 ${m('floor16').toFixed(0)} ms` : '';
process.stdout.write(
  `N=${count} reps=${reps} rtt=${rttMs} ms${floorLine}\n${line('before')}\n${line('after')}\n` +
    `cpu after / before, pair by pair: user ${pairwise((p) => p.user)}, system ${pairwise((p) => p.system)}, ` +
    `user+system ${pairwise((p) => p.user + p.system)}\n` +
    `${JSON.stringify({
      wall: Object.fromEntries([...wall].map(([k, v]) => [k, v.map(Math.round)])),
      cpu: Object.fromEntries(
        [...cpuParts].map(([k, v]) => [k, v.map(({ user, system }) => [user, system].map(Math.round))]),
      ),
    })}\n`,
);
