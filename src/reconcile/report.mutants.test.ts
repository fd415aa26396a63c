// deliverReports on its own, against the mock service and a real outbox in a temp dir: what a delivery
// returns, what the service received, what stays queued and what the local state remembers of the echo.

import * as nodeFs from 'node:fs/promises';
import { mkdtemp, rm } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { instanceFactory, mockRecord } from '../../test/helpers/instances.js';
import { reportContext } from '../../test/helpers/report-context.js';
import type { Clock } from '../lib/clock.js';
import { silentLogger } from '../lib/logger.js';
import { type RunningMockServer, startMockServer } from '../mock-server/server.js';
import type { ConfigInstanceRecord } from '../mock-server/state.js';
import { StatusOutbox } from '../store/outbox.js';
import { emptyState, type InstanceRecord, type LocalState } from '../store/state.js';
import { deliverReports, listedVersion, type ReportContext, resolveAwaitedEchoes } from './report.js';

const API_KEY = 'sk_test_report_0123456789abcdef';
const NOW = new Date('2026-06-01T00:00:00.000Z');
/** Retries are off; a clock that never moves by itself. */
const clock: Clock = { now: () => NOW.getTime(), monotonic: () => 1_000, sleep: async () => undefined };

/** The real fs, except that replacing outbox.json can be made to fail as a full disk would. */
function faultyFs() {
  const fs = {
    ...nodeFs,
    failOutbox: false,
    rename: async (from: Parameters<typeof nodeFs.rename>[0], to: Parameters<typeof nodeFs.rename>[1]) => {
      if (fs.failOutbox && String(to).endsWith('outbox.json')) {
        throw Object.assign(new Error(`ENOSPC: simulated failure, rename '${String(to)}'`), {
          code: 'ENOSPC',
        });
      }
      return nodeFs.rename(from, to);
    },
  };
  return fs;
}

let dir: string;
let server: RunningMockServer;
let fs: ReturnType<typeof faultyFs>;

beforeEach(async () => {
  dir = await mkdtemp(path.join(os.tmpdir(), 'config-agent-report-'));
  server = await startMockServer({ apiKeys: [API_KEY] });
  fs = faultyFs();
});

afterEach(async () => {
  await server.close();
  await rm(dir, { recursive: true, force: true });
});

function put(id: string, fields: Partial<ConfigInstanceRecord> = {}): void {
  server.state.instances.set(id, mockRecord(id, fields));
}

function record(fields: Partial<InstanceRecord> = {}): InstanceRecord {
  return { relativePath: 'x.json', activity: 'deployed', error: 'none', attempts: 0, ...fields };
}

async function context(
  ids: string[],
  options: { state?: LocalState; seen?: Map<string, string>; signal?: AbortSignal } = {},
): Promise<ReportContext> {
  const outbox = await StatusOutbox.open(fs, dir, silentLogger(), { now: () => 0 });
  for (const id of ids) outbox.enqueue(id, { activity_status: 'deployed', error_status: 'none' }, NOW);
  await outbox.persist();
  return reportContext({ url: server.url, apiKey: API_KEY, clock }, outbox, options);
}

function received(): string[] {
  return server.state.reports.map((r) => r.config_instance_id).sort();
}

async function queuedOnDisk(): Promise<string[]> {
  const reopened = await StatusOutbox.open(fs, dir, silentLogger(), { now: () => 0 });
  return reopened.pending().map((entry) => entry.instanceId);
}

