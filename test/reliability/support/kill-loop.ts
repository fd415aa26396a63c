// The kill -9 loop: an agent run killed at a random moment, the world checked, again and again; every few kills
// a run is let finish, and it must converge with no temp file left.
import type { ChildProcess } from 'node:child_process';
import { type FSWatcher, watch as watchDir } from 'node:fs';
import { readdir, readFile } from 'node:fs/promises';
import path from 'node:path';
import type { Fleet } from './fleet.js';
import { describeViolations, openLane, reportOnSignalEnv } from './lane.js';
import { countFromEnv, type Random, randomInt } from './random.js';

export interface KillLaneFigures {
  kills: number;
  /** Kills timed by a filesystem event of the run (the n-th create/rename/unlink in a watched dir). */
  killsOnEvent: number;
  /** Kills after which a temp file was found: the kill landed inside a publish. */
  killsInsidePublish: number;
  /** Runs that ran to their end (convergence checks, and runs the kill came too late for). */
  completedRuns: number;
  /** Power cuts right after a run's clean exit (with `cutAfterFinish`). */
  cutsAfterExit: number;
  /** The longest a run let finish took (wall time): how close the lane came to the hung-run deadline. */
  slowestRunMs: number;
  /** The time budget (`until`) ended the lane before its count of kills. */
  stoppedByTime: boolean;
  violations: string[];
}

export interface KillLaneOptions {
  kills: number;
  /**
   * A power cut: runs after each SIGKILL (the process is gone, as at a cut) and, with `cutAfterFinish`, after
   * each run that finished; it must drop what was not synced. Without it the lane is a plain kill -9 loop.
   */
  powerCut?: () => Promise<void>;
  cutAfterFinish?: boolean;
  /** A run is let finish after this many kills in a row (at most; the exact count is random). */
  finishEvery: number;
  /** Progress lines on stderr every `progressEvery` (100) kills carry this name; none without it. */
  label?: string;
  progressEvery?: number;
  /** Stops after this many violations: one is a failure, a few give the picture. */
  maxViolations?: number;
  /** A long run's time budget (epoch ms): no new kill starts after it; `stoppedByTime` says it ended the lane. */
  until?: number;
  /**
   * Kills the budget cannot cut: `until` ends the lane only after this many (default 0). On a machine too busy
   * for them within the budget the lane runs longer instead of failing a floor of kills set in wall time.
   */
  minKills?: number;
}

export interface Exit {
  code: number | null;
  /** The signal that ended the process (SIGKILL from the loop, or the SIGTERM a stop past its deadline ends by). */
  signal: NodeJS.Signals | null;
  output: string;
}

/**
 * When a run counts as hung. Not a wall-clock deadline alone: on a shared machine a niced run that needs 1–2 s
 * of CPU can wait minutes for it (a run capped at 1.5 % of a core takes over a minute and logs nothing, like the
 * 3 MB lane's "stall"). A run is hung when it neither used CPU nor was waiting for one (no thread runnable) for
 * `idleMs` — it waits on something that never comes —, when it used more than `cpuMs` of CPU — it spins —, or
 * when it outlives `wallMs` whatever else is true.
 */
export interface HangLimits {
  idleMs: number;
  cpuMs: number;
  wallMs: number;
}

export const HANG_LIMITS: HangLimits = {
  idleMs: countFromEnv('RELIABILITY_RUN_DEADLINE_MS', 60_000),
  // A run uses 1–3 s of CPU (a first sync of the 3 MB config included).
  cpuMs: 60_000,
  wallMs: 15 * 60_000,
};

const CLOCK_TICKS_PER_SECOND = 100;

