// review29: a service whose report answers keep showing the instance placed otherwise than its listings do.
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

/**
 * Answers every report 200 with the instance in the reported statuses but at another path (a stale row, a cache
 * in front of the service), and records nothing: its listings go on showing the instance as before.
 */
function answeringElsewhere(client: ServiceClient): ServiceClient {
  return {
    ...client,
    reportConfigInstanceStatus: async (id, report) => {
      const held = world.server.state.instances.get(id)!;
      const fields = { ...held, relative_filepath: 'elsewhere.json', ...report };
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
  world = await createPassWorld({
    name: 'superseded-review29',
    deps: { clock },
    wrapClient: answeringElsewhere,
  });
});

afterEach(async () => {
  await world.close();
});

// Each such answer made a full pass due at once (report.ts placeChanged, pass.ts supersededBy): that pass found the
// instance as before, reported it again, met the same answer, and made the next due at once: a full listing and a
// report every second (MIN_POLL_DELAY_MS) for as long as the service answered so, against one per poll.
it('makes one full pass due at once, not one after every pass', async () => {
  world.put({ id: 'u_s', relative_filepath: 'a.json' });
  await world.pass({ mode: 'full' });
  expect(await world.fileAt('a.json')).toContain('u_s');
  expect(world.reconciler.hasDueRetries()).toBe(true);
  const dueAfter: boolean[] = [];
  for (let i = 0; i < 3; i += 1) {
    monotonic += 1_000;
    const mode = world.reconciler.hasDueRetries() ? 'full' : 'incremental';
    await world.pass({ mode });
    dueAfter.push(world.reconciler.hasDueRetries());
  }
  // The follow-up ran; what it met again waits for the poll's own schedule.
  expect(dueAfter).toEqual([false, false, false]);
});