describe('deliverReports: the delivery it returns', () => {
  it('all delivered: counts only, no deferral, no persist error, no echo for an instance the state does not know', async () => {
    put('cfg_a');
    put('cfg_b');
    const ctx = await context(['cfg_a', 'cfg_b']);

    const delivery = await deliverReports(ctx);

    expect(delivery).toStrictEqual({ delivered: 2, rejected: 0, echoed: false });
    expect(received()).toEqual(['cfg_a', 'cfg_b']);
    expect(await queuedOnDisk()).toEqual([]);
  });

  it('a report no request can carry (an id with a lone surrogate, queued by an older agent) is dropped, not kept forever', async () => {
    put('cfg_a');
    const ctx = await context(['cfg_\uD800', 'cfg_a']);

    const delivery = await deliverReports(ctx);

    // Kept, it was tried and skipped on every pass, and the device never converged again.
    expect(delivery).toMatchObject({ delivered: 1, rejected: 1 });
    expect(received()).toEqual(['cfg_a']);
    expect(await queuedOnDisk()).toEqual([]);
  });

  it('an outage (503) defers delivery: the error is returned and every report stays queued on disk', async () => {
    put('cfg_a');
    server.state.addFault({ match: '^/v1/config_instances/', count: 10, status: 503 });
    const ctx = await context(['cfg_a']);

    const delivery = await deliverReports(ctx);

    expect(delivery.deferredBy).toBeDefined();
    expect(delivery).toMatchObject({ delivered: 0, rejected: 0, echoed: false });
    expect('persistError' in delivery).toBe(false);
    expect(received()).toEqual([]);
    expect(await queuedOnDisk()).toEqual(['cfg_a']);
  });

  it('reports go out several at once: those already sent when the outage answers one are still delivered', async () => {
    for (const id of ['cfg_a', 'cfg_b', 'cfg_c']) put(id);
    server.state.addFault({ match: '^/v1/config_instances/cfg_a$', count: 1, status: 503 });
    const ctx = await context(['cfg_a', 'cfg_b', 'cfg_c']);

    const delivery = await deliverReports(ctx);

    expect(delivery).toMatchObject({ delivered: 2 });
    expect(received()).toEqual(['cfg_b', 'cfg_c']);
    expect(ctx.outbox.pending().map((entry) => entry.instanceId)).toEqual(['cfg_a']);
  });

  it('an outbox that cannot be rewritten after delivery is returned as the persist error; memory is right', async () => {
    put('cfg_a');
    const ctx = await context(['cfg_a']);
    fs.failOutbox = true;

    const delivery = await deliverReports(ctx);

    expect(delivery.persistError).toBeInstanceOf(Error);
    expect('deferredBy' in delivery).toBe(false);
    expect(delivery).toMatchObject({ delivered: 1, rejected: 0 });
    expect(ctx.outbox.size).toBe(0);
    expect(await queuedOnDisk()).toEqual(['cfg_a']);
  });

  it('an aborted pass sends nothing: the report stays queued', async () => {
    put('cfg_a');
    const ctx = await context(['cfg_a'], { signal: AbortSignal.abort() });

    const delivery = await deliverReports(ctx);

    expect(delivery.delivered).toBe(0);
    expect(received()).toEqual([]);
    expect(ctx.outbox.pending().map((entry) => entry.instanceId)).toEqual(['cfg_a']);
  });
});