/** CPU time (ms) of the whole process and whether any of its threads is runnable now; undefined once gone. */
async function cpuAndRunnable(pid: number): Promise<{ cpuMs: number; runnable: boolean } | undefined> {
  const stat = await readFile(`/proc/${pid}/stat`, 'utf8').catch(() => undefined);
  if (stat === undefined) return undefined;
  const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
  const ticks = Number(fields[11]) + Number(fields[12]);
  let runnable = false;
  for (const tid of await readdir(`/proc/${pid}/task`).catch(() => [] as string[])) {
    const task = await readFile(`/proc/${pid}/task/${tid}/stat`, 'utf8').catch(() => '');
    if (task.slice(task.lastIndexOf(')') + 2, task.lastIndexOf(')') + 3) === 'R') runnable = true;
  }
  return { cpuMs: (ticks * 1000) / CLOCK_TICKS_PER_SECOND, runnable };
}

export { reportOnSignalEnv };

/** What the kernel says each thread of `pid` is doing: state, CPU ticks, the kernel function it sleeps in. */
async function threadStates(pid: number): Promise<string> {
  const lines: string[] = [];
  const tasks = await readdir(`/proc/${pid}/task`).catch(() => [] as string[]);
  for (const tid of tasks) {
    const stat = await readFile(`/proc/${pid}/task/${tid}/stat`, 'utf8').catch(() => '');
    const comm = stat.slice(stat.indexOf('(') + 1, stat.lastIndexOf(')'));
    const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
    const wchan = await readFile(`/proc/${pid}/task/${tid}/wchan`, 'utf8').catch(() => '?');
    lines.push(`${tid} ${comm} ${fields[0]} utime=${fields[11]} stime=${fields[12]} wchan=${wchan}`);
  }
  return lines.join('; ');
}

/** The newest diagnostic report in `dir` written for `pid`, summarised; waits up to `waitMs` for it. */
async function diagnosticReport(dir: string, pid: number, waitMs: number): Promise<string> {
  const until = performance.now() + waitMs;
  while (performance.now() < until) {
    const names = (await readdir(dir).catch(() => [] as string[])).filter((n) => n.includes(`.${pid}.`));
    for (const name of names) {
      const text = await readFile(path.join(dir, name), 'utf8').catch(() => '');
      try {
        const report = JSON.parse(text) as {
          javascriptStack?: { message?: string; stack?: string[] };
          libuv?: { type: string; is_active: boolean; remoteEndpoint?: unknown; filename?: string }[];
        };
        const stack = report.javascriptStack?.stack?.slice(0, 25).join(' | ') ?? '';
        const handles = (report.libuv ?? [])
          .filter((h) => h.is_active)
          .map((h) => `${h.type}${h.remoteEndpoint ? ` ${JSON.stringify(h.remoteEndpoint)}` : ''}`)
          .join(', ');
        return `JS: ${report.javascriptStack?.message ?? ''} ${stack}; active handles: ${handles}`;
      } catch {
        // Still being written.
      }
    }
    await new Promise((resolve) => setTimeout(resolve, 100));
  }
  return 'no diagnostic report came';
}

/**
 * Collects a run's output and exit; when it is hung (see HangLimits) it is asked for a diagnostic report (with
 * `reportDir`) and its threads' states are read, then it is killed: a hung run says why and where it hung.
 */
