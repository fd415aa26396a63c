// report22: report-truth gaps against runPass and the mock: a status endpoint that answers 2xx and records nothing,
// a report that lands on an instance an operator moved or retired between the listing and the report.
import pino from 'pino';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { createPassWorld, type PassWorld } from '../../test/helpers/pass-world.js';
import type { ServiceClient } from '../api/client.js';
import type { Clock } from '../lib/clock.js';
import type { ConfigInstanceRecord } from '../mock-server/state.js';
import type { Reconciler } from './reconcile.js';

const T1 = '2026-02-01T00:00:00.000Z';
const PATCH = '^/v1/config_instances/[^/]+$';
const UNRECORDED = 'recorded none of them';

/** Monotonic time the tests move by hand; sleeps end at once. */
let monotonic: number;
const clock: Clock = {
  now: () => Date.parse('2026-06-01T00:00:00.000Z') + monotonic,
  monotonic: () => monotonic,
  sleep: async () => undefined,
};

let world: PassWorld;
let server: PassWorld['server'];
let reconciler: Reconciler;
/** Every status report the agent sent (the requests, whatever the service did with them). */
let patches: number;
/** The warnings the agent logged, one JSON line each. */
let warnings: string[];
/** What an operator does at the service just before the next report reaches it (once). */
let beforeNextReport: ((id: string) => void) | undefined;

function counting(client: ServiceClient): ServiceClient {
  return {
    ...client,
    reportConfigInstanceStatus: (id, report, opts) => {
      patches += 1;
      const operator = beforeNextReport;
      beforeNextReport = undefined;
      operator?.(id);
      return client.reportConfigInstanceStatus(id, report, opts);
    },
  };
}

beforeEach(async () => {
  monotonic = 1_000;
  patches = 0;
  warnings = [];
  beforeNextReport = undefined;
  const logger = pino({ level: 'warn' }, { write: (line: string) => void warnings.push(line) });
  // random 1: each backoff is its whole ceiling (REPORT_BACKOFF: 30 s, then 60 s, ...).
  world = await createPassWorld({
    name: 'report22',
    deps: { clock, random: () => 1, logger },
    wrapClient: counting,
  });
  server = world.server;
  reconciler = world.reconciler;
});

afterEach(() => world.close());

const put = (fields: Partial<ConfigInstanceRecord> & { id: string }): void => world.put(fields);
const reports = () => world.reports();
const unrecordedWarnings = () => warnings.filter((line) => line.includes(UNRECORDED)).length;
const fileAt = (relative: string) => world.fileAt(relative);
const exists = (relative: string) => world.exists(relative);
/** The pass the daemon runs next: full when the reconciler says one is due. */
const daemonPass = () => reconciler.runPass({ mode: reconciler.hasDueRetries() ? 'full' : 'incremental' });

describe('a status endpoint that answers 2xx and records nothing', () => {
  // It answered every report 200 (a body that is no instance: no echo) and changed nothing. Each poll found the
  // instances as before, derived their reports again and sent them all: 3 requests a poll for as long as it lasted.
  it('has its reports held back as refused ones are, kept queued, and told once', async () => {
    for (const id of ['u_a', 'u_b', 'u_c']) put({ id });
    server.state.addFault({ match: PATCH, status: 200, count: 1000 });
    const first = await reconciler.runPass({ mode: 'full' });
    expect(first.reports.delivered).toBe(3);
    expect(patches).toBe(3);
    expect(await fileAt('u_a.json')).toBe('{\n  "owner": "u_a"\n}\n');
    const counts: number[] = [];
    for (let i = 0; i < 3; i += 1) {
      monotonic += 10_000;
      const result = await reconciler.runPass({ mode: 'incremental' });
      expect(result.converged).toBe(false);
      expect(result.reports.pending).toBe(3);
      counts.push(patches);
    }
    // Held 30 s after the pass that found them unrecorded: none sent in the next 30 s (before: 6, 9, 12).
    expect(counts).toEqual([3, 3, 3]);
    expect(unrecordedWarnings()).toBe(1);
    // Past the backoff they go again, and unrecorded once more, wait twice as long.
    monotonic += 10_001;
    await reconciler.runPass({ mode: 'incremental' });
    expect(patches).toBe(6);
    monotonic += 1_000;
    await reconciler.runPass({ mode: 'incremental' });
    monotonic += 59_000;
    await reconciler.runPass({ mode: 'incremental' });
    expect(patches).toBe(6);
    expect(unrecordedWarnings()).toBe(1);
    expect(reports()).toEqual([]);
    // The service records again: once the backoff ends every report lands, and the pass converges.
    server.state.clearFaults();
    monotonic += 1_001;
    const healed = await reconciler.runPass({ mode: 'incremental' });
    expect(patches).toBe(9);
    expect(reports().sort()).toEqual(['u_a deployed/none', 'u_b deployed/none', 'u_c deployed/none']);
    expect(healed.reports.pending).toBe(0);
    expect((await reconciler.runPass({ mode: 'full' })).converged).toBe(true);
    expect(patches).toBe(9);
    // A new episode is told again.
    put({ id: 'u_d' });
    server.state.addFault({ match: PATCH, status: 200, count: 1000 });
    await reconciler.runPass({ mode: 'incremental' });
    monotonic += 1_000;
    await reconciler.runPass({ mode: 'incremental' });
    expect(unrecordedWarnings()).toBe(2);
  });
});

