// pullInstances against the mock service: what each mode asks for, when a poll escalates to a full pull, which
// owners a poll fetches, and what the pull returns.

import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { mockRecord } from '../../test/helpers/instances.js';
import { createClient } from '../api/client.js';
import type { Clock } from '../lib/clock.js';
import { silentLogger } from '../lib/logger.js';
import { type RunningMockServer, startMockServer } from '../mock-server/server.js';
import type { ConfigInstanceRecord } from '../mock-server/state.js';
import type { ManagedFile } from '../store/state.js';
import { type PullContext, pullInstances, queriesFor } from './pull.js';

const API_KEY = 'sk_test_pull_0123456789abcdef';
const T0 = '2026-01-01T00:00:00.000Z';
const clock: Clock = { now: () => Date.parse(T0), monotonic: () => 1_000, sleep: async () => undefined };

let server: RunningMockServer;

beforeEach(async () => {
  server = await startMockServer({ apiKeys: [API_KEY] });
});

afterEach(async () => {
  await server.close();
});

function put(id: string, fields: Partial<ConfigInstanceRecord> = {}): void {
  server.state.instances.set(id, mockRecord(id, fields));
}

function owned(entries: Record<string, string>): Map<string, ManagedFile> {
  return new Map(
    Object.entries(entries).map(([relative, instanceId]) => [
      relative,
      { instanceId, sha256: '0'.repeat(64), mode: 0o640, createdDirs: [], writtenAt: T0 },
    ]),
  );
}

function context(files: Map<string, ManagedFile> = new Map(), extra: Partial<PullContext> = {}): PullContext {
  return {
    client: createClient({
      baseUrl: server.url,
      apiKey: API_KEY,
      timeoutMs: 10_000,
      maxResponseBytes: 1 << 20,
    }),
    deviceId: 'dvc_1',
    files,
    retry: { retries: 0, baseDelayMs: 0, maxDelayMs: 0, clock, random: () => 0.5, logger: silentLogger() },
    logger: silentLogger(),
    clock,
    ...extra,
  };
}

function listRequests(): number {
  return server.state.statsSnapshot().total;
}

const ids = (pulled: { instances: { id: string }[] }) => pulled.instances.map((i) => i.id).sort();

describe('queriesFor', () => {
  it('a poll asks only for what changed', () => {
    expect(queriesFor('incremental', 'dvc_1')).toEqual([
      { device_id: 'dvc_1', activity_status: 'queued' },
      { device_id: 'dvc_1', target_status: 'removed', activity_status: 'deployed' },
    ]);
  });

  it('a full pull asks for every instance targeting deployed, what changed, and the rarer removals', () => {
    expect(queriesFor('full', 'dvc_1')).toEqual([
      { device_id: 'dvc_1', target_status: 'deployed' },
      { device_id: 'dvc_1', activity_status: 'queued' },
      { device_id: 'dvc_1', target_status: 'removed', activity_status: 'deployed' },
      { device_id: 'dvc_1', target_status: 'created', activity_status: 'deployed' },
      { device_id: 'dvc_1', target_status: 'removed', activity_status: 'created' },
      { device_id: 'dvc_1', target_status: 'removed', activity_status: 'validating' },
      { device_id: 'dvc_1', target_status: 'removed', activity_status: 'validated' },
    ]);
  });
});

