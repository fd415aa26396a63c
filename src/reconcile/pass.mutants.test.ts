// runPass's own decisions, in-process against the mock service: reports before the pull, stopping at each
// stage, what the pass hands the planner, the recorder and the writer, and what a full pass forgets and prunes.
import * as nodeFs from 'node:fs/promises';
import { readdir, stat } from 'node:fs/promises';
import path from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { mockRecord } from '../../test/helpers/instances.js';
import { createPassWorld, type PassWorld } from '../../test/helpers/pass-world.js';
import type { ServiceClient } from '../api/client.js';
import { NetworkError } from '../api/errors.js';
import type { Clock } from '../lib/clock.js';
import type { FsPort } from '../lib/fs-port.js';
import type { ConfigInstanceRecord } from '../mock-server/state.js';
import { CACHE_DIR } from '../store/content-cache.js';
import { TEMP_PREFIX } from '../store/path-guard.js';
import { REPORT_BACKOFF } from './report.js';

const LIST = '^/v1/config_instances$';

let world: PassWorld;
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

beforeEach(async () => {
  onFsCall = () => undefined;
  slept.length = 0;
  world = await createPassWorld({
    name: 'pass-mutants',
    // Only bounds a failing run: a first request under a loaded Stryker dry run has taken more than 10 s.
    clientOptions: { timeoutMs: 60_000 },
    deps: { fs: watchedFs(), clock },
  });
});

afterEach(() => world.close());

function put(id: string, fields: Partial<ConfigInstanceRecord> = {}): void {
  world.server.state.instances.set(id, mockRecord(id, fields));
}

const exists = (relative: string) =>
  stat(path.join(world.rootDir, relative)).then(
    () => true,
    () => false,
  );

describe('runPass: reports of an earlier pass', () => {
  it('go out before the pull, so they are delivered even when the pull then fails; deployed ones after it', async () => {
    put('cfg_a');
    // Never deployed by the agent and no longer wanted: archived, reported removed.
    put('cfg_b', { target_status: 'removed', activity_status: 'created' });
    world.server.state.addFault({ match: '^/v1/config_instances/cfg_[ab]$', count: 2, status: 503 });
    expect(await world.pass()).toMatchObject({ reachable: true, reports: { delivered: 0, pending: 2 } });
    world.server.state.addFault({ match: LIST, count: 1, status: 503 });

    const result = await world.pass({ mode: 'incremental' });

    expect(result).toMatchObject({ reachable: false, reports: { delivered: 1, pending: 1 } });
    expect(world.reports()).toEqual(['cfg_b removed/none']);
    // A deployed report was made for the version then listed: it goes once a pull shows what the service holds.
    expect(await world.pass({ mode: 'incremental' })).toMatchObject({ reachable: true, converged: true });
    expect(world.reports()).toEqual(['cfg_b removed/none', 'cfg_a deployed/none']);
  });

  it('a delivery that went through, or skipped one report on its own, names no delivery error', async () => {
    put('cfg_a');
    put('cfg_b');
    // A 500 is this report's own failure: skipped and kept; delivery goes on and was not deferred.
    world.server.state.addFault({ match: '^/v1/config_instances/cfg_b$', count: 1, status: 500 });

    const skipped = await world.pass();

    expect(skipped.reports).toStrictEqual({ delivered: 1, rejected: 0, pending: 1 });
    // It waits out its backoff (report.ts REPORT_BACKOFF), then goes.
    expect(await world.pass()).toMatchObject({ converged: false, reports: { delivered: 0, pending: 1 } });
    clock.advance(REPORT_BACKOFF.baseMs);
    expect(await world.pass()).toMatchObject({ converged: true });
    expect(world.reports().sort()).toEqual(['cfg_a deployed/none', 'cfg_b deployed/none']);
  });

  it('are not delivered by a dry run (of a reconciler that could deliver them)', async () => {
    put('cfg_a');
    world.server.state.addFault({ match: '^/v1/config_instances/cfg_a$', count: 1, status: 503 });
    await world.pass();

    const result = await world.pass({ dryRun: true });

    expect(result.reports).toMatchObject({ delivered: 0, pending: 1 });
    expect(world.reports()).toEqual([]);
  });
});

