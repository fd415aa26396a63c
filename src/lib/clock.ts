// Time, as the rest of the code sees it: injected so tests can use fake timers.
export interface Clock {
  /** Wall-clock time in epoch milliseconds: for timestamps shown to people and the server. */
  now(): number;
  /** Monotonic milliseconds: for every delay and deadline, so a clock jump neither stalls nor storms. */
  monotonic(): number;
  /** Resolves after `ms`, or rejects with the signal's reason when it aborts first. */
  sleep(ms: number, signal?: AbortSignal): Promise<void>;
  /**
   * Runs `run` in a later turn of the event loop (setImmediate: after the I/O already due), for work spread over
   * turns. Optional: a clock without it (most fakes) has the event loop's own (`laterTurn`).
   */
  defer?(run: () => void): void;
}

/** The event loop's next turn: systemClock's `defer`. */
function nextImmediate(run: () => void): void {
  setImmediate(run);
}

/** `clock`'s later turn (`Clock.defer`), else the event loop's own. */
export function laterTurn(clock: Pick<Clock, 'defer'>): (run: () => void) => void {
  const defer = clock.defer;
  return defer === undefined ? nextImmediate : (run) => defer.call(clock, run);
}

/** The wall clock alone: what a timestamp shown to people needs. */
export type WallClock = Pick<Clock, 'now'>;

/** setTimeout's limit: a longer delay fires after 1 ms instead (Node's TimeoutOverflowWarning). */
export const MAX_TIMER_MS = 2 ** 31 - 1;

/** A timer of `ms` (clamped to 0), longer ones chained at MAX_TIMER_MS: `done` runs once it has all passed. */
function longTimer(ms: number, done: () => void): { cancel(): void } {
  let remaining = Number.isNaN(ms) ? 0 : Math.max(0, ms);
  let timer: ReturnType<typeof setTimeout>;
  const arm = () => {
    const step = Math.min(remaining, MAX_TIMER_MS);
    remaining -= step;
    timer = setTimeout(() => (remaining > 0 ? arm() : done()), step);
  };
  arm();
  return { cancel: () => clearTimeout(timer) };
}

export const systemClock: Clock = {
  defer: nextImmediate,
  now: () => Date.now(),
  monotonic: () => performance.now(),
  sleep: (ms, signal) =>
    new Promise<void>((resolve, reject) => {
      if (signal?.aborted) {
        reject(signal.reason);
        return;
      }
      const onAbort = () => {
        timer.cancel();
        reject(signal?.reason);
      };
      const timer = longTimer(ms, () => {
        signal?.removeEventListener('abort', onAbort);
        resolve();
      });
      signal?.addEventListener('abort', onAbort, { once: true });
    }),
};
