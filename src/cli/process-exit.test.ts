// endProcess: an exit that waits on pool work stuck in the kernel ends by the stop signal instead.
import { describe, expect, it } from 'vitest';
import { endProcess, POOL_DRAIN_MS, type ProcessEnd, signalOfExitCode } from './process-exit.js';

/** A process whose pool work ends after `busyMs` (never: Infinity), on a fake clock; `ended` is how it ended. */
function fakeProcess(busyMs: number) {
  let now = 0;
  const world = {
    ended: undefined as { code: number } | { signal: NodeJS.Signals } | undefined,
    end: {
      activeResources: () =>
        now < busyMs ? ['FSReqPromise', 'Timeout', 'PipeWrap'] : ['Timeout', 'PipeWrap'],
      exit: (code) => {
        world.ended = { code };
      },
      endBySignal: (signal) => {
        world.ended = { signal };
      },
      sleep: async (ms) => {
        now += ms;
      },
    } satisfies ProcessEnd,
  };
  return world;
}

describe('endProcess', () => {
  it('exits with the code when no pool work is in flight, or once it ends within the grace', async () => {
    for (const busyMs of [0, POOL_DRAIN_MS / 2]) {
      const world = fakeProcess(busyMs);
      await endProcess(143, world.end);
      expect(world.ended).toEqual({ code: 143 });
    }
  });

  it('ends by the signal the code stands for when pool work never ends (a hung mount)', async () => {
    for (const [code, signal] of [
      [143, 'SIGTERM'],
      [130, 'SIGINT'],
      [129, 'SIGHUP'],
      [1, 'SIGTERM'],
      [0, 'SIGTERM'],
    ] as const) {
      const world = fakeProcess(Number.POSITIVE_INFINITY);
      await endProcess(code, world.end);
      expect(world.ended, String(code)).toEqual({ signal });
    }
    // Never a signal that dumps core (134 would be SIGABRT).
    expect(signalOfExitCode(134)).toBe('SIGTERM');
  });
});
