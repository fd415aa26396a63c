// The clocks the mount-gate tests drive by hand: sleeps that end when the test says, or when its stepped time comes.

/** A few turns of the event loop: what a late answer needs to reach the gate (microtasks and setImmediate only). */
export async function settleTurns(turns = 5): Promise<void> {
  for (let turn = 0; turn < turns; turn += 1) await new Promise((resolve) => setImmediate(resolve));
}

/** Sleeps that end only when the test says: `expire()` ends every sleep begun so far (the bound has passed). */
export function controlledClock() {
  const pending: (() => void)[] = [];
  return {
    clock: {
      sleep: (_ms: number, signal?: AbortSignal) =>
        new Promise<void>((resolve, reject) => {
          pending.push(resolve);
          signal?.addEventListener('abort', () => reject(signal.reason), { once: true });
        }),
    },
    expire: () => {
      for (const end of pending.splice(0)) end();
    },
  };
}

/** A monotonic clock the test moves (`advance`): each sleep ends once its time has come, or on its signal. */
export function steppedClock() {
  let now = 0;
  const sleeps = new Set<{ at: number; end: () => void }>();
  return {
    clock: {
      monotonic: () => now,
      sleep: (ms: number, signal?: AbortSignal) =>
        new Promise<void>((resolve, reject) => {
          const entry = { at: now + ms, end: resolve };
          sleeps.add(entry);
          signal?.addEventListener(
            'abort',
            () => {
              sleeps.delete(entry);
              reject(signal.reason);
            },
            { once: true },
          );
        }),
    },
    advance: async (ms: number) => {
      now += ms;
      for (const entry of [...sleeps]) {
        if (entry.at > now) continue;
        sleeps.delete(entry);
        entry.end();
      }
      await settleTurns();
    },
  };
}
