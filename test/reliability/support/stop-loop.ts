// The daemon's stop under kill -9: SIGTERM at a random moment of its passes, then SIGKILL at a random moment of the
// stop or none; some stops with a pass hung on a FUSE mount nobody serves, so they run past the stop deadline and
// the process ends by SIGTERM with a pool thread still waiting (src/cli/process-exit.ts).
import { type ChildProcess, spawnSync } from 'node:child_process';
import { watch as watchDir } from 'node:fs';
import { mkdir, readdir, readFile } from 'node:fs/promises';
import path from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { POOL_DRAIN_MS } from '../../../src/cli/process-exit.js';
import { waitFor } from '../../helpers/wait-for.js';
import type { Fleet } from './fleet.js';
import { type Exit, HANG_LIMITS, watchRun } from './kill-loop.js';
import { describeViolations, openLane } from './lane.js';
import { type Random, randomInt } from './random.js';

/**
 * A stop gives the pass 7 s (STOP_BUDGET_MS, src/daemon/agent.ts), then flushes the state as it is and exits 0, which
 * endProcess turns into a SIGTERM after 1 s more of a pool thread hung (POOL_DRAIN_MS); the process's own 10 s
 * deadline (STOP_DEADLINE_MS, src/cli/compose.ts) ends a stop whose flush hangs too ("shutdown took too long"). A
 * call held by the mount gate (the hung mount below) fails at the stop itself (stop21), so a hung stop now usually
 * ends about 1 s after its SIGTERM, by SIGTERM; kills past the budget still strike stops whose pass did not end.
 */
const PASS_STOP_BUDGET_MS = 7_000;
const STOP_DEADLINE_MS = 10_000;
/** A stop not over this long after its SIGTERM is wedged (the deadline, the pool drain, a busy machine). */
const WEDGED_AFTER_MS = 60_000;
/** Under rootDir, not a managed path: the hung mount goes here for a hung stop, with one instance below it. */
const HUNG_DIR = 'mnt/hung';
const HUNG_FILE = `${HUNG_DIR}/stuck.json`;

export interface StopLaneOptions {
  stops: number;
  /** A run of `--once` is let finish (and must converge) after this many stops in a row, at most. */
  finishEvery: number;
  /** Mounts a FUSE filesystem nobody serves at a directory (test/helpers/hung-fuse.ts); none: no hung stops. */
  hungMount?: (mountPoint: string) => Promise<ChildProcess>;
  /** The share of stops made with a pass hung on that mount. */
  hungShare: number;
  label?: string;
  until?: number;
  /** Stops the budget cannot cut: `until` ends the lane only after this many (default 0). */
  minStops?: number;
  maxViolations?: number;
}

export interface StopLaneFigures {
  stops: number;
  /** Stops a SIGKILL cut short, at a random moment after the SIGTERM. */
  killedDuringStop: number;
  /** Stops that ended by themselves with exit 0. */
  cleanStops: number;
  /** Stops made while a thread of the daemon waited on the hung mount. */
  hungStops: number;
  /** Of those, SIGKILLs after the pass's stop budget ran out (the flush, the pool drain, the SIGTERM). */
  killedPastBudget: number;
  /** Hung stops that ended by themselves: past the pass's stop budget, by SIGTERM with a pool thread hung. */
  endedBySigterm: number;
  /** Of those, the ones that ran out the process's 10 s deadline too ("shutdown took too long"). */
  endedPastDeadline: number;
  /** How long each hung stop left alone took, SIGTERM to its end (ms). */
  hungStopMs: number[];
  /** SIGTERMs that came before the daemon's listener was in (nothing logged yet): ended by the default action. */
  beforeHandlers: number;
  completedRuns: number;
  stoppedByTime: boolean;
  violations: string[];
}

/** Whether a thread of `pid` waits for the FUSE daemon that never answers. */
async function waitsOnFuse(pid: number): Promise<boolean> {
  for (const task of await readdir(`/proc/${pid}/task`).catch(() => [] as string[])) {
    const wchan = await readFile(`/proc/${pid}/task/${task}/wchan`, 'utf8').catch(() => '');
    if (wchan.startsWith('fuse_') || wchan.startsWith('request_wait')) return true;
  }
  return false;
}

