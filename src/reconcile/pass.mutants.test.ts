// runPass's own decisions, in-process against the mock service: reports before the pull, stopping at each
// stage, what the pass hands the planner, the recorder and the writer, and what a full pass forgets and prunes.
import * as nodeFs from 'node:fs/promises';
import { mkdir, mkdtemp, readdir, rm, stat } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { mockRecord } from '../../test/helpers/instances.js';
import { createClient, type ServiceClient } from '../api/client.js';
import { NetworkError } from '../api/errors.js';
import type { Clock } from '../lib/clock.js';
import type { Deps } from '../lib/deps.js';
import type { FsPort } from '../lib/fs-port.js';
import { silentLogger } from '../lib/logger.js';
import { type RunningMockServer, startMockServer } from '../mock-server/server.js';
import type { ConfigInstanceRecord } from '../mock-server/state.js';
import { CACHE_DIR } from '../store/content-cache.js';
import { TEMP_PREFIX } from '../store/path-guard.js';
import type { PassOptions, PassResult, ReconcilerSettings } from './pass-runner.js';
import { Reconciler } from './reconcile.js';
import { REPORT_BACKOFF } from './report.js';

const API_KEY = 'sk_test_pass_mutants_0123456789abcdef';
const LIST = '^/v1/config_instances$';

let dir: string;
let rootDir: string;
let server: RunningMockServer;
let client: ServiceClient;
let reconciler: Reconciler;
/** Runs before each fs call the agent makes (its name, first argument and the rest): where a test stops it. */
let onFsCall: (name: string, target: string, args: readonly unknown[]) => void;
/** Every wait the pass asked the clock for, in ms. */
const slept: number[] = [];

const clock: Clock & { advance(ms: number): void } = (() => {
  let monotonic = 1_000;
  return {
    now: () => Date.parse('2026-06-01T00:00:00.000Z') + monotonic,
    monotonic: () => monotonic,
    // A wait the signal has already stopped ends at once, as the real clock's does.
    sleep: async (ms: number, signal?: AbortSignal) => {
      signal?.throwIfAborted();
      slept.push(ms);
      monotonic += ms;
    },
    advance(ms: number) {
      monotonic += ms;
    },
  };
})();

function watchedFs(): FsPort {
  const real: FsPort = nodeFs;
  const wrap = <K extends keyof FsPort>(name: K) =>
    (async (...args: unknown[]) => {
      onFsCall(name, String(args[0]), args);
      return (real[name] as (...rest: unknown[]) => Promise<unknown>)(...args);
    }) as unknown as FsPort[K];
  return {
    open: wrap('open'),
    rename: wrap('rename'),
    unlink: wrap('unlink'),
    link: wrap('link'),
    lstat: wrap('lstat'),
    stat: wrap('stat'),
    mkdir: wrap('mkdir'),
    readdir: wrap('readdir'),
    readFile: wrap('readFile'),
    rmdir: wrap('rmdir'),
    chmod: wrap('chmod'),
  };
}

async function open(
  extra: Partial<ReconcilerSettings> = {},
  options: { readOnly?: boolean; client?: ServiceClient } = {},
): Promise<void> {
  await reconciler?.close();
  const deps: Deps = { fs: watchedFs(), clock, random: () => 0.5, logger: silentLogger() };
  const settings: ReconcilerSettings = {
    deviceId: 'dvc_1',
    rootDir,
    stateDir: path.join(dir, 'state'),
    fileMode: 0o640,
    dirMode: 0o750,
    retry: { maxAttempts: 3, baseDelaySeconds: 10, maxDelaySeconds: 60 },
    requestRetries: 0,
    ...extra,
  };
  reconciler = await Reconciler.open(deps, settings, options.client ?? client, {
    readOnly: options.readOnly ?? false,
  });
}

beforeEach(async () => {
  dir = await mkdtemp(path.join(os.tmpdir(), 'config-agent-pass-mutants-'));
  rootDir = path.join(dir, 'root');
  await mkdir(rootDir);
  await mkdir(path.join(dir, 'state'), { mode: 0o700 });
  server = await startMockServer({ apiKeys: [API_KEY] });
  client = createClient({
    baseUrl: server.url,
    apiKey: API_KEY,
    // Only bounds a failing run: a first request under a loaded Stryker dry run has taken more than 10 s.
    timeoutMs: 60_000,
    maxResponseBytes: 1 << 20,
  });
  onFsCall = () => undefined;
  slept.length = 0;
  await open();
});

afterEach(async () => {
  await reconciler.close();
  await server.close();
  await rm(dir, { recursive: true, force: true });
});

function put(id: string, fields: Partial<ConfigInstanceRecord> = {}): void {
  server.state.instances.set(id, mockRecord(id, fields));
}

