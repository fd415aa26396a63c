// What the daemon's start waits out instead of exiting: a mount that did not answer, however a step let it through.
import { expect, it } from 'vitest';
import { StateDirError } from '../store/lock.js';
import { startWaitsOut } from './compose.js';
import { MountAbandonedAtStop, MountNotAnswering } from './mount-gate.js';

// CI at fad40d3 (load ~30): the start's call into stateDir's mount, given up on at the SIGTERM, reached the start's
// catch unwrapped: not an AgentError, so the daemon said 'cannot start' and exited 1 instead of the stop's 0.
it.each([
  [new MountNotAnswering('/mnt/state', 1_000), true],
  [new MountAbandonedAtStop('/mnt/state', 1_000), true],
  [new Error('opening the lock', { cause: new MountAbandonedAtStop('/mnt/state', 1_000) }), true],
  [
    new StateDirError('/s', 'cannot create agent.lock', Object.assign(new Error('EIO'), { code: 'EIO' })),
    true,
  ],
  [
    new StateDirError(
      '/s',
      'cannot create agent.lock',
      Object.assign(new Error('EACCES'), { code: 'EACCES' }),
    ),
    false,
  ],
  [Object.assign(new Error('ETIMEDOUT'), { code: 'ETIMEDOUT' }), false],
])('%s → %s', (error, expected) => {
  expect(startWaitsOut(error)).toBe(expected);
});
