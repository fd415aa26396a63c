// endProcess: an exit that waits on pool work stuck in the kernel ends by the stop signal instead.
import { describe, expect, it } from 'vitest';
import { endProcess, POOL_DRAIN_MS, type ProcessEnd, signalOfExitCode } from './process-exit.js';

/**
 * A process whose pool work ends after `busyMs` (never: Infinity), or after `busyTurns` turns of its loop, on a fake
 * clock; `ended` is how it ended, `clock.now` when.
 */
function fakeProcess(busyMs: number, busyTurns = Number.POSITIVE_INFINITY) {
  let turns = 0;
  const clock = { now: 0 };
  const world = {
    clock,
    ended: undefined as { code: number } | { signal: NodeJS.Signals } | undefined,
    end: {
      activeResources: () =>
        clock.now < busyMs && turns < busyTurns
          ? ['FSReqPromise', 'Timeout', 'PipeWrap']
          : ['Timeout', 'PipeWrap'],
      exit: (code) => {
        world.ended = { code };
      },
      endBySignal: (signal) => {
        world.ended = { signal };
      },
      sleep: async (ms) => {
        clock.now += ms;
        turns += 1;
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

  it('exits at once when the pool work listed is the request whose callback is still returning', async () => {
    // The last awaited fs call before the exit is listed until one turn of the loop has passed.
    const world = fakeProcess(Number.POSITIVE_INFINITY, 1);
    await endProcess(0, world.end);
    expect(world.ended).toEqual({ code: 0 });
    expect(world.clock.now).toBe(0);
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