const pass = (options: Partial<PassOptions> = {}): Promise<PassResult> =>
  reconciler.runPass({ mode: 'full', ...options });
const reports = () =>
  server.state.reports.map((r) => `${r.config_instance_id} ${r.activity_status}/${r.error_status}`);
const exists = (relative: string) =>
  stat(path.join(rootDir, relative)).then(
    () => true,
    () => false,
  );

describe('runPass: reports of an earlier pass', () => {
  it('go out before the pull, so they are delivered even when the pull then fails; deployed ones after it', async () => {
    put('cfg_a');
    // Never deployed by the agent and no longer wanted: archived, reported removed.
    put('cfg_b', { target_status: 'removed', activity_status: 'created' });
    server.state.addFault({ match: '^/v1/config_instances/cfg_[ab]$', count: 2, status: 503 });
    expect(await pass()).toMatchObject({ reachable: true, reports: { delivered: 0, pending: 2 } });
    server.state.addFault({ match: LIST, count: 1, status: 503 });

    const result = await pass({ mode: 'incremental' });

    expect(result).toMatchObject({ reachable: false, reports: { delivered: 1, pending: 1 } });
    expect(reports()).toEqual(['cfg_b removed/none']);
    // A deployed report was made for the version then listed: it goes once a pull shows what the service holds.
    expect(await pass({ mode: 'incremental' })).toMatchObject({ reachable: true, converged: true });
    expect(reports()).toEqual(['cfg_b removed/none', 'cfg_a deployed/none']);
  });

  it('a delivery that went through, or skipped one report on its own, names no delivery error', async () => {
    put('cfg_a');
    put('cfg_b');
    // A 500 is this report's own failure: skipped and kept; delivery goes on and was not deferred.
    server.state.addFault({ match: '^/v1/config_instances/cfg_b$', count: 1, status: 500 });

    const skipped = await pass();

    expect(skipped.reports).toStrictEqual({ delivered: 1, rejected: 0, pending: 1 });
    // It waits out its backoff (report.ts REPORT_BACKOFF), then goes.
    expect(await pass()).toMatchObject({ converged: false, reports: { delivered: 0, pending: 1 } });
    clock.advance(REPORT_BACKOFF.baseMs);
    expect(await pass()).toMatchObject({ converged: true });
    expect(reports().sort()).toEqual(['cfg_a deployed/none', 'cfg_b deployed/none']);
  });

  it('are not delivered by a dry run (of a reconciler that could deliver them)', async () => {
    put('cfg_a');
    server.state.addFault({ match: '^/v1/config_instances/cfg_a$', count: 1, status: 503 });
    await pass();

    const result = await pass({ dryRun: true });

    expect(result.reports).toMatchObject({ delivered: 0, pending: 1 });
    expect(reports()).toEqual([]);
  });
});

let stop: AbortController;
/** A client that stops the agent as soon as a listing request has been answered (or failed). */
function stoppingAfterListing(): ServiceClient {
  stop = new AbortController();
  return {
    ...client,
    listConfigInstancePage: (query, options) =>
      client.listConfigInstancePage(query, options).finally(() => stop.abort(new Error('agent stopping'))),
  };
}

