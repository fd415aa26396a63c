// fix30: closes past the stop deadline less the reserve: not made, no mount judged late by them, no endless retry.
import { expect, it } from 'vitest';
import { steppedClock } from '../../test/helpers/gate-clocks.js';
import { MountLanes, STOP_RESERVE_MS } from './mount-gate.js';

const MOUNT = '/srv/root/share';

/** A stand-in call into the mount: counts how often it was made; each answers only when the test says. */
function standIn() {
  const held: (() => void)[] = [];
  let made = 0;
  return {
    call: () => {
      made += 1;
      return new Promise<void>((resolve) => held.push(resolve));
    },
    made: () => made,
    answer: () => {
      for (const finish of held.splice(0)) finish();
    },
  };
}

// Before: a close made then was raced against a 0 ms bound. Into a hung mount it held a pool thread until the
// process ended; into a healthy one it lost the race, and the mount was judged late (every call refused).
it('past the stop deadline less the reserve, a close is not made and judges no mount late', async () => {
  const time = steppedClock();
  const stop = new AbortController();
  const lanes = new MountLanes(time.clock, 15_000, stop.signal, 10_000);
  stop.abort();
  await time.advance(10_000 - STOP_RESERVE_MS);
  const close = standIn();
  const closed = lanes.closing(MOUNT, close.call);
  await time.advance(0);
  close.answer();
  await time.advance(0);
  // It answers at once (the process's exit closes the descriptor).
  await closed;
  expect(close.made()).toBe(0);
  expect(lanes.lateMounts()).toEqual([]);
  // Every other call is refused as before (review29), not made either.
  const other = standIn();
  await expect(lanes.through(MOUNT, other.call)).rejects.toMatchObject({ name: 'MountAbandonedAtStop' });
  expect(other.made()).toBe(0);
});

// Before: the close deferred while the mount was late was tried once its late call answered, refused as past the
// deadline with a MountNotAnswering, deferred again and tried again at once, for ever: a loop of microtasks that
// starved every timer (the stop's own end included) until the process was killed.
it('a close deferred while its mount was late, whose late call answers past the deadline, is dropped', async () => {
  const time = steppedClock();
  const stop = new AbortController();
  const lanes = new MountLanes(time.clock, 15_000, stop.signal, 10_000);
  const hung = standIn();
  const first = lanes.through(MOUNT, hung.call).catch((error: unknown) => error);
  await time.advance(15_000);
  expect(await first).toMatchObject({ name: 'MountNotAnswering' });
  expect(lanes.lateMounts()).toEqual([MOUNT]);
  const close = standIn();
  await lanes.closing(MOUNT, close.call);
  stop.abort();
  await time.advance(10_000);
  hung.answer();
  await time.advance(0);
  expect(close.made()).toBe(0);
  expect(lanes.lateMounts()).toEqual([]);
  // The lanes go on: a close asked for now answers as the first did.
  await lanes.closing(MOUNT, close.call);
  expect(close.made()).toBe(0);
});

it('before the deadline less the reserve, a close into a healthy mount is made and judges it not late', async () => {
  const time = steppedClock();
  const stop = new AbortController();
  const lanes = new MountLanes(time.clock, 15_000, stop.signal, 10_000);
  stop.abort();
  await time.advance(1_000);
  let made = 0;
  await lanes.closing(MOUNT, async () => {
    made += 1;
  });
  expect(made).toBe(1);
  expect(lanes.lateMounts()).toEqual([]);
});
