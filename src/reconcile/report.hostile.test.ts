// deliverReports against a service that refuses a report for its size (413, 414, 431) or for good with another
// 4xx: the report is shrunk and sent once more (413), or dropped with a warning — never kept and retried forever.
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
import { deliverReports, type ReportContext } from './report.js';

const API_KEY = 'sk_test_report_hostile_0123456789';
const NOW = new Date('2026-06-01T00:00:00.000Z');
const clock: Clock = { now: () => NOW.getTime(), monotonic: () => 1_000, sleep: async () => undefined };

let dir: string;
let server: RunningMockServer;

beforeEach(async () => {
  dir = await mkdtemp(path.join(os.tmpdir(), 'config-agent-report-hostile-'));
  server = await startMockServer({ apiKeys: [API_KEY] });
});

afterEach(async () => {
  await server.close();
  await rm(dir, { recursive: true, force: true });
});

/** A logger that keeps its warnings and errors as plain messages. */
function recordingLogger(): { logger: Logger; lines: string[] } {
  const lines: string[] = [];
  const logger = silentLogger();
  const keep =
    (level: string) =>
    (...args: unknown[]) =>
      lines.push(`${level} ${args.find((arg) => typeof arg === 'string') ?? ''}`);
  return { logger: { ...logger, warn: keep('warn'), error: keep('error') } as Logger, lines };
}

async function context(
  reports: [string, StatusReport][],
  logger: Logger = silentLogger(),
): Promise<ReportContext> {
  const outbox = await StatusOutbox.open(nodeFs, dir, logger, { now: () => 0 });
  for (const [id, report] of reports) outbox.enqueue(id, report, NOW);
  await outbox.persist();
  return reportContext({ url: server.url, apiKey: API_KEY, clock }, outbox, { logger });
}

async function queuedOnDisk(): Promise<string[]> {
  const reopened = await StatusOutbox.open(nodeFs, dir, silentLogger(), { now: () => 0 });
  return reopened.pending().map((entry) => entry.instanceId);
}

const failed: StatusReport = { activity_status: 'queued', error_status: 'failed', message: 'x'.repeat(4096) };
const deployed: StatusReport = { activity_status: 'deployed', error_status: 'none' };

describe('a report the service refuses for its size', () => {
  it('413 once: sent again without its message, delivered; the reports behind it are delivered too', async () => {
    server.state.instances.set('cfg_a', mockRecord('cfg_a'));
    server.state.instances.set('cfg_b', mockRecord('cfg_b'));
    server.state.addFault({ match: '^/v1/config_instances/cfg_a$', count: 1, status: 413 });
    const ctx = await context([
      ['cfg_a', failed],
      ['cfg_b', deployed],
    ]);

    const delivery = await deliverReports(ctx);

    expect(delivery).toMatchObject({ delivered: 2, rejected: 0 });
    const a = server.state.reports.find((r) => r.config_instance_id === 'cfg_a');
    // The status got through; only the message, the part that made it too large, is left out.
    expect(a).toMatchObject({ activity_status: 'queued', error_status: 'failed' });
    expect(a?.message ?? '').toBe('');
    expect(await queuedOnDisk()).toEqual([]);
  });

  it('413 again without the message: dropped with a warning, not kept and retried on every pass', async () => {
    server.state.instances.set('cfg_a', mockRecord('cfg_a'));
    server.state.instances.set('cfg_b', mockRecord('cfg_b'));
    server.state.addFault({ match: '^/v1/config_instances/cfg_a$', count: 100, status: 413 });
    const { logger, lines } = recordingLogger();
    const ctx = await context(
      [
        ['cfg_a', failed],
        ['cfg_b', deployed],
      ],
      logger,
    );

    const delivery = await deliverReports(ctx);

    expect(delivery).toMatchObject({ delivered: 1, rejected: 1 });
    expect(server.state.reports.map((r) => r.config_instance_id)).toEqual(['cfg_b']);
    // Two tries of cfg_a's report (as queued, then shrunk), one of cfg_b's.
    expect(server.state.stats.get('PATCH /v1/config_instances/:id') ?? 0).toBeLessThanOrEqual(3);
    expect(await queuedOnDisk()).toEqual([]);
    expect(lines.some((line) => /dropped/.test(line))).toBe(true);
  });

  it.each([414, 431, 405, 415, 422])(
    '%i (will never succeed for this exact request): dropped at once, the others delivered',
    async (status) => {
      server.state.instances.set('cfg_a', mockRecord('cfg_a'));
      server.state.instances.set('cfg_b', mockRecord('cfg_b'));
      server.state.addFault({ match: '^/v1/config_instances/cfg_a$', count: 100, status });
      const ctx = await context([
        ['cfg_a', deployed],
        ['cfg_b', deployed],
      ]);

      const delivery = await deliverReports(ctx);

      expect(delivery).toMatchObject({ delivered: 1, rejected: 1 });
      expect(await queuedOnDisk()).toEqual([]);
    },
  );
});

describe('a report answered 2xx with a body over server.maxResponseBytes', () => {
  it('is delivered (any 2xx settles it): not kept and sent again for an answer the agent would not read', async () => {
    // The service answers a PATCH with the whole instance: one whose content is over the cap (an instance the
    // pull could not fetch, reported retrying, or one fetched before the operator lowered the cap).
    server.state.instances.set('cfg_big', mockRecord('cfg_big', { content: { blob: 'x'.repeat(2 << 20) } }));
    const ctx = await context([['cfg_big', failed]]);

    const delivery = await deliverReports(ctx);

    expect(delivery).toMatchObject({ delivered: 1, rejected: 0 });
    expect(server.state.stats.get('PATCH /v1/config_instances/:id')).toBe(1);
    expect(await queuedOnDisk()).toEqual([]);
  });
});

describe('a report answered 2xx with the instance still in another status', () => {
  it('is not taken as delivered: kept, and sent again after its backoff, not on every pass', async () => {
    server.state.instances.set('cfg_a', mockRecord('cfg_a', { activity_status: 'queued' }));
    // The answer says the service still holds `queued`: it did not take the report, whatever its status code.
    server.state.addFault({
      match: '^/v1/config_instances/cfg_a$',
      count: 100,
      mode: 'rewrite',
      replace: [{ find: '"activity_status":"deployed"', with: '"activity_status":"queued"' }],
    });
    const ctx = await context([['cfg_a', deployed]]);

    const delivery = await deliverReports(ctx);
    await deliverReports(ctx);

    expect(delivery).toMatchObject({ delivered: 0, rejected: 0 });
    expect(server.state.stats.get('PATCH /v1/config_instances/:id')).toBe(1);
    expect(await queuedOnDisk()).toEqual(['cfg_a']);
  });
});