describe('a report that lands on an instance placed otherwise since the listing', () => {
  // The PATCH names no version: an operator's move between the pull and the report had the service record the
  // moved instance `deployed`, while the new path held nothing. The answer shows the new path, but was read for
  // its statuses only: the pass said converged, and incremental polls do not list a `deployed` instance, so the
  // new file waited for the next full pass (up to poll.fullResyncSeconds).
  // A large answer (300 KB) is read from its bytes without a tree: its place is read with its head.
  it.each([
    ['small', { owner: 'u_m' }],
    ['large', { owner: 'u_m', pad: 'x'.repeat(300_000) }],
  ])(
    'makes a full pass due at once, which writes the new path (moved, a %s answer)',
    async (_size, content) => {
      put({ id: 'u_m', relative_filepath: 'a.json', content });
      beforeNextReport = (id) => {
        const record = server.state.instances.get(id)!;
        server.state.instances.set(id, { ...record, relative_filepath: 'b/moved.json', updated_at: T1 });
      };
      const first = await reconciler.runPass({ mode: 'full' });
      expect(JSON.parse(await fileAt('a.json'))).toEqual(content);
      expect(first.converged).toBe(false);
      expect(reconciler.hasDueRetries()).toBe(true);
      expect(reconciler.nextRetryAt()).toBeLessThanOrEqual(monotonic);
      expect(warnings.filter((line) => line.includes('landed on the instance changed'))).toHaveLength(1);
      monotonic += 1_000;
      const next = await daemonPass();
      expect(next.mode).toBe('full');
      expect(JSON.parse(await fileAt('b/moved.json'))).toEqual(content);
      expect(server.state.instances.get('u_m')).toMatchObject({
        activity_status: 'deployed',
        error_status: 'none',
      });
      // Its old file goes with the pass after the one that recorded the new one (list21, below), at once.
      expect(await exists('a.json')).toBe(true);
      expect(next.converged).toBe(false);
      monotonic += 1_000;
      const last = await daemonPass();
      expect(last.mode).toBe('full');
      expect(await exists('a.json')).toBe(false);
      expect(last.converged).toBe(true);
      expect(reconciler.hasDueRetries()).toBe(false);
    },
  );

  it('makes a full pass due at once, which retires it (redeployed as another instance at its path)', async () => {
    put({ id: 'u_old', relative_filepath: 'shared.json', config_schema_id: 'sch_shared' });
    // The operator deploys a new version, u_new, at the path: the service queues u_old for removal.
    beforeNextReport = (id) => {
      const record = server.state.instances.get(id)!;
      server.state.instances.set(id, { ...record, target_status: 'removed', updated_at: T1 });
      put({ id: 'u_new', relative_filepath: 'shared.json', config_schema_id: 'sch_shared', updated_at: T1 });
    };
    const first = await reconciler.runPass({ mode: 'full' });
    expect(first.converged).toBe(false);
    expect(reconciler.hasDueRetries()).toBe(true);
    monotonic += 1_000;
    const next = await daemonPass();
    expect(next.mode).toBe('full');
    expect(await fileAt('shared.json')).toBe('{\n  "owner": "u_new"\n}\n');
    expect(reports().sort()).toEqual(['u_new deployed/none', 'u_old deployed/none', 'u_old removed/none']);
    expect(next.converged).toBe(true);
  });

  it('is not acted on when the place it shows would not pass a listing (the path guard)', async () => {
    put({ id: 'u_h', relative_filepath: 'h.json' });
    server.state.addFault({
      match: PATCH,
      count: 1,
      mode: 'rewrite',
      replace: [{ find: '"relative_filepath":"h.json"', with: '"relative_filepath":"../escape.json"' }],
    });
    const first = await reconciler.runPass({ mode: 'full' });
    expect(first.converged).toBe(true);
    expect(reconciler.hasDueRetries()).toBe(false);
    expect(await exists('h.json')).toBe(true);
  });
});

describe('an instance moved to another path (list21)', () => {
  // The pass that writes the new path leaves the old file (removed only once the new one is recorded, so never
  // before it is durable) and said converged; incremental polls never remove a left path (only a complete
  // listing can tell nobody else wants it), so the old file stayed until the next scheduled full pass.
  it('has its old file removed by the pass right after the one that writes the new path', async () => {
    put({ id: 'u_v', relative_filepath: 'old/u_v.json' });
    expect((await reconciler.runPass({ mode: 'full' })).converged).toBe(true);
    const record = server.state.instances.get('u_v')!;
    server.state.instances.set('u_v', {
      ...record,
      relative_filepath: 'new/u_v.json',
      activity_status: 'queued',
      updated_at: T1,
    });
    monotonic += 30_000;
    const moved = await daemonPass();
    expect(moved.mode).toBe('incremental');
    expect(await fileAt('new/u_v.json')).toBe('{\n  "owner": "u_v"\n}\n');
    expect(await exists('old/u_v.json')).toBe(true);
    expect(moved.converged).toBe(false);
    expect(reconciler.hasDueRetries()).toBe(true);
    monotonic += 1_000;
    const next = await daemonPass();
    expect(next.mode).toBe('full');
    expect(await exists('old/u_v.json')).toBe(false);
    expect(await fileAt('new/u_v.json')).toBe('{\n  "owner": "u_v"\n}\n');
    expect(next.converged).toBe(true);
    expect(reports()).toEqual(['u_v deployed/none', 'u_v deployed/none']);
    monotonic += 30_000;
    expect((await daemonPass()).mode).toBe('incremental');
  });
});