describe('runPass: stopping', () => {
  it('a stop while pulling: the pass rejects with the stop, nothing is written', async () => {
    put('cfg_a');
    const controller = new AbortController();
    const stopping: ServiceClient = {
      ...client,
      listConfigInstancePage: (query, options) => {
        controller.abort(new Error('agent stopping'));
        return client.listConfigInstancePage(query, options);
      },
    };
    await open({}, { client: stopping });

    await expect(pass({ signal: controller.signal })).rejects.toThrow('agent stopping');
    expect(await exists('cfg_a.json')).toBe(false);
    expect(reports()).toEqual([]);
    // The listing request was never sent: the stop reached the client.
    expect(server.state.statsSnapshot().total).toBe(0);
  });

  it('a stop that cuts a report off (the connection drops as the agent stops): the pass rejects with the stop', async () => {
    put('cfg_a');
    const controller = new AbortController();
    const stopping: ServiceClient = {
      ...client,
      reportConfigInstanceStatus: async () => {
        controller.abort(new Error('agent stopping'));
        throw new NetworkError({ method: 'PATCH', route: '/v1/config_instances/{id}' }, 'socket closed');
      },
    };
    await open({}, { client: stopping });

    await expect(pass({ signal: controller.signal })).rejects.toThrow('agent stopping');
    expect(await exists('cfg_a.json')).toBe(true);
    expect(reconciler.pendingReports).toBe(1);
  });

  it('a stop that aborts a report in flight (the client throws the stop itself): the pass rejects with the stop', async () => {
    put('cfg_a');
    put('cfg_b');
    const controller = new AbortController();
    const stopping: ServiceClient = {
      ...client,
      reportConfigInstanceStatus: (id, report, options) => {
        controller.abort(new Error('agent stopping'));
        return client.reportConfigInstanceStatus(id, report, options);
      },
    };
    await open({}, { client: stopping });

    await expect(pass({ signal: controller.signal })).rejects.toThrow('agent stopping');
    expect(await exists('cfg_a.json')).toBe(true);
    expect(await exists('cfg_b.json')).toBe(true);
    expect(reports()).toEqual([]);
    expect(reconciler.pendingReports).toBe(2);
  });

  it('a stop while state is saved (the save fails as the agent stops): the pass rejects with the stop', async () => {
    put('cfg_a');
    const controller = new AbortController();
    onFsCall = (name, _target, args) => {
      if (name === 'rename' && String(args[1]).endsWith('state.json')) {
        controller.abort(new Error('agent stopping'));
        throw Object.assign(new Error('EIO: i/o error'), { code: 'EIO' });
      }
    };

    await expect(pass({ signal: controller.signal })).rejects.toThrow('agent stopping');
    expect(reports()).toEqual([]);
  });

  it('a stop during a request retry ends the wait: no backoff is slept, the pass rejects with the stop', async () => {
    await open({ requestRetries: 3 }, { client: stoppingAfterListing() });
    put('cfg_a');
    server.state.addFault({ match: LIST, count: 3, status: 503 });

    await expect(pass({ signal: stop.signal })).rejects.toThrow('agent stopping');
    expect(slept).toEqual([]);
    expect(await exists('cfg_a.json')).toBe(false);
  });

  it("a stop during a report's retry wait ends the wait: no backoff is slept, the report stays queued", async () => {
    const controller = new AbortController();
    const stopping: ServiceClient = {
      ...client,
      reportConfigInstanceStatus: (id, report, options) =>
        client
          .reportConfigInstanceStatus(id, report, options)
          .finally(() => controller.abort(new Error('agent stopping'))),
    };
    await open({ requestRetries: 3 }, { client: stopping });
    put('cfg_a');
    server.state.addFault({ match: '^/v1/config_instances/cfg_a$', count: 3, status: 503 });

    await pass({ signal: controller.signal }).catch(() => undefined);

    expect(slept).toEqual([]);
    expect(reports()).toEqual([]);
    expect(reconciler.pendingReports).toBe(1);
  });

  it('a stop while a file is written: that file is not put in place and the pass rejects with the stop', async () => {
    put('cfg_a');
    const controller = new AbortController();
    onFsCall = (name, target) => {
      if (name === 'open' && path.basename(target).startsWith(TEMP_PREFIX) && target.startsWith(rootDir))
        controller.abort(new Error('agent stopping'));
    };

    await expect(pass({ signal: controller.signal })).rejects.toThrow('agent stopping');
    expect(await exists('cfg_a.json')).toBe(false);
    expect(reports()).toEqual([]);
  });
});

describe('runPass: settings handed on', () => {
  it('files.rules (fileMeta) give each written file its mode and group', async () => {
    await open({ fileMeta: () => ({ mode: 0o604, gid: 65534 }) });
    put('cfg_a');

    await pass();

    const stats = await stat(path.join(rootDir, 'cfg_a.json'));
    expect({ mode: stats.mode & 0o7777, gid: stats.gid }).toEqual({ mode: 0o604, gid: 65534 });
  });

  it('without trackHookPaths, written paths are not kept for hooks', async () => {
    put('cfg_a');

    await pass();

    expect(reconciler.pendingHookPaths()).toEqual([]);
  });
});

