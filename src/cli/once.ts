// What `--once` prints for its pass: the human summary, the dry-run plan, or one JSON object.
import type { PassResult } from '../reconcile/pass-runner.js';
import type { CommandIo } from './io.js';
import { describePlan, type ReadCurrent } from './plan-report.js';
import { renderHumanSummary, renderPlan, toJsonSummary } from './summary.js';

export interface OnceCommand {
  configPath?: string;
  dryRun: boolean;
  json: boolean;
}

/** `readCurrent` gives the bytes on disk now, for the dry run's diff summary. */
export async function printPassResult(
  result: PassResult,
  command: OnceCommand,
  io: { stdout: Pick<CommandIo['stdout'], 'write'> },
  readCurrent: ReadCurrent,
): Promise<void> {
  const plan = command.dryRun ? await describePlan(result.steps, readCurrent) : undefined;
  if (command.json) {
    io.stdout.write(`${JSON.stringify(toJsonSummary(result, plan))}\n`);
  } else if (plan !== undefined) {
    io.stdout.write(renderPlan(result, plan));
  } else {
    io.stdout.write(renderHumanSummary(result));
  }
}