describe('pullInstances', () => {
  beforeEach(() => {
    put('cfg_settled', { activity_status: 'deployed' });
    put('cfg_new');
    put('cfg_gone', { target_status: 'removed', activity_status: 'deployed' });
    put('cfg_back', { target_status: 'created', activity_status: 'deployed' });
    put('cfg_never', { target_status: 'removed', activity_status: 'validated' });
    put('cfg_other', { device_id: 'dvc_2' });
  });

  it('full: every instance of this device the queries name, once each', async () => {
    const pulled = await pullInstances('full', context());

    expect(pulled.mode).toBe('full');
    expect(ids(pulled)).toEqual(['cfg_back', 'cfg_gone', 'cfg_never', 'cfg_new', 'cfg_settled']);
    expect(pulled.invalid).toEqual([]);
    expect(pulled.skipped).toEqual([]);
  });

  it('a poll that removes nothing recorded stays a poll: only what changed', async () => {
    const pulled = await pullInstances('incremental', context(owned({ 'cfg_settled.json': 'cfg_settled' })));

    expect(pulled.mode).toBe('incremental');
    expect(ids(pulled)).toEqual(['cfg_gone', 'cfg_new']);
  });

  it('a poll that would remove a recorded file escalates to a full pull', async () => {
    const pulled = await pullInstances('incremental', context(owned({ 'cfg_gone.json': 'cfg_gone' })));

    expect(pulled.mode).toBe('full');
    expect(ids(pulled)).toEqual(['cfg_back', 'cfg_gone', 'cfg_never', 'cfg_new', 'cfg_settled']);
  });

  it('a poll whose changed instance targets deployed at a recorded path does not escalate', async () => {
    const pulled = await pullInstances('incremental', context(owned({ 'cfg_new.json': 'cfg_new' })));

    expect(pulled.mode).toBe('incremental');
    expect(ids(pulled)).toEqual(['cfg_gone', 'cfg_new']);
  });

  it('a poll fetches the recorded owner of a path a changed instance wants, and nothing more', async () => {
    put('cfg_owner', { activity_status: 'deployed', relative_filepath: 'cfg_new.json' });
    const ctx = context(owned({ 'cfg_new.json': 'cfg_owner' }));

    const pulled = await pullInstances('incremental', ctx);

    expect(pulled.mode).toBe('incremental');
    expect(ids(pulled)).toEqual(['cfg_gone', 'cfg_new', 'cfg_owner']);
    const withOwner = listRequests();
    server.state.stats.clear();
    await pullInstances('incremental', context());
    expect(withOwner - listRequests()).toBe(1);
  });

  it('no owner request when the owner is the instance itself or was pulled already', async () => {
    // cfg_new owns its own path; shared.json, which cfg_new2 wants, is recorded for cfg_gone, in the poll.
    put('cfg_new2', { relative_filepath: 'shared.json' });
    await pullInstances('incremental', context());
    const plainRequests = listRequests();
    server.state.stats.clear();

    const pulled = await pullInstances(
      'incremental',
      context(owned({ 'cfg_new.json': 'cfg_new', 'shared.json': 'cfg_gone' })),
    );

    expect(pulled.mode).toBe('incremental');
    expect(pulled.instances.map((i) => i.id).sort()).toEqual(['cfg_gone', 'cfg_new', 'cfg_new2']);
    expect(listRequests()).toBe(plainRequests);
  });

  it('an owner fetched by a poll that is gone from the service adds nothing', async () => {
    const pulled = await pullInstances('incremental', context(owned({ 'cfg_new.json': 'cfg_vanished' })));

    expect(pulled.mode).toBe('incremental');
    expect(ids(pulled)).toEqual(['cfg_gone', 'cfg_new']);
  });

  it("a full pull is one listing, and one that escalates from a poll adds one listing to the poll's queries", async () => {
    server.state.stats.clear();
    const full = await pullInstances('full', context(owned({ 'cfg_gone.json': 'cfg_gone' })));
    const fullRequests = listRequests();
    server.state.stats.clear();
    await pullInstances('incremental', context());
    const pollRequests = listRequests();
    server.state.stats.clear();

    const escalated = await pullInstances('incremental', context(owned({ 'cfg_gone.json': 'cfg_gone' })));

    expect(full.mode).toBe('full');
    expect(fullRequests).toBe(1);
    expect(escalated.mode).toBe('full');
    expect(listRequests()).toBe(pollRequests + fullRequests);
  });

  it('an aborted pull fails instead of returning a partial listing', async () => {
    await expect(
      pullInstances('full', context(new Map(), { signal: AbortSignal.abort() })),
    ).rejects.toThrow();
  });
});
