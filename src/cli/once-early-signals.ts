// `--once`'s signals outside its pass: before its own listeners are in and after they are gone, an exit code, not Node's death by the signal.
import type { EventEmitter } from 'node:events';
import { ExitCode } from './exit-codes.js';
import { STRAY_SIGNALS } from './stray-signals.js';

const STOP_CODES = [
  ['SIGHUP', ExitCode.HungUp],
  ['SIGINT', ExitCode.Interrupted],
  ['SIGTERM', ExitCode.Terminated],
] as const;

/**
 * Listens, from the process's first line to its end, to the signals `--once` stops on and the stray ones it
 * ignores. Its pass listens to them itself (`onceInterruption`, compose.ts), but only from once its modules are
 * loaded (seconds on a busy device) until the pass returns; before and after, Node's default ended the run by the
 * signal (no exit code: a caller saw no 143) and a stray `kill -USR2` killed a run that had converged (adv33).
 * A stop signal with no other listener (the pass's is not in) exits with its code: nothing was begun yet, or all
 * that landed is recorded. The stray ones are ignored throughout.
 */
export function holdOnceSignals(events: EventEmitter, exit: (code: number) => void): void {
  for (const signal of STRAY_SIGNALS) events.on(signal, () => undefined);
  let exiting = false;
  for (const [signal, code] of STOP_CODES) {
    events.on(signal, () => {
      // The pass's own listener is in: it stops the pass (and a second signal exits at once).
      if (events.listenerCount(signal) > 1 || exiting) return;
      exiting = true;
      exit(code);
    });
  }
}