/**
 * When to SIGKILL after the SIGTERM: within the typical stop; for a hung stop, uniformly over the 12.5 s it can
 * last, or (half of them) from just before the pass's stop budget runs out to past the pool drain's second: the
 * flush, the exit and the SIGTERM, which a uniform moment seldom hits.
 */
function killMoment(random: Random, hung: boolean, typicalStopMs: number): number {
  if (!hung) return random() * typicalStopMs;
  if (random() < 0.5) return random() * (STOP_DEADLINE_MS + POOL_DRAIN_MS + 1_500);
  return PASS_STOP_BUDGET_MS - 200 + random() * (POOL_DRAIN_MS + 1_000);
}

/** Runs stops of the daemon on `fleet` (its config polls every second); returns the figures and violations. */
export async function runStopLane(
  fleet: Fleet,
  random: Random,
  options: StopLaneOptions,
): Promise<StopLaneFigures> {
  const figures: StopLaneFigures = {
    stops: 0,
    killedDuringStop: 0,
    cleanStops: 0,
    hungStops: 0,
    killedPastBudget: 0,
    endedBySigterm: 0,
    endedPastDeadline: 0,
    hungStopMs: [],
    beforeHandlers: 0,
    completedRuns: 0,
    stoppedByTime: false,
    violations: [],
  };
  const maxViolations = options.maxViolations ?? 3;
  const lane = await openLane(fleet, figures.violations, options.label, () => `stop ${figures.stops}`);
  const { fail, reportDir, runEnv } = lane;
  const hungDir = path.join(fleet.rootDir, HUNG_DIR);
  const finishRun = async (label: string): Promise<number> => {
    const started = performance.now();
    const exit = await watchRun(fleet.spawnOnce([], runEnv), HANG_LIMITS, reportDir);
    figures.completedRuns += 1;
    await lane.checkFinished(label, exit);
    return performance.now() - started;
  };

  fleet.deployAll(random);
  const typicalMs = await finishRun('first run');
  let typicalStopMs = 300;
  let sinceFinish = 0;
  let finishAfter = 1 + randomInt(random, options.finishEvery);
  while (figures.stops < options.stops && figures.violations.length < maxViolations) {
    if (
      options.until !== undefined &&
      figures.stops >= (options.minStops ?? 0) &&
      Date.now() >= options.until
    ) {
      figures.stoppedByTime = true;
      break;
    }
    if (random() < 0.8) fleet.mutate(random);
    // The first stop hangs and ends by itself, so even a short run takes the exit path past the deadline.
    const firstHung = options.hungMount !== undefined && figures.stops === 0;
    const hung = firstHung || (options.hungMount !== undefined && random() < options.hungShare);
    let mount: ChildProcess | undefined;
    let stuck: string | undefined;
    if (hung && options.hungMount !== undefined) {
      await mkdir(hungDir, { recursive: true });
      mount = await options.hungMount(hungDir);
      stuck = fleet.deployVersion(HUNG_FILE, random);
    }
    const child = fleet.spawnDaemon(runEnv);
    const pid = child.pid ?? 0;
    let ended = false;
    const exited = watchRun(child, HANG_LIMITS, reportDir).finally(() => {
      ended = true;
    });
    // The moment of the SIGTERM: with the pass hung on the mount; or after the n-th filesystem event of the
    // daemon's first pass (inside publishes, between a publish and its report); or uniformly over a run's length.
    let moment: string;
    if (hung) {
      const reached = await waitFor(async () => ended || (await waitsOnFuse(pid)), 30_000, {
        what: 'the daemon waiting on the hung mount',
        intervalMs: 20,
      }).catch(() => false);
      if (!ended && reached === true) figures.hungStops += 1;
      else if (!ended) fail(`stop ${figures.stops + 1}: the daemon never reached the hung mount in 30 s`);
      const delay = random() * 500;
      await sleep(delay);
      moment = `${delay.toFixed(0)} ms after it hung on the mount`;
    } else if (random() < 0.6) {
      const at = 1 + randomInt(random, 12);
      let events = 0;
      let trigger: () => void = () => undefined;
      const triggered = new Promise<void>((resolve) => {
        trigger = resolve;
      });
      const watchers = fleet.writtenDirs().flatMap((dir) => {
        try {
          const watcher = watchDir(dir, { persistent: false }, () => {
            events += 1;
            if (events === at) trigger();
          });
          watcher.on('error', () => undefined);
          return [watcher];
        } catch {
          return [];
        }
      });
      // A daemon with nothing to write makes few events: after two runs' length it is stopped idle.
      await Promise.race([triggered, exited, sleep(typicalMs * 2)]);
      for (const watcher of watchers) watcher.close();
      moment = events >= at ? `after filesystem event ${at}` : 'idle between passes';
    } else {
      const delay = random() * typicalMs * 1.5;
      await Promise.race([exited, sleep(delay)]);
      moment = `${delay.toFixed(0)} ms after its start`;
    }
    const label = `stop #${figures.stops + 1} ${hung ? '(pass hung on a mount) ' : ''}${moment}`;
    if (ended) {
      const early = await exited;
      fail(
        `${label}: the daemon ended before its SIGTERM: ${String(early.code ?? early.signal)}: ${early.output.slice(-1500)}`,
      );
    }
    const termAt = performance.now();
    child.kill('SIGTERM');
    figures.stops += 1;
    // A SIGKILL at a random moment of the stop (a hung one: its deadline, the pool drain, the SIGTERM it ends by).
    const killAfter = !firstHung && random() < 0.65 ? killMoment(random, hung, typicalStopMs) : undefined;
    let killed = false;
    if (killAfter !== undefined) {
      await Promise.race([exited, sleep(killAfter)]);
      if (!ended) {
        child.kill('SIGKILL');
        killed = true;
        figures.killedDuringStop += 1;
        if (hung && killAfter > PASS_STOP_BUDGET_MS) figures.killedPastBudget += 1;
      }
    }
    const exit: Exit = await exited;
    const stopMs = performance.now() - termAt;
    if (mount !== undefined) {
      mount.kill('SIGKILL');
      await new Promise((resolve) =>
        mount.exitCode === null && mount.signalCode === null
          ? mount.once('exit', resolve)
          : resolve(undefined),
      );
      spawnSync('umount', ['-l', hungDir]);
    }
    if (stuck !== undefined) fleet.retire(stuck);
    const how = killed
      ? `SIGKILL ${killAfter?.toFixed(0)} ms after the SIGTERM`
      : `ended by itself after ${stopMs.toFixed(0)} ms`;
    lane.checkKey(label, exit);
    if (exit.output.startsWith('hung (')) fail(`${label}: wedged in its stop: ${exit.output.slice(0, 3000)}`);
    else if (stopMs > WEDGED_AFTER_MS) fail(`${label}: its stop took ${stopMs.toFixed(0)} ms (${how})`);
    else if (!killed) {
      if (hung && exit.signal === 'SIGTERM') {
        figures.endedBySigterm += 1;
        figures.hungStopMs.push(Math.round(stopMs));
        if (/shutdown took too long|has not finished after/.test(exit.output)) figures.endedPastDeadline += 1;
      } else if (!hung && exit.code === 0) {
        figures.cleanStops += 1;
        typicalStopMs = typicalStopMs * 0.8 + stopMs * 0.2;
      } else if (!hung && exit.code === 1 && exit.output.includes('shutdown took too long')) {
        // A busy machine can take the whole deadline: the state as last flushed is all a later run needs.
      } else if (exit.signal === 'SIGTERM' && !exit.output.includes('"level"')) {
        // Before runAgent's listener is in (its modules still loading on a busy machine), SIGTERM's default
        // action ends the process: nothing is read or written yet, as for a kill -9 then.
        figures.beforeHandlers += 1;
      } else {
        fail(
          `${label}: ${how} with ${exit.signal ?? `exit ${String(exit.code)}`}, expected ${hung ? 'SIGTERM' : 'exit 0'}: ${exit.output.slice(-1500)}`,
        );
      }
    }
    const violations = await fleet.checkAnyMoment();
    if (violations.length > 0) fail(`${label}, ${how}: ${describeViolations(violations)}`);
    sinceFinish += 1;
    if (sinceFinish >= finishAfter) {
      await finishRun(`run after ${label}`);
      sinceFinish = 0;
      finishAfter = 1 + randomInt(random, options.finishEvery);
    }
  }
  if (figures.violations.length < maxViolations) await finishRun('final run');
  return figures;
}
