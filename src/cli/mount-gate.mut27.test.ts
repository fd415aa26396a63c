// mountDidNotAnswer's walk of an error's causes (mut27): how deep it looks, and a cycle or a null cause ends it.
import { expect, it } from 'vitest';
import { startWaitsOut } from './compose.js';
import { MountNotAnswering, mountDidNotAnswer } from './mount-gate.js';

/** `inner` wrapped in `wraps` plain errors, each the cause of the next. */
function wrapped(inner: unknown, wraps: number): unknown {
  let error = inner;
  for (let i = 0; i < wraps; i += 1) error = new Error(`step ${i}`, { cause: error });
  return error;
}

it('finds the mount that did not answer up to 8 errors deep (7 wrappers), not past that bound', () => {
  const lane = new MountNotAnswering('/mnt/state', 1_000);
  expect(mountDidNotAnswer(wrapped(lane, 7))).toBe(true);
  expect(startWaitsOut(wrapped(lane, 7))).toBe(true);
  expect(mountDidNotAnswer(wrapped(lane, 8))).toBe(false);
});

it('a cyclic chain of causes, or a null cause, ends the walk: no mount in it', () => {
  const first = new Error('first');
  const second = new Error('second', { cause: first });
  first.cause = second;
  expect(mountDidNotAnswer(first)).toBe(false);
  expect(mountDidNotAnswer(new Error('wrapped', { cause: null }))).toBe(false);
  expect(mountDidNotAnswer(undefined)).toBe(false);
});
