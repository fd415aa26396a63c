// PassReports with deliveries side by side: the next one leaves while the one before still waits for answers,
// each only after the persist that made its reports durable, and an instance's reports stay one at a time, in order.
import { createFsFromVolume, Volume } from 'memfs';
import { describe, expect, it } from 'vitest';
import type { ServiceClient } from '../api/client.js';
import type { StatusReport } from '../api/schemas.js';
import type { Clock } from '../lib/clock.js';
import type { FsPort } from '../lib/fs-port.js';
import { silentLogger } from '../lib/logger.js';
import { OUTBOX_FILE, StatusOutbox } from '../store/outbox.js';
import { emptyState } from '../store/state.js';
import { PassReports, type ReportContext } from './report.js';

const STATE_DIR = '/state';
const T0 = new Date('2026-01-01T00:00:00.000Z');
const deployed: StatusReport = { activity_status: 'deployed', error_status: 'none' };
const removed: StatusReport = { activity_status: 'removed', error_status: 'none' };
const clock: Clock = { now: () => T0.getTime(), monotonic: () => 0, sleep: async () => undefined };

const tick = () => new Promise((resolve) => setImmediate(resolve));

/** A service whose every answer waits until the test releases it (the newest first: a delayed, reordering wire). */
function delayedService(outboxOnDisk: () => Set<string>) {
  const log: string[] = [];
  const inFlight = new Map<string, number>();
  const violations: string[] = [];
  const held: Array<() => void> = [];
  const client = {
    reportConfigInstanceStatus: (id: string, report: StatusReport) => {
      const open = (inFlight.get(id) ?? 0) + 1;
      inFlight.set(id, open);
      if (open > 1) violations.push(`${id} twice in flight`);
      if (!outboxOnDisk().has(`${id}:${report.activity_status}`))
        violations.push(`${id} ${report.activity_status} sent before the outbox on disk held it`);
      log.push(`send ${id} ${report.activity_status}`);
      return new Promise<undefined>((resolve) => {
        held.push(() => {
          inFlight.set(id, (inFlight.get(id) ?? 1) - 1);
          log.push(`answer ${id} ${report.activity_status}`);
          resolve(undefined);
        });
      });
    },
  } as unknown as ServiceClient;
  const answerNewest = async () => {
    while (held.length > 0) {
      held.pop()?.();
      await tick();
    }
  };
  return { client, log, violations, answerNewest, held };
}

describe('PassReports, deliveries side by side', () => {
  it('a second delivery leaves while the first awaits its answers; an instance never has two in flight, in order', async () => {
    const vol = Volume.fromJSON({});
    vol.mkdirSync(STATE_DIR, { recursive: true });
    const fs = createFsFromVolume(vol).promises as unknown as FsPort;
    const outbox = await StatusOutbox.open(fs, STATE_DIR, silentLogger(), { now: () => 0 });
    const onDisk = () => {
      if (!vol.existsSync(`${STATE_DIR}/${OUTBOX_FILE}`)) return new Set<string>();
      const file = JSON.parse(vol.readFileSync(`${STATE_DIR}/${OUTBOX_FILE}`, 'utf8') as string) as {
        entries: { instanceId: string; report: StatusReport }[];
      };
      return new Set(file.entries.map((entry) => `${entry.instanceId}:${entry.report.activity_status}`));
    };
    const service = delayedService(onDisk);
    const ctx: ReportContext = {
      client: service.client,
      outbox,
      state: emptyState('dvc_1'),
      lastSeenUpdatedAt: new Map(),
      retry: { retries: 0, baseDelayMs: 0, maxDelayMs: 0, clock, random: () => 0.5, logger: silentLogger() },
      logger: silentLogger(),
    };
    let persists = 0;
    const reports = new PassReports(ctx, {
      persistRecords: async () => {
        persists += 1;
        await outbox.persist();
      },
      every: 2,
    });

    const pass = reports.around(async () => {
      outbox.enqueue('cfg_a', deployed, T0);
      outbox.enqueue('cfg_b', deployed, T0);
      reports.queued();
      for (let i = 0; i < 20 && service.held.length < 2; i++) await tick();
      // cfg_a's deployed report is in flight; its later report and cfg_c's make the next delivery.
      outbox.enqueue('cfg_a', removed, T0);
      outbox.enqueue('cfg_c', deployed, T0);
      reports.queued();
      for (let i = 0; i < 20 && service.held.length < 3; i++) await tick();
      await service.answerNewest();
      await service.answerNewest();
    });
    await pass;
    const total = await reports.finish();

    expect(service.violations).toEqual([]);
    // cfg_c left before any answer came back: two deliveries in flight at once.
    expect(service.log.slice(0, 3)).toEqual([
      'send cfg_a deployed',
      'send cfg_b deployed',
      'send cfg_c deployed',
    ]);
    const ofA = service.log.filter((line) => line.includes('cfg_a'));
    expect(ofA).toEqual([
      'send cfg_a deployed',
      'answer cfg_a deployed',
      'send cfg_a removed',
      'answer cfg_a removed',
    ]);
    expect(total).toMatchObject({ delivered: 4, rejected: 0 });
    expect(persists).toBe(2);
    expect(outbox.size).toBe(0);
  });
});
