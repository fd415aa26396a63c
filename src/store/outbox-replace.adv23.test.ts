// adv23: reports replaced by newer ones while queued (the service refusing them while instances change status).
import * as nodeFs from 'node:fs/promises';
import { describe, expect, it } from 'vitest';
import { silentLogger } from '../lib/logger.js';
import { StatusOutbox } from './outbox.js';

const N = 3_000;
const deployed = { activity_status: 'deployed', error_status: 'none' } as const;
const removed = { activity_status: 'removed', error_status: 'none' } as const;

/** Runs `work` counting the elements every `Array.prototype.filter` call in it visits. */
function filterVisits(work: () => void): number {
  const filter = Array.prototype.filter;
  let visits = 0;
  Array.prototype.filter = function counted(this: unknown[], predicate: never, thisArg?: unknown) {
    visits += this.length;
    return filter.call(this, predicate, thisArg);
  } as typeof filter;
  try {
    work();
  } finally {
    Array.prototype.filter = filter;
  }
  return visits;
}

describe('queued reports replaced by newer ones', () => {
  // Each replacement filtered the whole queue: n replacements visited n² entries (20,000: 38 s of CPU).
  it('cost work in proportion to their number, and keep one report per instance, the newest, in order', () => {
    const outbox = StatusOutbox.ephemeral(nodeFs, '/state', silentLogger());
    for (let i = 0; i < N; i += 1) outbox.enqueue(`cfg_${i}`, deployed, new Date(0));

    const visits = filterVisits(() => {
      for (let i = N - 1; i >= 0; i -= 1) outbox.enqueue(`cfg_${i}`, removed, new Date(0));
      expect(outbox.size).toBe(N);
    });

    // Before: 9,000,000 (3,000 queued, each replacement filtering all of them).
    expect(visits).toBeLessThan(10 * N);
    const pending = outbox.pending();
    expect(pending.map((entry) => entry.instanceId)).toEqual(
      Array.from({ length: N }, (_, i) => `cfg_${N - 1 - i}`),
    );
    expect(pending.every((entry) => entry.report.activity_status === 'removed')).toBe(true);
    expect(outbox.pendingFor('cfg_7')?.report).toEqual(removed);
  });

  it('a report replaced twice before a read leaves the newest alone', () => {
    const outbox = StatusOutbox.ephemeral(nodeFs, '/state', silentLogger());
    outbox.enqueue('cfg_a', deployed, new Date(0));
    outbox.enqueue('cfg_b', deployed, new Date(0));
    outbox.enqueue('cfg_a', removed, new Date(0));
    outbox.enqueue('cfg_a', deployed, new Date(0));

    expect(outbox.pending().map((entry) => `${entry.instanceId} ${entry.report.activity_status}`)).toEqual([
      'cfg_b deployed',
      'cfg_a deployed',
    ]);
  });
});
