// report.ts against the mutants Stryker left alive (mut23): contradicting and moved answers, awaited echoes judged, the unrecorded backoff.
import * as nodeFs from 'node:fs/promises';
import { mkdtemp, rm } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { instanceFactory, mockRecord } from '../../test/helpers/instances.js';
import { reportContext } from '../../test/helpers/report-context.js';
import type { ReportAnswer } from '../api/client.js';
import type { ConfigInstanceHead, StatusReport } from '../api/schemas.js';
import type { Clock } from '../lib/clock.js';
import { silentLogger } from '../lib/logger.js';
import { type RunningMockServer, startMockServer } from '../mock-server/server.js';
import { type DeliveryBackoff, StatusOutbox } from '../store/outbox.js';
import { emptyState, type InstanceRecord } from '../store/state.js';
import {
  deliverReports,
  listedVersion,
  placeChanged,
  type ReportContext,
  resolveAwaitedEchoes,
  UnrecordedReports,
} from './report.js';

const API_KEY = 'sk_test_report_mut23_0123456789abcdef';
const NOW = new Date('2026-06-01T00:00:00.000Z');
const clock: Clock = { now: () => NOW.getTime(), monotonic: () => 1_000, sleep: async () => undefined };
const deployed: StatusReport = { activity_status: 'deployed', error_status: 'none' };

let dir: string;
let server: RunningMockServer;

beforeEach(async () => {
  dir = await mkdtemp(path.join(os.tmpdir(), 'config-agent-report-mut23-'));
  server = await startMockServer({ apiKeys: [API_KEY] });
});

afterEach(async () => {
  await server.close();
  await rm(dir, { recursive: true, force: true });
});

function record(fields: Partial<InstanceRecord> = {}): InstanceRecord {
  return { relativePath: 'x.json', activity: 'deployed', error: 'none', attempts: 0, ...fields };
}

/** A context delivering `deployed` for `id`, whose report the service answers with `answer(id)`. */
async function answeredBy(
  id: string,
  answer: (id: string) => ReportAnswer | undefined,
  extra: Partial<ReportContext> = {},
): Promise<ReportContext> {
  const outbox = await StatusOutbox.open(nodeFs, dir, silentLogger(), { now: () => 0 });
  outbox.enqueue(id, deployed, NOW);
  await outbox.persist();
  const ctx = reportContext({ url: server.url, apiKey: API_KEY, clock }, outbox);
  return {
    ...ctx,
    client: { ...ctx.client, reportConfigInstanceStatus: async (reported) => answer(reported) },
    ...extra,
  };
}

describe('deliverReports: answers it must not take as delivered', () => {
  it('an answer showing the instance in the reported activity but another error status leaves the report queued', async () => {
    const ctx = await answeredBy('cfg_a', (id) => ({
      id,
      activity_status: 'deployed',
      error_status: 'failed',
      updated_at: '2026-06-01T00:00:01.000Z',
    }));

    const delivery = await deliverReports(ctx);

    // Taken as delivered, the same report went out again on every poll, each pass "converged".
    expect(delivery.delivered).toBe(0);
    expect(ctx.outbox.pending().map((entry) => entry.instanceId)).toEqual(['cfg_a']);
  });

  it('an answer showing the instance moved settles the report also for a caller that asks no word of it', async () => {
    const make = instanceFactory();
    const listed = make({ id: 'cfg_a', relative_filepath: 'a.json' });
    const ctx = await answeredBy(
      'cfg_a',
      (id) => ({
        id,
        activity_status: 'deployed',
        error_status: 'none',
        updated_at: '2026-06-01T00:00:01.000Z',
        fields: { ...listed, relative_filepath: 'b.json', activity_status: 'deployed' },
      }),
      { listedHead: () => listed },
    );
    const state = ctx.state;
    state.instances.set('cfg_a', record());
    ctx.lastSeenUpdatedAt.set('cfg_a', listed.updated_at);

    const delivery = await deliverReports(ctx);

    expect(delivery).toMatchObject({ delivered: 1, echoed: false });
    expect(ctx.outbox.pending()).toEqual([]);
    // Not the echo of a report of what is on disk.
    expect(state.instances.get('cfg_a')?.reportEcho).toBeUndefined();
  });

  it('an answer without an echo for an instance the state does not know says nothing echoed', async () => {
    server.state.instances.set('cfg_a', mockRecord('cfg_a'));
    const ctx = await answeredBy('cfg_a', () => undefined);
    ctx.lastSeenUpdatedAt.set('cfg_a', '2026-01-01T00:00:00.000Z');

    const delivery = await deliverReports(ctx);

    // echoed: state.json is saved for it; nothing of this instance's was recorded.
    expect(delivery).toStrictEqual({ delivered: 1, rejected: 0, echoed: false });
    expect(ctx.state.instances.has('cfg_a')).toBe(false);
  });
});