export function watchRun(child: ChildProcess, limits: HangLimits, reportDir?: string): Promise<Exit> {
  let output = '';
  let hung: Promise<string> | undefined;
  const started = performance.now();
  let lastProgress = started;
  let lastCpuMs = 0;
  let lastPoll = started;
  let polling = false;
  const interval = Math.min(1_000, limits.idleMs / 4);
  const hang = (why: string) => {
    clearInterval(poll);
    hung = (async () => {
      const pid = child.pid ?? 0;
      const threads = await threadStates(pid);
      let report = '';
      if (reportDir !== undefined) {
        child.kill('SIGUSR2');
        report = await diagnosticReport(reportDir, pid, 5_000);
      }
      child.kill('SIGKILL');
      return `hung (${why}), killed\nthreads: ${threads}\n${report}`;
    })();
  };
  const poll = setInterval(() => {
    if (polling || hung !== undefined || child.pid === undefined) return;
    polling = true;
    void cpuAndRunnable(child.pid)
      .then((now) => {
        if (now === undefined || hung !== undefined) return;
        const at = performance.now();
        // A poll that came late means this process (and the mock service in it) was starved too: a run
        // waiting on the service meanwhile is not idle.
        const late = at - lastPoll > 3 * interval;
        lastPoll = at;
        if (now.cpuMs > lastCpuMs || now.runnable || late) lastProgress = at;
        lastCpuMs = now.cpuMs;
        if (now.cpuMs > limits.cpuMs) hang(`used ${Math.round(now.cpuMs)} ms of CPU`);
        else if (at - lastProgress > limits.idleMs)
          hang(`no CPU used and none waited for in ${Math.round(at - lastProgress)} ms`);
        else if (at - started > limits.wallMs) hang(`ran ${Math.round(at - started)} ms`);
      })
      .finally(() => {
        polling = false;
      });
  }, interval);
  child.stdout?.setEncoding('utf8').on('data', (chunk: string) => {
    output += chunk;
  });
  child.stderr?.setEncoding('utf8').on('data', (chunk: string) => {
    output += chunk;
  });
  return new Promise((resolve, reject) => {
    child.on('error', reject);
    child.on('close', (code, signal) => {
      clearInterval(poll);
      if (hung === undefined) {
        resolve({ code, signal, output });
        return;
      }
      void hung.then((why) => resolve({ code, signal, output: `${why}\n${output}` }));
    });
  });
}

function watch(child: ChildProcess, reportDir?: string): Promise<Exit> {
  return watchRun(child, HANG_LIMITS, reportDir);
}

/** RELIABILITY_UNTIL (an ISO date or epoch ms), the long runs' time budget; undefined when unset. */
export function untilFromEnv(): number | undefined {
  const value = process.env.RELIABILITY_UNTIL;
  if (value === undefined || value === '') return undefined;
  const at = /^\d+$/.test(value) ? Number(value) : Date.parse(value);
  if (!Number.isFinite(at))
    throw new RangeError(`RELIABILITY_UNTIL must be a date or epoch ms, got ${value}`);
  return at;
}

/** Calls `onEvent` for every entry created, renamed or removed in `dirs` (those that exist now). */
function watchDirs(dirs: readonly string[], onEvent: () => void): () => void {
  const watchers: FSWatcher[] = [];
  for (const dir of dirs) {
    try {
      const watcher = watchDir(dir, { persistent: false }, onEvent);
      watcher.on('error', () => undefined);
      watchers.push(watcher);
    } catch {
      // Not created yet (or pruned): its events are simply not counted.
    }
  }
  return () => {
    for (const watcher of watchers) watcher.close();
  };
}

