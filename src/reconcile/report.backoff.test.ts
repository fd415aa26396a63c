// deliverReports against a service that answers one report 500 every time: the report waits out a growing
// backoff (fake clock) instead of being resent on every delivery, is never dropped, and never blocks the others.
import * as nodeFs from 'node:fs/promises';
import { mkdtemp, rm } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { mockRecord } from '../../test/helpers/instances.js';
import { reportContext } from '../../test/helpers/report-context.js';
import type { StatusReport } from '../api/schemas.js';
import type { Clock } from '../lib/clock.js';
import { type Logger, silentLogger } from '../lib/logger.js';
import { type RunningMockServer, startMockServer } from '../mock-server/server.js';
import { StatusOutbox } from '../store/outbox.js';
import { deliverReports, REPORT_ATTEMPTS_ALARM, REPORT_BACKOFF, type ReportContext } from './report.js';

const API_KEY = 'sk_test_report_backoff_0123456789';
const NOW = new Date('2026-06-01T00:00:00.000Z');
const PATCHES = 'PATCH /v1/config_instances/:id';

let dir: string;
let server: RunningMockServer;
let monotonic: number;
const clock: Clock = { now: () => NOW.getTime(), monotonic: () => monotonic, sleep: async () => undefined };

beforeEach(async () => {
  dir = await mkdtemp(path.join(os.tmpdir(), 'config-agent-report-backoff-'));
  server = await startMockServer({ apiKeys: [API_KEY] });
  monotonic = 1_000;
  for (const id of ['cfg_a', 'cfg_b', 'cfg_c']) server.state.instances.set(id, mockRecord(id));
});

afterEach(async () => {
  await server.close();
  await rm(dir, { recursive: true, force: true });
});

function recordingLogger(): { logger: Logger; lines: string[] } {
  const lines: string[] = [];
  const keep =
    (level: string) =>
    (...args: unknown[]) =>
      lines.push(`${level} ${args.find((arg) => typeof arg === 'string') ?? ''}`);
  return { logger: { ...silentLogger(), warn: keep('warn'), error: keep('error') } as Logger, lines };
}

async function context(outbox: StatusOutbox, logger: Logger = silentLogger()): Promise<ReportContext> {
  return reportContext({ url: server.url, apiKey: API_KEY, clock }, outbox, { logger });
}

const deployed: StatusReport = { activity_status: 'deployed', error_status: 'none' };
const failed: StatusReport = { activity_status: 'queued', error_status: 'failed', message: 'bad' };
const patches = () => server.state.stats.get(PATCHES) ?? 0;
const reportsOf = (id: string) => server.state.reports.filter((r) => r.config_instance_id === id);

describe('a report the service refuses for good (409), derived again by every pass', () => {
  it('is dropped, and the same report queued again waits the backoff; another report of it goes at once', async () => {
    const refusals = () => server.state.stats.get(PATCHES) ?? 0;
    server.state.addFault({ match: '^/v1/config_instances/cfg_a$', count: 1_000, status: 409 });
    const outbox = await StatusOutbox.open(nodeFs, dir, silentLogger(), { now: () => 0 });
    const ctx = await context(outbox);
    // A daemon polling every second for a minute: each pass finds the instance still queued at the service and
    // the file in place, so it queues `deployed` again (plan.ts dueReport). It was sent again every second.
    for (let second = 0; second < 60; second++) {
      monotonic += 1_000;
      if (outbox.pendingFor('cfg_a') === undefined) outbox.enqueue('cfg_a', deployed, NOW);
      outbox.enqueue('cfg_b', deployed, NOW);
      await deliverReports(ctx);
    }
    expect(reportsOf('cfg_b')).toHaveLength(60);
    const cfgARefusals = refusals() - 60;
    expect(cfgARefusals).toBeGreaterThanOrEqual(2);
    expect(cfgARefusals).toBeLessThanOrEqual(3);
    // Another status for it is not the refused one: it goes at once.
    const before = refusals();
    outbox.enqueue('cfg_a', failed, NOW);
    monotonic += 1;
    await deliverReports(ctx);
    expect(refusals() - before).toBe(1);
    // The service takes reports of it again: the refused one goes once its wait is over, and is delivered.
    server.state.clearFaults();
    for (let step = 0; step < 200 && reportsOf('cfg_a').length === 0; step++) {
      monotonic += 10_000;
      if (outbox.pendingFor('cfg_a') === undefined) outbox.enqueue('cfg_a', deployed, NOW);
      await deliverReports(ctx);
    }
    expect(reportsOf('cfg_a')).toMatchObject([{ activity_status: 'deployed', error_status: 'none' }]);
  });
});

