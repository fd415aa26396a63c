// The kill -9 loop: an agent run killed at a random moment, the world checked, again and again; every few kills
// a run is let finish, and it must converge with no temp file left.
import type { ChildProcess } from 'node:child_process';
import { type FSWatcher, watch as watchDir } from 'node:fs';
import { CANARY_KEY, type Fleet, type Violation } from './fleet.js';
import { type Random, randomInt } from './random.js';

export interface KillLaneFigures {
  kills: number;
  /** Kills timed by a filesystem event of the run (the n-th create/rename/unlink in a watched dir). */
  killsOnEvent: number;
  /** Kills after which a temp file was found: the kill landed inside a publish. */
  killsInsidePublish: number;
  /** Runs that ran to their end (convergence checks, and runs the kill came too late for). */
  completedRuns: number;
  violations: string[];
}

export interface KillLaneOptions {
  kills: number;
  /** A run is let finish after this many kills in a row (at most; the exact count is random). */
  finishEvery: number;
  /** Stops after this many violations: one is a failure, a few give the picture. */
  maxViolations?: number;
}

interface Exit {
  code: number | null;
  output: string;
}

function watch(child: ChildProcess): Promise<Exit> {
  let output = '';
  child.stdout?.setEncoding('utf8').on('data', (chunk: string) => {
    output += chunk;
  });
  child.stderr?.setEncoding('utf8').on('data', (chunk: string) => {
    output += chunk;
  });
  return new Promise((resolve, reject) => {
    child.on('error', reject);
    child.on('close', (code) => resolve({ code, output }));
  });
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

function describe(violations: readonly Violation[]): string {
  return violations.map((v) => `${v.path}: ${v.problem}`).join('; ');
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
    violations: [],
  };
  const maxViolations = options.maxViolations ?? 3;
  const fail = (what: string) => figures.violations.push(what);

  /** A run let finish: exit 0, converged world, no temp file. Returns its duration. */
  const finishRun = async (label: string): Promise<number> => {
    const started = performance.now();
    const exit = await watch(fleet.spawnOnce());
    const elapsed = performance.now() - started;
    figures.completedRuns += 1;
    if (exit.output.includes(CANARY_KEY)) fail(`${label}: the API key appeared in the output`);
    if (exit.code !== 0)
      fail(`${label}: exit ${String(exit.code)} instead of 0: ${exit.output.slice(-1500)}`);
    const violations = await fleet.checkConverged();
    if (violations.length > 0) fail(`${label}: not converged: ${describe(violations)}`);
    return elapsed;
  };

  fleet.deployAll(random);
  // The typical run length and event count set the kill window, so kills spread over the whole run.
  let typicalMs = await finishRun('first run');
  let typicalEvents = 8;
  let sinceFinish = 0;
  let finishAfter = 1 + randomInt(random, options.finishEvery);
  while (figures.kills < options.kills && figures.violations.length < maxViolations) {
    if (random() < 0.8) fleet.mutate(random);
    // Two kinds of moment: uniform in time (start-up, pull, plan...), or right after the n-th filesystem event
    // of the run, which lands kills inside publishes and between a publish and its record or report.
    const onEvent = random() < 0.6;
    const killAtEvent = 1 + randomInt(random, typicalEvents);
    const delayMs = onEvent ? randomInt(random, 3) : random() * typicalMs * 0.95;
    let events = 0;
    let trigger: () => void = () => undefined;
    const triggered = new Promise<'kill'>((resolve) => {
      trigger = () => resolve('kill');
    });
    const child = fleet.spawnOnce();
    const unwatch = watchDirs(fleet.writtenDirs(), () => {
      events += 1;
      if (onEvent && events === killAtEvent) setTimeout(trigger, delayMs);
    });
    const exited = watch(child);
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
      if (exit.output.includes(CANARY_KEY)) fail(`${label}: the API key appeared in the output`);
      if (exit.code !== 0)
        fail(`${label} (finished first): exit ${String(exit.code)}: ${exit.output.slice(-1500)}`);
      const violations = await fleet.checkConverged();
      if (violations.length > 0) fail(`${label} (finished first): ${describe(violations)}`);
      continue;
    }
    child.kill('SIGKILL');
    const exit = await exited;
    unwatch();
    figures.kills += 1;
    if (onEvent) figures.killsOnEvent += 1;
    if (exit.output.includes(CANARY_KEY)) fail(`${label}: the API key appeared in the output`);
    if ((await fleet.tempFiles()).length > 0) figures.killsInsidePublish += 1;
    const violations = await fleet.checkAnyMoment();
    if (violations.length > 0) fail(`${label}: ${describe(violations)}`);
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