describe('resolveAwaitedEchoes: what a listing tells of reports answered without an echo', () => {
  const make = instanceFactory({ relative_filepath: 'a.json' });
  const before = '2026-01-01T00:00:00.000Z';

  function awaiting(version?: string): InstanceRecord {
    return record({
      reportEcho: {
        updatedAt: before,
        operatorUpdatedAt: before,
        awaiting: 'deployed/none',
        ...(version === undefined ? {} : { version }),
      },
    });
  }

  it('names the instances shown recorded, and leaves one without an awaited echo (or unknown) as it was', () => {
    const state = emptyState('dvc_1');
    const shown = make({ id: 'cfg_a', activity_status: 'deployed', updated_at: '2026-01-02T00:00:00Z' });
    state.instances.set('cfg_a', awaiting(listedVersion(shown)));
    state.instances.set('cfg_plain', record());

    const judged = resolveAwaitedEchoes(state, [
      shown,
      make({ id: 'cfg_plain', activity_status: 'deployed' }),
      make({ id: 'cfg_unknown', activity_status: 'deployed' }),
    ]);

    expect(judged).toStrictEqual({ recorded: ['cfg_a'], unrecorded: [] });
    expect(state.instances.get('cfg_a')?.reportEcho).toStrictEqual({
      updatedAt: '2026-01-02T00:00:00Z',
      operatorUpdatedAt: before,
    });
    expect(state.instances.get('cfg_plain')).toStrictEqual(record());
    expect(state.instances.has('cfg_unknown')).toBe(false);
  });

  it('an instance shown in other statuses and with a new updated_at (an operator redeployed it) is not unrecorded', () => {
    const state = emptyState('dvc_1');
    const shown = make({ id: 'cfg_a', activity_status: 'queued', updated_at: '2026-01-03T00:00:00Z' });
    state.instances.set('cfg_a', awaiting(listedVersion(shown)));
    const asBefore = make({ id: 'cfg_b', activity_status: 'queued', updated_at: before });
    state.instances.set('cfg_b', awaiting(listedVersion(asBefore)));

    const judged = resolveAwaitedEchoes(state, [shown, asBefore]);

    // cfg_b shown exactly as before the report: the service recorded nothing; cfg_a moved on by an operator.
    expect(judged).toStrictEqual({ recorded: [], unrecorded: ['cfg_b'] });
  });
});

describe('placeChanged: where an answer shows the instance placed otherwise than listed', () => {
  const make = instanceFactory({ relative_filepath: 'a.json', created_at: '2026-01-01T00:00:00.000Z' });
  const listed: ConfigInstanceHead = make({ id: 'cfg_a' });
  const shown = (fields: Record<string, unknown>) => ({ ...make({ id: 'cfg_a' }), ...fields });

  it('no fields, or the same place, is no change', () => {
    expect(placeChanged(listed, undefined)).toBeUndefined();
    expect(placeChanged(listed, shown({}))).toBeUndefined();
  });

  it('created_at written otherwise for the same instant is the same place; another instant is not', () => {
    expect(placeChanged(listed, shown({ created_at: '2026-01-01T00:00:00Z' }))).toBeUndefined();
    expect(placeChanged(listed, shown({ created_at: '2026-01-01T00:00:01Z' }))).toEqual(['created_at']);
  });

  it('another field showing a string that names the listed created_at instant is still a change', () => {
    // A path may be any name, a timestamp's too: only created_at is compared as an instant.
    expect(placeChanged(listed, shown({ relative_filepath: '2026-01-01T00:00:00Z' }))).toEqual([
      'relative_filepath',
    ]);
  });

  it('names exactly the fields that differ', () => {
    expect(placeChanged(listed, shown({ relative_filepath: 'b.json' }))).toEqual(['relative_filepath']);
    expect(placeChanged(listed, shown({ relative_filepath: 'b.json', target_status: 'removed' }))).toEqual([
      'relative_filepath',
      'target_status',
    ]);
  });

  it('an answer that would not pass as a listing item is trusted for nothing', () => {
    expect(placeChanged(listed, shown({ relative_filepath: 'b.json', config_type_id: 7 }))).toBeUndefined();
    expect(placeChanged(listed, shown({ relative_filepath: '../b.json' }))).toBeUndefined();
  });
});

