// fix30: the full pass a report's answer made due stays due when that pass does not finish, and a doubt ends.
import { rm } from 'node:fs/promises';
import path from 'node:path';
import { afterEach, beforeEach, expect, it } from 'vitest';
import { createPassWorld, type PassWorld } from '../../test/helpers/pass-world.js';
import type { ServiceClient } from '../api/client.js';
import type { Clock } from '../lib/clock.js';

let monotonic: number;
const clock: Clock = {
  now: () => Date.parse('2026-06-01T00:00:00.000Z') + monotonic,
  monotonic: () => monotonic,
  sleep: async () => undefined,
};
let world: PassWorld;
/** Armed: the heap checkpoint after a written file throws (a pass that throws during apply). */
let throwAfterWrite = false;
/** The path the service's report answers place instances at; undefined: where they are listed. */
let answeredAt: string | undefined;

/** Answers every report 200 with the instance in the reported statuses, at `answeredAt`, recording nothing. */
function answeringElsewhere(client: ServiceClient): ServiceClient {
  return {
    ...client,
    reportConfigInstanceStatus: async (id, report) => {
      const held = world.server.state.instances.get(id)!;
      const fields = { ...held, relative_filepath: answeredAt ?? held.relative_filepath, ...report };
      return {
        id,
        activity_status: report.activity_status,
        error_status: report.error_status,
        updated_at: held.updated_at,
        fields,
      };
    },
  };
}

beforeEach(async () => {
  monotonic = 1_000;
  throwAfterWrite = false;
  answeredAt = 'elsewhere.json';
  world = await createPassWorld({
    name: 'follow-up-fix30',
    deps: {
      clock,
      heapCheckpoint: () => {
        if (throwAfterWrite) throw new Error('stand-in failure during apply');
      },
    },
    wrapClient: answeringElsewhere,
  });
});

afterEach(async () => {
  await world.close();
});

// pass.ts cleared followUp.fullPassDue as the full pass it made due began: when that pass threw (here during
// apply), the follow-up was lost and the next pass was an incremental one at the poll's schedule.
it('keeps the full pass due when the follow-up pass throws during apply', async () => {
  world.put({ id: 'u_f', relative_filepath: 'a.json' });
  await world.pass({ mode: 'full' });
  expect(world.reconciler.hasDueRetries()).toBe(true);
  // The follow-up must write a.json again (removed under it), and throws after the write.
  await rm(path.join(world.rootDir, 'a.json'));
  throwAfterWrite = true;
  monotonic += 1_000;
  await expect(world.pass({ mode: 'full' })).rejects.toThrow('stand-in failure during apply');
  expect(world.reconciler.hasDueRetries()).toBe(true);
  // The follow-up that finishes ends it (its answer meets the same place again: doubted, not followed).
  throwAfterWrite = false;
  monotonic += 1_000;
  await world.pass({ mode: 'full' });
  expect(await world.fileAt('a.json')).toContain('u_f');
  expect(world.reconciler.hasDueRetries()).toBe(false);
});

// An instance once doubted (its answers placing it otherwise in the full pass they made due) stayed doubted until
// 10,000 others were or a restart: after the service's answers agreed with its listings again, a genuine move
// (made between the listing and the report) waited for the scheduled full resync, not followed at once.
it('forgets the doubt once an answer places the instance as listed: a later move is followed at once', async () => {
  world.put({ id: 'u_d', relative_filepath: 'a.json', content: { v: 1 } });
  await world.pass({ mode: 'full' });
  monotonic += 1_000;
  await world.pass({ mode: 'full' });
  // The follow-up met the same answer: doubted, nothing due.
  expect(world.reconciler.hasDueRetries()).toBe(false);
  // The service answers as it lists again; the instance is reported (its next version written) and recorded.
  answeredAt = undefined;
  world.put({ id: 'u_d', relative_filepath: 'a.json', content: { v: 2 } });
  monotonic += 1_000;
  await world.pass({ mode: 'full' });
  expect(await world.fileAt('a.json')).toMatch(/"v":\s*2/);
  expect(world.reconciler.hasDueRetries()).toBe(false);
  // A genuine move made as the next report reaches the service: followed at once.
  answeredAt = 'moved.json';
  world.put({ id: 'u_d', relative_filepath: 'a.json', content: { v: 3 } });
  monotonic += 1_000;
  await world.pass({ mode: 'full' });
  expect(world.reconciler.hasDueRetries()).toBe(true);
});
