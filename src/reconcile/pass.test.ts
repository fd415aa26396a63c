// runPass in-process against the mock service on loopback and a real temp dir: one test per rule of the pass.

import { spawnSync } from 'node:child_process';
import * as nodeFs from 'node:fs/promises';
import { lstat, mkdir, readFile, rm, stat, truncate, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { Writable } from 'node:stream';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { tryMount, unmount } from '../../test/helpers/harness.js';
import { createPassWorld, type PassWorld } from '../../test/helpers/pass-world.js';
import { createClient, type ServiceClient } from '../api/client.js';
import type { Clock } from '../lib/clock.js';
import type { Deps } from '../lib/deps.js';
import { sha256Hex } from '../lib/hash.js';
import { createLogger, silentLogger } from '../lib/logger.js';
import { createSecretRegistry } from '../lib/secrets.js';
import { type RunningMockServer, startMockServer } from '../mock-server/server.js';
import type { ConfigInstanceRecord } from '../mock-server/state.js';
import { DirectorySyncLedger } from '../store/directory-syncs.js';
import { ROOT_MOUNT_FILE } from '../store/root-mount.js';
import type { PassMode, PassResult, ReconcilerSettings } from './pass-runner.js';
import type { Reconciler } from './reconcile.js';

const API_KEY = 'sk_test_pass_0123456789abcdef';
const DEVICE = 'dvc_1';
const T0 = '2026-01-01T00:00:00.000Z';

/** A monotonic clock that moves only when told: cooldowns are crossed on purpose, never by waiting. */
function manualClock(): Clock & { advance(ms: number): void } {
  let monotonic = 1_000;
  return {
    now: () => Date.parse('2026-06-01T00:00:00.000Z') + monotonic,
    monotonic: () => monotonic,
    sleep: async () => undefined,
    advance(ms) {
      monotonic += ms;
    },
  };
}

/** The real fs, with a switch that makes renames onto chosen targets fail as a full disk would. */
function faultyFs() {
  const fs = {
    ...nodeFs,
    failRenameTo: (_target: string) => false,
    renameErrno: 'ENOSPC',
    rename: async (from: Parameters<typeof nodeFs.rename>[0], to: Parameters<typeof nodeFs.rename>[1]) => {
      if (fs.failRenameTo(String(to))) {
        throw Object.assign(new Error(`${fs.renameErrno}: simulated failure, rename '${String(to)}'`), {
          code: fs.renameErrno,
        });
      }
      return nodeFs.rename(from, to);
    },
  };
  return fs;
}

interface World {
  fs: ReturnType<typeof faultyFs>;
  readonly dir: string;
  rootDir: string;
  readonly server: RunningMockServer;
  clock: ReturnType<typeof manualClock>;
  readonly client: ServiceClient;
  reconciler: Reconciler;
}

let world: World;
let pw: PassWorld;

/** Opens the pass world's Reconciler (closing the one open) on world's fs, clock and rootDir as they are then. */
function openReconciler(
  client: ServiceClient,
  extra: Partial<ReconcilerSettings> = {},
  logger = silentLogger(),
  readOnly = false,
): Promise<Reconciler> {
  return pw.open({
    client,
    deps: { fs: world.fs, clock: world.clock, logger },
    settings: { rootDir: world.rootDir, ...extra },
    readOnly,
  });
}

// A pass world whose Reconciler opens on world's fs, clock and rootDir, which tests swap before they reopen it.
beforeEach(async () => {
  pw = await createPassWorld({ name: 'pass', apiKey: API_KEY, open: false });
  const { dir, rootDir, server, client } = pw;
  world = { fs: faultyFs(), dir, rootDir, server, clock: manualClock(), client } as World;
  world.reconciler = await openReconciler(client);
});

afterEach(() => pw.close());

/** Puts an instance on the service exactly as given (statuses included), as if operators and reports had. */
const put = (fields: Partial<ConfigInstanceRecord> & { id: string }): void => pw.put(fields);

function onService(id: string): ConfigInstanceRecord {
  return world.server.state.instance(id);
}

function pass(mode: PassMode = 'full'): Promise<PassResult> {
  return world.reconciler.runPass({ mode });
}

/** The reports the service received, as `id activity/error`. */
const reportsReceived = (): string[] => pw.reports();

function fileAt(relative: string): Promise<string> {
  return readFile(path.join(world.rootDir, relative), 'utf8');
}

async function exists(relative: string): Promise<boolean> {
  return lstat(path.join(world.rootDir, relative)).then(
    () => true,
    () => false,
  );
}

function json(content: unknown): string {
  return `${JSON.stringify(content, null, 2)}\n`;
}

describe('runPass: target deployed', () => {
  it('gives a record kept before lengths were (no size) the length of its confirmed file, once', async () => {
    put({ id: 'cfg_a', content: { port: 8080 } });
    await pass();
    // state.json as an agent before ManagedFile.size wrote it: the record without the length.
    const stateFile = path.join(world.dir, 'state', 'state.json');
    const saved = JSON.parse(await readFile(stateFile, 'utf8')) as {
      files: Record<string, { size?: number }>;
    };
    expect(saved.files['cfg_a.json']?.size).toBe(json({ port: 8080 }).length);
    delete saved.files['cfg_a.json']!.size;
    await world.reconciler.close();
    await writeFile(stateFile, JSON.stringify(saved));
    world.reconciler = await openReconciler(world.client);
    expect(world.reconciler.state.files.get('cfg_a.json')?.size).toBeUndefined();

    await pass();

    // The drift watcher and a removal judge a file of another length unread only with the length recorded.
    const after = JSON.parse(await readFile(stateFile, 'utf8')) as typeof saved;
    expect(after.files['cfg_a.json']?.size).toBe(json({ port: 8080 }).length);
    const written = await stat(stateFile);
    await pass();
    const again = await stat(stateFile);
    expect([again.ino, again.mtimeMs]).toEqual([written.ino, written.mtimeMs]);
  });

  it('writes a new file with the exact bytes, then reports deployed; a second pass changes nothing', async () => {
    put({ id: 'cfg_a', relative_filepath: 'app/a.json', content: { port: 8080 } });

    const first = await pass();

    expect(await fileAt('app/a.json')).toBe(json({ port: 8080 }));
    expect((await stat(path.join(world.rootDir, 'app/a.json'))).mode & 0o777).toBe(0o640);
    expect(reportsReceived()).toEqual(['cfg_a deployed/none']);
    expect(first.converged).toBe(true);
    const before = await stat(path.join(world.rootDir, 'app/a.json'));
    const second = await pass();
    const after = await stat(path.join(world.rootDir, 'app/a.json'));
    expect([after.ino, after.mtimeMs]).toEqual([before.ino, before.mtimeMs]);
    expect(reportsReceived()).toHaveLength(1);
    expect(second.converged).toBe(true);
  });

  it('holds each instance as the bytes of its file, not its parsed content, and writes those bytes', async () => {
    put({ id: 'cfg_a', relative_filepath: 'app/a.json', content: { port: 8080 } });
    put({ id: 'cfg_b', relative_filepath: 'app/b.yaml', content: { port: 'on' } });

    const result = await pass();

    const writes = result.steps.filter((step) => step.kind === 'write');
    expect(writes.map((step) => step.path).sort()).toEqual(['app/a.json', 'app/b.yaml']);
    for (const step of writes) {
      expect('content' in step.instance).toBe(false);
      expect(sha256Hex(await readFile(path.join(world.rootDir, step.path)))).toBe(step.sha256);
    }
    expect(await fileAt('app/b.yaml')).toBe('port: "on"\n');
    expect(reportsReceived().sort()).toEqual(['cfg_a deployed/none', 'cfg_b deployed/none']);
  });

  it("lets each file's bytes go once its step is applied: after the pass no step or instance holds any", async () => {
    // Each write step and its pulled instance held the file's bytes until the pass ended: at 10,000 × ~1 KiB
    // ~10 MiB, all of it still held at the pass's peak (docs/performance-history.md "Memory, seventh round").
    for (let i = 0; i < 40; i++)
      put({
        id: `cfg_${i}`,
        relative_filepath: `d${i % 4}/f${i}.json`,
        content: { i, pad: 'x'.repeat(200) },
      });
    world.fs.failRenameTo = (target) => target.endsWith(`${path.sep}f7.json`);

    const result = await pass();

    const writes = result.steps.filter((step) => step.kind === 'write');
    expect(writes).toHaveLength(40);
    let held = 0;
    for (const step of writes) {
      held += step.data?.length ?? 0;
      if ('file' in step.instance)
        held += (step.instance as { file: { data?: Buffer } }).file.data?.length ?? 0;
    }
    expect(held).toBe(0);
    // The bytes were written all the same, the failed one included on the next pass (pulled again).
    expect(await fileAt('d1/f5.json')).toBe(json({ i: 5, pad: 'x'.repeat(200) }));
    expect(reportsReceived().filter((r) => r.endsWith('deployed/none'))).toHaveLength(39);
    world.fs.failRenameTo = () => false;
    world.clock.advance(3_600_000);
    await pass();
    expect(await fileAt('d3/f7.json')).toBe(json({ i: 7, pad: 'x'.repeat(200) }));
  });

  it('in place and recorded as ours: nothing written; `deployed` reported again only when the service lags', async () => {
    put({ id: 'cfg_a', content: { v: 1 } });
    await pass();
    const before = await stat(path.join(world.rootDir, 'cfg_a.json'));
    put({ ...onService('cfg_a'), error_status: 'retrying' });

    await pass();

    const after = await stat(path.join(world.rootDir, 'cfg_a.json'));
    expect([after.ino, after.mtimeMs]).toEqual([before.ino, before.mtimeMs]);
    expect(reportsReceived()).toEqual(['cfg_a deployed/none', 'cfg_a deployed/none']);
    expect(onService('cfg_a')).toMatchObject({ activity_status: 'deployed', error_status: 'none' });
  });

  it('error_status failed: never touched again, not even a file it owns', async () => {
    put({ id: 'cfg_a', content: { v: 1 } });
    await pass();
    put({ ...onService('cfg_a'), content: { v: 2 }, error_status: 'failed' });

    const result = await pass();

    expect(await fileAt('cfg_a.json')).toBe(json({ v: 1 }));
    expect(reportsReceived()).toEqual(['cfg_a deployed/none']);
    expect(result.outcomes).toMatchObject([{ instanceId: 'cfg_a', action: 'untouched' }]);
  });

  it('a hostile path fails at once with the rule broken; nothing is written anywhere', async () => {
    put({ id: 'cfg_evil', relative_filepath: '../escape.json' });

    await pass();

    expect(reportsReceived()).toEqual(['cfg_evil queued/failed']);
    expect(world.server.state.reports[0]?.message).toMatch(/\.\./);
    await expect(lstat(path.join(world.dir, 'escape.json'))).rejects.toThrow();
    expect(await nodeFs.readdir(world.rootDir)).toEqual([]);
  });

  it('two instances at one path: the one updated later wins, the other is refused `retrying` naming both', async () => {
    put({ id: 'cfg_old', relative_filepath: 'shared.json', updated_at: '2026-01-01T00:00:00.000Z' });
    put({ id: 'cfg_new', relative_filepath: 'shared.json', updated_at: '2026-01-02T00:00:00.000Z' });

    await pass();

    expect(await fileAt('shared.json')).toBe(json({ owner: 'cfg_new' }));
    expect(reportsReceived().sort()).toEqual(['cfg_new deployed/none', 'cfg_old queued/retrying']);
    const refusal = world.server.state.reports.find((r) => r.config_instance_id === 'cfg_old');
    expect(refusal?.message).toMatch(/cfg_new/);
    expect(refusal?.message).toMatch(/cfg_old/);
  });

  it('the winner stays when the listing writes timestamps otherwise than the report answers (+00:00, not Z)', async () => {
    put({ id: 'cfg_old', relative_filepath: 'shared.json', updated_at: '2026-01-01T00:00:00.000Z' });
    put({ id: 'cfg_new', relative_filepath: 'shared.json', updated_at: '2026-01-02T00:00:00.000Z' });
    /** The service lists the instants its report answers gave, written with an offset instead of `Z`. */
    const listedWithOffset = () => {
      for (const id of ['cfg_old', 'cfg_new']) {
        const record = onService(id);
        put({ ...record, updated_at: record.updated_at.replace(/Z$/, '+00:00') });
      }
    };

    for (let round = 0; round < 3; round++) {
      await pass();
      listedWithOffset();
      world.clock.advance(3_600_000);
    }

    // The agent's own reports moved both updated_at; the operators' choice (cfg_new, updated later) still holds.
    expect(await fileAt('shared.json')).toBe(json({ owner: 'cfg_new' }));
    expect(reportsReceived()).not.toContain('cfg_old deployed/none');
    expect(onService('cfg_old')).toMatchObject({ activity_status: 'queued', error_status: 'retrying' });
  });

  it('the winner stays when the service answers reports with 204 (no echo in the answer)', async () => {
    world.server.state.addFault({
      match: '^/v1/config_instances/[^/]+$',
      count: 100,
      mode: 'rewrite',
      status: 204,
    });
    put({ id: 'cfg_old', relative_filepath: 'shared.json', updated_at: '2026-01-01T00:00:00.000Z' });
    put({ id: 'cfg_new', relative_filepath: 'shared.json', updated_at: '2026-01-02T00:00:00.000Z' });

    for (let round = 0; round < 4; round++) {
      await pass();
      world.clock.advance(3_600_000);
      // A new process each time (as `--once`): the awaited echo lives in state.json.
      await world.reconciler.close();
      world.reconciler = await openReconciler(world.client);
    }

    expect(await fileAt('shared.json')).toBe(json({ owner: 'cfg_new' }));
    // Each once: the file never changed hands, so nothing was reported again.
    expect(reportsReceived().sort()).toEqual(['cfg_new deployed/none', 'cfg_old queued/retrying']);
    expect(onService('cfg_old')).toMatchObject({ activity_status: 'queued', error_status: 'retrying' });
    // An operator who now redeploys cfg_old (queued, no error, updated later) hands it the path.
    put({
      ...onService('cfg_old'),
      error_status: 'none',
      updated_at: new Date(Date.now() + 60_000).toISOString(),
    });
    await pass();
    expect(await fileAt('shared.json')).toBe(json({ owner: 'cfg_old' }));
  });

  it('with 204 answers, an operator’s content edit made before the next listing (statuses kept) counts as theirs', async () => {
    world.server.state.addFault({
      match: '^/v1/config_instances/[^/]+$',
      count: 100,
      mode: 'rewrite',
      status: 204,
    });
    put({ id: 'cfg_old', relative_filepath: 'shared.json', updated_at: '2026-01-01T00:00:00.000Z' });
    put({ id: 'cfg_new', relative_filepath: 'shared.json', updated_at: '2026-01-02T00:00:00.000Z' });
    const nextProcess = async () => {
      world.clock.advance(3_600_000);
      // A new process each time (as `--once`): the awaited echo and its version live in state.json.
      await world.reconciler.close();
      world.reconciler = await openReconciler(world.client);
    };
    await pass();
    expect(await fileAt('shared.json')).toBe(json({ owner: 'cfg_new' }));
    expect(onService('cfg_old')).toMatchObject({ activity_status: 'queued', error_status: 'retrying' });
    await nextProcess();
    // Between the report (answered 204) and the next listing, an operator edits cfg_old's content, no redeploy:
    // its statuses stay the reported ones, its updated_at is the operator's, later than cfg_new's.
    put({
      ...onService('cfg_old'),
      content: { owner: 'cfg_old', edited: true },
      updated_at: new Date(Date.now() + 60_000).toISOString(),
    });
    for (let round = 0; round < 3; round++) {
      await pass();
      await nextProcess();
    }

    expect(await fileAt('shared.json')).toBe(json({ owner: 'cfg_old', edited: true }));
    // The path changed hands once, and stayed: each of the agent's own 204 reports is taken for its echo.
    expect(reportsReceived()).toEqual([
      ...['cfg_new deployed/none', 'cfg_old queued/retrying'],
      ...['cfg_old deployed/none', 'cfg_new deployed/retrying'],
    ]);
    expect(onService('cfg_new')).toMatchObject({ activity_status: 'deployed', error_status: 'retrying' });
  });

  it('a report left queued by a pass and answered 204 in the next one awaits the version of the listing before it', async () => {
    // cfg_old's refusal is not taken in the first pass (503), then every PATCH is answered 204; one process.
    world.server.state.addFault({ match: '^/v1/config_instances/cfg_old$', count: 1, status: 503 });
    world.server.state.addFault({
      match: '^/v1/config_instances/[^/]+$',
      count: 100,
      mode: 'rewrite',
      status: 204,
    });
    put({ id: 'cfg_old', relative_filepath: 'shared.json', updated_at: '2026-01-01T00:00:00.000Z' });
    put({ id: 'cfg_new', relative_filepath: 'shared.json', updated_at: '2026-01-02T00:00:00.000Z' });
    await pass();
    expect(reportsReceived()).not.toContain('cfg_old queued/retrying');
    // Edited after the listing the report was made from, before the next pass delivers it first.
    put({
      ...onService('cfg_old'),
      content: { owner: 'cfg_old', edited: true },
      updated_at: new Date(Date.now() + 60_000).toISOString(),
    });
    for (let round = 0; round < 3; round++) {
      world.clock.advance(3_600_000);
      await pass();
    }

    expect(await fileAt('shared.json')).toBe(json({ owner: 'cfg_old', edited: true }));
    expect(reportsReceived().slice(0, 2).sort()).toEqual([
      'cfg_new deployed/none',
      'cfg_old queued/retrying',
    ]);
    expect(reportsReceived().slice(2)).toEqual(['cfg_old deployed/none', 'cfg_new deployed/retrying']);
  });

  it('a report left queued by one process and answered 204 by the next before it lists awaits the version kept with it', async () => {
    // As above, but the next pass is another process's: the version comes from outbox.json, not from memory.
    world.server.state.addFault({ match: '^/v1/config_instances/cfg_old$', count: 1, status: 503 });
    world.server.state.addFault({
      match: '^/v1/config_instances/[^/]+$',
      count: 100,
      mode: 'rewrite',
      status: 204,
    });
    put({ id: 'cfg_old', relative_filepath: 'shared.json', updated_at: '2026-01-01T00:00:00.000Z' });
    put({ id: 'cfg_new', relative_filepath: 'shared.json', updated_at: '2026-01-02T00:00:00.000Z' });
    await pass();
    expect(reportsReceived()).not.toContain('cfg_old queued/retrying');
    // An operator's content edit (statuses as they were) after the listing the queued report was made from.
    put({
      ...onService('cfg_old'),
      content: { owner: 'cfg_old', edited: true },
      updated_at: new Date(Date.now() + 60_000).toISOString(),
    });
    for (let round = 0; round < 3; round++) {
      world.clock.advance(3_600_000);
      await world.reconciler.close();
      world.reconciler = await openReconciler(world.client);
      await pass();
    }

    // The listing after the 204 shows another version than the report's: the edit is the operator's, the latest.
    expect(await fileAt('shared.json')).toBe(json({ owner: 'cfg_old', edited: true }));
  });

  it('a report left queued for an instance the next listing no longer holds: the next pass runs as any other', async () => {
    // Its report refused in both passes (an outage of that route): it is still queued when the second one lists.
    world.server.state.addFault({ match: '^/v1/config_instances/cfg_gone$', count: 10, status: 503 });
    put({ id: 'cfg_gone', relative_filepath: 'gone.json' });
    await pass();
    expect(await fileAt('gone.json')).toBe(json({ owner: 'cfg_gone' }));
    expect(reportsReceived()).toEqual([]);
    // Deleted on the service while its report waits: no listing shows it, its version is the one kept.
    world.server.state.instances.delete('cfg_gone');
    world.clock.advance(3_600_000);
    const result = await pass();
    expect(result.error).toBeUndefined();
    expect(result.reachable).toBe(true);
    expect(await fileAt('gone.json')).toBe(json({ owner: 'cfg_gone' }));
  });

  for (const [first, answer] of [
    ['refused (503)', 'the instance (its echo)'],
    ['refused (503)', '204'],
    ['taken but answered 503, as a crash before its answer was recorded', 'the instance (its echo)'],
  ] as const) {
    it(`a report ${first} in one process and sent first by the next, answered with ${answer}: the winner stays`, async () => {
      // cfg_old's refusal does not settle in the first process; the next process sends it before it lists.
      world.server.state.addFault({
        match: '^/v1/config_instances/cfg_old$',
        count: 1,
        status: 503,
        ...(first === 'refused (503)' ? {} : { mode: 'rewrite' as const }),
      });
      if (answer === '204') {
        world.server.state.addFault({
          match: '^/v1/config_instances/[^/]+$',
          count: 100,
          mode: 'rewrite',
          status: 204,
        });
      }
      put({ id: 'cfg_old', relative_filepath: 'shared.json', updated_at: '2026-01-01T00:00:00.000Z' });
      put({ id: 'cfg_new', relative_filepath: 'shared.json', updated_at: '2026-01-02T00:00:00.000Z' });
      await pass();
      expect(await fileAt('shared.json')).toBe(json({ owner: 'cfg_new' }));
      const sentFirst = reportsReceived().length;
      for (let round = 0; round < 3; round++) {
        world.clock.advance(3_600_000);
        await world.reconciler.close();
        world.reconciler = await openReconciler(world.client);
        await pass();
      }

      // The agent's own report moved cfg_old's updated_at past cfg_new's: that is not the operators' choice.
      expect(await fileAt('shared.json')).toBe(json({ owner: 'cfg_new' }));
      expect(reportsReceived().slice(sentFirst)).toEqual(['cfg_old queued/retrying']);
      expect(reportsReceived()).not.toContain('cfg_old deployed/none');
    });
  }

  it('a failed write waits out its cooldown (no new attempt, no new report), then succeeds once it is due', async () => {
    const full = { on: true };
    world.fs.failRenameTo = (target) => full.on && target.endsWith('app.json');
    put({ id: 'cfg_a', relative_filepath: 'app.json' });

    await pass();
    expect(reportsReceived()).toEqual(['cfg_a queued/retrying']);
    full.on = false;

    const waiting = await pass();
    expect(waiting.outcomes).toMatchObject([{ instanceId: 'cfg_a', action: 'waiting' }]);
    expect(await exists('app.json')).toBe(false);
    expect(reportsReceived()).toEqual(['cfg_a queued/retrying']);

    world.clock.advance(10_001);
    await pass();
    expect(await fileAt('app.json')).toBe(json({ owner: 'cfg_a' }));
    expect(reportsReceived()).toEqual(['cfg_a queued/retrying', 'cfg_a deployed/none']);
  });
});

describe("runPass: the agent's own resource trouble", () => {
  it.each(['EMFILE', 'ENFILE', 'ENOMEM'])(
    '%s: no attempt counted, nothing reported, no cooldown: the next pass simply tries again',
    async (code) => {
      put({ id: 'cfg_a', content: { v: 1 } });
      world.fs.renameErrno = code;
      world.fs.failRenameTo = () => true;
      // More passes than retry.maxAttempts (3), without moving the clock past any cooldown.
      for (let round = 0; round < 5; round += 1) {
        const result = await pass();
        expect(result.converged).toBe(false);
        expect(result.outcomes).toMatchObject([
          { instanceId: 'cfg_a', action: 'waiting', message: expect.stringMatching(/retried next pass/) },
        ]);
      }
      expect(reportsReceived()).toEqual([]);
      expect(world.reconciler.state.instances.get('cfg_a')?.attempts ?? 0).toBe(0);

      world.fs.failRenameTo = () => false;
      const healed = await pass();
      expect(healed.converged).toBe(true);
      expect(await fileAt('cfg_a.json')).toBe(json({ v: 1 }));
      expect(reportsReceived()).toEqual(['cfg_a deployed/none']);
    },
  );
});

describe('runPass: the root removed under a running agent', () => {
  it('is made again, as start-up makes it: every file is written back, no instance is failed', async () => {
    put({ id: 'cfg_a', relative_filepath: 'app/a.json', content: { v: 1 } });
    put({ id: 'cfg_b', content: { v: 2 } });
    await pass();
    // A local clean-up script removes the whole tree while the daemon runs.
    await rm(world.rootDir, { recursive: true });

    const result = await pass();

    expect(result.converged).toBe(true);
    expect(await fileAt('app/a.json')).toBe(json({ v: 1 }));
    expect(await fileAt('cfg_b.json')).toBe(json({ v: 2 }));
    expect((await stat(world.rootDir)).mode & 0o777).toBe(0o750);
    // Each write failed with the root's ENOENT before: an attempt each, `retrying` reported, then `failed`
    // for good once retry.maxAttempts passed, and a failed instance is never touched again.
    expect(reportsReceived().filter((r) => !r.endsWith('deployed/none'))).toEqual([]);
  });

  it('made again but its entry not made durable (the fsync of its parent fails): nothing under it is deployed', async () => {
    put({ id: 'cfg_a', relative_filepath: 'app/a.json', content: { v: 1 } });
    await pass();
    await rm(world.rootDir, { recursive: true });
    // The fsync of rootDir's parent fails (EIO) once: a power cut may lose the new root and all below it.
    const parent = path.dirname(world.rootDir);
    let failParentSync = true;
    const open = world.fs.open;
    Object.assign(world.fs, {
      open: async (...args: Parameters<typeof nodeFs.open>) => {
        const handle = await open(...args);
        if (String(args[0]) !== parent || !failParentSync) return handle;
        failParentSync = false;
        return Object.assign(handle, {
          sync: async () => {
            throw Object.assign(new Error('EIO: simulated, fsync'), { code: 'EIO' });
          },
        });
      },
    });
    world.server.state.reports.length = 0;

    await pass();

    // Before: the file was written into the new root and counted deployed (the service kept deployed/none).
    expect(reportsReceived()).toEqual(['cfg_a deployed/retrying']);
    // rootDir's condition (missing), not the instance's: no attempt counted.
    expect(world.reconciler.state.instances.get('cfg_a')?.attempts).toBe(0);

    world.clock.advance(3_600_000);
    await pass();
    expect(await fileAt('app/a.json')).toBe(json({ v: 1 }));
    expect(onService('cfg_a').activity_status).toBe('deployed');
    expect(onService('cfg_a').error_status).toBe('none');
  });
  it('made again, its entry not made durable, and not removable again (another process wrote into it): nothing under it is deployed', async () => {
    put({ id: 'cfg_a', relative_filepath: 'app/a.json', content: { v: 1 } });
    await pass();
    await rm(world.rootDir, { recursive: true });
    // The fsync of rootDir's parent fails (EIO) once, and meanwhile another process puts a file in the new root,
    // so it cannot be removed again (ENOTEMPTY): its entry, and all below it, may not survive a power cut.
    const parent = path.dirname(world.rootDir);
    let failParentSync = true;
    const open = world.fs.open;
    Object.assign(world.fs, {
      // The process's fsync ledger, as compose.ts gives the agent's file system (hangSafeFs).
      directorySyncs: new DirectorySyncLedger(),
      open: async (...args: Parameters<typeof nodeFs.open>) => {
        const handle = await open(...args);
        if (String(args[0]) !== parent || !failParentSync) return handle;
        failParentSync = false;
        return Object.assign(handle, {
          sync: async () => {
            await writeFile(path.join(world.rootDir, 'other.txt'), "not the agent's");
            throw Object.assign(new Error('EIO: simulated, fsync'), { code: 'EIO' });
          },
        });
      },
    });
    world.server.state.reports.length = 0;

    await pass();

    // Before: the root stayed with its entry dropped and the file was counted deployed (nothing reported).
    expect(onService('cfg_a').activity_status).toBe('deployed');
    expect(onService('cfg_a').error_status).not.toBe('none');
    expect(await readFile(path.join(world.rootDir, 'other.txt'), 'utf8')).toBe("not the agent's");
  });

  it('made again, its entry not made durable, and the removal failing once: never deployed while its entry is unsettled; a restart converges', async () => {
    put({ id: 'cfg_a', relative_filepath: 'app/a.json', content: { v: 1 } });
    await pass();
    await rm(world.rootDir, { recursive: true });
    const parent = path.dirname(world.rootDir);
    let failParentSync = true;
    let failRmdir = true;
    const open = world.fs.open;
    const rmdir = world.fs.rmdir;
    Object.assign(world.fs, {
      directorySyncs: new DirectorySyncLedger(),
      open: async (...args: Parameters<typeof nodeFs.open>) => {
        const handle = await open(...args);
        if (String(args[0]) !== parent || !failParentSync) return handle;
        failParentSync = false;
        return Object.assign(handle, {
          sync: async () => {
            throw Object.assign(new Error('EIO: simulated, fsync'), { code: 'EIO' });
          },
        });
      },
      rmdir: async (...args: Parameters<typeof nodeFs.rmdir>) => {
        if (String(args[0]) === world.rootDir && failRmdir) {
          failRmdir = false;
          throw Object.assign(new Error('EIO: simulated, rmdir'), { code: 'EIO' });
        }
        return rmdir(...args);
      },
    });
    world.server.state.reports.length = 0;

    await pass();
    expect(onService('cfg_a').error_status).not.toBe('none');

    world.clock.advance(3_600_000);
    await pass();
    // The pass before wrote the file into the root it could not remove, so it is not empty now and stays, its
    // entry in its parent unsettled. Before, the file in place was reported deployed without an fsync of the
    // chain (review27): the service held deployed/none for a file a power cut could take with the root.
    expect(await fileAt('app/a.json')).toBe(json({ v: 1 }));
    expect(onService('cfg_a').error_status).toBe('retrying');
    expect(world.reconciler.state.instances.get('cfg_a')?.attempts).toBe(0);

    // A restart (a new process: its ledger knows of no failed fsync, as at any start) confirms it deployed.
    await world.reconciler.close();
    Object.assign(world.fs, { directorySyncs: new DirectorySyncLedger() });
    world.reconciler = await openReconciler(world.client);
    world.clock.advance(3_600_000);
    await pass();
    expect(await fileAt('app/a.json')).toBe(json({ v: 1 }));
    expect(onService('cfg_a').activity_status).toBe('deployed');
    expect(onService('cfg_a').error_status).toBe('none');
  });
});

describe('runPass: the root replaced by something not a directory under a running agent', () => {
  for (const [what, plant] of [
    ['a regular file', (root: string) => writeFile(root, 'not a directory\n')],
    ['a dangling symlink', (root: string) => nodeFs.symlink(`${root}-gone`, root)],
    // rm -rf of rootDir's parent: the root cannot be made again where it was (no mkdir -p, on purpose).
    ['nothing, its parent gone too', (root: string) => rm(path.dirname(root), { recursive: true })],
  ] as const) {
    it(`${what}: the device's condition, no attempt charged; written back once it is a directory again`, async () => {
      await world.reconciler.close();
      const rootDir = path.join(world.dir, 'parent', 'root');
      await mkdir(rootDir, { recursive: true });
      world.rootDir = rootDir;
      world.reconciler = await openReconciler(world.client, {
        retry: { maxAttempts: 1, baseDelaySeconds: 10, maxDelaySeconds: 60 },
      });
      put({ id: 'cfg_a', relative_filepath: 'app/a.json', content: { v: 1 } });
      put({ id: 'cfg_b', content: { v: 2 } });
      await pass();
      await rm(rootDir, { recursive: true });
      await plant(rootDir);
      put({ id: 'cfg_c', content: { v: 3 } });

      // Three passes, each past every cooldown: with maxAttempts 1 an attempt is `failed` for good.
      for (let n = 0; n < 3; n += 1) {
        expect((await pass('full')).converged).toBe(false);
        world.clock.advance(3_600_000);
      }
      expect(reportsReceived().filter((r) => r.endsWith('/failed'))).toEqual([]);

      await rm(path.dirname(rootDir), { recursive: true, force: true });
      await mkdir(rootDir, { recursive: true });
      const result = await pass('full');

      expect(result.converged).toBe(true);
      expect(await fileAt('app/a.json')).toBe(json({ v: 1 }));
      expect(await fileAt('cfg_b.json')).toBe(json({ v: 2 }));
      expect(await fileAt('cfg_c.json')).toBe(json({ v: 3 }));
      expect(reportsReceived().filter((r) => r.endsWith('/failed'))).toEqual([]);
    });
  }
});

/**
 * The real fs, with rootDir reported as a mount point (its st_dev one past its parent's) while `mounted` is true:
 * what a tmpfs or a data partition on rootDir looks like, switched off as a lazy unmount leaves the bare mountpoint.
 */
function mountedRootFs(rootDir: string) {
  // The same object as faultyFs's: its rename reads failRenameTo from it.
  const fs = Object.assign(faultyFs(), {
    mounted: true,
    stat: (async (target: string, options?: unknown) => {
      const stats = await nodeFs.stat(target, options as never);
      if (fs.mounted && target === rootDir) Object.assign(stats, { dev: Number(stats.dev) + 1 });
      return stats;
    }) as typeof nodeFs.stat,
  });
  return fs;
}

describe("runPass: rootDir's mount gone under a running agent", () => {
  async function mountedWorld(): Promise<ReturnType<typeof mountedRootFs>> {
    await world.reconciler.close();
    const fs = mountedRootFs(world.rootDir);
    world.fs = fs;
    world.reconciler = await openReconciler(world.client, {
      retry: { maxAttempts: 1, baseDelaySeconds: 10, maxDelaySeconds: 60 },
    });
    return fs;
  }

  it('writes nothing into the bare mountpoint, never an attempt; written back once it is mounted again', async () => {
    const fs = await mountedWorld();
    put({ id: 'cfg_a', relative_filepath: 'app/a.json', content: { v: 1 } });
    put({ id: 'cfg_b', content: { v: 2 } });
    expect((await pass()).converged).toBe(true);
    // Unmounted: the bare directory underneath is empty.
    fs.mounted = false;
    await rm(world.rootDir, { recursive: true });
    await mkdir(world.rootDir);
    put({ id: 'cfg_c', content: { v: 3 } });

    // Three passes, each past every cooldown: with maxAttempts 1 an attempt is `failed` for good.
    for (let n = 0; n < 3; n += 1) {
      expect((await pass('full')).converged).toBe(false);
      world.clock.advance(3_600_000);
    }
    expect(await nodeFs.readdir(world.rootDir)).toEqual([]);
    expect(reportsReceived().filter((r) => r.endsWith('/failed'))).toEqual([]);
    expect(onService('cfg_c')).toMatchObject({ activity_status: 'queued', error_status: 'retrying' });
    expect(world.server.state.reports.at(-1)?.message).toContain('is no mount point any more');

    // Mounted again (a remount: the files are back).
    fs.mounted = true;
    await mkdir(path.join(world.rootDir, 'app'));
    await writeFile(path.join(world.rootDir, 'app/a.json'), json({ v: 1 }));
    await writeFile(path.join(world.rootDir, 'cfg_b.json'), json({ v: 2 }));
    const result = await pass('full');

    expect(result.converged).toBe(true);
    expect(await fileAt('cfg_c.json')).toBe(json({ v: 3 }));
    expect(onService('cfg_c')).toMatchObject({ activity_status: 'deployed', error_status: 'none' });
    expect(reportsReceived().filter((r) => r.endsWith('/failed'))).toEqual([]);
  });

  it('gone in the middle of a batch: nothing of that batch reported deployed, nor adopted from its declarations', async () => {
    const fs = await mountedWorld();
    put({ id: 'cfg_a', relative_filepath: 'app/a.json', content: { v: 1 } });
    put({ id: 'cfg_b', content: { v: 2 } });
    // Unmounted at the batch's first rename into rootDir: its writes go on into the bare directory.
    fs.failRenameTo = (target) => {
      if (target.startsWith(world.rootDir)) fs.mounted = false;
      return false;
    };

    expect((await pass()).converged).toBe(false);
    world.clock.advance(3_600_000);
    expect((await pass('full')).converged).toBe(false);
    expect(reportsReceived().filter((r) => !r.endsWith('/retrying'))).toEqual([]);
    expect(onService('cfg_a')).toMatchObject({ activity_status: 'queued', error_status: 'retrying' });

    fs.mounted = true;
    world.clock.advance(3_600_000);
    expect((await pass('full')).converged).toBe(true);
    expect(onService('cfg_a')).toMatchObject({ activity_status: 'deployed', error_status: 'none' });
    expect(onService('cfg_b')).toMatchObject({ activity_status: 'deployed', error_status: 'none' });
  });

  it('removes nothing while it is gone', async () => {
    const fs = await mountedWorld();
    put({ id: 'cfg_a', content: { v: 1 } });
    await pass();
    fs.mounted = false;
    put({ ...onService('cfg_a'), target_status: 'removed' });

    await pass('full');

    expect(await fileAt('cfg_a.json')).toBe(json({ v: 1 }));
    expect(reportsReceived().filter((r) => r.startsWith('cfg_a removed'))).toEqual([]);
  });

  it('a real tmpfs on rootDir, lazily unmounted mid-run: the bare directory stays empty; a new mount is written (root only)', async (ctx) => {
    const refused = tryMount(['-t', 'tmpfs', '-o', 'mode=0755,size=1m', 'tmpfs', world.rootDir]);
    if (refused !== undefined) {
      ctx.skip(refused);
      return;
    }
    let mounted = true;
    try {
      await world.reconciler.close();
      world.reconciler = await openReconciler(world.client, {
        retry: { maxAttempts: 1, baseDelaySeconds: 10, maxDelaySeconds: 60 },
      });
      put({ id: 'cfg_a', relative_filepath: 'app/a.json', content: { v: 1 } });
      put({ id: 'cfg_b', content: { v: 2 } });
      expect((await pass()).converged).toBe(true);
      expect(spawnSync('umount', ['-l', world.rootDir]).status).toBe(0);
      mounted = false;
      put({ id: 'cfg_c', content: { v: 3 } });

      for (let n = 0; n < 3; n += 1) {
        expect((await pass('full')).converged).toBe(false);
        world.clock.advance(3_600_000);
      }
      expect(await nodeFs.readdir(world.rootDir)).toEqual([]);
      expect(reportsReceived().filter((r) => r.endsWith('/failed'))).toEqual([]);

      // Another (empty) tmpfs mounted there: a new st_dev, accepted; everything is written onto it.
      expect(tryMount(['-t', 'tmpfs', '-o', 'mode=0755,size=1m', 'tmpfs', world.rootDir])).toBeUndefined();
      mounted = true;
      expect((await pass('full')).converged).toBe(true);
      expect(await fileAt('app/a.json')).toBe(json({ v: 1 }));
      expect(await fileAt('cfg_b.json')).toBe(json({ v: 2 }));
      expect(await fileAt('cfg_c.json')).toBe(json({ v: 3 }));
      unmount(world.rootDir);
      mounted = false;
      expect(await nodeFs.readdir(world.rootDir)).toEqual([]);
    } finally {
      if (mounted) unmount(world.rootDir);
    }
  });

  // Kept in memory only, a restart while the mount was gone wrote every file onto the bare mountpoint.
  it('a restart remembers it was a mount point: nothing written into the bare directory until mounted, or the record removed', async () => {
    const fs = await mountedWorld();
    put({ id: 'cfg_a', content: { v: 1 } });
    await pass();
    fs.mounted = false;
    await rm(path.join(world.rootDir, 'cfg_a.json'));
    put({ id: 'cfg_b', content: { v: 2 } });
    await world.reconciler.close();
    world.reconciler = await openReconciler(world.client);

    for (let n = 0; n < 2; n += 1) {
      expect((await pass('full')).converged).toBe(false);
      world.clock.advance(3_600_000);
    }
    expect(await nodeFs.readdir(world.rootDir)).toEqual([]);
    expect(onService('cfg_b')).toMatchObject({ activity_status: 'queued', error_status: 'retrying' });
    expect(world.server.state.reports.at(-1)?.message).toContain('was one when the agent last saw it');
    expect(reportsReceived().filter((r) => r.endsWith('/failed'))).toEqual([]);

    // Mounted again: written there.
    fs.mounted = true;
    expect((await pass('full')).converged).toBe(true);
    expect(await fileAt('cfg_b.json')).toBe(json({ v: 2 }));

    // The mount given up on purpose: the operator removes the record, and the plain directory is used.
    fs.mounted = false;
    await rm(path.join(world.dir, 'state', ROOT_MOUNT_FILE));
    await world.reconciler.close();
    world.reconciler = await openReconciler(world.client);
    await rm(path.join(world.rootDir, 'cfg_b.json'));
    expect((await pass('full')).converged).toBe(true);
    expect(await fileAt('cfg_b.json')).toBe(json({ v: 2 }));
  });

  it('a rootDir never seen as a mount point is used as it is, and nothing is recorded', async () => {
    put({ id: 'cfg_a', content: { v: 1 } });
    expect((await pass()).converged).toBe(true);
    await world.reconciler.close();
    world.reconciler = await openReconciler(world.client);
    expect((await pass('full')).converged).toBe(true);
    expect(await exists(path.join('..', 'state', ROOT_MOUNT_FILE))).toBe(false);
  });
});

describe('runPass: stateDir swapped for a symlink under a running agent', () => {
  it('writes nothing through it, neither a pass nor the flush at stop; goes on once stateDir is back', async () => {
    put({ id: 'cfg_a', content: { v: 1 } });
    expect((await pass()).converged).toBe(true);
    const stateDir = path.join(world.dir, 'state');
    const outside = path.join(world.dir, 'outside');
    await mkdir(outside);
    await nodeFs.rename(stateDir, `${stateDir}.aside`);
    await nodeFs.symlink(outside, stateDir);
    put({ id: 'cfg_b', content: { v: 2 } });

    await expect(pass()).rejects.toThrow(`resolves to ${outside} now`);
    await expect(world.reconciler.flushState()).rejects.toThrow(`resolves to ${outside} now`);
    expect(await nodeFs.readdir(outside)).toEqual([]);
    expect(await exists('cfg_b.json')).toBe(false);

    await rm(stateDir);
    await nodeFs.rename(`${stateDir}.aside`, stateDir);
    expect((await pass()).converged).toBe(true);
    expect(await fileAt('cfg_b.json')).toBe(json({ v: 2 }));
    expect(onService('cfg_b')).toMatchObject({ activity_status: 'deployed', error_status: 'none' });
    expect(
      JSON.parse(await readFile(path.join(stateDir, 'state.json'), 'utf8')).files['cfg_b.json'],
    ).toBeDefined();
    expect(await nodeFs.readdir(outside)).toEqual([]);
  });
});

describe('runPass: rootDir swapped for a symlink under a running agent', () => {
  it('writes and removes nothing through it, never an attempt; converges once rootDir is back', async () => {
    await world.reconciler.close();
    world.reconciler = await openReconciler(world.client, {
      retry: { maxAttempts: 1, baseDelaySeconds: 10, maxDelaySeconds: 60 },
    });
    put({ id: 'cfg_a', relative_filepath: 'app/a.json', content: { v: 1 } });
    put({ id: 'cfg_b', content: { v: 2 } });
    expect((await pass()).converged).toBe(true);
    // Whoever may write rootDir's parent moves it aside and puts a symlink to another directory in its place;
    // that directory holds a file with exactly cfg_b's bytes.
    const outside = path.join(world.dir, 'outside');
    await mkdir(outside);
    await writeFile(path.join(outside, 'cfg_b.json'), json({ v: 2 }));
    await nodeFs.rename(world.rootDir, `${world.rootDir}.aside`);
    await nodeFs.symlink(outside, world.rootDir);
    put({ id: 'cfg_c', content: { v: 3 } });
    put({ ...onService('cfg_b'), target_status: 'removed' });

    for (let n = 0; n < 3; n += 1) {
      expect((await pass('full')).converged).toBe(false);
      world.clock.advance(3_600_000);
    }
    expect((await nodeFs.readdir(outside)).sort()).toEqual(['cfg_b.json']);
    expect(await readFile(path.join(outside, 'cfg_b.json'), 'utf8')).toBe(json({ v: 2 }));
    expect(reportsReceived().filter((r) => r.endsWith('/failed'))).toEqual([]);
    expect(reportsReceived().filter((r) => r.startsWith('cfg_b removed'))).toEqual([]);
    expect(onService('cfg_c')).toMatchObject({ activity_status: 'queued', error_status: 'retrying' });
    expect(world.server.state.reports.find((r) => r.config_instance_id === 'cfg_c')?.message).toContain(
      `resolves to ${outside} now`,
    );

    // rootDir is the directory it was again.
    await rm(world.rootDir);
    await nodeFs.rename(`${world.rootDir}.aside`, world.rootDir);
    world.clock.advance(3_600_000);
    expect((await pass('full')).converged).toBe(true);
    expect(await fileAt('cfg_c.json')).toBe(json({ v: 3 }));
    expect(await exists('cfg_b.json')).toBe(false);
    expect(onService('cfg_c')).toMatchObject({ activity_status: 'deployed', error_status: 'none' });
    expect(onService('cfg_b')).toMatchObject({ activity_status: 'removed', error_status: 'none' });
    expect(await readFile(path.join(outside, 'cfg_b.json'), 'utf8')).toBe(json({ v: 2 }));
  });
});

describe('runPass: a failed swap', () => {
  it.skipIf(process.getuid?.() !== 0)(
    "puts the old file back in the group it had, not the agent's (root only: chown to any gid)",
    async () => {
      put({ id: 'cfg_a', relative_filepath: 'conf/a.json', config_schema_id: 'sch_s', content: { v: 'a' } });
      await pass();
      // files.rules gave it the group of its readers (a gid no account uses), mode 0640.
      await nodeFs.chown(path.join(world.rootDir, 'conf/a.json'), 0, 4242);
      world.server.state.removeInstance('cfg_a', T0);
      put({ id: 'cfg_b', relative_filepath: 'conf/b.json', config_schema_id: 'sch_s', content: { v: 'b' } });
      world.fs.failRenameTo = (target) => target.endsWith('conf/b.json');

      await pass();

      expect(await fileAt('conf/a.json')).toBe(json({ v: 'a' }));
      // Rolled back as a new inode in the agent's group, it was unreadable to the group that reads it.
      const stats = await stat(path.join(world.rootDir, 'conf/a.json'));
      expect({ gid: stats.gid, mode: stats.mode & 0o777 }).toEqual({ gid: 4242, mode: 0o640 });
    },
  );
});

describe('runPass: a huge file planted at a managed path', () => {
  /** The most bytes of a file any one read handed the agent: what observing a file costs in memory. */
  function meterReads(): () => number {
    let largest = 0;
    const open = world.fs.open;
    world.fs.open = (async (...args: Parameters<typeof nodeFs.open>) => {
      const handle = await open(...args);
      const readFile = handle.readFile.bind(handle);
      const read = handle.read.bind(handle);
      return Object.assign(handle, {
        readFile: async (...rest: unknown[]) => {
          const data = await (readFile as (...a: unknown[]) => Promise<Buffer | string>)(...rest);
          largest = Math.max(largest, data.length);
          return data;
        },
        read: async (...rest: unknown[]) => {
          const result = await (read as (...a: unknown[]) => Promise<{ bytesRead: number }>)(...rest);
          largest = Math.max(largest, result.bytesRead);
          return result;
        },
      });
    }) as typeof nodeFs.open;
    return () => largest;
  }

  it('is hashed a chunk at a time, never held whole, and repaired (a retired one kept)', async () => {
    put({ id: 'cfg_a', content: { v: 1 } });
    put({ id: 'cfg_b', content: { v: 2 } });
    await pass();
    // A local user replaces both with sparse files of 64 MiB (gigabytes cost no more to make): read whole, each
    // was allocated in full, on every pass, until a small device killed the agent for it.
    for (const name of ['cfg_a.json', 'cfg_b.json']) {
      await writeFile(path.join(world.rootDir, name), '');
      await truncate(path.join(world.rootDir, name), 64 * 1024 * 1024);
    }
    world.server.state.removeInstance('cfg_b', T0);
    const largestRead = meterReads();

    const result = await pass();

    expect(await fileAt('cfg_a.json')).toBe(json({ v: 1 }));
    expect((await stat(path.join(world.rootDir, 'cfg_b.json'))).size).toBe(64 * 1024 * 1024);
    expect(result.outcomes.find((o) => o.instanceId === 'cfg_b')?.message).toMatch(/changed by someone else/);
    expect(largestRead()).toBeLessThanOrEqual(1024 * 1024);
  });

  it('of another size than the bytes wanted there is not read at all by the observation, and repaired', async () => {
    put({ id: 'cfg_a', content: { v: 1 } });
    put({ id: 'cfg_c', relative_filepath: 'same-size.json', content: { v: 3 } });
    put({ id: 'cfg_r', relative_filepath: 'retired.json', content: { v: 5 } });
    await pass();
    // Retired while a local user's sparse file stands at its path: another length than the one written, so not
    // ours, kept without a read.
    await writeFile(path.join(world.rootDir, 'retired.json'), '');
    await truncate(path.join(world.rootDir, 'retired.json'), 64 * 1024 * 1024);
    world.server.state.removeInstance('cfg_r', T0);
    // A terabyte sparse file took 50 minutes of reading per pass (4 GiB: 12 s on the dev machine): every full
    // pass held the device's other configs back that long. One of the wanted size is still read and compared.
    await writeFile(path.join(world.rootDir, 'cfg_a.json'), '');
    await truncate(path.join(world.rootDir, 'cfg_a.json'), 64 * 1024 * 1024);
    await writeFile(path.join(world.rootDir, 'same-size.json'), json({ v: 4 }));
    const bytesRead = new Map<string, number>();
    const open = world.fs.open;
    world.fs.open = (async (...args: Parameters<typeof nodeFs.open>) => {
      const handle = await open(...args);
      const read = handle.read.bind(handle);
      const name = path.basename(String(args[0]));
      return Object.assign(handle, {
        read: async (...rest: unknown[]) => {
          const result = await (read as (...a: unknown[]) => Promise<{ bytesRead: number }>)(...rest);
          bytesRead.set(name, (bytesRead.get(name) ?? 0) + result.bytesRead);
          return result;
        },
      });
    }) as typeof nodeFs.open;

    const result = await pass();

    expect(await fileAt('cfg_a.json')).toBe(json({ v: 1 }));
    expect(await fileAt('same-size.json')).toBe(json({ v: 3 }));
    expect(bytesRead.get('cfg_a.json') ?? 0).toBe(0);
    expect(bytesRead.get('retired.json') ?? 0).toBe(0);
    expect((await stat(path.join(world.rootDir, 'retired.json'))).size).toBe(64 * 1024 * 1024);
    expect(result.outcomes.find((o) => o.instanceId === 'cfg_r')?.message).toMatch(/changed by someone else/);
    expect(bytesRead.get('same-size.json')).toBeGreaterThan(0);
    expect(
      result.outcomes
        .filter((o) => o.action === 'written')
        .map((o) => o.instanceId)
        .sort(),
    ).toEqual(['cfg_a', 'cfg_c']);
  });
});

describe('runPass: a state.json record whose path the path guard refuses (tampered)', () => {
  it('is dropped with an error naming it, never acted on, and the passes converge', async () => {
    put({ id: 'cfg_a', relative_filepath: 'a.json', content: { port: 1 } });
    put({ id: 'cfg_b', relative_filepath: 'app/b.json', content: { port: 2 } });
    await pass();
    // Files outside the root, and one at a non-canonical spelling of a managed one, each with the bytes recorded.
    await writeFile(path.join(world.dir, 'outside.json'), json({ port: 1 }));
    const stateFile = path.join(world.dir, 'state', 'state.json');
    const saved = JSON.parse(await readFile(stateFile, 'utf8')) as {
      files: Record<string, { instanceId: string }>;
    };
    const refused = [
      '../outside.json',
      path.join(world.dir, 'outside.json'),
      'app/../app/b.json',
      'app//b.json',
    ];
    for (const bad of refused) saved.files[bad] = { ...saved.files['a.json']!, instanceId: 'cfg_gone' };
    saved.files['../outside.json']!.instanceId = 'cfg_a';
    await world.reconciler.close();
    await writeFile(stateFile, JSON.stringify(saved));
    const lines: string[] = [];
    const destination = new Writable({
      write(chunk: Buffer, _encoding, done) {
        lines.push(...chunk.toString('utf8').split('\n').filter(Boolean));
        done();
      },
    });
    const logger = createLogger({ level: 'info', secrets: createSecretRegistry(), destination });
    world.reconciler = await openReconciler(world.client, {}, logger);

    // Before: every pass tried to remove '../outside.json' (refused: `waiting`), never converged, `--once` exit 1.
    for (let i = 0; i < 3; i += 1) {
      const result = await pass();
      expect(result.converged).toBe(true);
      expect(result.steps.filter((step) => step.kind === 'remove')).toEqual([]);
      world.clock.advance(3_600_000);
    }
    expect(await fileAt('../outside.json')).toBe(json({ port: 1 }));
    expect(await fileAt('a.json')).toBe(json({ port: 1 }));
    expect(await fileAt('app/b.json')).toBe(json({ port: 2 }));
    const after = JSON.parse(await readFile(stateFile, 'utf8')) as typeof saved;
    expect(Object.keys(after.files).sort()).toEqual(['a.json', 'app/b.json']);
    const dropped = lines
      .map((line) => JSON.parse(line) as { msg: string; path?: string })
      .filter((line) => line.msg.includes('the path guard refuses'));
    expect(dropped.map((line) => line.path).sort()).toEqual([...refused].sort());
    expect(reportsReceived()).toEqual(['cfg_a deployed/none', 'cfg_b deployed/none']);
  });
});

describe('runPass: target removed or created', () => {
  it('recorded as ours: the file is removed and `removed` reported', async () => {
    put({ id: 'cfg_a', relative_filepath: 'dir/a.json' });
    await pass();
    world.server.state.removeInstance('cfg_a', T0);

    await pass();

    expect(await exists('dir/a.json')).toBe(false);
    expect(await exists('dir')).toBe(false);
    expect(reportsReceived()).toEqual(['cfg_a deployed/none', 'cfg_a removed/none']);
  });

  it('never deployed by us: archived (`removed`), a file at its path untouched', async () => {
    await writeFile(path.join(world.rootDir, 'cfg_a.json'), 'not ours\n');
    put({ id: 'cfg_a', target_status: 'removed', activity_status: 'queued' });

    await pass();

    expect(await fileAt('cfg_a.json')).toBe('not ours\n');
    expect(reportsReceived()).toEqual(['cfg_a removed/none']);
  });

  it('deployed per the service but not recorded as ours: `removed` with a note, the file stays', async () => {
    await writeFile(path.join(world.rootDir, 'cfg_a.json'), 'someone else\n');
    put({ id: 'cfg_a', target_status: 'removed', activity_status: 'deployed' });

    await pass();

    expect(await fileAt('cfg_a.json')).toBe('someone else\n');
    expect(reportsReceived()).toEqual(['cfg_a removed/none']);
    expect(world.server.state.reports[0]?.message).toMatch(/not recorded as written by this agent/);
  });

  it('another instance deployed at the path in this pass takes the file over; the old one is reported with it', async () => {
    put({ id: 'cfg_a', relative_filepath: 'app.json', content: { v: 'a' } });
    await pass();
    put({ id: 'cfg_b', relative_filepath: 'app.json', content: { v: 'b' } });
    world.server.state.removeInstance('cfg_a', T0);

    await pass();

    expect(await fileAt('app.json')).toBe(json({ v: 'b' }));
    expect(reportsReceived().slice(1).sort()).toEqual(['cfg_a removed/none', 'cfg_b deployed/none']);
  });

  it('the path already belongs to the other instance: the old one is simply reported `removed`', async () => {
    put({ id: 'cfg_b', relative_filepath: 'app.json', content: { v: 'b' } });
    await pass();
    put({
      id: 'cfg_a',
      relative_filepath: 'app.json',
      target_status: 'removed',
      activity_status: 'deployed',
    });

    await pass();

    expect(await fileAt('app.json')).toBe(json({ v: 'b' }));
    expect(reportsReceived()).toEqual(['cfg_b deployed/none', 'cfg_a removed/none']);
  });

  it('while the new owner of the path failed for good, the old file stays and nothing is reported for it', async () => {
    put({ id: 'cfg_a', relative_filepath: 'app.json', content: { v: 'a' } });
    await pass();
    world.server.state.removeInstance('cfg_a', T0);
    put({ id: 'cfg_b', relative_filepath: 'app.json', error_status: 'failed' });

    await pass();

    expect(await fileAt('app.json')).toBe(json({ v: 'a' }));
    expect(reportsReceived()).toEqual(['cfg_a deployed/none']);
  });

  it('recorded as ours for an earlier owner and wanted by nobody (full pass): removed, `removed` reported', async () => {
    put({ id: 'cfg_x', relative_filepath: 'app.json' });
    await pass();
    // cfg_x is history now (not listed again); cfg_y claims it had the path deployed and must go.
    put({ ...onService('cfg_x'), target_status: 'removed', activity_status: 'removed' });
    put({
      id: 'cfg_y',
      relative_filepath: 'app.json',
      target_status: 'removed',
      activity_status: 'deployed',
    });

    await pass();

    expect(await exists('app.json')).toBe(false);
    expect(reportsReceived()).toEqual(['cfg_x deployed/none', 'cfg_y removed/none']);
  });

  it('a removal of the same config schema is a swap: the old file goes, the new one is written, both reported', async () => {
    put({ id: 'cfg_a', relative_filepath: 'old.json', config_schema_id: 'sch_app' });
    await pass();
    put({ id: 'cfg_b', relative_filepath: 'new.json', config_schema_id: 'sch_app' });
    world.server.state.removeInstance('cfg_a', T0);

    await pass();

    expect(await exists('old.json')).toBe(false);
    expect(await fileAt('new.json')).toBe(json({ owner: 'cfg_b' }));
    expect(reportsReceived().slice(1)).toEqual(['cfg_b deployed/none', 'cfg_a removed/none']);
  });

  // Removed and put back at each retry, the old file was a new inode each time (a change to hooks and readers).
  it.each([
    [
      'a local directory at the new path',
      'new.json',
      async () => mkdir(path.join(world.rootDir, 'new.json')),
    ],
    [
      'a local file where the new path needs a directory',
      'etc/new.json',
      async () => writeFile(path.join(world.rootDir, 'etc'), 'a local file'),
    ],
    [
      'a symlink on the way',
      'link/new.json',
      async () => nodeFs.symlink(world.dir, path.join(world.rootDir, 'link')),
    ],
  ])(
    'a swap whose new file is blocked by %s: the old file is never removed nor rewritten on its retries',
    async (_, newPath, block) => {
      put({ id: 'cfg_a', relative_filepath: 'old.json', config_schema_id: 'sch_app' });
      await pass();
      const before = await stat(path.join(world.rootDir, 'old.json'));
      await block();
      put({ id: 'cfg_b', relative_filepath: newPath, config_schema_id: 'sch_app' });
      world.server.state.removeInstance('cfg_a', T0);
      for (let round = 0; round < 4; round++) {
        await pass();
        const now = await stat(path.join(world.rootDir, 'old.json'));
        expect([now.ino, now.mtimeMs]).toEqual([before.ino, before.mtimeMs]);
        world.clock.advance(3_600_000);
      }
      expect(await fileAt('old.json')).toBe(json({ owner: 'cfg_a' }));
      expect(reportsReceived().filter((r) => r.startsWith('cfg_a'))).toEqual(['cfg_a deployed/none']);
      expect(reportsReceived().at(-1)).toBe('cfg_b queued/retrying');
    },
  );
});

describe('runPass: file bytes past the in-memory budget (spill.ts)', () => {
  /** A reconciler that holds no file bytes in memory: every file goes through the content cache. */
  async function spillingEverything(): Promise<void> {
    await world.reconciler.close();
    world.reconciler = await openReconciler(world.client, { inMemoryFileBytes: 0 });
  }

  /** Opening the content cache's entries (not its temp files) fails as if the entries were gone. */
  function loseCacheEntries(): void {
    const open = world.fs.open;
    world.fs.open = (async (...args: Parameters<typeof nodeFs.open>) => {
      if (/[/]cache[/][0-9a-f]{64}$/.test(String(args[0]))) {
        throw Object.assign(new Error(`ENOENT: simulated, open '${String(args[0])}'`), { code: 'ENOENT' });
      }
      return open(...args);
    }) as typeof nodeFs.open;
  }

  it('are set aside in the content cache and written byte for byte, then reported', async () => {
    await spillingEverything();
    put({ id: 'cfg_a', relative_filepath: 'app/a.json', content: { port: 8080 } });
    put({ id: 'cfg_b', relative_filepath: 'app/b.yaml', content: { port: 'on', list: [1, 2] } });

    const result = await pass();

    // Set aside: the steps carried only the sha256 and the length of their bytes, never the bytes.
    const writes = result.steps.filter((step) => step.kind === 'write');
    expect(writes.map((step) => step.size).sort()).toEqual(
      [json({ port: 8080 }).length, 'port: "on"\nlist:\n  - 1\n  - 2\n'.length].sort(),
    );
    expect(await fileAt('app/a.json')).toBe(json({ port: 8080 }));
    expect(await fileAt('app/b.yaml')).toBe('port: "on"\nlist:\n  - 1\n  - 2\n');
    expect(reportsReceived().sort()).toEqual(['cfg_a deployed/none', 'cfg_b deployed/none']);
    expect(result.converged).toBe(true);
    // The drift watcher's copies are the entries set aside: one per file, named by its sha256.
    const cached = await nodeFs.readdir(path.join(world.dir, 'state', 'cache'));
    expect(cached.sort()).toEqual(writes.map((step) => step.sha256).sort());
  });

  it('a write whose bytes were lost from the cache waits for the next pass, uncharged; the file it displaces stays', async () => {
    // The bytes are the agent's own state directory's trouble, not the instance's: no attempt is counted (with
    // maxAttempts 1 the instance would be `failed` for good), nothing is reported, no cooldown holds it off.
    await world.reconciler.close();
    world.reconciler = await openReconciler(world.client, {
      retry: { maxAttempts: 1, baseDelaySeconds: 10, maxDelaySeconds: 60 },
    });
    put({ id: 'cfg_a', relative_filepath: 'old.json', config_schema_id: 'sch_app' });
    await pass();
    await world.reconciler.close();
    world.reconciler = await openReconciler(world.client, {
      inMemoryFileBytes: 0,
      retry: { maxAttempts: 1, baseDelaySeconds: 10, maxDelaySeconds: 60 },
    });
    put({ id: 'cfg_b', relative_filepath: 'new.json', config_schema_id: 'sch_app' });
    world.server.state.removeInstance('cfg_a', T0);
    loseCacheEntries();

    const failed = await pass();

    expect(failed.converged).toBe(false);
    expect(failed.outcomes).toContainEqual(
      expect.objectContaining({
        instanceId: 'cfg_b',
        action: 'waiting',
        message: expect.stringMatching(/content cache/),
      }),
    );
    expect(await fileAt('old.json')).toBe(json({ owner: 'cfg_a' }));
    expect(await exists('new.json')).toBe(false);
    expect(reportsReceived().slice(1)).toEqual([]);

    world.fs.open = nodeFs.open;
    const healed = await pass();

    expect(healed.converged).toBe(true);
    expect(await exists('old.json')).toBe(false);
    expect(await fileAt('new.json')).toBe(json({ owner: 'cfg_b' }));
    expect(reportsReceived().slice(1)).toEqual(['cfg_b deployed/none', 'cfg_a removed/none']);
  });

  it('an entry the state directory cannot read (EIO) costs no attempt either; the next pass heals', async () => {
    await world.reconciler.close();
    world.reconciler = await openReconciler(world.client, {
      inMemoryFileBytes: 0,
      retry: { maxAttempts: 1, baseDelaySeconds: 10, maxDelaySeconds: 60 },
    });
    put({ id: 'cfg_b', relative_filepath: 'b.json', content: { port: 8080 } });
    const open = world.fs.open;
    world.fs.open = (async (...args: Parameters<typeof nodeFs.open>) => {
      if (/[/]cache[/][0-9a-f]{64}$/.test(String(args[0])))
        throw Object.assign(new Error(`EIO: simulated, open '${String(args[0])}'`), { code: 'EIO' });
      return open(...args);
    }) as typeof nodeFs.open;

    const failed = await pass();

    expect(failed.outcomes).toContainEqual(
      expect.objectContaining({ instanceId: 'cfg_b', action: 'waiting' }),
    );
    expect(reportsReceived()).toEqual([]);
    world.fs.open = open;
    const healed = await pass();
    expect(healed.converged).toBe(true);
    expect(await fileAt('b.json')).toBe(json({ port: 8080 }));
    expect(reportsReceived()).toEqual(['cfg_b deployed/none']);
  });

  it('an entry of the right size with other bytes (torn) costs no attempt, is deleted, and the next pass heals', async () => {
    // The entry is kept by every prune (a.json, deployed, has these bytes), so only its deletion on the failed
    // read stops it from failing b.json's write on every pass. With maxAttempts 1 a charged attempt would have
    // left cfg_b `failed` for good over a cache entry a power cut tore.
    await world.reconciler.close();
    world.reconciler = await openReconciler(world.client, {
      inMemoryFileBytes: 0,
      retry: { maxAttempts: 1, baseDelaySeconds: 10, maxDelaySeconds: 60 },
    });
    put({ id: 'cfg_a', relative_filepath: 'a.json', content: { port: 8080 } });
    await pass();
    const wanted = Buffer.from(json({ port: 8080 }));
    const entry = path.join(world.dir, 'state', 'cache', sha256Hex(wanted));
    await nodeFs.writeFile(entry, Buffer.alloc(wanted.length));
    put({ id: 'cfg_b', relative_filepath: 'b.json', content: { port: 8080 } });

    const failed = await pass();

    expect(failed.converged).toBe(false);
    expect(await exists('b.json')).toBe(false);
    expect(reportsReceived().slice(1)).toEqual([]);

    const healed = await pass();

    expect(healed.converged).toBe(true);
    expect(await fileAt('a.json')).toBe(json({ port: 8080 }));
    expect(await fileAt('b.json')).toBe(json({ port: 8080 }));
    expect(reportsReceived().slice(1)).toEqual(['cfg_b deployed/none']);
    expect(await nodeFs.readFile(entry)).toEqual(wanted);
  });
});

describe('runPass: a batch whose declaration cannot be written (intent.json)', () => {
  it.each(['ENOSPC', 'EIO', 'EROFS'])(
    '%s: none of its files is created, retrying as the device condition (never an attempt); written once it can declare',
    async (errno) => {
      await world.reconciler.close();
      let failing = true;
      // Every publish of intent.json fails (its rename into place), as on a full, failing or read-only stateDir.
      world.fs.renameErrno = errno;
      world.fs.failRenameTo = (target) => failing && path.basename(target) === 'intent.json';
      world.reconciler = await openReconciler(world.client, {
        retry: { maxAttempts: 1, baseDelaySeconds: 10, maxDelaySeconds: 60 },
      });
      put({ id: 'cfg_a', relative_filepath: 'app/a.json', content: { v: 1 } });
      put({ id: 'cfg_b', content: { v: 2 } });

      // Three passes, each past every cooldown: with maxAttempts 1 an attempt is `failed` for good.
      for (let n = 0; n < 3; n += 1) {
        expect((await pass('full')).converged).toBe(false);
        world.clock.advance(3_600_000);
      }
      // No file, no temp file, no directory: nothing a power cut could leave undeclared.
      expect(await nodeFs.readdir(world.rootDir)).toEqual([]);
      expect(reportsReceived().filter((r) => !r.endsWith('/retrying'))).toEqual([]);
      expect(onService('cfg_a')).toMatchObject({ activity_status: 'queued', error_status: 'retrying' });
      expect(onService('cfg_b')).toMatchObject({ activity_status: 'queued', error_status: 'retrying' });
      expect(world.server.state.reports.at(-1)?.message).toContain('intent.json');

      failing = false;
      const result = await pass('full');

      expect(result.converged).toBe(true);
      expect(await fileAt('app/a.json')).toBe(json({ v: 1 }));
      expect(await fileAt('cfg_b.json')).toBe(json({ v: 2 }));
      expect(onService('cfg_a')).toMatchObject({ activity_status: 'deployed', error_status: 'none' });
      expect(reportsReceived().filter((r) => r.endsWith('/failed'))).toEqual([]);
      // Settled: the journal is gone once state.json records the files.
      expect(await exists(path.join('..', 'state', 'intent.json'))).toBe(false);
    },
  );
});

describe('runPass: ownership declared before the rename (intent.json)', () => {
  /**
   * A run that dies right after `relative` is renamed into place: the pass is stopped there, and the reconciler
   * is closed without the persist a stop would make, so state.json never records the file (a kill -9).
   */
  async function killedAfterRenameOf(relative: string, fail = false): Promise<void> {
    const controller = new AbortController();
    const rename = world.fs.rename;
    world.fs.rename = async (from, to) => {
      if (String(to) !== path.join(world.rootDir, relative)) return rename(from, to);
      controller.abort();
      if (fail) throw Object.assign(new Error('EIO: simulated, rename'), { code: 'EIO' });
      return rename(from, to);
    };
    await expect(world.reconciler.runPass({ mode: 'full', signal: controller.signal })).rejects.toThrow();
    world.fs.rename = rename;
    await world.reconciler.close();
    world.reconciler = await openReconciler(world.client);
  }

  it('a file a killed run published and never recorded is removed when its still-queued instance is retired', async () => {
    put({ id: 'cfg_a', relative_filepath: 'motion/left.json', config_schema_id: 'sch_motion' });
    await killedAfterRenameOf('motion/left.json');
    expect(await fileAt('motion/left.json')).toBe(json({ owner: 'cfg_a' }));
    expect(reportsReceived()).toEqual([]);
    // The service swaps the schema to another path while cfg_a is still queued: cfg_a is retired with it.
    put({ id: 'cfg_b', relative_filepath: 'motion/right.json', config_schema_id: 'sch_motion' });
    world.server.state.removeInstance('cfg_a', T0);

    const result = await pass();

    expect(await exists('motion/left.json')).toBe(false);
    expect(await fileAt('motion/right.json')).toBe(json({ owner: 'cfg_b' }));
    expect(reportsReceived().sort()).toEqual(['cfg_a removed/none', 'cfg_b deployed/none']);
    expect(result.converged).toBe(true);
    // Settled: state.json records what the journal declared, and the journal is gone.
    expect(await exists(path.join('..', 'state', 'intent.json'))).toBe(false);
  });

  it('removed, it takes the directories its write made with it, never one that was there before', async () => {
    // `keep` is the operator's (empty); `keep/made/deeper` did not exist at the declaration: the write made it.
    await mkdir(path.join(world.rootDir, 'keep'));
    put({ id: 'cfg_a', relative_filepath: 'keep/made/deeper/a.json' });
    await killedAfterRenameOf('keep/made/deeper/a.json');
    world.server.state.removeInstance('cfg_a', T0);

    const result = await pass();

    expect(reportsReceived()).toEqual(['cfg_a removed/none']);
    expect(result.converged).toBe(true);
    expect(await exists('keep/made')).toBe(false);
    expect(await exists('keep')).toBe(true);
  });

  it('retired alone (no successor), the same file is removed too', async () => {
    put({ id: 'cfg_a', relative_filepath: 'a.json' });
    await killedAfterRenameOf('a.json');
    world.server.state.removeInstance('cfg_a', T0);

    const result = await pass();

    expect(await exists('a.json')).toBe(false);
    expect(reportsReceived()).toEqual(['cfg_a removed/none']);
    expect(result.converged).toBe(true);
  });

  it('a declared write whose rename never happened proves nothing: the file there stays', async () => {
    await writeFile(path.join(world.rootDir, 'a.json'), 'an operator file\n');
    put({ id: 'cfg_a', relative_filepath: 'a.json' });
    await killedAfterRenameOf('a.json', true);
    expect(await fileAt('a.json')).toBe('an operator file\n');
    world.server.state.removeInstance('cfg_a', T0);

    const result = await pass();

    expect(await fileAt('a.json')).toBe('an operator file\n');
    expect(reportsReceived()).toEqual(['cfg_a removed/none']);
    expect(result.converged).toBe(true);
    expect(await exists(path.join('..', 'state', 'intent.json'))).toBe(false);
  });

  it('a file a killed run published and never recorded is confirmed, not rewritten, when still wanted', async () => {
    put({ id: 'cfg_a', relative_filepath: 'a.json' });
    await killedAfterRenameOf('a.json');
    const before = await stat(path.join(world.rootDir, 'a.json'));

    const result = await pass();

    const after = await stat(path.join(world.rootDir, 'a.json'));
    expect(after.ino).toBe(before.ino);
    expect(reportsReceived()).toEqual(['cfg_a deployed/none']);
    expect(result.converged).toBe(true);
  });
});

describe('runPass: pulls', () => {
  it('an incremental poll fetches the recorded owner of a path a newcomer wants, so the newcomer is refused', async () => {
    put({ id: 'cfg_owner', relative_filepath: 'app.json', updated_at: '2026-01-05T00:00:00.000Z' });
    await pass();
    // An older instance is queued at the same path; the owner is deployed and unchanged, so a poll's
    // queries do not list it.
    put({ id: 'cfg_late', relative_filepath: 'app.json', updated_at: '2026-01-02T00:00:00.000Z' });

    const result = await pass('incremental');

    expect(result.mode).toBe('incremental');
    expect(await fileAt('app.json')).toBe(json({ owner: 'cfg_owner' }));
    expect(reportsReceived()).toEqual(['cfg_owner deployed/none', 'cfg_late queued/retrying']);
  });

  it('an incremental poll that would remove a recorded file becomes a full pass', async () => {
    put({ id: 'cfg_a', relative_filepath: 'a.json' });
    await pass();
    world.server.state.removeInstance('cfg_a', T0);

    const result = await pass('incremental');

    expect(result.mode).toBe('full');
    expect(await exists('a.json')).toBe(false);
  });

  it('an instance of another device in a listing is ignored: nothing written, nothing reported', async () => {
    put({ id: 'cfg_mine', relative_filepath: 'mine.json' });
    put({ id: 'cfg_stranger', device_id: 'dvc_other', relative_filepath: 'stranger.json' });
    // A server bug: the device filter is ignored (the pager builds every pull from listConfigInstancePage).
    const leaky: ServiceClient = {
      ...world.client,
      listConfigInstancePage: ({ device_id: _ignored, ...filters } = {}, page) =>
        world.client.listConfigInstancePage(filters, page),
    };
    await world.reconciler.close();
    world.reconciler = await openReconciler(leaky);

    // A poll lists its queries one by one (a full pull's one wide listing keeps only what its queries match).
    const result = await pass('incremental');

    expect(result.error).toBeUndefined();
    expect(await exists('stranger.json')).toBe(false);
    expect(await fileAt('mine.json')).toBe(json({ owner: 'cfg_mine' }));
    expect(reportsReceived()).toEqual(['cfg_mine deployed/none']);
  });
});

describe('runPass: two instances whose paths nest (one file where the other needs a directory)', () => {
  const lastReport = (id: string) =>
    world.server.state.reports.filter((r) => r.config_instance_id === id).at(-1);

  // The newer one takes the path over, as at one path: the older one's file is removed (and the directory the agent
  // made for it), the newer one written, the older one told why. Before, the newer one waited for good.
  it("a newer instance whose path is a directory of the older one's: takes it over, written in the next pass", async () => {
    put({ id: 'cfg_dir', relative_filepath: 'a.json/b.json', updated_at: '2026-01-02T00:00:00.000Z' });
    await pass();
    put({ id: 'cfg_file', relative_filepath: 'a.json', updated_at: '2026-01-03T00:00:00.000Z' });
    await pass();
    expect(await fileAt('a.json')).toBe(json({ owner: 'cfg_file' }));
    for (let round = 0; round < 3; round++) {
      world.clock.advance(3_600_000);
      await pass();
    }
    expect(await fileAt('a.json')).toBe(json({ owner: 'cfg_file' }));
    expect(lastReport('cfg_file')).toMatchObject({ activity_status: 'deployed', error_status: 'none' });
    expect(lastReport('cfg_dir')?.error_status).toBe('retrying');
    expect(lastReport('cfg_dir')?.message).toContain(
      'path conflict: "a.json/b.json" and "a.json" of cfg_file, the instance updated last',
    );
    // Told once: the same message while the conflict lasts.
    expect(world.server.state.reports.filter((r) => r.config_instance_id === 'cfg_dir')).toHaveLength(2);
  });

  it('and the other way round: a file where the newer instance needs a directory', async () => {
    put({ id: 'cfg_file', relative_filepath: 'a.json', updated_at: '2026-01-02T00:00:00.000Z' });
    await pass();
    put({ id: 'cfg_dir', relative_filepath: 'a.json/b.json', updated_at: '2026-01-03T00:00:00.000Z' });
    await pass();
    expect(await fileAt('a.json/b.json')).toBe(json({ owner: 'cfg_dir' }));
    for (let round = 0; round < 3; round++) {
      world.clock.advance(3_600_000);
      await pass();
    }
    expect(await fileAt('a.json/b.json')).toBe(json({ owner: 'cfg_dir' }));
    expect(lastReport('cfg_dir')).toMatchObject({ activity_status: 'deployed', error_status: 'none' });
    expect(lastReport('cfg_file')?.error_status).toBe('retrying');
    expect(lastReport('cfg_file')?.message).toContain(
      'path conflict: "a.json" and "a.json/b.json" of cfg_dir, the instance updated last',
    );
  });

  it('a sibling needing the same directory lands in the same pass as the winner whose write removes the file', async () => {
    put({ id: 'cfg_file', relative_filepath: 'a.json', updated_at: '2026-01-01T00:00:00.000Z' });
    await pass();
    put({ id: 'cfg_aside', relative_filepath: 'a.json/x.json', updated_at: '2026-01-02T00:00:00.000Z' });
    put({ id: 'cfg_dir', relative_filepath: 'a.json/b.json', updated_at: '2026-01-03T00:00:00.000Z' });
    await pass();
    // The swap that removes a.json runs before the plain writes: a.json/x.json does not meet the file.
    expect(await fileAt('a.json/b.json')).toBe(json({ owner: 'cfg_dir' }));
    expect(await fileAt('a.json/x.json')).toBe(json({ owner: 'cfg_aside' }));
    expect(lastReport('cfg_aside')).toMatchObject({ activity_status: 'deployed', error_status: 'none' });
  });

  it("cut between the loser's removal and the winner's write (its file gone, its record still there): the next pass writes the winner", async () => {
    put({ id: 'cfg_file', relative_filepath: 'a.json', updated_at: '2026-01-01T00:00:00.000Z' });
    await pass();
    // As a power cut after the swap's unlink leaves it: state.json still records cfg_file at a.json.
    await rm(path.join(world.rootDir, 'a.json'));
    put({ id: 'cfg_dir', relative_filepath: 'a.json/b.json', updated_at: '2026-01-03T00:00:00.000Z' });
    await pass();
    expect(await fileAt('a.json/b.json')).toBe(json({ owner: 'cfg_dir' }));
    expect(lastReport('cfg_dir')).toMatchObject({ activity_status: 'deployed', error_status: 'none' });
    const state = JSON.parse(await readFile(path.join(world.dir, 'state', 'state.json'), 'utf8'));
    expect(Object.keys(state.files).sort()).toEqual(['a.json/b.json']);
  });

  it('the older one stays while the newer one cannot be written (failed on the service): a device keeps a config', async () => {
    put({ id: 'cfg_file', relative_filepath: 'a.json', updated_at: '2026-01-02T00:00:00.000Z' });
    await pass();
    put({
      id: 'cfg_dir',
      relative_filepath: 'a.json/b.json',
      updated_at: '2026-01-03T00:00:00.000Z',
      error_status: 'failed',
    });
    await pass();
    expect(await fileAt('a.json')).toBe(json({ owner: 'cfg_file' }));
    expect(lastReport('cfg_file')).toMatchObject({ activity_status: 'deployed', error_status: 'none' });
  });

  it('a file of someone else in the directory the newer one needs is never removed, and the older file is put back: it waits, told why', async () => {
    put({ id: 'cfg_dir', relative_filepath: 'a.json/b.json', updated_at: '2026-01-02T00:00:00.000Z' });
    await pass();
    await writeFile(path.join(world.rootDir, 'a.json', 'mine.txt'), 'a local file');
    put({ id: 'cfg_file', relative_filepath: 'a.json', updated_at: '2026-01-03T00:00:00.000Z' });
    await pass();
    world.clock.advance(3_600_000);
    await pass();
    expect(await readFile(path.join(world.rootDir, 'a.json', 'mine.txt'), 'utf8')).toBe('a local file');
    expect(lastReport('cfg_file')?.error_status).toBe('retrying');
    expect(lastReport('cfg_file')?.activity_status).not.toBe('deployed');
    // The older one's file was put back when the newer one could not be written: the device keeps a config
    // (before, it was removed and the device had neither). Neither is claimed deployed.
    expect(await fileAt('a.json/b.json')).toBe(json({ owner: 'cfg_dir' }));
    expect(lastReport('cfg_dir')?.error_status).toBe('retrying');
  });

  it("while a file of someone else blocks the newer one, the older one's file is never removed nor rewritten on its retries", async () => {
    put({ id: 'cfg_dir', relative_filepath: 'a.json/b.json', updated_at: '2026-01-02T00:00:00.000Z' });
    await pass();
    const loser = path.join(world.rootDir, 'a.json', 'b.json');
    const before = await stat(loser);
    await writeFile(path.join(world.rootDir, 'a.json', 'mine.txt'), 'a local file');
    put({ id: 'cfg_file', relative_filepath: 'a.json', updated_at: '2026-01-03T00:00:00.000Z' });
    for (let round = 0; round < 5; round++) {
      await pass();
      // Removed and put back, it would be a new inode (a hook or the drift watcher would see a change each time).
      const now = await stat(loser);
      expect([now.ino, now.mtimeMs]).toEqual([before.ino, before.mtimeMs]);
      world.clock.advance(3_600_000);
    }
    expect(await fileAt('a.json/b.json')).toBe(json({ owner: 'cfg_dir' }));
    expect(await readFile(path.join(world.rootDir, 'a.json', 'mine.txt'), 'utf8')).toBe('a local file');
    expect(lastReport('cfg_file')).toMatchObject({ activity_status: 'queued', error_status: 'retrying' });
    expect(lastReport('cfg_file')?.message).toContain('"a.json/mine.txt" is not a file of this agent');
    expect(lastReport('cfg_dir')?.error_status).toBe('retrying');
    // The local file gone, the newer one is written in the next pass, the older one's file and directory with it.
    await rm(path.join(world.rootDir, 'a.json', 'mine.txt'));
    world.clock.advance(3_600_000);
    await pass();
    expect(await fileAt('a.json')).toBe(json({ owner: 'cfg_file' }));
    expect(lastReport('cfg_file')).toMatchObject({ activity_status: 'deployed', error_status: 'none' });
  });

  it("an operator's directory the older one's file sits in is never pruned: that file is left as it is, the newer one waits", async () => {
    await mkdir(path.join(world.rootDir, 'a.json', 'x'), { recursive: true });
    put({ id: 'cfg_dir', relative_filepath: 'a.json/x/b.json', updated_at: '2026-01-02T00:00:00.000Z' });
    await pass();
    const loser = path.join(world.rootDir, 'a.json', 'x', 'b.json');
    const before = await stat(loser);
    put({ id: 'cfg_file', relative_filepath: 'a.json', updated_at: '2026-01-03T00:00:00.000Z' });
    for (let round = 0; round < 3; round++) {
      await pass();
      const now = await stat(loser);
      expect([now.ino, now.mtimeMs]).toEqual([before.ino, before.mtimeMs]);
      world.clock.advance(3_600_000);
    }
    expect(lastReport('cfg_file')).toMatchObject({ activity_status: 'queued', error_status: 'retrying' });
    expect(lastReport('cfg_file')?.message).toContain('"a.json" is a directory this agent did not make');
  });

  it("a file in the way of an instance failed on the service (never touched) is named as that instance's, and nothing is removed", async () => {
    put({ id: 'cfg_side', relative_filepath: 'a.json/c.json', updated_at: '2026-01-01T00:00:00.000Z' });
    await pass();
    put({ id: 'cfg_dir', relative_filepath: 'a.json/b.json', updated_at: '2026-01-02T00:00:00.000Z' });
    await pass();
    const loser = path.join(world.rootDir, 'a.json', 'b.json');
    const before = await stat(loser);
    put({
      id: 'cfg_side',
      relative_filepath: 'a.json/c.json',
      updated_at: '2026-01-01T00:00:00.000Z',
      error_status: 'failed',
    });
    put({ id: 'cfg_file', relative_filepath: 'a.json', updated_at: '2026-01-03T00:00:00.000Z' });
    for (let round = 0; round < 3; round++) {
      await pass();
      const now = await stat(loser);
      expect([now.ino, now.mtimeMs]).toEqual([before.ino, before.mtimeMs]);
      world.clock.advance(3_600_000);
    }
    expect(await fileAt('a.json/c.json')).toBe(json({ owner: 'cfg_side' }));
    expect(lastReport('cfg_file')).toMatchObject({ activity_status: 'queued', error_status: 'retrying' });
    expect(lastReport('cfg_file')?.message).toContain(
      '"a.json" holds the file of cfg_side at "a.json/c.json", not removed for this write',
    );
  });

  it('while one older file was changed by someone else, the other older one in the way is never removed nor rewritten on its retries', async () => {
    put({ id: 'cfg_b', relative_filepath: 'a.json/b.json', updated_at: '2026-01-02T00:00:00.000Z' });
    put({ id: 'cfg_c', relative_filepath: 'a.json/c.json', updated_at: '2026-01-02T00:00:00.000Z' });
    await pass();
    const kept = path.join(world.rootDir, 'a.json', 'b.json');
    const changed = path.join(world.rootDir, 'a.json', 'c.json');
    await writeFile(changed, 'an operator edit');
    const before = await stat(kept);
    put({ id: 'cfg_file', relative_filepath: 'a.json', updated_at: '2026-01-03T00:00:00.000Z' });
    for (let round = 0; round < 3; round++) {
      await pass();
      // Removed and put back, it would be a new inode (a hook or the drift watcher would see a change each time).
      const now = await stat(kept);
      expect([now.ino, now.mtimeMs]).toEqual([before.ino, before.mtimeMs]);
      world.clock.advance(3_600_000);
    }
    expect(await readFile(changed, 'utf8')).toBe('an operator edit');
    expect(await fileAt('a.json/b.json')).toBe(json({ owner: 'cfg_b' }));
    expect(lastReport('cfg_file')).toMatchObject({ activity_status: 'queued', error_status: 'retrying' });
    expect(lastReport('cfg_file')?.message).toContain('"a.json/c.json"');
  });

  it("the older one's file two directories down, both made for it: removed with them, the newer one written", async () => {
    put({ id: 'cfg_dir', relative_filepath: 'a.json/x/b.json', updated_at: '2026-01-02T00:00:00.000Z' });
    put({ id: 'cfg_side', relative_filepath: 'a.json/x/c.json', updated_at: '2026-01-01T00:00:00.000Z' });
    await pass();
    put({ id: 'cfg_file', relative_filepath: 'a.json', updated_at: '2026-01-03T00:00:00.000Z' });
    await pass();
    expect(await fileAt('a.json')).toBe(json({ owner: 'cfg_file' }));
    expect(lastReport('cfg_file')).toMatchObject({ activity_status: 'deployed', error_status: 'none' });
  });
});

describe('runPass: reports', () => {
  it('a report the service rejects for good (404) is dropped; the reports after it are still delivered', async () => {
    put({ id: 'cfg_a', relative_filepath: 'a.json' });
    put({ id: 'cfg_b', relative_filepath: 'b.json' });
    world.server.state.addFault({ match: '^/v1/config_instances/cfg_a$', count: 100, status: 404 });

    const first = await pass();

    expect(reportsReceived()).toEqual(['cfg_b deployed/none']);
    expect(first.reports).toMatchObject({ delivered: 1, rejected: 1, pending: 0 });
    // The service still lacks cfg_a's status: the next pass says it again, and that same report waits the report
    // backoff before it is sent (it went on every pass); one entry per instance at most.
    const second = await pass();
    expect(second.reports).toMatchObject({ delivered: 0, pending: 1 });
    const third = await pass();
    expect(third.reports).toMatchObject({ delivered: 0, pending: 1 });
    expect(reportsReceived()).toEqual(['cfg_b deployed/none']);
  });

  it('a refused report of an instance the service then deleted is forgotten: one of that id later goes at once', async () => {
    // Retired on the service with no file here: the agent reports it removed, and the service refuses that.
    const retired = { id: 'cfg_a', relative_filepath: 'a.json', target_status: 'removed' } as const;
    put(retired);
    world.server.state.addFault({ match: '^/v1/config_instances/cfg_a$', count: 1, status: 404 });
    await pass();
    expect(reportsReceived()).toEqual([]);
    // Then deleted at the service: never listed nor reported again, nothing the agent knows keeps it.
    world.server.state.instances.delete('cfg_a');
    await pass();
    // An instance of that id again (restored from a backup): its report is not held back by the old refusal.
    put(retired);
    await pass();
    expect(reportsReceived()).toEqual(['cfg_a removed/none']);
  });

  it('a service that cannot take reports now (503) keeps them all for the next pass', async () => {
    put({ id: 'cfg_a', relative_filepath: 'a.json' });
    put({ id: 'cfg_b', relative_filepath: 'b.json' });
    // Reports go out several at once: the outage answers every one of them.
    world.server.state.addFault({ match: '^/v1/config_instances/cfg_', count: 2, status: 503 });

    const first = await pass();

    expect(first.reports).toMatchObject({ delivered: 0, pending: 2 });
    expect(first.converged).toBe(false);
    const second = await pass();
    expect(reportsReceived().sort()).toEqual(['cfg_a deployed/none', 'cfg_b deployed/none']);
    expect(second.converged).toBe(true);
  });

  it("the agent's own report does not make an instance the one 'updated last' at a path", async () => {
    // cfg_first was updated by operators later than cfg_second; reporting cfg_first moves its updated_at
    // again, but cfg_second's own newer report must not flip the winner on the next passes.
    put({ id: 'cfg_first', relative_filepath: 'p.json', updated_at: '2026-01-03T00:00:00.000Z' });
    put({ id: 'cfg_second', relative_filepath: 'p.json', updated_at: '2026-01-02T00:00:00.000Z' });

    await pass();
    await pass();
    await pass();

    expect(await fileAt('p.json')).toBe(json({ owner: 'cfg_first' }));
    expect(reportsReceived().sort()).toEqual(['cfg_first deployed/none', 'cfg_second queued/retrying']);
  });
});

/**
 * The real fs plus a model of what a power cut would lose: bytes written and not yet fsynced, and directory
 * entries renamed and not yet fsynced. `failDirSyncs` makes that many fsyncs of `failDirSyncOf` fail with EIO.
 */
function durabilityModel(base: typeof nodeFs) {
  const unsyncedFiles = new Set<string>();
  const unsyncedDirs = new Set<string>();
  const model = { unsyncedFiles, unsyncedDirs, failDirSyncs: 0, failDirSyncOf: '' };
  const open = async (file: Parameters<typeof nodeFs.open>[0], ...rest: unknown[]) => {
    const name = String(file);
    const handle = await (base.open as (...args: unknown[]) => Promise<nodeFs.FileHandle>)(file, ...rest);
    const isDir = (await handle.stat()).isDirectory();
    return new Proxy(handle, {
      get(target, key, receiver) {
        const value = Reflect.get(target, key, receiver);
        if (key === 'writeFile' || key === 'write') {
          return async (...args: unknown[]) => {
            unsyncedFiles.add(name);
            return (value as (...a: unknown[]) => unknown).apply(target, args);
          };
        }
        if (key === 'sync' || key === 'datasync') {
          return async () => {
            if (isDir && name === model.failDirSyncOf && model.failDirSyncs > 0) {
              model.failDirSyncs -= 1;
              throw Object.assign(new Error('EIO: i/o error, fsync'), { code: 'EIO' });
            }
            await (value as () => Promise<void>).apply(target);
            (isDir ? unsyncedDirs : unsyncedFiles).delete(name);
          };
        }
        return typeof value === 'function' ? value.bind(target) : value;
      },
    });
  };
  const rename = async (from: string, to: string) => {
    await base.rename(from, to);
    if (unsyncedFiles.delete(String(from))) unsyncedFiles.add(String(to));
    unsyncedDirs.add(path.dirname(String(to)));
  };
  return { model, fs: { ...base, open, rename } as unknown as typeof nodeFs };
}

describe('runPass: "deployed" means durable', () => {
  it('after a directory fsync failed, the next pass fsyncs the renamed file and its directory before reporting it', async () => {
    const { model, fs } = durabilityModel(nodeFs);
    world.fs = { ...faultyFs(), ...fs } as ReturnType<typeof faultyFs>;
    await world.reconciler.close();
    world.reconciler = await openReconciler(world.client);
    put({ id: 'cfg_a', relative_filepath: 'conf/a.json', content: { v: 1 } });
    model.failDirSyncOf = path.join(world.rootDir, 'conf');
    model.failDirSyncs = 1;

    await pass();
    // The rename happened (the bytes are there) but its directory entry may not survive a power cut.
    expect(await fileAt('conf/a.json')).toBe(json({ v: 1 }));
    expect(reportsReceived()).toEqual(['cfg_a queued/retrying']);

    // The next run (a restart: attempts and cooldowns start over) finds the bytes already in place.
    await world.reconciler.close();
    world.reconciler = await openReconciler(world.client);
    await pass();

    expect(reportsReceived()).toEqual(['cfg_a queued/retrying', 'cfg_a deployed/none']);
    const file = path.join(world.rootDir, 'conf/a.json');
    expect(model.unsyncedFiles.has(file)).toBe(false);
    expect(model.unsyncedDirs.has(path.dirname(file))).toBe(false);
    // Nothing the state directory's next decisions rely on is left unsynced either. Not the lock (a power cut
    // ends its holder, and a lock whose process is gone is taken over), nor the content cache: every read
    // checks an entry's bytes against its name, so one a power cut tore or lost is simply absent.
    const cacheDir = path.join(world.dir, 'state', 'cache');
    const unsynced = [...model.unsyncedFiles, ...model.unsyncedDirs];
    expect(
      unsynced.filter(
        (p) =>
          p.startsWith(world.dir) &&
          !p.endsWith('agent.lock') &&
          p !== cacheDir &&
          !p.startsWith(`${cacheDir}/`),
      ),
    ).toEqual([]);
  });
});

describe('runPass: the result', () => {
  it('starts at the injected wall clock and takes no monotonic time the clock did not move', async () => {
    put({ id: 'cfg_a' });

    const result = await pass();

    expect(result.startedAt).toBe('2026-06-01T00:00:01.000Z');
    expect(result.durationMs).toBe(0);
    expect(result).toMatchObject({ mode: 'full', dryRun: false, reachable: true, converged: true });
    expect(result.steps.map((step) => step.kind)).toEqual(['write']);
  });

  it('a service that cannot be pulled: unreachable, the HTTP error with its Retry-After, nothing touched', async () => {
    put({ id: 'cfg_a' });
    world.server.state.addFault({ match: '^/v1/config_instances$', count: 100, status: 503, retry_after: 7 });

    const result = await pass('incremental');

    expect(result).toMatchObject({
      mode: 'incremental',
      reachable: false,
      converged: false,
      steps: [],
      outcomes: [],
      error: { code: 'http_status', status: 503, retryable: true, retryAfterMs: 7000 },
    });
    expect(result.error?.message).toMatch(/503/);
    expect(await exists('cfg_a.json')).toBe(false);
    expect(reportsReceived()).toEqual([]);
  });

  it('an HTTP error without Retry-After carries none', async () => {
    world.server.state.addFault({ match: '^/v1/config_instances$', count: 100, status: 500 });

    const result = await pass();

    expect(result.error).toMatchObject({ code: 'http_status', status: 500 });
    expect(result.error !== undefined && 'retryAfterMs' in result.error).toBe(false);
  });

  it('a failure that is not an HTTP status: its code and retryability, no status', async () => {
    // A loopback port nothing listens on: a mock's, closed.
    const gone = await startMockServer({ apiKeys: [API_KEY] });
    const port = Number(new URL(gone.url).port);
    await gone.close();
    const unreachable = createClient({
      baseUrl: `http://127.0.0.1:${port}`,
      apiKey: API_KEY,
      timeoutMs: 10_000,
      maxResponseBytes: 1 << 20,
    });
    await world.reconciler.close();
    world.reconciler = await openReconciler(unreachable);

    const result = await pass();

    expect(result.reachable).toBe(false);
    expect(result.error).toMatchObject({ code: 'network_error', retryable: true });
    expect(result.error !== undefined && 'status' in result.error).toBe(false);
  });

  it('a bug met while pulling is an internal error, not retryable', async () => {
    const broken: ServiceClient = {
      ...world.client,
      async listConfigInstancePage() {
        throw new TypeError('bug in the listing');
      },
    };
    await world.reconciler.close();
    world.reconciler = await openReconciler(broken);

    const result = await pass();

    expect(result.error).toEqual({ code: 'internal', message: 'bug in the listing', retryable: false });
  });

  it('a state that cannot be saved: files and reports still happen, the pass says persistError', async () => {
    put({ id: 'cfg_a' });
    world.fs.failRenameTo = (target) => target.endsWith('state.json');

    const result = await pass();

    expect(await fileAt('cfg_a.json')).toBe(json({ owner: 'cfg_a' }));
    expect(reportsReceived()).toEqual(['cfg_a deployed/none']);
    expect(result.persistError).toMatchObject({
      retryable: expect.any(Boolean),
      message: expect.any(String),
    });
    expect(result.converged).toBe(false);

    world.fs.failRenameTo = () => false;
    expect((await pass()).converged).toBe(true);
  });

  it('a report rejected for good keeps the pass from converging', async () => {
    put({ id: 'cfg_a' });
    world.server.state.addFault({ match: '^/v1/config_instances/cfg_a$', count: 100, status: 404 });

    const result = await pass();

    expect(result.reports).toMatchObject({ rejected: 1, pending: 0 });
    expect(result.converged).toBe(false);
  });

  it('an outage while reporting: the delivery error and the pending count, not converged', async () => {
    put({ id: 'cfg_a' });
    world.server.state.addFault({ match: '^/v1/config_instances/cfg_a$', count: 100, status: 503 });

    const result = await pass();

    expect(result.reports).toMatchObject({ delivered: 0, pending: 1, deliveryError: { status: 503 } });
    expect(result.converged).toBe(false);
    expect(world.reconciler.pendingReports).toBe(1);
  });

  it('temp files swept at open are in the first pass result only', async () => {
    await world.reconciler.close();
    await writeFile(path.join(world.rootDir, '.config-agent.tmp-left'), 'partial');
    world.reconciler = await openReconciler(world.client);

    expect((await pass()).sweptTempFiles).toEqual(['.config-agent.tmp-left']);
    expect((await pass()).sweptTempFiles).toEqual([]);
  });
});

describe('runPass: dry runs', () => {
  it('plans against the service and the disk, writes, records and reports nothing', async () => {
    put({ id: 'cfg_a' });
    await world.reconciler.close();
    world.reconciler = await openReconciler(world.client, {}, silentLogger(), true);

    expect(() => world.reconciler.runPass({ mode: 'full' })).toThrow(/dry-run/);
    const result = await world.reconciler.runPass({ mode: 'full', dryRun: true });

    expect(result).toMatchObject({ dryRun: true, reachable: true, converged: false, outcomes: [] });
    expect(result.steps.map((step) => step.kind)).toEqual(['write']);
    expect(await exists('cfg_a.json')).toBe(false);
    expect(reportsReceived()).toEqual([]);
    expect(world.reconciler.state.instances.size).toBe(0);
  });
});

describe('Reconciler: between passes', () => {
  it('a failed write: a cooldown the daemon can wait for, due once the clock passes it', async () => {
    put({ id: 'cfg_a' });
    world.fs.failRenameTo = (target) => target.endsWith('cfg_a.json');
    expect(world.reconciler.nextRetryAt()).toBeUndefined();

    await pass();

    const at = world.reconciler.nextRetryAt();
    expect(at).toBeGreaterThan(world.clock.monotonic());
    expect(world.reconciler.hasDueRetries()).toBe(false);
    world.clock.advance((at ?? 0) - world.clock.monotonic() - 1);
    expect(world.reconciler.hasDueRetries()).toBe(false);
    world.clock.advance(1);
    expect(world.reconciler.hasDueRetries()).toBe(true);
  });

  it('the earliest of several cooldowns is the next retry', async () => {
    put({ id: 'cfg_a' });
    put({ id: 'cfg_b' });
    world.fs.failRenameTo = (target) => target.endsWith('cfg_a.json') || target.endsWith('cfg_b.json');
    await pass();
    const cooldowns = [...world.reconciler.state.cooldowns.values()];
    expect(cooldowns).toHaveLength(2);
    world.reconciler.state.cooldowns.set('cfg_b', Math.min(...cooldowns) - 5);
    world.reconciler.state.cooldowns.set('cfg_a', Math.min(...cooldowns) + 5);

    expect(world.reconciler.nextRetryAt()).toBe(Math.min(...cooldowns) - 5);
  });

  it('changed paths are kept for hooks until settled, and survive a restart until then', async () => {
    put({ id: 'cfg_a' });
    put({ id: 'cfg_b' });
    await world.reconciler.close();
    world.reconciler = await openReconciler(world.client, { trackHookPaths: true });

    await pass();
    expect(world.reconciler.pendingHookPaths().sort()).toEqual(['cfg_a.json', 'cfg_b.json']);
    world.reconciler.settleHookPaths(['cfg_a.json']);
    await world.reconciler.flushState();
    await world.reconciler.close();
    world.reconciler = await openReconciler(world.client, { trackHookPaths: true });

    expect(world.reconciler.pendingHookPaths()).toEqual(['cfg_b.json']);
  });

  it('reconfigure keeps the reconciler for new settings of the same device, root and state dir only', async () => {
    put({ id: 'cfg_a' });
    const deps: Deps = { fs: world.fs, clock: world.clock, random: () => 0.5, logger: silentLogger() };
    const same = {
      deviceId: DEVICE,
      rootDir: world.rootDir,
      stateDir: path.join(world.dir, 'state'),
      fileMode: 0o600,
      dirMode: 0o750,
      retry: { maxAttempts: 3, baseDelaySeconds: 10, maxDelaySeconds: 60 },
      requestRetries: 0,
    } satisfies ReconcilerSettings;

    expect(world.reconciler.reconfigure(deps, { ...same, deviceId: 'dvc_2' }, world.client)).toBe(false);
    expect(world.reconciler.reconfigure(deps, { ...same, rootDir: world.dir }, world.client)).toBe(false);
    expect(world.reconciler.reconfigure(deps, { ...same, stateDir: world.dir }, world.client)).toBe(false);
    expect(world.reconciler.reconfigure(deps, same, world.client)).toBe(true);
    await pass();

    expect((await stat(path.join(world.rootDir, 'cfg_a.json'))).mode & 0o777).toBe(0o600);
  });
});

describe('runPass: an instance the service lists at another path than its recorded file', () => {
  const LATER = '2026-01-02T00:00:00.000Z';

  it('moved while deployed: the new file is written, the next pass removes the old; retired: nothing stays', async () => {
    put({ id: 'cfg_a', relative_filepath: 'old/a.json', content: { v: 1 } });
    await pass();
    put({
      ...onService('cfg_a'),
      relative_filepath: 'new.json',
      content: { v: 2 },
      activity_status: 'queued',
      updated_at: LATER,
    });

    await pass();
    // The old file stays until the new one is in place (recorded), as for a swap.
    expect(await fileAt('old/a.json')).toBe(json({ v: 1 }));
    const moved = await pass();

    expect(await fileAt('new.json')).toBe(json({ v: 2 }));
    expect(await exists('old/a.json')).toBe(false);
    expect(await exists('old')).toBe(false);
    expect(reportsReceived()).toEqual(['cfg_a deployed/none', 'cfg_a deployed/none']);
    expect(moved.converged).toBe(true);
    world.server.state.removeInstance('cfg_a', '2026-01-03T00:00:00.000Z');

    const retired = await pass();

    expect(await exists('new.json')).toBe(false);
    expect(reportsReceived().at(-1)).toBe('cfg_a removed/none');
    expect(retired.converged).toBe(true);
    const state = JSON.parse(await readFile(path.join(world.dir, 'state', 'state.json'), 'utf8'));
    expect(state.files).toEqual({});
  });

  it('retired at another path: the file at its old path is removed too', async () => {
    put({ id: 'cfg_a', relative_filepath: 'old.json', content: { v: 1 } });
    await pass();
    put({
      ...onService('cfg_a'),
      relative_filepath: 'new.json',
      activity_status: 'deployed',
      updated_at: LATER,
    });
    world.server.state.removeInstance('cfg_a', '2026-01-03T00:00:00.000Z');

    const result = await pass();

    expect(await exists('old.json')).toBe(false);
    expect(reportsReceived()).toEqual(['cfg_a deployed/none', 'cfg_a removed/none']);
    expect(result.converged).toBe(true);
  });

  it('kept while its new file cannot be written, and while another instance is listed at the old path', async () => {
    put({ id: 'cfg_a', relative_filepath: 'old.json', content: { v: 1 } });
    await pass();
    put({ ...onService('cfg_a'), relative_filepath: 'new.json', content: { v: 2 }, updated_at: LATER });
    world.fs.failRenameTo = (target) => target.endsWith('new.json');

    await pass();

    expect(await fileAt('old.json')).toBe(json({ v: 1 }));
    world.fs.failRenameTo = () => false;
    put({ id: 'cfg_b', relative_filepath: 'old.json', target_status: 'removed', activity_status: 'removed' });
    world.clock.advance(3_600_000);

    await pass();

    expect(await fileAt('new.json')).toBe(json({ v: 2 }));
    expect(await fileAt('old.json')).toBe(json({ v: 1 }));
  });
});