describe('UnrecordedReports: the backoff of reports a service answers 2xx and never records', () => {
  /** A backoff whose delay says how often in a row: `times` seconds. */
  const backoffAt = (now: number): DeliveryBackoff => ({ now: () => now, delayMs: (times) => times * 1_000 });

  /** Whether the outbox's queued report for `id` goes out in a flush at `now` (its hold-back has passed). */
  async function sentAt(outbox: StatusOutbox, now: number): Promise<boolean> {
    const flushed = await outbox.flush(
      async () => undefined,
      () => 'skip',
      { backoff: backoffAt(now) },
    );
    return flushed.delivered.length === 1;
  }

  it.each([
    ['activity', { activity_status: 'removed', error_status: 'none' }],
    ['error', { activity_status: 'deployed', error_status: 'failed' }],
    ['message', { activity_status: 'deployed', error_status: 'none', message: 'other' }],
  ] as const)('a report differing in its %s counts its hold-backs from one again', async (_, second) => {
    const outbox = StatusOutbox.ephemeral(nodeFs, dir, silentLogger());
    const unrecorded = new UnrecordedReports();
    unrecorded.sent('cfg_a', deployed);
    const judged = { recorded: [], unrecorded: ['cfg_a'] };
    unrecorded.judge(judged, outbox, backoffAt(0), silentLogger());
    unrecorded.judge(judged, outbox, backoffAt(0), silentLogger());
    // Another report of it sent and again not recorded: held 1 s (its first), not 3 s (the third in a row).
    unrecorded.sent('cfg_a', second);
    unrecorded.judge(judged, outbox, backoffAt(0), silentLogger());
    outbox.enqueue('cfg_a', second, NOW);

    expect(await sentAt(outbox, 1_500)).toBe(true);
  });

  it('the same report shown unrecorded again is held longer each time', async () => {
    const outbox = StatusOutbox.ephemeral(nodeFs, dir, silentLogger());
    const unrecorded = new UnrecordedReports();
    unrecorded.sent('cfg_a', deployed);
    const judged = { recorded: [], unrecorded: ['cfg_a'] };
    unrecorded.judge(judged, outbox, backoffAt(0), silentLogger());
    unrecorded.sent('cfg_a', { ...deployed });
    unrecorded.judge(judged, outbox, backoffAt(0), silentLogger());
    outbox.enqueue('cfg_a', deployed, NOW);

    expect(await sentAt(outbox, 1_500)).toBe(false);
    expect(await sentAt(outbox, 2_000)).toBe(true);
  });

  it('a report shown unrecorded that it never sent (another process sent it) is not held back', async () => {
    const outbox = StatusOutbox.ephemeral(nodeFs, dir, silentLogger());
    const unrecorded = new UnrecordedReports();
    unrecorded.judge({ recorded: [], unrecorded: ['cfg_a'] }, outbox, backoffAt(0), silentLogger());
    outbox.enqueue('cfg_a', deployed, NOW);

    expect(unrecorded.remembered).toBe(0);
    expect(await sentAt(outbox, 0)).toBe(true);
  });

  it('remembers 100,000 instances at most, forgetting the least recently sent', async () => {
    const unrecorded = new UnrecordedReports();
    for (let i = 0; i < 100_000; i += 1) unrecorded.sent(`cfg_${i}`, deployed);
    expect(unrecorded.remembered).toBe(100_000);
    // cfg_0 sent again is the most recent: cfg_1 is the one forgotten.
    unrecorded.sent('cfg_0', deployed);
    unrecorded.sent('cfg_new', deployed);
    expect(unrecorded.remembered).toBe(100_000);

    const outbox = StatusOutbox.ephemeral(nodeFs, dir, silentLogger());
    unrecorded.judge({ recorded: [], unrecorded: ['cfg_0', 'cfg_1'] }, outbox, backoffAt(0), silentLogger());
    outbox.enqueue('cfg_1', deployed, NOW);
    outbox.enqueue('cfg_0', deployed, NOW);
    const flushed = await outbox.flush(
      async () => undefined,
      () => 'skip',
      { backoff: backoffAt(0) },
    );
    expect(flushed.delivered.map((entry) => entry.instanceId)).toEqual(['cfg_1']);
  });
});
