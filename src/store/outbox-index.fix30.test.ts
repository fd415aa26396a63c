// fix30: the outbox's index of each instance's newest report is rebuilt from the queue it compacts first.
import * as nodeFs from 'node:fs/promises';
import { expect, it } from 'vitest';
import { silentLogger } from '../lib/logger.js';
import { StatusOutbox } from './outbox.js';

const deployed = { activity_status: 'deployed', error_status: 'none' } as const;
const removed = { activity_status: 'removed', error_status: 'none' } as const;

// `#index()` reset the index before it read the queue through `#live()`, which drops every entry of a replaced
// instance but the one the index names: the index empty, the newest went too. Safe only while each caller
// compacted first; a flush that settles reports now leaves the compaction to `#index()`, so this catches it.
it('a flush that settles one report keeps the newest of an instance replaced while it ran', async () => {
  const outbox = StatusOutbox.ephemeral(nodeFs, '/state', silentLogger());
  outbox.enqueue('cfg_a', deployed, new Date(0));
  outbox.enqueue('cfg_b', deployed, new Date(0));
  const sent: string[] = [];
  const result = await outbox.flush(
    async (entry) => {
      sent.push(`${entry.instanceId} ${entry.report.activity_status}`);
      // cfg_b's queued report is replaced while cfg_a's is in flight: the old one is not sent, the new one stays.
      if (entry.instanceId === 'cfg_a') outbox.enqueue('cfg_b', removed, new Date(0));
    },
    () => 'skip',
    { persist: false },
  );
  expect(sent).toEqual(['cfg_a deployed']);
  expect(result.delivered.map((entry) => entry.instanceId)).toEqual(['cfg_a']);
  expect(outbox.size).toBe(1);
  expect(outbox.pending().map((entry) => `${entry.instanceId} ${entry.report.activity_status}`)).toEqual([
    'cfg_b removed',
  ]);
  expect(outbox.pendingFor('cfg_b')?.report).toEqual(removed);
  expect(outbox.pendingFor('cfg_a')).toBeUndefined();
});
