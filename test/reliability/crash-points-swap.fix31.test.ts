// fix31: SIGKILL at exact syscalls of a real `--once` (strace `inject=...:signal=KILL:when=N`, as
// crash-points.adv22.test.ts) while the service has swapped two instances' paths (etc/app/config.json and
// etc/db/pool.json: each instance listed at the other's path, queued again). After each kill: no torn file, each of
// the two paths holds one of the two instances' bytes or is missing, no foreign file touched, nothing told
// `deployed` that is not on disk with its bytes; the next run converges (each path the instance listed there, both
// reported deployed) and leaves no temp file. Strikes the first call at each site of a rename and an unlink (and
// the run's last): the swap's own steps, 12 chains of up to three agent runs, three at once (~7 s on 2 loaded cores).

import { spawn } from 'node:child_process';
import { mkdtemp, readFile, rm } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { AGENT_BIN, collect, type RunResult } from '../helpers/harness.js';
import { Fleet } from './support/fleet.js';
import { runSeed, seededRandom } from './support/random.js';
import { straceUnavailable } from './support/strace.js';

const SKIP = straceUnavailable();
const SEED = runSeed();
const SWAPPED = ['etc/app/config.json', 'etc/db/pool.json'] as const;
const POINTS = ['rename', 'unlink'] as const;
type Point = (typeof POINTS)[number];
const TRACED = ['rename', 'fsync', 'unlink', 'rmdir', 'mkdir'];

let base = '';
beforeAll(async () => {
  base = await mkdtemp(path.join(os.tmpdir(), 'config-agent-crash-swap-'));
});
afterAll(async () => {
  if (base) await rm(base, { recursive: true, force: true });
});

/** A fleet after a first sync, then the two paths swapped by the service: the run under test carries it out. */
async function world(name: string): Promise<Fleet> {
  const dir = path.join(base, name);
  const fleet = await Fleet.create({
    dir,
    rootDir: path.join(dir, 'root'),
    stateDir: path.join(dir, 'state'),
    bigFileBytes: 0,
  });
  fleet.deployAll(seededRandom(SEED));
  const first = await fleet.runOnce();
  if (first.code !== 0) throw new Error(`first sync: exit ${first.code}: ${first.stderr.slice(-1500)}`);
  fleet.swapPaths(...SWAPPED);
  return fleet;
}

describe.skipIf(SKIP !== undefined)(
  'SIGKILL at exact syscalls of a pass that swaps two paths',
  { timeout: 300_000 },
  () => {
    it('at each site of a rename and an unlink: nothing torn or wrongly deleted, nothing told early, converges', async () => {
      // One queue of strikes for both calls, three lanes side by side (each strike a chain of its own).
      const queue: { name: Point; when: number }[] = [];
      for (const name of POINTS) {
        const calls = await strike(name, `${name}-traced`, undefined);
        expect(calls.length, `the traced pass made no ${name}`).toBeGreaterThan(0);
        const seen = new Set<string>();
        for (const call of calls) {
          const first = !seen.has(call.site);
          seen.add(call.site);
          if (first || call.when === calls.length) queue.push({ name, when: call.when });
        }
        process.stderr.write(`crash-points-swap.fix31: ${name}: ${calls.length} calls\n`);
      }
      process.stderr.write(
        `crash-points-swap.fix31: striking ${queue.map((s) => `${s.name} #${s.when}`).join(', ')}\n`,
      );
      const lanes = await Promise.allSettled(
        Array.from({ length: 3 }, async () => {
          for (let next = queue.shift(); next !== undefined; next = queue.shift())
            await strike(next.name, `${next.name}-${next.when}`, next.when);
        }),
      );
      for (const lane of lanes) if (lane.status === 'rejected') throw lane.reason;
    });
  },
);

interface TracedCall {
  when: number;
  site: string;
}

