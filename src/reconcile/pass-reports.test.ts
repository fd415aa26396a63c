// Reports delivered while a pass still writes: each only after its file, its directory entry, state.json and the
// outbox are durable; deliveries never outlive the pass; a stop or an outage ends delivery for it and loses nothing.
import { constants, existsSync } from 'node:fs';
import * as nodeFs from 'node:fs/promises';
import { readFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { createPassWorld, type PassWorld } from '../../test/helpers/pass-world.js';
import type { ServiceClient } from '../api/client.js';
import { HttpStatusError, NetworkError } from '../api/errors.js';
import type { FsPort } from '../lib/fs-port.js';
import { REPORT_CONCURRENCY } from './report.js';

/** Plain writes per batch (256 in production: the same code, fewer files to make the point). */
const BATCH = 16;
/** Three batches: the first one's reports are delivered while the others are written. */
const COUNT = 2 * BATCH + 8;
/** The file of the second batch whose rename waits for the first report or the planned stop (or 3 s at most). */
const HELD = `d1/c${BATCH + 1}.json`;

type Event =
  | { kind: 'fsync-file' | 'fsync-dir'; path: string }
  | { kind: 'rename'; from: string; to: string }
  | { kind: 'report'; id: string; activity: string }
  /** state.json or outbox.json renamed into place, with what it then held. */
  | { kind: 'state'; files: Map<string, string> }
  | { kind: 'outbox'; ids: Set<string> };

interface World extends PassWorld {
  events: Event[];
  /** Makes the next report requests fail (from the n-th on, counted from 1) until set back to undefined. */
  failReports?: { from: number; error: () => Error } | undefined;
  /** Aborts this controller when the n-th report request starts. */
  abortAt?: { nth: number; controller: AbortController } | undefined;
  reportCalls: number;
  /** Report requests started and not yet settled. */
  reportsInFlight: number;
}

let world: World;

/** A tmpfs when there is one (fsync is free there; the order of the calls is what is checked). */
function scratchParent(): string {
  return existsSync('/dev/shm') ? '/dev/shm' : os.tmpdir();
}

/** Node's fs, logging fsyncs and renames (relative to the world's dir), and holding HELD's rename. */
function recordingFs(dir: string, events: Event[], firstReport: Promise<unknown>): FsPort {
  const relative = (file: string) => path.relative(dir, file);
  return {
    ...nodeFs,
    open: (async (file: string, flags: number, mode?: number) => {
      const handle = await nodeFs.open(file, flags, mode);
      const isDir = typeof flags === 'number' && (flags & constants.O_DIRECTORY) !== 0;
      return new Proxy(handle, {
        get(target, property, receiver) {
          const value = Reflect.get(target, property, receiver) as unknown;
          if (typeof value !== 'function') return value;
          const bound = (value as (...args: unknown[]) => unknown).bind(target);
          if (property !== 'sync') return bound;
          return async () => {
            await bound();
            events.push({ kind: isDir ? 'fsync-dir' : 'fsync-file', path: relative(String(file)) });
          };
        },
      });
    }) as FsPort['open'],
    rename: async (from, to) => {
      const target = relative(String(to));
      if (target === path.join('root', HELD)) {
        await Promise.race([firstReport, new Promise((resolve) => setTimeout(resolve, 3_000))]);
      }
      await nodeFs.rename(from, to);
      events.push({ kind: 'rename', from: relative(String(from)), to: target });
      if (target === path.join('state', 'state.json')) {
        const state = JSON.parse(await readFile(String(to), 'utf8')) as {
          files: Record<string, { instanceId: string }>;
        };
        const files = new Map(
          Object.entries(state.files).map(([file, { instanceId }]) => [file, instanceId]),
        );
        events.push({ kind: 'state', files });
      }
      if (target === path.join('state', 'outbox.json')) {
        const outbox = JSON.parse(await readFile(String(to), 'utf8')) as {
          entries: { instanceId: string }[];
        };
        events.push({ kind: 'outbox', ids: new Set(outbox.entries.map((entry) => entry.instanceId)) });
      }
    },
  };
}

function wrappedClient(client: ServiceClient, onFirstReport: () => void): ServiceClient {
  return {
    ...client,
    reportConfigInstanceStatus: async (id, report, opts) => {
      world.reportCalls += 1;
      const nth = world.reportCalls;
      world.events.push({ kind: 'report', id, activity: report.activity_status });
      // The held file waits for the first report, or for the stop when one is planned (so it lands mid-apply).
      if (world.abortAt === undefined) onFirstReport();
      if (world.abortAt?.nth === nth) {
        world.abortAt.controller.abort();
        onFirstReport();
      }
      const failure = world.failReports;
      if (failure !== undefined && nth >= failure.from) throw failure.error();
      world.reportsInFlight += 1;
      try {
        return await client.reportConfigInstanceStatus(id, report, opts);
      } catch (error) {
        // A request a stop cut off settles late: a pass that did not wait for its deliveries ends before it.
        if (opts?.signal?.aborted === true) await new Promise((resolve) => setTimeout(resolve, 200));
        throw error;
      } finally {
        world.reportsInFlight -= 1;
      }
    },
  };
}

beforeEach(async () => {
  const events: Event[] = [];
  let reported: () => void = () => undefined;
  const firstReport = new Promise<void>((resolve) => {
    reported = resolve;
  });
  const passWorld = await createPassWorld({ name: 'pass-reports', parent: scratchParent(), open: false });
  world = Object.assign(passWorld, { events, reportCalls: 0, reportsInFlight: 0 });
  await world.open({
    deps: { fs: recordingFs(world.dir, events, firstReport) },
    clientOptions: { maxResponseBytes: 8 << 20 },
    wrapClient: (client) => wrappedClient(client, () => reported()),
    settings: { fileMode: 0o644, dirMode: 0o755, batchSteps: BATCH },
  });
  putInstances();
});

afterEach(() => world.close());

/** COUNT instances in four directories, ids in plan order (the plan sorts by path). */
function putInstances(): void {
  for (let i = 0; i < COUNT; i += 1) {
    const id = `cfg_${String(i).padStart(4, '0')}`;
    world.put({ id, relative_filepath: `d${i % 4}/c${i}.json`, content: { id } });
  }
}

function pathOf(id: string): string {
  return world.server.state.instance(id).relative_filepath;
}

/**
 * What is wrong with a `deployed` report (the index of its event): its file fsynced, renamed, its directory
 * fsynced, and state.json recording the file and outbox.json holding the report, each renamed into place and
 * its directory fsynced — all before the report left.
 */
function violation(events: readonly Event[], at: number): string | undefined {
  const report = events[at] as Extract<Event, { kind: 'report' }>;
  const target = path.join('root', pathOf(report.id));
  const renamed = events.findLastIndex((e, i) => i < at && e.kind === 'rename' && e.to === target);
  if (renamed < 0) return `${report.id}: reported before its rename`;
  const rename = events[renamed] as Extract<Event, { kind: 'rename' }>;
  if (!events.some((e, i) => i < renamed && e.kind === 'fsync-file' && e.path === rename.from))
    return `${report.id}: temp file not fsynced before its rename`;
  const dirSynced = (dir: string, after: number) =>
    events.some((e, i) => i > after && i < at && e.kind === 'fsync-dir' && e.path === dir);
  if (!dirSynced(path.dirname(target), renamed))
    return `${report.id}: directory not fsynced before its report`;
  const state = events.findLastIndex((e, i) => i < at && e.kind === 'state');
  const recorded = events[state] as Extract<Event, { kind: 'state' }> | undefined;
  if (recorded?.files.get(pathOf(report.id)) !== report.id)
    return `${report.id}: not in state.json when reported`;
  if (!dirSynced('state', state)) return `${report.id}: state.json's rename not fsynced before the report`;
  const outbox = events.findLastIndex((e, i) => i < at && e.kind === 'outbox');
  const queued = events[outbox] as Extract<Event, { kind: 'outbox' }> | undefined;
  if (queued?.ids.has(report.id) !== true) return `${report.id}: not in outbox.json when reported`;
  if (!dirSynced('state', outbox)) return `${report.id}: outbox.json's rename not fsynced before the report`;
  return undefined;
}

function reportIndexes(events: readonly Event[]): number[] {
  return events.flatMap((e, i) => (e.kind === 'report' ? [i] : []));
}

async function readJson<T>(name: string): Promise<T> {
  return JSON.parse(await readFile(path.join(world.stateDir, name), 'utf8')) as T;
}

async function queuedOnDisk(): Promise<string[]> {
  return (await readJson<{ entries: { instanceId: string }[] }>('outbox.json')).entries.map(
    (e) => e.instanceId,
  );
}

/**
 * After the state is persisted: every instance whose file state.json records is deployed on the service or has
 * its report in outbox.json.
 */
async function lostReports(): Promise<string[]> {
  const state = await readJson<{ files: Record<string, { instanceId: string }> }>('state.json');
  const queued = new Set(await queuedOnDisk());
  return Object.values(state.files)
    .map((file) => file.instanceId)
    .filter((id) => world.server.state.instance(id).activity_status !== 'deployed' && !queued.has(id));
}

describe('reports delivered while the pass still writes', () => {
  it('the first batch is reported before the second is in place, each report after its file and records are durable', async () => {
    const result = await world.reconciler.runPass({ mode: 'full' });

    expect(result.converged).toBe(true);
    expect(result.reports.delivered).toBe(COUNT);
    const { events } = world;
    const reports = reportIndexes(events);
    expect(reports.length).toBe(COUNT);
    // Pipelined: a report left before the second batch's held file was renamed into place.
    const heldRename = events.findIndex((e) => e.kind === 'rename' && e.to === path.join('root', HELD));
    expect(reports[0]).toBeLessThan(heldRename);
    expect(reports.map((at) => violation(events, at)).filter((v) => v !== undefined)).toEqual([]);
    // One report per instance, each once.
    const reported = reports.map((at) => (events[at] as Extract<Event, { kind: 'report' }>).id);
    expect(new Set(reported).size).toBe(COUNT);
    expect(world.server.state.instance('cfg_0000').activity_status).toBe('deployed');
  });

  it('a stop during the delivery: the pass ends with it, nothing is sent after, no report is lost', async () => {
    const controller = new AbortController();
    world.abortAt = { nth: 5, controller };

    await expect(world.reconciler.runPass({ mode: 'full', signal: controller.signal })).rejects.toThrow();
    const callsAtEnd = world.reportCalls;
    // Nothing outlives the pass: every delivery it started has settled, none starts later.
    expect(world.reportsInFlight).toBe(0);
    await new Promise((resolve) => setImmediate(resolve));
    expect(world.reportCalls).toBe(callsAtEnd);
    expect(world.reportCalls).toBeLessThan(5 + REPORT_CONCURRENCY);
    // What the daemon's stop does: persist. The reports not acknowledged are on disk and go with the next pass.
    await world.reconciler.flushState();
    expect(await lostReports()).toEqual([]);
    world.abortAt = undefined;
    const next = await world.reconciler.runPass({ mode: 'full' });
    expect(next.converged).toBe(true);
    expect(
      [...world.server.state.instances.values()].filter((i) => i.activity_status !== 'deployed'),
    ).toEqual([]);
  });

  it.each([
    ['a 503', () => new HttpStatusError({ method: 'PATCH', route: '/status' }, 503, undefined, undefined)],
    ['the network down', () => new NetworkError({ method: 'PATCH', route: '/status' }, 'ECONNREFUSED')],
  ])(
    '%s mid-delivery: no more reports this pass, every file written and recorded, the rest queued on disk',
    async (_label, error) => {
      world.failReports = { from: 10, error };

      const result = await world.reconciler.runPass({ mode: 'full' });

      expect(result.reports.deliveryError?.retryable).toBe(true);
      // A stop ends delivery for the pass: only the sends already in flight when it failed were made.
      expect(world.reportCalls).toBeLessThan(10 + REPORT_CONCURRENCY);
      expect(result.outcomes.filter((o) => o.action === 'written').length).toBe(COUNT);
      const state = await readJson<{ files: Record<string, unknown> }>('state.json');
      expect(Object.keys(state.files).length).toBe(COUNT);
      const deployed = [...world.server.state.instances.values()].filter(
        (i) => i.activity_status === 'deployed',
      );
      expect((await queuedOnDisk()).length + deployed.length).toBe(COUNT);
      expect(await lostReports()).toEqual([]);

      world.failReports = undefined;
      const next = await world.reconciler.runPass({ mode: 'full' });
      expect(next.converged).toBe(true);
      expect(next.reports.delivered).toBe(COUNT - deployed.length);
    },
  );

  it('a report the service fails on its own (500) stays queued, is sent once this pass, and the rest go', async () => {
    world.failReports = {
      from: 5,
      error: () => {
        world.failReports = undefined;
        return new HttpStatusError({ method: 'PATCH', route: '/status' }, 500, undefined, undefined);
      },
    };

    const result = await world.reconciler.runPass({ mode: 'full' });

    const reports = reportIndexes(world.events).map(
      (at) => world.events[at] as Extract<Event, { kind: 'report' }>,
    );
    const failed = reports[4]!.id;
    expect(reports.filter((r) => r.id === failed).length).toBe(1);
    expect(reports.length).toBe(COUNT);
    expect(result.reports.delivered).toBe(COUNT - 1);
    expect(world.reconciler.pendingReports).toBe(1);
    expect(await queuedOnDisk()).toEqual([failed]);
  });
});