describe('a report the service answers 500 every time', () => {
  it('waits out a growing backoff: one request per backoff, not one per delivery; the others still go', async () => {
    server.state.addFault({ match: '^/v1/config_instances/cfg_a$', count: 1_000, status: 500 });
    const outbox = await StatusOutbox.open(nodeFs, dir, silentLogger(), { now: () => 0 });
    outbox.enqueue('cfg_a', deployed, NOW);
    outbox.enqueue('cfg_b', deployed, NOW);
    await outbox.persist();
    const ctx = await context(outbox);

    expect(await deliverReports(ctx)).toMatchObject({ delivered: 1, rejected: 0 });
    expect(patches()).toBe(2);
    // A daemon polling every second for a minute: the report waits its first backoff (22.5 s with random 0.5).
    for (let second = 0; second < 60; second++) {
      monotonic += 1_000;
      outbox.enqueue('cfg_c', deployed, NOW);
      await deliverReports(ctx);
    }
    expect(reportsOf('cfg_c')).toHaveLength(60);
    const cfgAPatches = patches() - 1 - 60;
    expect(cfgAPatches).toBeGreaterThanOrEqual(2);
    expect(cfgAPatches).toBeLessThanOrEqual(3);
    // A day later: the waits have grown to the hour's cap; 24 hours cost about 24 requests, not 86,400.
    const before = patches();
    for (let step = 0; step < 24 * 12; step++) {
      monotonic += 5 * 60_000;
      await deliverReports(ctx);
    }
    expect(patches() - before).toBeLessThanOrEqual(24 * 2 + 8);
    expect(patches() - before).toBeGreaterThanOrEqual(24);
    // Never dropped: still queued, on disk too, with its attempts.
    const reopened = await StatusOutbox.open(nodeFs, dir, silentLogger(), { now: () => 0 });
    expect(reopened.pending().map((entry) => entry.instanceId)).toEqual(['cfg_a']);
    expect(reopened.pending()[0]?.attempts).toBe(patches() - 61);
  });

  it('once the service takes it again it is delivered at its next try', async () => {
    server.state.addFault({ match: '^/v1/config_instances/cfg_a$', count: 3, status: 500 });
    const outbox = await StatusOutbox.open(nodeFs, dir, silentLogger(), { now: () => 0 });
    outbox.enqueue('cfg_a', deployed, NOW);
    const ctx = await context(outbox);
    for (let step = 0; step < 40 && outbox.size > 0; step++) {
      monotonic += 10_000;
      await deliverReports(ctx);
    }
    expect(reportsOf('cfg_a')).toHaveLength(1);
    expect(patches()).toBe(4);
    expect(outbox.size).toBe(0);
  });

  it('a newer report for the instance replaces it and goes at once', async () => {
    server.state.addFault({ match: '^/v1/config_instances/cfg_a$', count: 1, status: 500 });
    const outbox = await StatusOutbox.open(nodeFs, dir, silentLogger(), { now: () => 0 });
    outbox.enqueue('cfg_a', failed, NOW);
    const ctx = await context(outbox);
    await deliverReports(ctx);
    expect(outbox.size).toBe(1);

    outbox.enqueue('cfg_a', deployed, NOW);
    monotonic += 1;
    expect(await deliverReports(ctx)).toMatchObject({ delivered: 1 });
    expect(reportsOf('cfg_a')).toMatchObject([{ activity_status: 'deployed', error_status: 'none' }]);
    expect(outbox.size).toBe(0);
  });

  it('a restart tries it at once (attempts kept); after many failures each one is logged as an error', async () => {
    server.state.addFault({ match: '^/v1/config_instances/cfg_a$', count: 1_000, status: 500 });
    const outbox = await StatusOutbox.open(nodeFs, dir, silentLogger(), { now: () => 0 });
    outbox.enqueue('cfg_a', deployed, NOW);
    await deliverReports(await context(outbox));
    expect(patches()).toBe(1);

    let attempts = 1;
    let lines: string[] = [];
    for (; attempts < REPORT_ATTEMPTS_ALARM + 1; attempts++) {
      // Each restart (a `--once` run) sends it once.
      const recorded = recordingLogger();
      lines = recorded.lines;
      const reopened = await StatusOutbox.open(nodeFs, dir, silentLogger(), { now: () => 0 });
      expect(reopened.pending()[0]?.attempts).toBe(attempts);
      await deliverReports(await context(reopened, recorded.logger));
      await deliverReports(await context(reopened, recorded.logger));
    }
    expect(patches()).toBe(attempts);
    expect(lines.some((line) => /^error .*still not accepted/.test(line))).toBe(true);
  });

  it('many reports failing in one delivery make one log line naming how many, not one each (ux23)', async () => {
    server.state.addFault({ match: '^/v1/config_instances/', count: 1_000, status: 500 });
    const outbox = await StatusOutbox.open(nodeFs, dir, silentLogger(), { now: () => 0 });
    for (const id of ['cfg_a', 'cfg_b', 'cfg_c']) outbox.enqueue(id, deployed, NOW);
    const fields: Record<string, unknown>[] = [];
    const recorded = recordingLogger();
    const logger = {
      ...recorded.logger,
      warn: (obj: Record<string, unknown>, msg: string) => {
        fields.push(obj);
        recorded.logger.warn(obj, msg);
      },
    } as Logger;
    await deliverReports(await context(outbox, logger));
    expect(patches()).toBe(3);
    expect(outbox.size).toBe(3);
    // Before: three warn lines, one per report.
    expect(recorded.lines).toEqual(['warn status report failed: kept, sent again after a backoff']);
    expect(fields[0]).toMatchObject({ failed: 3, stillNotAccepted: 0, pending: 3 });
  });

  it('Retry-After longer than the backoff is honoured', async () => {
    server.state.addFault({
      match: '^/v1/config_instances/cfg_a$',
      count: 1,
      status: 500,
      retry_after: 3000,
    });
    const outbox = await StatusOutbox.open(nodeFs, dir, silentLogger(), { now: () => 0 });
    outbox.enqueue('cfg_a', deployed, NOW);
    const ctx = await context(outbox);
    await deliverReports(ctx);
    monotonic += REPORT_BACKOFF.baseMs * 4;
    await deliverReports(ctx);
    expect(patches()).toBe(1);
    monotonic += 3_000_000;
    await deliverReports(ctx);
    expect(patches()).toBe(2);
    expect(outbox.size).toBe(0);
  });
});