describe("deliverReports: our report's echo in the local state", () => {
  it('a report that moves updated_at is remembered with the operator updated_at before it, and echoed', async () => {
    put('cfg_a', { updated_at: '2026-02-01T00:00:00.000Z' });
    const state = emptyState('dvc_1');
    state.instances.set('cfg_a', record());
    const seen = new Map([['cfg_a', '2026-02-01T00:00:00.000Z']]);
    const ctx = await context(['cfg_a'], { state, seen });

    const delivery = await deliverReports(ctx);

    const now = server.state.instance('cfg_a').updated_at;
    expect(now).not.toBe('2026-02-01T00:00:00.000Z');
    expect(delivery.echoed).toBe(true);
    expect(state.instances.get('cfg_a')).toEqual(
      record({ reportEcho: { updatedAt: now, operatorUpdatedAt: '2026-02-01T00:00:00.000Z' } }),
    );
    expect(seen.get('cfg_a')).toBe(now);
  });

  it('the echo of an echo keeps the operator updated_at from before our first report', async () => {
    put('cfg_a', { updated_at: '2026-03-01T00:00:00.000Z' });
    const state = emptyState('dvc_1');
    const echo = { updatedAt: '2026-03-01T00:00:00.000Z', operatorUpdatedAt: '2026-02-01T00:00:00.000Z' };
    state.instances.set('cfg_a', record({ reportEcho: echo }));
    const seen = new Map([['cfg_a', '2026-03-01T00:00:00.000Z']]);
    const ctx = await context(['cfg_a'], { state, seen });

    await deliverReports(ctx);

    const now = server.state.instance('cfg_a').updated_at;
    expect(state.instances.get('cfg_a')?.reportEcho).toEqual({
      updatedAt: now,
      operatorUpdatedAt: '2026-02-01T00:00:00.000Z',
    });
  });

  it('one echo among several reports is enough for the delivery to say echoed', async () => {
    put('cfg_a', { updated_at: '2026-02-01T00:00:00.000Z' });
    put('cfg_b', { updated_at: '2026-02-01T00:00:00.000Z' });
    const state = emptyState('dvc_1');
    state.instances.set('cfg_a', record());
    const seen = new Map([['cfg_a', '2026-02-01T00:00:00.000Z']]);
    const ctx = await context(['cfg_a', 'cfg_b'], { state, seen });

    expect((await deliverReports(ctx)).echoed).toBe(true);
  });

  it("an answer that is another instance (a lying service) is no echo of ours: that instance's record is untouched", async () => {
    put('cfg_a', { updated_at: '2026-02-01T00:00:00.000Z' });
    put('cfg_b', { updated_at: '2026-02-01T00:00:00.000Z' });
    const state = emptyState('dvc_1');
    state.instances.set('cfg_a', record());
    state.instances.set('cfg_b', record());
    const seen = new Map([
      ['cfg_a', '2026-02-01T00:00:00.000Z'],
      ['cfg_b', '2026-02-01T00:00:00.000Z'],
    ]);
    // The report on cfg_a is answered with cfg_b, updated since by an operator.
    server.state.addFault({
      match: '^/v1/config_instances/cfg_a$',
      count: 1,
      mode: 'rewrite',
      replace: [
        { find: '"id":"cfg_a"', with: '"id":"cfg_b"' },
        { find: '"relative_filepath":"cfg_a.json"', with: '"relative_filepath":"cfg_b.json"' },
      ],
    });
    const ctx = await context(['cfg_a'], { state, seen });

    const delivery = await deliverReports(ctx);

    expect(delivery).toMatchObject({ delivered: 1 });
    // Had it been taken for cfg_b's echo, cfg_b's later operator update would lose a path conflict it wins.
    expect(state.instances.get('cfg_b')).toEqual(record());
    // cfg_a's own echo is awaited from the next listing (the answer did not give it).
    expect(state.instances.get('cfg_a')?.reportEcho).toEqual({
      updatedAt: '2026-02-01T00:00:00.000Z',
      operatorUpdatedAt: '2026-02-01T00:00:00.000Z',
      awaiting: 'deployed/none',
    });
    expect(seen.get('cfg_b')).toBe('2026-02-01T00:00:00.000Z');
  });

  it('no echo without a local record, without a last-seen updated_at, or when updated_at did not move', async () => {
    // cfg_a: no local record. cfg_b: never seen. cfg_c: the service already holds this status (no move).
    put('cfg_a', { updated_at: '2026-02-01T00:00:00.000Z' });
    put('cfg_b', { updated_at: '2026-02-01T00:00:00.000Z' });
    put('cfg_c', { updated_at: '2026-02-01T00:00:00.000Z', activity_status: 'deployed' });
    const state = emptyState('dvc_1');
    state.instances.set('cfg_b', record());
    state.instances.set('cfg_c', record());
    const seen = new Map([
      ['cfg_a', '2026-02-01T00:00:00.000Z'],
      ['cfg_c', '2026-02-01T00:00:00.000Z'],
    ]);
    const ctx = await context(['cfg_a', 'cfg_b', 'cfg_c'], { state, seen });

    const delivery = await deliverReports(ctx);

    expect(delivery).toMatchObject({ delivered: 3, echoed: false });
    expect([...state.instances.keys()].sort()).toEqual(['cfg_b', 'cfg_c']);
    expect(state.instances.get('cfg_b')).toEqual(record());
    expect(state.instances.get('cfg_c')).toEqual(record());
    expect(seen).toEqual(
      new Map([
        ['cfg_a', '2026-02-01T00:00:00.000Z'],
        ['cfg_c', '2026-02-01T00:00:00.000Z'],
      ]),
    );
  });
});