let stop: AbortController;
/** A world.client that stops the agent as soon as a listing request has been answered (or failed). */
function stoppingAfterListing(): ServiceClient {
  stop = new AbortController();
  return {
    ...world.client,
    listConfigInstancePage: (query, options) =>
      world.client
        .listConfigInstancePage(query, options)
        .finally(() => stop.abort(new Error('agent stopping'))),
  };
}

describe('runPass: stopping', () => {
  it('a stop while pulling: the pass rejects with the stop, nothing is written', async () => {
    put('cfg_a');
    const controller = new AbortController();
    const stopping: ServiceClient = {
      ...world.client,
      listConfigInstancePage: (query, options) => {
        controller.abort(new Error('agent stopping'));
        return world.client.listConfigInstancePage(query, options);
      },
    };
    await world.open({ client: stopping });

    await expect(world.pass({ signal: controller.signal })).rejects.toThrow('agent stopping');
    expect(await exists('cfg_a.json')).toBe(false);
    expect(world.reports()).toEqual([]);
    // The listing request was never sent: the stop reached the client.
    expect(world.server.state.statsSnapshot().total).toBe(0);
  });

  it('a stop that cuts a report off (the connection drops as the agent stops): the pass rejects with the stop', async () => {
    put('cfg_a');
    const controller = new AbortController();
    const stopping: ServiceClient = {
      ...world.client,
      reportConfigInstanceStatus: async () => {
        controller.abort(new Error('agent stopping'));
        throw new NetworkError({ method: 'PATCH', route: '/v1/config_instances/{id}' }, 'socket closed');
      },
    };
    await world.open({ client: stopping });

    await expect(world.pass({ signal: controller.signal })).rejects.toThrow('agent stopping');
    expect(await exists('cfg_a.json')).toBe(true);
    expect(world.reconciler.pendingReports).toBe(1);
  });

  it('a stop that aborts a report in flight (the client throws the stop itself): the pass rejects with the stop', async () => {
    put('cfg_a');
    put('cfg_b');
    const controller = new AbortController();
    const stopping: ServiceClient = {
      ...world.client,
      reportConfigInstanceStatus: (id, report, options) => {
        controller.abort(new Error('agent stopping'));
        return world.client.reportConfigInstanceStatus(id, report, options);
      },
    };
    await world.open({ client: stopping });

    await expect(world.pass({ signal: controller.signal })).rejects.toThrow('agent stopping');
    expect(await exists('cfg_a.json')).toBe(true);
    expect(await exists('cfg_b.json')).toBe(true);
    expect(world.reports()).toEqual([]);
    expect(world.reconciler.pendingReports).toBe(2);
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

    await expect(world.pass({ signal: controller.signal })).rejects.toThrow('agent stopping');
    expect(world.reports()).toEqual([]);
  });

  it('a stop during a request retry ends the wait: no backoff is slept, the pass rejects with the stop', async () => {
    await world.open({ settings: { requestRetries: 3 }, client: stoppingAfterListing() });
    put('cfg_a');
    world.server.state.addFault({ match: LIST, count: 3, status: 503 });

    await expect(world.pass({ signal: stop.signal })).rejects.toThrow('agent stopping');
    expect(slept).toEqual([]);
    expect(await exists('cfg_a.json')).toBe(false);
  });

  it("a stop during a report's retry wait ends the wait: no backoff is slept, the report stays queued", async () => {
    const controller = new AbortController();
    const stopping: ServiceClient = {
      ...world.client,
      reportConfigInstanceStatus: (id, report, options) =>
        world.client
          .reportConfigInstanceStatus(id, report, options)
          .finally(() => controller.abort(new Error('agent stopping'))),
    };
    await world.open({ settings: { requestRetries: 3 }, client: stopping });
    put('cfg_a');
    world.server.state.addFault({ match: '^/v1/config_instances/cfg_a$', count: 3, status: 503 });

    await world.pass({ signal: controller.signal }).catch(() => undefined);

    expect(slept).toEqual([]);
    expect(world.reports()).toEqual([]);
    expect(world.reconciler.pendingReports).toBe(1);
  });

  it('a stop while a file is written: that file is not put in place and the pass rejects with the stop', async () => {
    put('cfg_a');
    const controller = new AbortController();
    onFsCall = (name, target) => {
      if (
        name === 'open' &&
        path.basename(target).startsWith(TEMP_PREFIX) &&
        target.startsWith(world.rootDir)
      )
        controller.abort(new Error('agent stopping'));
    };

    await expect(world.pass({ signal: controller.signal })).rejects.toThrow('agent stopping');
    expect(await exists('cfg_a.json')).toBe(false);
    expect(world.reports()).toEqual([]);
  });
});

