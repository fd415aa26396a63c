// adv34: the daemon's health over a slow disk: a pass that keeps writing is healthy however long it runs.
import * as nodeFs from 'node:fs/promises';
import os from 'node:os';
import { afterEach, describe, expect, it } from 'vitest';
import { createPassWorld, type PassWorld } from '../../test/helpers/pass-world.js';
import { PATIENCE_MS, waitFor } from '../../test/helpers/wait-for.js';
import { parseAgentConfig } from '../config/load.js';
import type { Clock } from '../lib/clock.js';
import type { FsPort } from '../lib/fs-port.js';
import { silentLogger } from '../lib/logger.js';
import type { Reconciler } from '../reconcile/reconcile.js';
import { AgentDaemon } from './agent.js';
import type { HealthReport } from './local-api.js';
import { AgentMetrics } from './metrics.js';

const SECOND = 1000;
const MINUTE = 60 * SECOND;
/** What each rename costs on this disk (an SD card whose fsyncs take seconds, in a pass of many files). */
const RENAME_MS = 40 * SECOND;
const FILES = 24;

/** Monotonic time the test moves; the daemon's own waits are recorded and end when the test releases them. */
class SteppedClock implements Clock {
  mono = 5_000_000;
  readonly sleeps: { ms: number; release: () => void }[] = [];
  now(): number {
    return Date.parse('2030-06-01T12:00:00Z') + this.mono;
  }
  monotonic(): number {
    return this.mono;
  }
  sleep(ms: number, signal?: AbortSignal): Promise<void> {
    return new Promise<void>((resolve, reject) => {
      const onAbort = () => reject(signal?.reason);
      this.sleeps.push({
        ms,
        release: () => {
          signal?.removeEventListener('abort', onAbort);
          resolve();
        },
      });
      if (signal?.aborted) onAbort();
      else signal?.addEventListener('abort', onAbort, { once: true });
    });
  }
}

let world: PassWorld | undefined;
let daemon: AgentDaemon<Reconciler> | undefined;
afterEach(async () => {
  await daemon?.stop();
  daemon = undefined;
  await world?.close();
  world = undefined;
});

/**
 * A daemon over a real Reconciler whose disk takes RENAME_MS of the clock per rename, and `onRename` asked at
 * each (a watchdog polling `/v1/health` meanwhile). Returns once the daemon waits for its first pass.
 */
async function slowDaemon(onRename: (daemon: AgentDaemon<Reconciler>) => Promise<void> | void) {
  const clock = new SteppedClock();
  let self: AgentDaemon<Reconciler> | undefined;
  const fs: FsPort = {
    ...(nodeFs as unknown as FsPort),
    rename: async (from, to) => {
      clock.mono += RENAME_MS;
      if (self !== undefined) await onRename(self);
      return nodeFs.rename(from, to);
    },
  };
  world = await createPassWorld({
    name: 'slow-disk-adv34',
    parent: os.tmpdir(),
    deps: { fs, clock },
    // Batches of 4 files: each batch's reports are queued when its writes are done (16 at a time by default).
    settings: { batchSteps: 4 },
  });
  for (let i = 0; i < FILES; i += 1) {
    world.put({
      id: `cfg_${String(i).padStart(2, '0')}`,
      relative_filepath: `app${i % 3}/f${i}.json`,
      activity_status: 'queued',
      target_status: 'deployed',
    });
  }
  const config = parseAgentConfig(
    {
      deviceId: 'dvc_1',
      server: { baseUrl: world.server.url, timeoutSeconds: 30 },
      rootDir: world.rootDir,
      stateDir: world.stateDir,
      poll: { intervalSeconds: 30, jitterRatio: 0 },
      drift: 'off',
    },
    'agent-slow-disk.adv34.test',
  );
  self = new AgentDaemon({
    deps: { fs, clock, random: () => 0.5, logger: silentLogger() },
    config,
    runner: world.reconciler,
    metrics: new AgentMetrics({ deviceId: config.deviceId }),
    hookEnv: {},
    scrub: (text) => text,
  });
  daemon = self;
  await self.start();
  await waitFor(() => clock.sleeps.length === 1 || undefined, PATIENCE_MS, { what: 'the boot wait' });
  return { clock, daemon: self, world };
}

describe('the daemon over a slow disk (adv34)', () => {
  it('stays healthy through a pass that keeps writing for longer than the stall budget, and reports it all', async () => {
    const seen: HealthReport[] = [];
    const { clock, world } = await slowDaemon((d) => void seen.push(d.health()));
    clock.sleeps[0]?.release();
    await waitFor(() => clock.sleeps.length === 2 || undefined, PATIENCE_MS, { what: 'the first pass' });
    // Over 16 minutes of the clock in one pass: each file's rename, state.json's and outbox.json's.
    expect(seen.length).toBeGreaterThan(FILES);
    expect(seen.length * RENAME_MS).toBeGreaterThan(15 * MINUTE);
    const stalled = seen.filter((report) => !report.healthy).map((report) => report.reason);
    expect(stalled, 'a healthy agent declared stalled while it wrote').toEqual([]);
    expect(world.reports().filter((r) => r.endsWith(' deployed/none'))).toHaveLength(FILES);
    for (let i = 0; i < FILES; i += 1) expect(await world.exists(`app${i % 3}/f${i}.json`)).toBe(true);
  });

  it('is still told stalled when the pass stops making progress', async () => {
    let renames = 0;
    let hold: Promise<void> | undefined;
    let release = () => {};
    const { clock, daemon } = await slowDaemon(async () => {
      renames += 1;
      if (renames === 6) {
        hold = new Promise<void>((resolve) => (release = resolve));
        await hold;
      }
    });
    clock.sleeps[0]?.release();
    await waitFor(() => hold !== undefined || undefined, PATIENCE_MS, { what: 'the held rename' });
    expect(daemon.health()).toEqual({ healthy: true, lastLoopAt: expect.any(String) });
    // Nothing recorded for twice the budget (10 minutes, a health check at each): told stalled.
    let stalled: HealthReport | undefined;
    for (let minute = 0; minute < 21 && stalled === undefined; minute += 1) {
      clock.mono += MINUTE;
      const report = daemon.health();
      if (!report.healthy) stalled = report;
    }
    expect(stalled?.reason).toMatch(/running far too long/);
    release();
    await waitFor(() => clock.sleeps.length === 2 || undefined, PATIENCE_MS, { what: 'the pass to end' });
  });
});
