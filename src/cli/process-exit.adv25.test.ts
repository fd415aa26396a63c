// adv25: a name lookup still in flight at a command's end (a service whose DNS never answered) no longer turns its exit code into SIGTERM.
import { describe, expect, it } from 'vitest';
import { endProcess, LOOKUP_DRAIN_MS, POOL_DRAIN_MS, type ProcessEnd } from './process-exit.js';

/**
 * A process on a fake clock whose pool holds a getaddrinfo until `lookupMs` and a call into a mount until `fsMs`
 * (never: Infinity); `ended` is how it ended and `at` when.
 */
function fakeProcess(lookupMs: number, fsMs = 0) {
  let now = 0;
  const world = {
    ended: undefined as { code: number } | { signal: NodeJS.Signals } | undefined,
    at: -1,
    end: {
      activeResources: () => [
        ...(now < lookupMs ? ['GetAddrInfoReqWrap'] : []),
        ...(now < fsMs ? ['FSReqPromise'] : []),
        'TCPSocketWrap',
        'Timeout',
      ],
      exit: (code) => {
        world.ended = { code };
        world.at = now;
      },
      endBySignal: (signal) => {
        world.ended = { signal };
        world.at = now;
      },
      sleep: async (ms) => {
        now += ms;
      },
    } satisfies ProcessEnd,
  };
  return world;
}

describe('endProcess with a name lookup in flight', () => {
  it("a command's exit code waits out the lookup (the resolver's timeouts), exit 3 and not SIGTERM", async () => {
    // Seen on the built --once with a resolver that never answers: "The service could not be used", status 143.
    for (const code of [3, 1, 0, 78]) {
      const world = fakeProcess(10_000);
      await endProcess(code, world.end, { lookupDrainMs: LOOKUP_DRAIN_MS });
      expect(world.ended, String(code)).toEqual({ code });
      expect(world.at).toBeGreaterThanOrEqual(10_000);
    }
  });

  it('a lookup that outlasts the drain still ends the process, by the signal', async () => {
    const world = fakeProcess(Number.POSITIVE_INFINITY);
    await endProcess(3, world.end, { lookupDrainMs: LOOKUP_DRAIN_MS });
    expect(world.ended).toEqual({ signal: 'SIGTERM' });
    expect(world.at).toBeLessThanOrEqual(LOOKUP_DRAIN_MS + 100);
  });

  it('a call into a hung mount beside the lookup is still given POOL_DRAIN_MS only', async () => {
    const world = fakeProcess(10_000, Number.POSITIVE_INFINITY);
    await endProcess(3, world.end, { lookupDrainMs: LOOKUP_DRAIN_MS });
    expect(world.ended).toEqual({ signal: 'SIGTERM' });
    expect(world.at).toBeLessThan(2 * POOL_DRAIN_MS);
  });

  it("a stop's code (Ctrl+C, SIGTERM) and the daemon (no lookupDrainMs) do not wait on the lookup", async () => {
    for (const [code, options, signal] of [
      [130, { lookupDrainMs: LOOKUP_DRAIN_MS }, 'SIGINT'],
      [143, { lookupDrainMs: LOOKUP_DRAIN_MS }, 'SIGTERM'],
      [0, {}, 'SIGTERM'],
    ] as const) {
      const world = fakeProcess(10_000);
      await endProcess(code, world.end, options);
      expect(world.ended, String(code)).toEqual({ signal });
      expect(world.at).toBeLessThan(2 * POOL_DRAIN_MS);
    }
  });
});