async function strike(name: Point, dirName: string, when: number | undefined): Promise<TracedCall[]> {
  const fleet = await world(dirName);
  try {
    const traceFile = path.join(fleet.dir, 'strace.txt');
    const run = await strace(fleet, when === undefined ? { traceFile } : { name, when });
    const label = `${name} #${when ?? 'none'} (exit ${String(run.code)})`;
    expect(await fleet.checkAnyMoment(), label).toEqual([]);
    expect(run.signal === 'SIGKILL' || run.code === 137, `${label}: killed, ${run.stderr.slice(-1500)}`).toBe(
      when !== undefined,
    );
    if (when !== undefined) {
      const next = await fleet.runOnce();
      expect(next.code, `${label}, the run after: ${next.stderr.slice(-1500)}`).toBe(0);
    } else expect(run.code, `${label}: ${run.stderr.slice(-1500)}`).toBe(0);
    expect(await fleet.checkConverged(), label).toEqual([]);
    expect(await fleet.tempFiles(), label).toEqual([]);
    // The swap carried out: each path holds the instance listed there now, reported deployed.
    for (const at of SWAPPED) {
      const [listed] = fleet.instancesAt(at);
      expect(listed?.activity_status, `${label}: ${at}`).toBe('deployed');
      expect((await fleet.fileBytes(at))?.equals(fleet.bytesOf(listed!.id)!), `${label}: ${at}'s bytes`).toBe(
        true,
      );
    }
    if (when !== undefined) return [];
    return tracedCalls(await readFile(traceFile, 'utf8'), name, fleet);
  } finally {
    await fleet.close();
  }
}

/** The calls of `name` in a trace (`strace -f -y`), each with its `when=N` and its site (as adv22's tracedCalls). */
function tracedCalls(trace: string, name: Point, fleet: Fleet): TracedCall[] {
  const renamed = new Map<string, string>();
  for (const line of trace.split('\n')) {
    const match = /^\d+ +rename\("([^"]*)", "([^"]*)"\)/.exec(line);
    if (match?.[1] !== undefined && match[2] !== undefined) renamed.set(match[1], match[2]);
  }
  const managed = new Set(fleet.paths);
  const place = (call: string, raw: string): string => {
    const file = renamed.get(raw) ?? raw;
    if (file === fleet.stateDir) return `${call} the state directory`;
    if (file.startsWith(`${fleet.stateDir}/`)) return `${call} ${path.basename(file)}`;
    const relative = path.relative(fleet.rootDir, file);
    if ((SWAPPED as readonly string[]).includes(relative)) return `${call} ${relative}`;
    if (managed.has(relative)) return `${call} a managed file`;
    return `${call} a directory`;
  };
  const last = new Map<string, string>();
  const counts = new Map<string, number>();
  const calls: TracedCall[] = [];
  for (const line of trace.split('\n')) {
    const match = /^(\d+) +(rename|fsync|unlink|rmdir|mkdir)\((?:\d+<([^>]*)>|"([^"]*)")/.exec(line);
    if (match === null) continue;
    const [, thread = '', call = '', fd, quoted] = match;
    const here = place(call, fd ?? quoted ?? '');
    const site = `${last.get(thread) ?? 'start'}, then ${here}`;
    last.set(thread, here);
    if (call !== name) continue;
    const count = (counts.get(thread) ?? 0) + 1;
    counts.set(thread, count);
    if (count > calls.length) calls.push({ when: count, site });
  }
  return calls;
}

function strace(
  fleet: Fleet,
  how: { name: Point; when: number } | { traceFile: string },
): Promise<RunResult> {
  const child = spawn(
    'strace',
    [
      '-f',
      ...('traceFile' in how ? ['-y', '-o', how.traceFile] : ['-o', '/dev/null']),
      '-e',
      `trace=${TRACED.join(',')}`,
      ...('traceFile' in how ? [] : ['-e', `inject=${how.name}:signal=KILL:when=${how.when}`]),
      process.execPath,
      AGENT_BIN,
      '--config',
      fleet.configPath,
      '--once',
    ],
    {
      env: { PATH: process.env.PATH, HOME: process.env.HOME, UV_THREADPOOL_SIZE: '1' },
      stdio: ['ignore', 'pipe', 'pipe'],
    },
  );
  return collect(child, 60_000);
}