describe('runPass: settings handed on', () => {
  it('files.rules (fileMeta) give each written file its mode and group', async () => {
    await world.open({ settings: { fileMeta: () => ({ mode: 0o604, gid: 65534 }) } });
    put('cfg_a');

    await world.pass();

    const stats = await stat(path.join(world.rootDir, 'cfg_a.json'));
    expect({ mode: stats.mode & 0o7777, gid: stats.gid }).toEqual({ mode: 0o604, gid: 65534 });
  });

  it('without trackHookPaths, written paths are not kept for hooks', async () => {
    put('cfg_a');

    await world.pass();

    expect(world.reconciler.pendingHookPaths()).toEqual([]);
  });
});

describe('runPass: what a full pass forgets and prunes', () => {
  /** cfg_b archived (never deployed): a record with no file. */
  async function archived(): Promise<void> {
    put('cfg_a');
    put('cfg_b', { target_status: 'removed', activity_status: 'created' });
    await world.pass();
    expect(world.reconciler.state.instances.get('cfg_b')).toMatchObject({ activity: 'removed' });
  }

  it('a poll keeps the record of an instance it did not list; a full pass that does not list it forgets it', async () => {
    await archived();

    await world.pass({ mode: 'incremental' });
    expect(world.reconciler.state.instances.has('cfg_b')).toBe(true);

    await world.pass();
    expect(world.reconciler.state.instances.has('cfg_b')).toBe(false);
    expect(world.reconciler.state.instances.has('cfg_a')).toBe(true);
  });

  it('an instance listed but invalid keeps its record (with no file) through a full pass', async () => {
    put('cfg_a', { content: { n: 1 } });
    onFsCall = (name, target) => {
      if (name === 'rename' && target.startsWith(world.rootDir))
        throw Object.assign(new Error('EINVAL: invalid argument'), { code: 'EINVAL' });
    };
    await world.pass();
    expect(world.reconciler.state.instances.get('cfg_a')).toMatchObject({ attempts: 1, error: 'retrying' });
    world.server.state.addFault({
      match: LIST,
      count: 1000,
      mode: 'rewrite',
      replace: [{ find: '"n":1}', with: '"n":1e400}' }],
    });

    await world.pass();

    expect(world.reconciler.state.instances.get('cfg_a')).toMatchObject({
      attempts: 1,
      error: 'failed',
      message: expect.stringMatching(/^invalid instance from the service: content\.n/),
    });
  });

  it('a full pass drops the cached content of a file it removed', async () => {
    put('cfg_a', { content: { only: 'a' } });
    await world.pass();
    const cache = path.join(world.dir, 'state', CACHE_DIR);
    const cached = await readdir(cache, { recursive: true });
    expect(cached.length).toBeGreaterThan(0);
    world.server.state.instances.set('cfg_a', {
      ...world.server.state.instance('cfg_a'),
      target_status: 'removed',
      activity_status: 'deployed',
    });

    await world.pass();

    expect(await exists('cfg_a.json')).toBe(false);
    expect(await readdir(cache, { recursive: true })).toEqual(
      cached.filter((name) => !/^[0-9a-f]{64}$/.test(path.basename(name))),
    );
  });
});

