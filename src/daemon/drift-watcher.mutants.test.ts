// The drift watcher's debounce where mutation testing found it unpinned: each window's sleep on the injected clock is
// ended by the next event, judgeNow and close (none left waiting), and a closed watcher starts none.
import * as nodeFs from 'node:fs/promises';
import os from 'node:os';
import { afterEach, describe, expect, it } from 'vitest';
import { watchedRoot } from '../../test/helpers/drift-watched.js';
import type { Clock } from '../lib/clock.js';
import { silentLogger } from '../lib/logger.js';
import { DriftWatcher } from './drift-watcher.js';
import { SingleFlight } from './single-flight.js';

const WINDOW_MS = 60_000;
const cleanups: Array<() => Promise<void>> = [];

afterEach(async () => {
  for (const cleanup of cleanups.splice(0).reverse()) await cleanup();
});

/** A clock whose time never moves: its sleeps end only by their signal; `waiting` counts those not ended. */
function stoppedClock(): Pick<Clock, 'sleep'> & { waiting(): number } {
  let waiting = 0;
  return {
    sleep: (_ms, signal) =>
      new Promise<void>((_resolve, reject) => {
        if (signal?.aborted) {
          reject(signal.reason);
          return;
        }
        waiting += 1;
        signal?.addEventListener(
          'abort',
          () => {
            waiting -= 1;
            reject(signal.reason);
          },
          { once: true },
        );
      }),
    waiting: () => waiting,
  };
}

/** A root holding a.json, managed and changed by hand, watched under `report` on a clock that never moves. */
async function watched() {
  const clock = stoppedClock();
  const root = await watchedRoot({
    prefix: 'config-agent-debounce-mutants-',
    names: ['a.json'],
    clock,
    debounceMs: WINDOW_MS,
  });
  cleanups.push(root.close);
  return { watcher: root.watcher, clock, drifts: root.drifts, notice: () => root.notice('a.json') };
}

describe("the debounce's sleeps", () => {
  it('a burst leaves one window waiting; judgeNow ends it', async () => {
    const { watcher, clock, drifts, notice } = await watched();
    for (let i = 0; i < 5; i += 1) notice();
    expect(clock.waiting()).toBe(1);
    await watcher.judgeNow();
    expect(clock.waiting()).toBe(0);
    expect(drifts).toEqual([['a.json']]);
  });

  it('close ends the window, and a change told after it starts none', async () => {
    const { watcher, clock, drifts, notice } = await watched();
    notice();
    expect(clock.waiting()).toBe(1);
    await watcher.close();
    expect(clock.waiting()).toBe(0);
    notice();
    expect(clock.waiting()).toBe(0);
    expect(drifts).toEqual([]);
  });

  it('judgeNow with nothing noticed, and close before any start, end quietly', async () => {
    const { watcher, clock, drifts } = await watched();
    await watcher.judgeNow();
    expect(drifts).toEqual([]);
    expect(clock.waiting()).toBe(0);
    const idle = new DriftWatcher({
      fs: nodeFs,
      rootDir: os.tmpdir(),
      policy: 'report',
      logger: silentLogger(),
      managedFiles: () => new Map(),
      passes: new SingleFlight(async () => undefined),
      onDrift: () => undefined,
      clock,
    });
    await expect(idle.close()).resolves.toBeUndefined();
  });
});