/** Runs one lane of the loop on its own fleet; returns the figures and every violation seen. */
export async function runKillLane(
  fleet: Fleet,
  random: Random,
  options: KillLaneOptions,
): Promise<KillLaneFigures> {
  const figures: KillLaneFigures = {
    kills: 0,
    killsOnEvent: 0,
    killsInsidePublish: 0,
    completedRuns: 0,
    cutsAfterExit: 0,
    slowestRunMs: 0,
    stoppedByTime: false,
    violations: [],
  };
  const maxViolations = options.maxViolations ?? 3;
  const lane = await openLane(fleet, figures.violations, options.label, () => `kill ${figures.kills}`);
  const { fail } = lane;

  /** A run let finish: exit 0, converged world, no temp file. Returns its duration. */
  const finishRun = async (label: string): Promise<number> => {
    const started = performance.now();
    const exit = await watch(fleet.spawnOnce([], lane.runEnv), lane.reportDir);
    const elapsed = performance.now() - started;
    figures.completedRuns += 1;
    figures.slowestRunMs = Math.max(figures.slowestRunMs, elapsed);
    await lane.checkFinished(label, exit);
    if (options.powerCut !== undefined && options.cutAfterFinish === true) {
      // Right after a clean exit 0 everything the service was told must already be on the platter.
      await options.powerCut();
      figures.cutsAfterExit += 1;
      const afterCut = await fleet.checkAnyMoment();
      if (afterCut.length > 0)
        fail(`power cut right after ${label} (exit 0): ${describeViolations(afterCut)}`);
    }
    return elapsed;
  };

  fleet.deployAll(random);
  // The typical run length and event count set the kill window, so kills spread over the whole run.
  let typicalMs = await finishRun('first run');
  let typicalEvents = 8;
  let sinceFinish = 0;
  let finishAfter = 1 + randomInt(random, options.finishEvery);
  while (figures.kills < options.kills && figures.violations.length < maxViolations) {
    if (
      options.until !== undefined &&
      figures.kills >= (options.minKills ?? 0) &&
      Date.now() >= options.until
    ) {
      figures.stoppedByTime = true;
      break;
    }
    if (random() < 0.8) fleet.mutate(random);
    // Two kinds of moment: uniform in time (start-up, pull, plan...), or right after the n-th filesystem event
    // of the run, which lands kills inside publishes and between a publish and its record or report.
    const onEvent = random() < 0.6;
    // Below the typical count: a run with few changes makes fewer events, and a kill that comes too late is a wasted run.
    const killAtEvent = 1 + randomInt(random, Math.max(1, Math.round(typicalEvents * 0.8)));
    const delayMs = onEvent ? randomInt(random, 3) : random() * typicalMs * 0.95;
    let events = 0;
    let trigger: () => void = () => undefined;
    const triggered = new Promise<'kill'>((resolve) => {
      trigger = () => resolve('kill');
    });
    const child = fleet.spawnOnce([], lane.runEnv);
    const unwatch = watchDirs(fleet.writtenDirs(), () => {
      events += 1;
      if (onEvent && events === killAtEvent) setTimeout(trigger, delayMs);
    });
    const exited = watch(child, lane.reportDir);
    const timer = onEvent ? undefined : setTimeout(trigger, delayMs);
    const first = await Promise.race([exited.then(() => 'exited' as const), triggered]);
    clearTimeout(timer);
    const label = `kill #${figures.kills + 1} ${onEvent ? `after event ${killAtEvent} + ${delayMs} ms` : `at ${delayMs.toFixed(0)} ms`}`;
    if (first === 'exited') {
      unwatch();
      // Too late: the run finished first. It still had to converge.
      const exit = await exited;
      typicalEvents = Math.max(4, Math.round(typicalEvents * 0.7 + events * 0.3));
      figures.completedRuns += 1;
      await lane.checkFinished(`${label} (finished first)`, exit);
      continue;
    }
    child.kill('SIGKILL');
    const exit = await exited;
    unwatch();
    await options.powerCut?.();
    figures.kills += 1;
    if (options.label !== undefined && figures.kills % (options.progressEvery ?? 100) === 0) {
      process.stderr.write(
        `${options.label}: ${figures.kills}/${options.kills}, ${figures.violations.length} violations\n`,
      );
    }
    if (onEvent) figures.killsOnEvent += 1;
    lane.checkKey(label, exit);
    if ((await fleet.tempFiles()).length > 0) figures.killsInsidePublish += 1;
    const violations = await fleet.checkAnyMoment();
    if (violations.length > 0) fail(`${label}: ${describeViolations(violations)}`);
    sinceFinish += 1;
    if (sinceFinish >= finishAfter) {
      const elapsed = await finishRun(`run after ${label}`);
      typicalMs = typicalMs * 0.8 + elapsed * 0.2;
      sinceFinish = 0;
      finishAfter = 1 + randomInt(random, options.finishEvery);
    }
  }
  if (figures.violations.length < maxViolations) await finishRun('final run');
  return figures;
}