describe('runPass: requests and what reporting persists', () => {
  it('in-pass request retries: full jitter from 500 ms doubling to a 10 s cap; the pass lasts what it slept', async () => {
    await world.open({ settings: { requestRetries: 6 } });
    put('cfg_a');
    world.server.state.addFault({ match: LIST, count: 6, status: 503 });

    const result = await world.pass();

    // random() is 0.5: half of each ceiling.
    expect(slept).toEqual([250, 500, 1000, 2000, 4000, 5000]);
    expect(result).toMatchObject({ reachable: true, converged: true, durationMs: 12_750 });
    expect(world.reports()).toEqual(['cfg_a deployed/none']);
  });

  it('requestRetryBaseMs sets the first ceiling', async () => {
    await world.open({ settings: { requestRetries: 2, requestRetryBaseMs: 2_000 } });
    put('cfg_a');
    world.server.state.addFault({ match: LIST, count: 2, status: 503 });

    expect((await world.pass()).reachable).toBe(true);
    expect(slept).toEqual([1_000, 2_000]);
  });

  it('the echo of a delivered report is saved: a restarted agent still knows it', async () => {
    put('cfg_a');
    await world.pass();
    expect(world.reconciler.state.instances.get('cfg_a')?.reportEcho).toBeDefined();
    const echo = world.reconciler.state.instances.get('cfg_a')?.reportEcho;

    await world.open();

    expect(world.reconciler.state.instances.get('cfg_a')?.reportEcho).toEqual(echo);
  });

  it('an outbox that cannot be rewritten after delivery: the pass says persistError and does not converge', async () => {
    put('cfg_a');
    onFsCall = (name, _target, args) => {
      if (
        name === 'rename' &&
        String(args[1]).endsWith('outbox.json') &&
        world.server.state.reports.length > 0
      )
        throw Object.assign(new Error('EIO: i/o error'), { code: 'EIO' });
    };

    const result = await world.pass();

    expect(world.reports()).toEqual(['cfg_a deployed/none']);
    expect(result.persistError).toMatchObject({ code: expect.any(String), message: expect.any(String) });
    expect(result.converged).toBe(false);
  });
});

describe('runPass: a listing with unusable items is not complete', () => {
  /** p.json written for cfg_old, which the service no longer lists; cfg_x, at the same path, is being removed. */
  async function orphanedFile(): Promise<void> {
    put('cfg_old', { relative_filepath: 'p.json' });
    await world.pass();
    world.server.state.instances.delete('cfg_old');
    put('cfg_x', { relative_filepath: 'p.json', target_status: 'removed', activity_status: 'deployed' });
  }

  it('an invalid item (which may want the path) keeps a recorded file that no usable item wants', async () => {
    await orphanedFile();
    put('cfg_bad', { relative_filepath: 'p.json', content: { n: 1 } });
    world.server.state.addFault({
      match: LIST,
      count: 1000,
      mode: 'rewrite',
      replace: [{ find: '"n":1}', with: '"n":1e400}' }],
    });

    await world.pass();

    expect(await exists('p.json')).toBe(true);
  });

  it('a skipped item (a status this agent does not know) keeps it too', async () => {
    await orphanedFile();
    put('cfg_new', { relative_filepath: 'p.json' });
    world.server.state.addFault({
      match: LIST,
      count: 1000,
      mode: 'rewrite',
      replace: [{ find: '"target_status":"deployed"', with: '"target_status":"superseded"' }],
    });

    await world.pass();

    expect(await exists('p.json')).toBe(true);
  });

  it('with every item usable and none wanting the path, the file goes', async () => {
    await orphanedFile();

    await world.pass();

    expect(await exists('p.json')).toBe(false);
  });
});
