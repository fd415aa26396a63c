// Steady state over a synced world: `--once` with nothing to do, and the daemon's polls counted on the wire.
import { spawn } from 'node:child_process';
import path from 'node:path';
import { createInterface } from 'node:readline';
import { pathToFileURL } from 'node:url';
import { AGENT_ARGV, AGENT_BIN, AGENT_ENV, REPO_ROOT } from './first-sync.js';
import { currentMemoryKiB, median, runTimed, taskClockMs } from './proc.js';
import { type BenchWorld, changedEntries, snapshotTree, startByteCounter } from './world.js';

export interface NothingToDo {
  ms: number[];
  /** CPU seconds (user + system) of each run, when GNU time is there. */
  cpuSeconds: number[];
  /** Files whose inode, mtime or size changed over all runs (want 0). */
  filesChanged: number;
  /**
   * Files of the state directory changed by the runs after the first (want 0). The first run after a sync
   * records the files' fingerprints (stateDir/fingerprints.json); a pass with nothing to do writes nothing.
   */
  stateFilesChanged: number;
  /** Status reports the mock received over all runs (want 0). */
  reports: number;
  /** Requests of one full pass. */
  requestsPerPass: number;
  /**
   * CPU time (task-clock, all threads, ms) of further `--once` runs, each right after a `node -e 0` whose own is in
   * `nodeTaskClockMs`: the CPU ratio of the same minutes, in steps finer than GNU time's 10 ms. Empty without perf.
   */
  taskClockMs: number[];
  nodeTaskClockMs: number[];
  failures: string[];
}

export async function onceNothingToDo(world: BenchWorld, reps: number): Promise<NothingToDo> {
  const result: NothingToDo = {
    ms: [],
    cpuSeconds: [],
    filesChanged: 0,
    stateFilesChanged: 0,
    reports: 0,
    requestsPerPass: 0,
    taskClockMs: [],
    nodeTaskClockMs: [],
    failures: [],
  };
  const reportsBefore = world.server.state.reports.length;
  // A device runs --once long after its sync. A file whose ctime is within 3 s of its read is never fingerprinted
  // (RACY_MARGIN_MS, src/store/fingerprints.ts), so runs started right after the sync would all read every file.
  await new Promise((resolve) => setTimeout(resolve, 3_500));
  for (let rep = 0; rep < reps; rep += 1) {
    const before = await snapshotTree(world.rootDir);
    const stateBefore = await snapshotTree(world.stateDir);
    const requestsBefore = world.server.state.statsSnapshot().total;
    const run = await runTimed(process.execPath, [...AGENT_ARGV, '--config', world.configPath, '--once'], {
      rss: true,
      env: AGENT_ENV,
    });
    result.requestsPerPass = world.server.state.statsSnapshot().total - requestsBefore;
    result.ms.push(run.ms);
    if (run.cpuSeconds !== undefined) result.cpuSeconds.push(run.cpuSeconds);
    if (run.code !== 0) result.failures.push(`exit ${run.code}: ${run.stderr.slice(0, 400)}`);
    result.filesChanged += changedEntries(before, await snapshotTree(world.rootDir));
    if (rep > 0) result.stateFilesChanged += changedEntries(stateBefore, await snapshotTree(world.stateDir));
  }
  for (let rep = 0; rep < reps; rep += 1) {
    const node = await taskClockMs(process.execPath, ['-e', '0']);
    const once = await taskClockMs(
      process.execPath,
      [...AGENT_ARGV, '--config', world.configPath, '--once'],
      AGENT_ENV,
    );
    if (node === undefined || once === undefined) break;
    result.nodeTaskClockMs.push(node);
    result.taskClockMs.push(once);
  }
  result.reports = world.server.state.reports.length - reportsBefore;
  return result;
}

export interface DaemonPolls {
  /** Per incremental pass (a poll): requests and bytes on the wire. */
  requests: number[];
  bytes: number[];
  /** RSS samples of the idle daemon between polls, KiB. */
  idleRssKiB: number[];
  /** The anonymous part of each sample (RssAnon): without the node binary's file-backed pages. */
  idleAnonKiB: number[];
  failure?: string;
}