describe('an echo awaited from the next listing (an answer without one) is taken only from the version reported', () => {
  const makeInstance = instanceFactory({ relative_filepath: 'x.json' });
  const BEFORE = '2026-02-01T00:00:00.000Z';
  const LATER = '2026-02-02T00:00:00.000Z';
  const reported = makeInstance({ id: 'cfg_a', updated_at: BEFORE, content: { port: 1 } });

  it('a 204 answer records the version listed with the instance’s last-seen updated_at', async () => {
    put('cfg_a', { updated_at: BEFORE });
    server.state.addFault({ match: '^/v1/config_instances/cfg_a$', count: 1, mode: 'rewrite', status: 204 });
    const state = emptyState('dvc_1');
    state.instances.set('cfg_a', record());
    const ctx = await context(['cfg_a'], { state, seen: new Map([['cfg_a', BEFORE]]) });
    ctx.listedVersion = (id) => (id === 'cfg_a' ? listedVersion(reported) : undefined);

    expect(await deliverReports(ctx)).toMatchObject({ delivered: 1, echoed: true });
    expect(state.instances.get('cfg_a')?.reportEcho).toEqual({
      updatedAt: BEFORE,
      operatorUpdatedAt: BEFORE,
      awaiting: 'deployed/none',
      version: listedVersion(reported),
    });
  });

  it('a report queued by an earlier run, answered before any listing of this one: the echo awaited from what was kept with it', async () => {
    const EARLIER = '2026-01-01T00:00:00.000Z';
    for (const id of ['cfg_a', 'cfg_b', 'cfg_c', 'cfg_d', 'cfg_e']) {
      put(id, { updated_at: BEFORE });
      server.state.addFault({
        match: `^/v1/config_instances/${id}$`,
        count: 1,
        mode: 'rewrite',
        status: 204,
      });
    }
    const state = emptyState('dvc_1');
    for (const id of ['cfg_a', 'cfg_b', 'cfg_c']) state.instances.set(id, record());
    // cfg_e awaited an echo of an earlier report already, at the same updated_at: its operator's time stays.
    state.instances.set('cfg_e', record({ reportEcho: { updatedAt: BEFORE, operatorUpdatedAt: EARLIER } }));
    const outbox = await StatusOutbox.open(fs, dir, silentLogger(), { now: () => 0 });
    const deployed = { activity_status: 'deployed', error_status: 'none' } as const;
    // cfg_a: listed with its version; cfg_b: an updated_at only; cfg_c: nothing kept; cfg_d: no local record.
    for (const id of ['cfg_a', 'cfg_b', 'cfg_d', 'cfg_e']) outbox.enqueue(id, deployed, NOW, BEFORE);
    outbox.enqueue('cfg_c', deployed, NOW);
    outbox.relist((id) => (id === 'cfg_a' ? { updatedAt: BEFORE, version: 'version-a' } : undefined));
    await outbox.persist();
    // No listing in this process: nothing seen, no listed versions.
    const ctx = reportContext({ url: server.url, apiKey: API_KEY, clock }, outbox, { state });

    expect(await deliverReports(ctx)).toMatchObject({ delivered: 5 });
    const awaiting = { updatedAt: BEFORE, operatorUpdatedAt: BEFORE, awaiting: 'deployed/none' };
    expect(state.instances.get('cfg_a')?.reportEcho).toEqual({ ...awaiting, version: 'version-a' });
    expect(state.instances.get('cfg_b')?.reportEcho).toEqual(awaiting);
    expect(state.instances.get('cfg_c')?.reportEcho).toBeUndefined();
    expect(state.instances.has('cfg_d')).toBe(false);
    expect(state.instances.get('cfg_e')?.reportEcho).toEqual({ ...awaiting, operatorUpdatedAt: EARLIER });
  });

  const awaitingState = (version: string | undefined) => {
    const state = emptyState('dvc_1');
    const echo = { updatedAt: BEFORE, operatorUpdatedAt: BEFORE, awaiting: 'deployed/none' };
    state.instances.set('cfg_a', record({ reportEcho: version === undefined ? echo : { ...echo, version } }));
    return state;
  };
  const listed = (fields: Parameters<typeof makeInstance>[0]) =>
    makeInstance({ activity_status: 'deployed', updated_at: LATER, content: { port: 1 }, ...fields });

  it.each([
    ['the very version: the echo', {}, { updatedAt: LATER, operatorUpdatedAt: BEFORE }],
    [
      'content edited: the operator’s',
      { content: { port: 2 } },
      { updatedAt: BEFORE, operatorUpdatedAt: BEFORE },
    ],
    [
      'path changed: the operator’s',
      { relative_filepath: 'y.json' },
      { updatedAt: BEFORE, operatorUpdatedAt: BEFORE },
    ],
    [
      'target changed: the operator’s',
      { target_status: 'created' as const },
      { updatedAt: BEFORE, operatorUpdatedAt: BEFORE },
    ],
    [
      'other statuses: the operator’s',
      { error_status: 'retrying' as const },
      { updatedAt: BEFORE, operatorUpdatedAt: BEFORE },
    ],
  ])('%s', (_, fields, echo) => {
    const state = awaitingState(listedVersion(reported));
    resolveAwaitedEchoes(state, [listed({ id: 'cfg_a', ...fields })]);
    // An echo left at BEFORE while the listing says LATER: LATER counts as the operator's at a path conflict.
    expect(state.instances.get('cfg_a')?.reportEcho).toEqual(echo);
  });

  it('a listed instance with its file (a pass’s) is of the version of its file’s sha256', () => {
    const { content: _content, ...head } = reported;
    const withFile = { ...head, file: { sha256: 'a'.repeat(64) } };
    expect(listedVersion(withFile)).toBe(listedVersion({ ...withFile, updated_at: LATER }));
    expect(listedVersion(withFile)).not.toBe(
      listedVersion({ ...withFile, file: { sha256: 'b'.repeat(64) } }),
    );
  });

  it('awaited without a version (an older agent’s record): the statuses alone, as before', () => {
    const state = awaitingState(undefined);
    resolveAwaitedEchoes(state, [listed({ id: 'cfg_a', content: { port: 2 } })]);
    expect(state.instances.get('cfg_a')?.reportEcho).toEqual({ updatedAt: LATER, operatorUpdatedAt: BEFORE });
  });
});
