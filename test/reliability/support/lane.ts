// What the kill lane and the stop lane share: a lane's report directory and its runs' env, how a violation is
// recorded, the key's check of any output, and the checks of a run let finish (exit 0, the world converged).
import { mkdir } from 'node:fs/promises';
import path from 'node:path';
import { CANARY_KEY, type Fleet, type Violation } from './fleet.js';
import type { Exit } from './kill-loop.js';

/** The env of every run: SIGUSR2 makes Node write a diagnostic report (JS stack, handles) into `dir`. */
export function reportOnSignalEnv(dir: string): NodeJS.ProcessEnv {
  return { NODE_OPTIONS: `--report-on-signal --report-signal=SIGUSR2 --report-directory=${dir}` };
}

export function describeViolations(violations: readonly Violation[]): string {
  return violations.map((v) => `${v.path}: ${v.problem}`).join('; ');
}

export interface Lane {
  /** Where a hung run's diagnostic report goes (watchRun). */
  reportDir: string;
  /** The env of the lane's runs: SIGUSR2 fills `reportDir`. */
  runEnv: NodeJS.ProcessEnv;
  /** Records a violation, and says it on stderr at once when the lane is labelled. */
  fail(what: string): void;
  /** A violation when the API key appears in a run's output. */
  checkKey(label: string, exit: Exit): void;
  /** A run let finish: the key not in its output, exit 0, and every file converged. */
  checkFinished(label: string, exit: Exit): Promise<void>;
}

/**
 * Opens a lane on `fleet`: its report directory made, its violations pushed to `violations`. `where` names the
 * moment of a violation on stderr (`kill 77`): a long run that goes wrong says so while it still runs.
 */
export async function openLane(
  fleet: Fleet,
  violations: string[],
  label: string | undefined,
  where: () => string,
): Promise<Lane> {
  const reportDir = path.join(fleet.dir, 'reports');
  await mkdir(reportDir, { recursive: true });
  const fail = (what: string) => {
    violations.push(what);
    if (label !== undefined)
      process.stderr.write(`${label}: violation at ${where()}: ${what.slice(0, 4000)}\n`);
  };
  const checkKey = (runLabel: string, exit: Exit) => {
    if (exit.output.includes(CANARY_KEY)) fail(`${runLabel}: the API key appeared in the output`);
  };
  return {
    reportDir,
    runEnv: reportOnSignalEnv(reportDir),
    fail,
    checkKey,
    async checkFinished(runLabel, exit) {
      checkKey(runLabel, exit);
      if (exit.code !== 0)
        fail(`${runLabel}: exit ${String(exit.code)} instead of 0: ${exit.output.slice(-1500)}`);
      const unconverged = await fleet.checkConverged();
      if (unconverged.length > 0) fail(`${runLabel}: not converged: ${describeViolations(unconverged)}`);
    },
  };
}
