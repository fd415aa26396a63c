// The drift watcher's debounce runs on the injected clock: a change is judged once the window passed on it, a change
// within the window starts it again, and close() or judgeNow() ends it; no wall-clock window anywhere.
import * as nodeFs from 'node:fs/promises';
import os from 'node:os';
import { afterEach, describe, expect, it } from 'vitest';
import { watchedRoot } from '../../test/helpers/drift-watched.js';
import type { Clock } from '../lib/clock.js';

/** Longer than any test here could wait on the wall clock: only the fake clock can end it. */
const WINDOW_MS = 60_000;
const cleanups: Array<() => Promise<void>> = [];

afterEach(async () => {
  for (const cleanup of cleanups.splice(0).reverse()) await cleanup();
});

/** Time moves only when told; a sleep ends once its deadline is passed, or rejects when its signal aborts. */
function manualClock(): Pick<Clock, 'sleep'> & { advance(ms: number): void } {
  let now = 0;
  const sleepers = new Set<{ until: number; resolve: () => void }>();
  return {
    sleep: (ms, signal) =>
      new Promise<void>((resolve, reject) => {
        const sleeper = { until: now + ms, resolve };
        if (signal?.aborted) {
          reject(signal.reason);
          return;
        }
        sleepers.add(sleeper);
        signal?.addEventListener(
          'abort',
          () => {
            sleepers.delete(sleeper);
            reject(signal.reason);
          },
          { once: true },
        );
      }),
    advance(ms) {
      now += ms;
      for (const sleeper of [...sleepers]) {
        if (sleeper.until > now) continue;
        sleepers.delete(sleeper);
        sleeper.resolve();
      }
    },
  };
}

/** Lets what is under way finish (turns of the event loop and round trips of the thread pool); asserts nothing. */
async function settle(): Promise<void> {
  for (let turn = 0; turn < 20; turn += 1) {
    await new Promise((resolve) => setImmediate(resolve));
    await nodeFs.stat(os.tmpdir());
  }
}

/** Settles until `done` holds; bounded, and it asserts nothing about how long that took. */
async function eventually(done: () => boolean, what: string): Promise<void> {
  for (let round = 0; round < 100; round += 1) {
    if (done()) return;
    await settle();
  }
  throw new Error(`never happened: ${what}`);
}

/** A root holding a.json and b.json, both managed and both changed by hand, watched under `report`. */
async function watched() {
  const clock = manualClock();
  const root = await watchedRoot({
    prefix: 'config-agent-debounce-',
    names: ['a.json', 'b.json'],
    clock,
    debounceMs: WINDOW_MS,
  });
  cleanups.push(root.close);
  return { watcher: root.watcher, clock, drifts: root.drifts, notice: root.notice };
}

describe("the drift watcher's debounce on the injected clock", () => {
  it('judges a change once the window has passed on the clock, and not before', async () => {
    const { clock, drifts, notice } = await watched();
    notice('a.json');
    await settle();
    clock.advance(WINDOW_MS - 1);
    await settle();
    expect(drifts).toEqual([]);
    clock.advance(1);
    // Before: a real 60 s timer, which the fake clock could not end.
    await eventually(() => drifts.length > 0, 'the change judged');
    expect(drifts).toEqual([['a.json']]);
  });

  it('a change within the window starts it again: a burst is judged once, after its last change', async () => {
    const { clock, drifts, notice } = await watched();
    notice('a.json');
    clock.advance(WINDOW_MS / 2);
    notice('b.json');
    clock.advance(WINDOW_MS / 2);
    await settle();
    expect(drifts).toEqual([]);
    clock.advance(WINDOW_MS / 2);
    await eventually(() => drifts.length > 0, 'the burst judged');
    expect(drifts).toEqual([['a.json', 'b.json']]);
    clock.advance(WINDOW_MS * 2);
    await settle();
    expect(drifts).toEqual([['a.json', 'b.json']]);
  });

  it('judgeNow ends the window: judged at once, and not again when the window would have ended', async () => {
    const { watcher, clock, drifts, notice } = await watched();
    notice('a.json');
    await watcher.judgeNow();
    expect(drifts).toEqual([['a.json']]);
    clock.advance(WINDOW_MS);
    await settle();
    expect(drifts).toEqual([['a.json']]);
  });

  it('close ends the window: nothing is judged after it', async () => {
    const { watcher, clock, drifts, notice } = await watched();
    notice('a.json');
    await watcher.close();
    clock.advance(WINDOW_MS);
    await settle();
    expect(drifts).toEqual([]);
  });
});