/** How long the daemon waits between polls, and when in that wait its RSS is read. */
export interface PollTiming {
  intervalSeconds: number;
  /** After the log line of each incremental poll. */
  sampleAfterMs: number;
}

/** The bench's usual measure: 1 s polls, read half-way (a daemon that is never idle for long). */
export const FAST_POLLS: PollTiming = { intervalSeconds: 1, sampleAfterMs: 400 };
/** The default poll interval (30 s), read 20 s into the wait: what a device sees between polls. */
export const DEFAULT_POLLS: PollTiming = { intervalSeconds: 30, sampleAfterMs: 20_000 };

/** Runs the daemon with no full resync, and measures `polls` polls after its first (full) pass. */
export async function daemonPolls(
  world: BenchWorld,
  polls: number,
  timing: PollTiming = FAST_POLLS,
): Promise<DaemonPolls> {
  const counter = await startByteCounter(world.server.port);
  await world.writeConfig(
    {
      // debug: an idle poll's 'pass finished' line is logged at debug since cit24 (dc629db), and the bench
      // finds each poll by it.
      log: { level: 'debug' },
      poll: { intervalSeconds: timing.intervalSeconds, jitterRatio: 0.2, fullResyncSeconds: 86_400 },
    },
    counter.url,
  );
  const result: DaemonPolls = { requests: [], bytes: [], idleRssKiB: [], idleAnonKiB: [] };
  // The V8 flags, malloc arenas and mmap threshold the packaged launcher gives the daemon (packaging/launcher.mjs):
  // the daemon as shipped.
  const launcher = (await import(pathToFileURL(path.join(REPO_ROOT, 'packaging', 'launcher.mjs')).href)) as {
    DAEMON_NODE_FLAGS: string[];
    DAEMON_MALLOC_ARENA_MAX: string;
    DAEMON_MALLOC_MMAP_THRESHOLD: string;
  };
  const child = spawn(
    process.execPath,
    [...launcher.DAEMON_NODE_FLAGS, AGENT_BIN, '--config', world.configPath],
    {
      env: {
        PATH: process.env.PATH,
        HOME: process.env.HOME,
        MALLOC_ARENA_MAX: launcher.DAEMON_MALLOC_ARENA_MAX,
        MALLOC_MMAP_THRESHOLD_: launcher.DAEMON_MALLOC_MMAP_THRESHOLD,
      },
      stdio: ['ignore', 'ignore', 'pipe'],
    },
  );
  const exited = new Promise<void>((resolve) => child.once('close', () => resolve()));
  const deadline = setTimeout(() => child.kill('SIGKILL'), 10 * 60_000);
  let lastRequests = 0;
  let lastBytes = 0;
  let seenFull = false;
  try {
    const lines = createInterface({ input: child.stderr! });
    for await (const line of lines) {
      let entry: { msg?: string; mode?: string };
      try {
        entry = JSON.parse(line) as typeof entry;
      } catch {
        continue;
      }
      if (entry.msg !== 'pass finished' && entry.msg !== 'pass could not reach the service') continue;
      if (entry.msg !== 'pass finished') {
        result.failure = 'the daemon could not reach the service';
        break;
      }
      const requests = world.server.state.statsSnapshot().total;
      const bytes = counter.bytes();
      if (seenFull && entry.mode === 'incremental') {
        result.requests.push(requests - lastRequests);
        result.bytes.push(bytes - lastBytes);
        // Between this poll and the next: the daemon is idle.
        await new Promise((resolve) => setTimeout(resolve, timing.sampleAfterMs));
        const memory = await currentMemoryKiB(child.pid!);
        if (memory !== undefined) {
          result.idleRssKiB.push(memory.rss);
          result.idleAnonKiB.push(memory.anon);
        }
      }
      if (entry.mode === 'full') seenFull = true;
      lastRequests = requests;
      lastBytes = bytes;
      if (result.requests.length >= polls) break;
    }
  } finally {
    clearTimeout(deadline);
    child.kill('SIGTERM');
    await exited;
    await counter.close();
    await world.writeConfig();
  }
  if (result.requests.length < polls && result.failure === undefined) {
    result.failure = `the daemon stopped after ${result.requests.length} polls`;
  }
  return result;
}

export function medianOf(values: readonly number[]): number {
  return median(values);
}
