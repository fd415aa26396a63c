// The drift watcher's debounce runs on the injected clock: a change is judged once the window passed on it, a change
// within the window starts it again, and close() or judgeNow() ends it; no wall-clock window anywhere.
import { afterEach, describe, expect, it } from 'vitest';
import { manualClock, settle, watchedRoot } from '../../test/helpers/drift-watched.js';

/** Longer than any test here could wait on the wall clock: only the fake clock can end it. */
const WINDOW_MS = 60_000;
const cleanups: Array<() => Promise<void>> = [];

afterEach(async () => {
  for (const cleanup of cleanups.splice(0).reverse()) await cleanup();
});

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
