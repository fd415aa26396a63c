// The durable guarantee of a pass, whatever the concurrency of apply: every file and its directory entry are
// fsynced before its instance is reported `deployed`. The fs and the client record one ordered event log.
import { constants } from 'node:fs';
import * as nodeFs from 'node:fs/promises';
import { mkdir, mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { createClient, type ServiceClient } from '../api/client.js';
import type { Deps } from '../lib/deps.js';
import type { FsPort } from '../lib/fs-port.js';
import { silentLogger } from '../lib/logger.js';
import { type RunningMockServer, startMockServer } from '../mock-server/server.js';
import type { ReconcilerSettings } from './pass-runner.js';
import { Reconciler } from './reconcile.js';

const API_KEY = 'sk_test_durability_0123456789abcdef';
const DEVICE = 'dvc_1';
const T0 = '2026-01-01T00:00:00.000Z';

type Event =
  | { kind: 'fsync-file'; path: string }
  | { kind: 'fsync-dir'; path: string }
  | { kind: 'rename'; from: string; to: string }
  | { kind: 'report'; id: string; activity: string };

interface World {
  dir: string;
  rootDir: string;
  server: RunningMockServer;
  events: Event[];
  /** Directories (relative to the root) whose fsync fails with EIO. */
  failingDirSyncs: Set<string>;
  reconciler: Reconciler;
}

let world: World;

/** Node's fs, recording fsyncs and renames under the root (the state directory's own writes are not logged). */
function recordingFs(rootDir: string, events: Event[], failingDirSyncs: Set<string>): FsPort {
  const underRoot = (file: string) => {
    const relative = path.relative(rootDir, file);
    return relative.startsWith('..') ? undefined : relative;
  };
  return {
    ...nodeFs,
    open: (async (file: string, flags: number, mode?: number) => {
      const handle = await nodeFs.open(file, flags, mode);
      const relative = underRoot(String(file));
      if (relative === undefined) return handle;
      const isDir = typeof flags === 'number' && (flags & constants.O_DIRECTORY) !== 0;
      return new Proxy(handle, {
        get(target, property, receiver) {
          const value = Reflect.get(target, property, receiver) as unknown;
          if (typeof value !== 'function') return value;
          const bound = (value as (...args: unknown[]) => unknown).bind(target);
          if (property !== 'sync') return bound;
          return async () => {
            if (isDir && failingDirSyncs.has(relative)) {
              throw Object.assign(new Error(`EIO: i/o error, fsync '${String(file)}'`), { code: 'EIO' });
            }
            await bound();
            events.push({ kind: isDir ? 'fsync-dir' : 'fsync-file', path: relative });
          };
        },
      });
    }) as FsPort['open'],
    rename: async (from, to) => {
      await nodeFs.rename(from, to);
      const target = underRoot(String(to));
      if (target !== undefined)
        events.push({ kind: 'rename', from: underRoot(String(from)) ?? '', to: target });
    },
  };
}

function recordingClient(client: ServiceClient, events: Event[]): ServiceClient {
  return {
    ...client,
    reportConfigInstanceStatus: async (id, report, opts) => {
      events.push({ kind: 'report', id, activity: report.activity_status });
      return client.reportConfigInstanceStatus(id, report, opts);
    },
  };
}

beforeEach(async () => {
  const dir = await mkdtemp(path.join(os.tmpdir(), 'config-agent-durability-'));
  const rootDir = path.join(dir, 'root');
  await mkdir(rootDir);
  await mkdir(path.join(dir, 'state'), { mode: 0o700 });
  const server = await startMockServer({ apiKeys: [API_KEY] });
  const events: Event[] = [];
  const failingDirSyncs = new Set<string>();
  const client = recordingClient(
    createClient({ baseUrl: server.url, apiKey: API_KEY, timeoutMs: 10_000, maxResponseBytes: 8 << 20 }),
    events,
  );
  const deps: Deps = {
    fs: recordingFs(rootDir, events, failingDirSyncs),
    clock: {
      now: () => Date.parse('2026-06-01T00:00:00.000Z'),
      monotonic: () => 1_000,
      sleep: async () => undefined,
    },
    random: () => 0.5,
    logger: silentLogger(),
  };
  const settings: ReconcilerSettings = {
    deviceId: DEVICE,
    rootDir,
    stateDir: path.join(dir, 'state'),
    fileMode: 0o644,
    dirMode: 0o755,
    retry: { maxAttempts: 3, baseDelaySeconds: 10, maxDelaySeconds: 60 },
    requestRetries: 0,
  };
  const reconciler = await Reconciler.open(deps, settings, client);
  world = { dir, rootDir, server, events, failingDirSyncs, reconciler };
});

afterEach(async () => {
  await world.reconciler.close();
  await world.server.close();
  await rm(world.dir, { recursive: true, force: true });
});

/** 60 instances over a root file, two existing-to-be directories and nested new ones. */
function putInstances(): Map<string, string> {
  const paths = new Map<string, string>();
  for (let i = 0; i < 60; i += 1) {
    const id = `cfg_${String(i).padStart(3, '0')}`;
    const relative = i === 0 ? 'top.json' : `d${i % 3}/s${i % 5}/c${i}.json`;
    paths.set(id, relative);
    world.server.state.instances.set(id, {
      id,
      device_id: DEVICE,
      relative_filepath: relative,
      config_schema_id: `sch_${id}`,
      config_type_id: 'typ',
      target_status: 'deployed',
      activity_status: 'queued',
      error_status: 'none',
      content: { id, padding: 'x'.repeat(200) },
      created_at: T0,
      updated_at: T0,
    });
  }
  return paths;
}

function directoryOf(relative: string): string {
  const dir = path.posix.dirname(relative);
  return dir === '.' ? '' : dir;
}

/**
 * For the instance's report: its file was fsynced, then renamed into place, then its directory fsynced —
 * all before the report left. Returns what is wrong, or undefined.
 */
function orderViolation(events: readonly Event[], id: string, relative: string): string | undefined {
  const reported = events.findIndex((e) => e.kind === 'report' && e.id === id && e.activity === 'deployed');
  if (reported < 0) return `${id} was never reported deployed`;
  const renamed = events.findLastIndex((e, i) => i < reported && e.kind === 'rename' && e.to === relative);
  if (renamed < 0) return `${id}: no rename into ${relative} before its report`;
  const rename = events[renamed] as Extract<Event, { kind: 'rename' }>;
  const fileSynced = events.findIndex(
    (e, i) => i < renamed && e.kind === 'fsync-file' && e.path === rename.from,
  );
  if (fileSynced < 0) return `${id}: temp file not fsynced before its rename`;
  const dirSynced = events.findIndex(
    (e, i) => i > renamed && i < reported && e.kind === 'fsync-dir' && e.path === directoryOf(relative),
  );
  if (dirSynced < 0)
    return `${id}: directory ${directoryOf(relative) || '(root)'} not fsynced between rename and report`;
  return undefined;
}

describe('the durable guarantee of a pass', () => {
  it('every file: fsync, rename, directory fsync, and only then its `deployed` report', async () => {
    const paths = putInstances();

    const result = await world.reconciler.runPass({ mode: 'full' });

    expect(result.converged).toBe(true);
    const violations = [...paths].map(([id, relative]) => orderViolation(world.events, id, relative));
    expect(violations.filter((v) => v !== undefined)).toEqual([]);
    expect(await readFile(path.join(world.rootDir, 'd1/s1/c1.json'), 'utf8')).toContain('"cfg_001"');
  });

  it('bytes already in place but unrecorded (a leftover, an adopted file): fsynced with their directory before the report', async () => {
    const paths = putInstances();
    const leftovers = [...paths].filter(([, relative]) => relative.startsWith('d1/'));
    for (const [id, relative] of leftovers) {
      await mkdir(path.join(world.rootDir, directoryOf(relative)), { recursive: true });
      const content = { id, padding: 'x'.repeat(200) };
      await writeFile(path.join(world.rootDir, relative), `${JSON.stringify(content, null, 2)}\n`, {
        mode: 0o644,
      });
    }

    const result = await world.reconciler.runPass({ mode: 'full' });

    expect(result.converged).toBe(true);
    for (const [id, relative] of leftovers) {
      const reported = world.events.findIndex((e) => e.kind === 'report' && e.id === id);
      expect(reported).toBeGreaterThan(-1);
      const before = world.events.slice(0, reported);
      expect(before.some((e) => e.kind === 'rename' && e.to === relative)).toBe(false);
      expect(before.some((e) => e.kind === 'fsync-file' && e.path === relative)).toBe(true);
      const fileSynced = before.findIndex((e) => e.kind === 'fsync-file' && e.path === relative);
      expect(
        before.some((e, i) => i > fileSynced && e.kind === 'fsync-dir' && e.path === directoryOf(relative)),
      ).toBe(true);
    }
  });

  it('a directory whose fsync fails: its files are not reported deployed; every other file keeps the order', async () => {
    const paths = putInstances();
    world.failingDirSyncs.add('d2/s2');

    const result = await world.reconciler.runPass({ mode: 'full' });

    expect(result.converged).toBe(false);
    const inFailing = [...paths].filter(([, relative]) => directoryOf(relative) === 'd2/s2');
    expect(inFailing.length).toBeGreaterThan(0);
    for (const [id] of inFailing) {
      expect(world.events.some((e) => e.kind === 'report' && e.id === id && e.activity === 'deployed')).toBe(
        false,
      );
      expect(world.server.state.instance(id).error_status).toBe('retrying');
    }
    const others = [...paths].filter(([, relative]) => directoryOf(relative) !== 'd2/s2');
    const violations = others.map(([id, relative]) => orderViolation(world.events, id, relative));
    expect(violations.filter((v) => v !== undefined)).toEqual([]);
  });
  it('a takeover (a newer instance wants the path of a deployed one): the swap keeps the order too', async () => {
    putInstances();
    expect((await world.reconciler.runPass({ mode: 'full' })).converged).toBe(true);
    world.events.length = 0;
    const old = world.server.state.instance('cfg_000');
    world.server.state.instances.set('cfg_new', {
      ...old,
      id: 'cfg_new',
      config_schema_id: 'sch_cfg_new',
      activity_status: 'queued',
      content: { id: 'cfg_new', padding: 'y'.repeat(200) },
      created_at: '2026-12-30T00:00:00.000Z',
      updated_at: '2026-12-31T00:00:00.000Z',
    });

    await world.reconciler.runPass({ mode: 'full' });

    expect(await readFile(path.join(world.rootDir, 'top.json'), 'utf8')).toContain('"cfg_new"');
    expect(orderViolation(world.events, 'cfg_new', 'top.json')).toBeUndefined();
  });
});
