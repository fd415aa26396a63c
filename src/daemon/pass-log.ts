// The level of the daemon's summary of a pass: info when the pass did something or the agent's state changed, debug when idle.

import type { PassResult } from '../reconcile/pass-runner.js';

/** An idle agent still logs one pass at info this often, so the journal shows it alive (and how many went quiet). */
export const PASS_HEARTBEAT_MS = 60 * 60 * 1000;

export interface PassLogLevel {
  level: 'info' | 'debug' | 'warn';
  /** Passes summarised at debug since the last one at info or warn (given on info lines, when any). */
  quietPasses: number;
}

/**
 * Decides, pass by pass, whether the summary is worth the journal. A poll every 30 s that found nothing to do
 * logged `pass finished` at info: ~2,900 lines a day saying nothing. Now at info: the first pass of the process
 * and the first after a reload; a pass that wrote, removed, archived, reported or failed something, delivered or
 * had reports rejected, met an error, swept temp files; one whose reachability, convergence or count of pending
 * reports differs from the pass before (a recovery, a backlog drained); and an idle one when the last at info is
 * `PASS_HEARTBEAT_MS` old. An unreachable service stays a warning every time (its passes back off). The rest:
 * debug.
 */
export class PassLogPolicy {
  #lastLoudAt: number | undefined;
  #previous: { reachable: boolean; converged: boolean; pending: number } | undefined;
  #quiet = 0;

  /** The configuration changed: the next pass is told at info. */
  reloaded(): void {
    this.#previous = undefined;
  }

  /** The level for `result`'s summary; `now`: the monotonic clock. */
  next(result: PassResult, now: number): PassLogLevel {
    const previous = this.#previous;
    const pending = result.reports.pending;
    this.#previous = { reachable: result.reachable, converged: result.converged, pending };
    const loud =
      !result.reachable ||
      previous === undefined ||
      previous.reachable !== result.reachable ||
      previous.converged !== result.converged ||
      previous.pending !== pending ||
      eventful(result) ||
      this.#lastLoudAt === undefined ||
      now - this.#lastLoudAt >= PASS_HEARTBEAT_MS;
    if (!loud) {
      this.#quiet += 1;
      return { level: 'debug', quietPasses: this.#quiet };
    }
    const quietPasses = this.#quiet;
    this.#quiet = 0;
    this.#lastLoudAt = now;
    return { level: result.reachable ? 'info' : 'warn', quietPasses };
  }
}

function eventful(result: PassResult): boolean {
  return (
    result.error !== undefined ||
    result.persistError !== undefined ||
    result.reports.deliveryError !== undefined ||
    result.reports.delivered > 0 ||
    result.reports.rejected > 0 ||
    result.sweptTempFiles.length > 0 ||
    result.outcomes.some((outcome) => outcome.action !== 'unchanged')
  );
}