describe('runPass: what a full pass forgets and prunes', () => {
  /** cfg_b archived (never deployed): a record with no file. */
  async function archived(): Promise<void> {
    put('cfg_a');
    put('cfg_b', { target_status: 'removed', activity_status: 'created' });
    await pass();
    expect(reconciler.state.instances.get('cfg_b')).toMatchObject({ activity: 'removed' });
  }

  it('a poll keeps the record of an instance it did not list; a full pass that does not list it forgets it', async () => {
    await archived();

    await pass({ mode: 'incremental' });
    expect(reconciler.state.instances.has('cfg_b')).toBe(true);

    await pass();
    expect(reconciler.state.instances.has('cfg_b')).toBe(false);
    expect(reconciler.state.instances.has('cfg_a')).toBe(true);
  });

  it('an instance listed but invalid keeps its record (with no file) through a full pass', async () => {
    put('cfg_a', { content: { n: 1 } });
    onFsCall = (name, target) => {
      if (name === 'rename' && target.startsWith(rootDir))
        throw Object.assign(new Error('EINVAL: invalid argument'), { code: 'EINVAL' });
    };
    await pass();
    expect(reconciler.state.instances.get('cfg_a')).toMatchObject({ attempts: 1, error: 'retrying' });
    server.state.addFault({
      match: LIST,
      count: 1000,
      mode: 'rewrite',
      replace: [{ find: '"n":1}', with: '"n":1e400}' }],
    });

    await pass();

    expect(reconciler.state.instances.get('cfg_a')).toMatchObject({
      attempts: 1,
      error: 'failed',
      message: expect.stringMatching(/^invalid instance from the service: content\.n/),
    });
  });

  it('a full pass drops the cached content of a file it removed', async () => {
    put('cfg_a', { content: { only: 'a' } });
    await pass();
    const cache = path.join(dir, 'state', CACHE_DIR);
    const cached = await readdir(cache, { recursive: true });
    expect(cached.length).toBeGreaterThan(0);
    server.state.instances.set('cfg_a', {
      ...server.state.instance('cfg_a'),
      target_status: 'removed',
      activity_status: 'deployed',
    });

    await pass();

    expect(await exists('cfg_a.json')).toBe(false);
    expect(await readdir(cache, { recursive: true })).toEqual(
      cached.filter((name) => !/^[0-9a-f]{64}$/.test(path.basename(name))),
    );
  });
});

describe('runPass: requests and what reporting persists', () => {
  it('in-pass request retries: full jitter from 500 ms doubling to a 10 s cap; the pass lasts what it slept', async () => {
    await open({ requestRetries: 6 });
    put('cfg_a');
    server.state.addFault({ match: LIST, count: 6, status: 503 });

    const result = await pass();

    // random() is 0.5: half of each ceiling.
    expect(slept).toEqual([250, 500, 1000, 2000, 4000, 5000]);
    expect(result).toMatchObject({ reachable: true, converged: true, durationMs: 12_750 });
    expect(reports()).toEqual(['cfg_a deployed/none']);
  });

  it('requestRetryBaseMs sets the first ceiling', async () => {
    await open({ requestRetries: 2, requestRetryBaseMs: 2_000 });
    put('cfg_a');
    server.state.addFault({ match: LIST, count: 2, status: 503 });

    expect((await pass()).reachable).toBe(true);
    expect(slept).toEqual([1_000, 2_000]);
  });

  it('the echo of a delivered report is saved: a restarted agent still knows it', async () => {
    put('cfg_a');
    await pass();
    expect(reconciler.state.instances.get('cfg_a')?.reportEcho).toBeDefined();
    const echo = reconciler.state.instances.get('cfg_a')?.reportEcho;

    await open();

    expect(reconciler.state.instances.get('cfg_a')?.reportEcho).toEqual(echo);
  });

  it('an outbox that cannot be rewritten after delivery: the pass says persistError and does not converge', async () => {
    put('cfg_a');
    onFsCall = (name, _target, args) => {
      if (name === 'rename' && String(args[1]).endsWith('outbox.json') && server.state.reports.length > 0)
        throw Object.assign(new Error('EIO: i/o error'), { code: 'EIO' });
    };

    const result = await pass();

    expect(reports()).toEqual(['cfg_a deployed/none']);
    expect(result.persistError).toMatchObject({ code: expect.any(String), message: expect.any(String) });
    expect(result.converged).toBe(false);
  });
});

describe('runPass: a listing with unusable items is not complete', () => {
  /** p.json written for cfg_old, which the service no longer lists; cfg_x, at the same path, is being removed. */
  async function orphanedFile(): Promise<void> {
    put('cfg_old', { relative_filepath: 'p.json' });
    await pass();
    server.state.instances.delete('cfg_old');
    put('cfg_x', { relative_filepath: 'p.json', target_status: 'removed', activity_status: 'deployed' });
  }

  it('an invalid item (which may want the path) keeps a recorded file that no usable item wants', async () => {
    await orphanedFile();
    put('cfg_bad', { relative_filepath: 'p.json', content: { n: 1 } });
    server.state.addFault({
      match: LIST,
      count: 1000,
      mode: 'rewrite',
      replace: [{ find: '"n":1}', with: '"n":1e400}' }],
    });

    await pass();

    expect(await exists('p.json')).toBe(true);
  });

  it('a skipped item (a status this agent does not know) keeps it too', async () => {
    await orphanedFile();
    put('cfg_new', { relative_filepath: 'p.json' });
    server.state.addFault({
      match: LIST,
      count: 1000,
      mode: 'rewrite',
      replace: [{ find: '"target_status":"deployed"', with: '"target_status":"superseded"' }],
    });

    await pass();

    expect(await exists('p.json')).toBe(true);
  });

  it('with every item usable and none wanting the path, the file goes', async () => {
    await orphanedFile();

    await pass();

    expect(await exists('p.json')).toBe(false);
  });
});
