// Step handlers on memfs: each pass is observe → plan → apply; assertions are on the resulting world.
import path from 'node:path';
import { createFsFromVolume, Volume } from 'memfs';
import { beforeEach, describe, expect, it } from 'vitest';
import { instanceFactory } from '../../test/helpers/instances.js';
import type { ConfigInstance } from '../api/schemas.js';
import type { Clock } from '../lib/clock.js';
import type { FsPort } from '../lib/fs-port.js';
import { sha256Hex } from '../lib/hash.js';
import { silentLogger } from '../lib/logger.js';
import { ContentCache } from '../store/content-cache.js';
import { StatusOutbox } from '../store/outbox.js';
import { TEMP_PREFIX } from '../store/path-guard.js';
import { emptyState, type LocalState } from '../store/state.js';
import { type ApplyContext, applySteps } from './apply.js';
import { observeDisk } from './observe.js';
import type { InstanceOutcome, RetryPolicy } from './pass-runner.js';
import { planSteps, type Step } from './plan.js';
import { backoffDelayMs, pendingReports as queuedReports, type RecordContext, recordStep } from './record.js';

const ROOT = '/srv/config';
const STATE_DIR = '/var/lib/config-agent';
const OUTSIDE = '/outside';
const FILE_MODE = 0o640;
const DIR_MODE = 0o750;
const RETRY: RetryPolicy = { maxAttempts: 3, baseDelaySeconds: 10, maxDelaySeconds: 60 };
const WALL_START = Date.parse('2026-03-01T12:00:00.000Z');

const makeInstance = instanceFactory({ relative_filepath: 'app.json', content: { port: 8080 } });

function jsonText(content: unknown): string {
  return `${JSON.stringify(content, null, 2)}\n`;
}

interface FakeClock extends Clock {
  advance(ms: number): void;
}

function fakeClock(): FakeClock {
  let wall = WALL_START;
  let mono = 10_000;
  return {
    now: () => wall,
    monotonic: () => mono,
    sleep: async (ms) => {
      wall += ms;
      mono += ms;
    },
    advance(ms) {
      wall += ms;
      mono += ms;
    },
  };
}

type FaultOp = 'open' | 'rename' | 'unlink' | 'mkdir';
interface Fault {
  op: FaultOp;
  /** Absolute path the operation targets (for rename: the destination). */
  match: (absolute: string) => boolean;
  code: 'ENOSPC' | 'EDQUOT' | 'EACCES' | 'EPERM' | 'EROFS' | 'EIO' | 'EINVAL' | 'ENOTCONN';
}

function errnoError(code: string, syscall: string, target: string): NodeJS.ErrnoException {
  return Object.assign(new Error(`${code}: simulated failure, ${syscall} '${target}'`), {
    code,
    syscall,
    path: target,
  });
}

/** memfs with injectable errno failures for one path: the disk-failure tests need faults memfs cannot produce. */
function faultyFs(inner: FsPort, faults: Fault[]): FsPort {
  const check = (op: FaultOp, target: unknown) => {
    const absolute = String(target);
    const fault = faults.find((candidate) => candidate.op === op && candidate.match(absolute));
    if (fault !== undefined) throw errnoError(fault.code, op, absolute);
  };
  return {
    open: (async (...args: Parameters<FsPort['open']>) => {
      check('open', args[0]);
      return inner.open(...args);
    }) as FsPort['open'],
    rename: (async (...args: Parameters<FsPort['rename']>) => {
      check('rename', args[1]);
      return inner.rename(...args);
    }) as FsPort['rename'],
    unlink: (async (...args: Parameters<FsPort['unlink']>) => {
      check('unlink', args[0]);
      return inner.unlink(...args);
    }) as FsPort['unlink'],
    link: inner.link.bind(inner),
    lstat: inner.lstat.bind(inner),
    stat: inner.stat.bind(inner),
    mkdir: (async (...args: Parameters<FsPort['mkdir']>) => {
      check('mkdir', args[0]);
      return inner.mkdir(...args);
    }) as FsPort['mkdir'],
    readdir: inner.readdir.bind(inner),
    readFile: inner.readFile.bind(inner),
    rmdir: inner.rmdir.bind(inner),
    chmod: inner.chmod.bind(inner),
  };
}

const renameTo =
  (relative: string): Fault['match'] =>
  (absolute) =>
    absolute === path.join(ROOT, relative);
const tempFileIn =
  (relativeDir: string): Fault['match'] =>
  (absolute) =>
    path.dirname(absolute) === path.join(ROOT, relativeDir) &&
    path.basename(absolute).startsWith(TEMP_PREFIX);

/** The service, reduced to what a pass needs: the instances it lists and the reports it accepts. */
class FakeService {
  readonly instances = new Map<string, ConfigInstance>();
  readonly received: Array<{ instanceId: string; activity: string; error: string; message?: string }> = [];

  put(...instances: ConfigInstance[]): void {
    for (const instance of instances) this.instances.set(instance.id, instance);
  }

  update(id: string, fields: Partial<Omit<ConfigInstance, 'status' | 'id'>>): void {
    const current = this.instances.get(id);
    if (current === undefined) throw new Error(`no instance ${id}`);
    this.put(makeInstance({ ...current, ...fields }));
  }

  list(): ConfigInstance[] {
    return [...this.instances.values()];
  }

  get(id: string): ConfigInstance {
    return this.instances.get(id)!;
  }

  async deliver(outbox: StatusOutbox): Promise<void> {
    await outbox.flush(
      async (entry) => {
        const { activity_status, error_status, message } = entry.report;
        this.received.push({
          instanceId: entry.instanceId,
          activity: activity_status,
          error: error_status,
          ...(message === undefined ? {} : { message }),
        });
        this.update(entry.instanceId, { activity_status, error_status });
      },
      () => 'stop',
    );
  }
}

interface World {
  vol: InstanceType<typeof Volume>;
  fs: FsPort;
  faults: Fault[];
  clock: FakeClock;
  state: LocalState;
  outbox: StatusOutbox;
  cache: ContentCache;
  ctx: ApplyContext & RecordContext;
  service: FakeService;
}

async function makeWorld(files: Record<string, string> = {}): Promise<World> {
  const vol = Volume.fromJSON(files);
  vol.mkdirSync(ROOT, { recursive: true });
  vol.mkdirSync(STATE_DIR, { recursive: true });
  vol.mkdirSync(OUTSIDE, { recursive: true });
  for (const name of Object.keys(files)) if (name.startsWith(`${ROOT}/`)) vol.chmodSync(name, FILE_MODE);
  const faults: Fault[] = [];
  const fs = faultyFs(createFsFromVolume(vol).promises as unknown as FsPort, faults);
  const clock = fakeClock();
  const logger = silentLogger();
  const state = emptyState('dvc_1');
  const outbox = await StatusOutbox.open(fs, STATE_DIR, logger, { now: () => 0 });
  const cache = new ContentCache(fs, STATE_DIR);
  const ctx: ApplyContext & RecordContext = {
    fs,
    clock,
    random: () => 0.5,
    logger,
    rootDir: ROOT,
    fileMode: FILE_MODE,
    dirMode: DIR_MODE,
    retry: RETRY,
    state,
    files: state.files,
    cache,
    outbox,
    trackHookPaths: false,
  };
  return { vol, fs, faults, clock, state, outbox, cache, ctx, service: new FakeService() };
}

/** Observe → plan, the way a full pass of the reconciler does. */
async function planWorld(world: World): Promise<Step[]> {
  const instances = world.service.list();
  return planSteps({
    instances,
    local: world.state,
    disk: await observeDisk(world.fs, ROOT, instances),
    pendingReports: queuedReports(world.outbox),
    now: world.clock.monotonic(),
    fileMode: FILE_MODE,
    complete: true,
  });
}

async function pass(world: World): Promise<{ steps: Step[]; outcomes: InstanceOutcome[] }> {
  const steps = await planWorld(world);
  const outcomes = await applyAndRecord(steps, world.ctx);
  return { steps, outcomes };
}

/** Apply → record, the way a pass does: each step's result recorded as it lands; an abort is rethrown. */
async function applyAndRecord(
  steps: readonly Step[],
  ctx: ApplyContext & RecordContext,
): Promise<InstanceOutcome[]> {
  const outcomes: InstanceOutcome[] = [];
  await applySteps(steps, ctx, (applied) => outcomes.push(...recordStep(applied, ctx)));
  ctx.signal?.throwIfAborted();
  return outcomes;
}

function outcomeOf(outcomes: InstanceOutcome[], id: string): InstanceOutcome {
  const mine = outcomes.filter((outcome) => outcome.instanceId === id);
  expect(mine).toHaveLength(1);
  return mine[0]!;
}

function pendingReports(world: World) {
  return world.outbox.pending().map((entry) => ({ instanceId: entry.instanceId, ...entry.report }));
}

function text(world: World, relative: string): string {
  return world.vol.readFileSync(path.join(ROOT, relative), 'utf8') as string;
}

function exists(world: World, absolute: string): boolean {
  return world.vol.existsSync(absolute);
}

function modeOf(world: World, absolute: string): number {
  return world.vol.lstatSync(absolute).mode & 0o7777;
}

function identity(world: World, relative: string): { ino: number; mtimeMs: number } {
  const stats = world.vol.statSync(path.join(ROOT, relative));
  return { ino: Number(stats.ino), mtimeMs: Number(stats.mtimeMs) };
}

function leftoverTempFiles(world: World): string[] {
  return Object.keys(world.vol.toJSON()).filter((name) => path.basename(name).startsWith(TEMP_PREFIX));
}

describe('applySteps: write', () => {
  let world: World;
  beforeEach(async () => {
    world = await makeWorld();
  });

  it('writes the file with its mode, records it, queues `deployed`; the next pass writes nothing', async () => {
    world.service.put(
      makeInstance({ id: 'cfg_1', relative_filepath: 'etc/app/config.json', content: { a: 1 } }),
    );
    const first = await pass(world);

    expect(outcomeOf(first.outcomes, 'cfg_1')).toMatchObject({
      action: 'written',
      converged: true,
      reason: 'new',
    });
    expect(text(world, 'etc/app/config.json')).toBe(jsonText({ a: 1 }));
    expect(modeOf(world, `${ROOT}/etc/app/config.json`)).toBe(FILE_MODE);
    expect(modeOf(world, `${ROOT}/etc`)).toBe(DIR_MODE);
    expect(modeOf(world, `${ROOT}/etc/app`)).toBe(DIR_MODE);
    const sha = sha256Hex(Buffer.from(jsonText({ a: 1 })));
    expect(world.state.files.get('etc/app/config.json')).toEqual({
      instanceId: 'cfg_1',
      sha256: sha,
      mode: FILE_MODE,
      createdDirs: ['etc', 'etc/app'],
      writtenAt: new Date(WALL_START).toISOString(),
      size: Buffer.byteLength(jsonText({ a: 1 })),
    });
    expect(world.state.instances.get('cfg_1')).toEqual({
      relativePath: 'etc/app/config.json',
      activity: 'deployed',
      error: 'none',
      attempts: 0,
    });
    expect(pendingReports(world)).toEqual([
      { instanceId: 'cfg_1', activity_status: 'deployed', error_status: 'none' },
    ]);
    expect((await world.cache.get(sha))?.toString('utf8')).toBe(jsonText({ a: 1 }));
    expect(leftoverTempFiles(world)).toEqual([]);

    const before = identity(world, 'etc/app/config.json');
    await world.service.deliver(world.outbox);
    world.clock.advance(5_000);
    const second = await pass(world);

    expect(outcomeOf(second.outcomes, 'cfg_1')).toMatchObject({ action: 'unchanged', converged: true });
    expect(identity(world, 'etc/app/config.json')).toEqual(before);
    expect(world.outbox.pending()).toEqual([]);
  });

  it('without cacheWrittenFiles (`--once`): written, recorded and queued alike, no copy in the content cache', async () => {
    world.ctx.cacheWrittenFiles = false;
    world.service.put(makeInstance({ id: 'cfg_1', relative_filepath: 'etc/app.json', content: { a: 1 } }));
    const { outcomes } = await pass(world);

    expect(outcomeOf(outcomes, 'cfg_1')).toMatchObject({ action: 'written', converged: true });
    expect(text(world, 'etc/app.json')).toBe(jsonText({ a: 1 }));
    expect(world.state.files.get('etc/app.json')?.sha256).toBe(sha256Hex(Buffer.from(jsonText({ a: 1 }))));
    expect(pendingReports(world)).toEqual([
      { instanceId: 'cfg_1', activity_status: 'deployed', error_status: 'none' },
    ]);
    expect(exists(world, path.join(STATE_DIR, 'cache'))).toBe(false);
    expect(leftoverTempFiles(world)).toEqual([]);
  });

  it('adopts an identical file after lost state without rewriting it or reporting what the server knows', async () => {
    world = await makeWorld({ [`${ROOT}/app.json`]: jsonText({ port: 8080 }) });
    world.service.put(makeInstance({ id: 'cfg_1', activity_status: 'deployed' }));
    const before = identity(world, 'app.json');

    const { outcomes } = await pass(world);

    expect(outcomeOf(outcomes, 'cfg_1')).toMatchObject({
      action: 'unchanged',
      reason: 'adopt',
      converged: true,
    });
    expect(identity(world, 'app.json')).toEqual(before);
    expect(world.state.files.get('app.json')?.instanceId).toBe('cfg_1');
    expect(world.outbox.pending()).toEqual([]);
  });

  it('rewrites a file with the right bytes but the wrong mode', async () => {
    world = await makeWorld({ [`${ROOT}/app.json`]: jsonText({ port: 8080 }) });
    world.vol.chmodSync(`${ROOT}/app.json`, 0o666);
    world.service.put(makeInstance({ id: 'cfg_1' }));

    const { outcomes } = await pass(world);

    expect(outcomeOf(outcomes, 'cfg_1')).toMatchObject({ action: 'written', reason: 'changed' });
    expect(modeOf(world, `${ROOT}/app.json`)).toBe(FILE_MODE);
    expect(text(world, 'app.json')).toBe(jsonText({ port: 8080 }));
  });

  it('restores a managed file someone edited, without a report when the server already has deployed/none', async () => {
    world.service.put(makeInstance({ id: 'cfg_1' }));
    await pass(world);
    await world.service.deliver(world.outbox);
    world.vol.writeFileSync(`${ROOT}/app.json`, '{"port": 1}\n');

    const { outcomes } = await pass(world);

    expect(outcomeOf(outcomes, 'cfg_1')).toMatchObject({
      action: 'written',
      reason: 'drift',
      converged: true,
    });
    expect(text(world, 'app.json')).toBe(jsonText({ port: 8080 }));
    expect(world.outbox.pending()).toEqual([]);
  });

  it('writes YAML for .yaml/.yml and JSON for .json and unknown extensions', async () => {
    const content = { name: 'edge', list: [1, 2] };
    world.service.put(
      makeInstance({ id: 'cfg_y', relative_filepath: 'a.yaml', content, config_schema_id: 's1' }),
      makeInstance({ id: 'cfg_m', relative_filepath: 'b.yml', content, config_schema_id: 's2' }),
      makeInstance({ id: 'cfg_j', relative_filepath: 'c.json', content, config_schema_id: 's3' }),
      makeInstance({ id: 'cfg_u', relative_filepath: 'd.conf', content, config_schema_id: 's4' }),
    );
    await pass(world);
    const yaml = 'name: edge\nlist:\n  - 1\n  - 2\n';
    expect([
      text(world, 'a.yaml'),
      text(world, 'b.yml'),
      text(world, 'c.json'),
      text(world, 'd.conf'),
    ]).toEqual([yaml, yaml, jsonText(content), jsonText(content)]);
  });

  it('refuses the older of two instances at one path: only the newer is written, the older is `retrying`', async () => {
    world.service.put(
      makeInstance({ id: 'cfg_old', updated_at: '2026-01-01T10:00:00Z', content: { v: 1 } }),
      makeInstance({ id: 'cfg_new', updated_at: '2026-01-01T11:00:00Z', content: { v: 2 } }),
    );
    const { outcomes } = await pass(world);

    expect(text(world, 'app.json')).toBe(jsonText({ v: 2 }));
    expect(outcomeOf(outcomes, 'cfg_old')).toMatchObject({ action: 'refused', converged: false });
    const refusal = world.outbox.pendingFor('cfg_old')?.report;
    expect(refusal).toMatchObject({ activity_status: 'queued', error_status: 'retrying' });
    expect(refusal?.message).toContain('cfg_old');
    expect(refusal?.message).toContain('cfg_new');
    expect(world.state.files.get('app.json')?.instanceId).toBe('cfg_new');

    // Once the service holds the refusal, the next pass does not send it again.
    await world.service.deliver(world.outbox);
    await pass(world);
    expect(world.outbox.pending()).toEqual([]);
    expect(world.service.received.filter((report) => report.instanceId === 'cfg_old')).toHaveLength(1);
  });
});

describe('applySteps: remove and archive', () => {
  it('deletes only the recorded file and prunes the directories the agent created, once empty', async () => {
    const world = await makeWorld({ [`${ROOT}/shared/keep.txt`]: 'not ours\n' });
    world.service.put(
      makeInstance({ id: 'cfg_1', relative_filepath: 'shared/deep/er/app.json', config_schema_id: 's1' }),
      makeInstance({ id: 'cfg_2', relative_filepath: 'shared/sibling.json', config_schema_id: 's2' }),
    );
    await pass(world);
    expect(world.state.files.get('shared/deep/er/app.json')?.createdDirs).toEqual([
      'shared/deep',
      'shared/deep/er',
    ]);
    await world.service.deliver(world.outbox);

    world.service.update('cfg_1', { target_status: 'removed' });
    const { outcomes } = await pass(world);

    expect(outcomeOf(outcomes, 'cfg_1')).toMatchObject({ action: 'removed', converged: true });
    expect(exists(world, `${ROOT}/shared/deep`)).toBe(false);
    expect(text(world, 'shared/keep.txt')).toBe('not ours\n');
    expect(text(world, 'shared/sibling.json')).toBe(jsonText({ port: 8080 }));
    expect(world.state.files.has('shared/deep/er/app.json')).toBe(false);
    expect(world.state.instances.get('cfg_1')).toMatchObject({
      activity: 'removed',
      error: 'none',
      attempts: 0,
    });
    expect(pendingReports(world)).toEqual([
      { instanceId: 'cfg_1', activity_status: 'removed', error_status: 'none' },
    ]);
  });

  it('a directory created for one file and shared by another is pruned when the last of them goes', async () => {
    const world = await makeWorld();
    world.service.put(
      makeInstance({ id: 'cfg_1', relative_filepath: 'svc/a/one.json', config_schema_id: 's1' }),
    );
    await pass(world);
    await world.service.deliver(world.outbox);
    world.service.put(
      makeInstance({ id: 'cfg_2', relative_filepath: 'svc/a/two.json', config_schema_id: 's2' }),
    );
    await pass(world);
    await world.service.deliver(world.outbox);

    world.service.update('cfg_1', { target_status: 'removed' });
    await pass(world);
    await world.service.deliver(world.outbox);
    expect(exists(world, `${ROOT}/svc/a/one.json`)).toBe(false);
    expect(text(world, 'svc/a/two.json')).toBe(jsonText({ port: 8080 }));

    world.service.update('cfg_2', { target_status: 'removed' });
    await pass(world);
    expect(exists(world, `${ROOT}/svc`)).toBe(false);
    expect(world.state.files.size).toBe(0);
  });

  it('never deletes a file the agent did not record writing (lost state, another writer)', async () => {
    const world = await makeWorld({ [`${ROOT}/foreign.json`]: 'written by someone else\n' });
    world.service.put(
      makeInstance({
        id: 'cfg_1',
        relative_filepath: 'foreign.json',
        target_status: 'removed',
        activity_status: 'deployed',
      }),
    );

    const { outcomes } = await pass(world);

    expect(outcomeOf(outcomes, 'cfg_1')).toMatchObject({ action: 'archived', converged: true });
    expect(text(world, 'foreign.json')).toBe('written by someone else\n');
    expect(pendingReports(world)).toEqual([
      {
        instanceId: 'cfg_1',
        activity_status: 'removed',
        error_status: 'none',
        message: 'file left in place: it is not recorded as written by this agent',
      },
    ]);
  });

  it('archives an instance never deployed by the agent: `removed` queued, the disk untouched', async () => {
    const world = await makeWorld({ [`${ROOT}/app.json`]: 'someone else\n' });
    world.service.put(makeInstance({ id: 'cfg_1', target_status: 'removed', activity_status: 'queued' }));
    const before = identity(world, 'app.json');

    const { outcomes } = await pass(world);

    expect(outcomeOf(outcomes, 'cfg_1')).toMatchObject({ action: 'archived', converged: true });
    expect(identity(world, 'app.json')).toEqual(before);
    expect(text(world, 'app.json')).toBe('someone else\n');
    expect(world.state.files.size).toBe(0);
    expect(pendingReports(world)).toEqual([
      { instanceId: 'cfg_1', activity_status: 'removed', error_status: 'none' },
    ]);
  });

  it('keeps the file when another instance that targets deployed takes the path over', async () => {
    const world = await makeWorld();
    world.service.put(makeInstance({ id: 'cfg_old', content: { v: 1 } }));
    await pass(world);
    await world.service.deliver(world.outbox);

    world.service.update('cfg_old', { target_status: 'removed' });
    world.service.put(makeInstance({ id: 'cfg_new', content: { v: 2 } }));
    await pass(world);

    expect(text(world, 'app.json')).toBe(jsonText({ v: 2 }));
    expect(world.state.files.get('app.json')?.instanceId).toBe('cfg_new');
    expect(pendingReports(world)).toEqual([
      { instanceId: 'cfg_new', activity_status: 'deployed', error_status: 'none' },
      { instanceId: 'cfg_old', activity_status: 'removed', error_status: 'none' },
    ]);
  });

  it('a recorded file someone already deleted: the record is forgotten and the created dirs are pruned', async () => {
    const world = await makeWorld();
    world.service.put(makeInstance({ id: 'cfg_1', relative_filepath: 'x/y/app.json' }));
    await pass(world);
    await world.service.deliver(world.outbox);
    world.vol.unlinkSync(`${ROOT}/x/y/app.json`);

    world.service.update('cfg_1', { target_status: 'removed' });
    const { outcomes } = await pass(world);

    expect(outcomeOf(outcomes, 'cfg_1')).toMatchObject({ action: 'removed', converged: true });
    expect(exists(world, `${ROOT}/x`)).toBe(false);
    expect(world.state.files.size).toBe(0);
    expect(pendingReports(world)).toEqual([
      { instanceId: 'cfg_1', activity_status: 'removed', error_status: 'none' },
    ]);
  });

  it('a recorded file replaced by a symlink is left alone, and its target is never touched', async () => {
    const world = await makeWorld({ [`${OUTSIDE}/secret`]: 'outside the root\n' });
    world.service.put(makeInstance({ id: 'cfg_1' }));
    await pass(world);
    await world.service.deliver(world.outbox);
    world.vol.unlinkSync(`${ROOT}/app.json`);
    world.vol.symlinkSync(`${OUTSIDE}/secret`, `${ROOT}/app.json`);

    world.service.update('cfg_1', { target_status: 'removed' });
    const { outcomes } = await pass(world);

    expect(outcomeOf(outcomes, 'cfg_1')).toMatchObject({ action: 'archived', converged: true });
    expect(world.vol.lstatSync(`${ROOT}/app.json`).isSymbolicLink()).toBe(true);
    expect(world.vol.readFileSync(`${OUTSIDE}/secret`, 'utf8')).toBe('outside the root\n');
    expect(world.state.files.size).toBe(0);
    expect(world.outbox.pendingFor('cfg_1')?.report).toMatchObject({
      activity_status: 'removed',
      error_status: 'none',
    });
  });
});

describe('applySteps: hostile path strings fail at once', () => {
  it.each([
    ['a dot-dot path', '../outside/app.json', /"\."|"\.\."/],
    ['an absolute path', `${OUTSIDE}/app.json`, /absolute/],
  ])(
    '%s: `failed` with the reason, nothing written outside the root, no retry',
    async (_name, relative, why) => {
      const world = await makeWorld({ [`${OUTSIDE}/app.json`]: 'outside\n' });
      world.service.put(makeInstance({ id: 'cfg_1', relative_filepath: relative }));

      const { outcomes } = await pass(world);

      expect(outcomeOf(outcomes, 'cfg_1')).toMatchObject({ action: 'failed', converged: false });
      expect(world.vol.readFileSync(`${OUTSIDE}/app.json`, 'utf8')).toBe('outside\n');
      expect(world.vol.readdirSync(OUTSIDE)).toEqual(['app.json']);
      const report = world.outbox.pendingFor('cfg_1')?.report;
      expect(report).toMatchObject({ activity_status: 'queued', error_status: 'failed' });
      expect(report?.message).toMatch(why);
      expect(world.state.instances.get('cfg_1')).toMatchObject({ error: 'failed', attempts: 0 });
      expect(world.state.cooldowns.has('cfg_1')).toBe(false);

      // The service now holds `failed`: the instance is never touched again.
      await world.service.deliver(world.outbox);
      const again = await pass(world);
      expect(again.steps).toEqual([{ kind: 'skip', instance: world.service.get('cfg_1') }]);
      expect(world.outbox.pending()).toEqual([]);
    },
  );
});

describe('applySteps: an obstacle on disk is never written through, and is retried', () => {
  it.each([
    ['a symlinked parent directory', 'link/app.json', `${ROOT}/link`],
    ['a symlink at the target', 'app.json', `${ROOT}/app.json`],
    ['a directory at the target', 'dir.json', `${ROOT}/dir.json`],
    ['a file where a directory goes', 'plain/app.json', `${ROOT}/plain`],
  ])(
    '%s: `retrying`, never an attempt nor `failed` (the device is in the way), nothing written outside the root; converges once it is cleared',
    async (_name, relative, obstacle) => {
      const world = await makeWorld({ [`${OUTSIDE}/app.json`]: 'outside\n' });
      world.vol.symlinkSync(OUTSIDE, `${ROOT}/link`);
      world.vol.symlinkSync(`${OUTSIDE}/app.json`, `${ROOT}/app.json`);
      world.vol.mkdirSync(`${ROOT}/dir.json`);
      world.vol.writeFileSync(`${ROOT}/plain`, 'a local file\n');
      world.service.put(makeInstance({ id: 'cfg_1', relative_filepath: relative }));

      // More passes than maxAttempts (3), each past the hold-off: a local user's obstacle made the instance
      // `failed` for good at the service, never written once it was cleared.
      for (let round = 0; round < 5; round += 1) {
        const { outcomes } = await pass(world);
        expect(outcomeOf(outcomes, 'cfg_1')).toMatchObject({ action: 'retrying', converged: false });
        world.clock.advance(360_001);
      }
      expect(world.vol.readFileSync(`${OUTSIDE}/app.json`, 'utf8')).toBe('outside\n');
      expect(world.vol.readdirSync(OUTSIDE)).toEqual(['app.json']);
      const report = world.outbox.pendingFor('cfg_1')?.report;
      expect(report).toMatchObject({ activity_status: 'queued', error_status: 'retrying' });
      expect(report?.message).toMatch(/path rejected.*something on the device is in the way/);
      expect(world.state.instances.get('cfg_1')).toMatchObject({ error: 'retrying', attempts: 0 });

      if (world.vol.lstatSync(obstacle).isSymbolicLink()) world.vol.unlinkSync(obstacle);
      else world.vol.rmSync(obstacle, { recursive: true });
      world.clock.advance(60_001);
      const again = await pass(world);
      expect(outcomeOf(again.outcomes, 'cfg_1')).toMatchObject({ action: 'written', converged: true });
      expect(text(world, relative)).toBe(jsonText({ port: 8080 }));
      expect(world.vol.readFileSync(`${OUTSIDE}/app.json`, 'utf8')).toBe('outside\n');
    },
  );

  it('a file replaced by a directory of the same name, in one pass: the file goes first, then the new tree', async () => {
    const world = await makeWorld();
    world.service.put(
      makeInstance({ id: 'cfg_file', relative_filepath: 'app/conf', config_schema_id: 's_f' }),
    );
    await pass(world);
    await world.service.deliver(world.outbox);
    world.service.update('cfg_file', { target_status: 'removed' });
    world.service.put(
      makeInstance({ id: 'cfg_tree', relative_filepath: 'app/conf/main.json', config_schema_id: 's_t' }),
    );

    const { outcomes } = await pass(world);

    expect(outcomeOf(outcomes, 'cfg_file')).toMatchObject({ action: 'removed' });
    expect(outcomeOf(outcomes, 'cfg_tree')).toMatchObject({ action: 'written', converged: true });
    expect(text(world, 'app/conf/main.json')).toBe(jsonText({ port: 8080 }));
  });

  it('a directory replaced by a file of the same name, in one pass: the tree goes first, then the file', async () => {
    const world = await makeWorld();
    world.service.put(
      makeInstance({ id: 'cfg_tree', relative_filepath: 'app/conf/main.json', config_schema_id: 's_t' }),
    );
    await pass(world);
    await world.service.deliver(world.outbox);
    world.service.update('cfg_tree', { target_status: 'removed' });
    world.service.put(
      makeInstance({ id: 'cfg_file', relative_filepath: 'app/conf', config_schema_id: 's_f' }),
    );

    const { outcomes } = await pass(world);

    expect(outcomeOf(outcomes, 'cfg_tree')).toMatchObject({ action: 'removed' });
    expect(outcomeOf(outcomes, 'cfg_file')).toMatchObject({ action: 'written', converged: true });
    expect(text(world, 'app/conf')).toBe(jsonText({ port: 8080 }));
  });
});

describe('applySteps: disk failures retry with backoff, then fail', () => {
  it('EINVAL on rename (a name the filesystem refuses): `retrying` with a cooldown and the attempt count, then `failed` after maxAttempts', async () => {
    const world = await makeWorld();
    world.faults.push({ op: 'rename', match: renameTo('b.json'), code: 'EINVAL' });
    world.service.put(
      makeInstance({ id: 'cfg_a', relative_filepath: 'a.json', config_schema_id: 's_a' }),
      makeInstance({ id: 'cfg_b', relative_filepath: 'b.json', config_schema_id: 's_b' }),
    );

    const first = await pass(world);

    // One instance's failure never stops another.
    expect(outcomeOf(first.outcomes, 'cfg_a')).toMatchObject({ action: 'written' });
    expect(text(world, 'a.json')).toBe(jsonText({ port: 8080 }));
    expect(outcomeOf(first.outcomes, 'cfg_b')).toMatchObject({ action: 'retrying', converged: false });
    expect(exists(world, `${ROOT}/b.json`)).toBe(false);
    expect(leftoverTempFiles(world)).toEqual([]);
    // random() = 0.5 → half of base × 2^0.
    const firstDelay = 0.5 * 10 * 1000;
    expect(world.state.cooldowns.get('cfg_b')).toBe(world.clock.monotonic() + firstDelay);
    expect(world.state.instances.get('cfg_b')).toMatchObject({
      error: 'retrying',
      attempts: 1,
      nextAttemptAt: new Date(world.clock.now() + firstDelay).toISOString(),
    });
    const retrying = world.outbox.pendingFor('cfg_b')?.report;
    expect(retrying).toMatchObject({ activity_status: 'queued', error_status: 'retrying' });
    expect(retrying?.message).toMatch(/EINVAL/);
    await world.service.deliver(world.outbox);

    // Before the cooldown elapses the instance waits and no attempt is counted.
    world.clock.advance(firstDelay - 1);
    const waiting = await pass(world);
    expect(outcomeOf(waiting.outcomes, 'cfg_b')).toMatchObject({
      action: 'waiting',
      message: 'next attempt in 1s',
    });
    expect(world.state.instances.get('cfg_b')?.attempts).toBe(1);

    world.clock.advance(1);
    const second = await pass(world);
    expect(outcomeOf(second.outcomes, 'cfg_b').action).toBe('retrying');
    expect(world.state.instances.get('cfg_b')?.attempts).toBe(2);
    expect(world.state.cooldowns.get('cfg_b')).toBe(world.clock.monotonic() + 0.5 * 20 * 1000);
    // The service already holds this `retrying` with this message: nothing new to send.
    expect(world.outbox.pending()).toEqual([]);

    world.clock.advance(10_000);
    const third = await pass(world);
    expect(outcomeOf(third.outcomes, 'cfg_b').action).toBe('failed');
    expect(world.state.instances.get('cfg_b')).toMatchObject({ error: 'failed', attempts: 3 });
    expect(world.state.cooldowns.has('cfg_b')).toBe(false);
    expect(world.outbox.pendingFor('cfg_b')?.report).toMatchObject({ error_status: 'failed' });
    await world.service.deliver(world.outbox);

    world.clock.advance(3_600_000);
    const after = await pass(world);
    expect(outcomeOf(after.outcomes, 'cfg_b').action).toBe('untouched');
    expect(exists(world, `${ROOT}/b.json`)).toBe(false);
    expect(leftoverTempFiles(world)).toEqual([]);
  });

  it('a full disk (ENOSPC, EDQUOT) for hours: `retrying` naming the disk, never an attempt nor `failed`; written once space returns', async () => {
    for (const code of ['ENOSPC', 'EDQUOT'] as const) {
      const world = await makeWorld();
      const fault = { op: 'rename' as const, match: renameTo('b.json'), code };
      world.faults.push(fault);
      world.service.put(makeInstance({ id: 'cfg_b', relative_filepath: 'b.json' }));

      // Three hours of passes, each after the longest cooldown (maxDelaySeconds 60): maxAttempts is 3.
      for (let i = 0; i < 180; i += 1) {
        const result = await pass(world);
        expect(outcomeOf(result.outcomes, 'cfg_b')).toMatchObject({ action: 'retrying' });
        await world.service.deliver(world.outbox);
        world.clock.advance(60_001);
      }

      expect(world.state.instances.get('cfg_b')).toMatchObject({ error: 'retrying', attempts: 0 });
      const told = world.service.received.filter((r) => r.instanceId === 'cfg_b');
      // Reported once: the same message every time, which the service already holds.
      expect(told.map((r) => `${r.activity}/${r.error}`)).toEqual(['queued/retrying']);
      // A quota is named as one: its remedy is the quota, not space on the disk.
      expect(told[0]?.message).toMatch(
        code === 'EDQUOT'
          ? /the agent's disk quota on rootDir's filesystem is used up: retried until it has room/
          : /the disk holding rootDir is full: retried until space returns/,
      );
      expect(told[0]?.message).toContain(code);
      expect(exists(world, `${ROOT}/b.json`)).toBe(false);

      world.faults.splice(world.faults.indexOf(fault), 1);
      const healed = await pass(world);
      expect(outcomeOf(healed.outcomes, 'cfg_b')).toMatchObject({ action: 'written' });
      expect(text(world, 'b.json')).toBe(jsonText({ port: 8080 }));
      expect(world.outbox.pendingFor('cfg_b')?.report).toMatchObject({ activity_status: 'deployed' });
    }
  });

  it('a full disk holds each attempt off longer: full jitter over base × 2^(n-1), capped, like attempts', async () => {
    const world = await makeWorld();
    world.faults.push({ op: 'rename', match: renameTo('b.json'), code: 'ENOSPC' });
    world.service.put(makeInstance({ id: 'cfg_b', relative_filepath: 'b.json' }));
    const delays: number[] = [];
    for (let i = 0; i < 5; i += 1) {
      await pass(world);
      const until = world.state.cooldowns.get('cfg_b') ?? 0;
      delays.push(until - world.clock.monotonic());
      world.clock.advance(until - world.clock.monotonic());
    }
    // random() = 0.5: half of 10 s, 20 s, 40 s, then the 60 s cap.
    expect(delays).toEqual([5_000, 10_000, 20_000, 30_000, 30_000]);
  });

  it('a full disk is tried again at least every 5 minutes, whatever maxDelaySeconds: written soon after space returns', async () => {
    const world = await makeWorld();
    world.ctx.retry = { maxAttempts: 10, baseDelaySeconds: 15, maxDelaySeconds: 3600 };
    world.ctx.random = () => 1;
    world.faults.push({ op: 'rename', match: renameTo('b.json'), code: 'ENOSPC' });
    world.service.put(makeInstance({ id: 'cfg_b', relative_filepath: 'b.json' }));
    const delays: number[] = [];
    for (let i = 0; i < 8; i += 1) {
      await pass(world);
      const until = world.state.cooldowns.get('cfg_b') ?? 0;
      delays.push(until - world.clock.monotonic());
      world.clock.advance(until - world.clock.monotonic());
    }
    expect(delays).toEqual([15_000, 30_000, 60_000, 120_000, 240_000, 300_000, 300_000, 300_000]);
  });

  it('EROFS (a read-only root): `retrying` naming it, never an attempt nor `failed`', async () => {
    const world = await makeWorld();
    world.faults.push({ op: 'rename', match: renameTo('b.json'), code: 'EROFS' });
    world.service.put(makeInstance({ id: 'cfg_b', relative_filepath: 'b.json' }));
    for (let i = 0; i < 10; i += 1) {
      const result = await pass(world);
      expect(outcomeOf(result.outcomes, 'cfg_b')).toMatchObject({
        action: 'retrying',
        message: expect.stringMatching(/EROFS.*rootDir is on a read-only filesystem/),
      });
      world.clock.advance(60_001);
    }
    expect(world.state.instances.get('cfg_b')).toMatchObject({ error: 'retrying', attempts: 0 });
  });

  it.each(['EIO', 'ENOTCONN'] as const)(
    '%s (the disk failing): `retrying` naming it, never an attempt nor `failed`; written once it works again',
    async (code) => {
      const world = await makeWorld();
      world.faults.push({ op: 'rename', match: renameTo('b.json'), code });
      world.service.put(makeInstance({ id: 'cfg_b', relative_filepath: 'b.json' }));
      // Ten passes over an hour with maxAttempts 3: an I/O error was an attempt, so a card failing for minutes
      // left the instance `failed` for good at the service, never written once the disk worked again.
      for (let i = 0; i < 10; i += 1) {
        const result = await pass(world);
        expect(outcomeOf(result.outcomes, 'cfg_b')).toMatchObject({
          action: 'retrying',
          message: expect.stringMatching(new RegExp(`${code}.*the disk holding rootDir fails`)),
        });
        world.clock.advance(360_001);
      }
      expect(world.state.instances.get('cfg_b')).toMatchObject({ error: 'retrying', attempts: 0 });
      world.faults.length = 0;
      const healed = await pass(world);
      expect(outcomeOf(healed.outcomes, 'cfg_b')).toMatchObject({ action: 'written', converged: true });
      expect(text(world, 'b.json')).toBe(jsonText({ port: 8080 }));
    },
  );

  it('a file larger than the whole filesystem (statfs) counts attempts: `failed` after maxAttempts', async () => {
    const world = await makeWorld();
    // 8 bytes in all: the file's 21 bytes can never fit, however much is freed.
    world.fs.statfs = async () => ({ blocks: 2, bsize: 4 });
    world.faults.push({ op: 'rename', match: renameTo('b.json'), code: 'ENOSPC' });
    world.service.put(makeInstance({ id: 'cfg_b', relative_filepath: 'b.json' }));
    const actions: string[] = [];
    for (let i = 0; i < 3; i += 1) {
      actions.push(outcomeOf((await pass(world)).outcomes, 'cfg_b').action);
      world.clock.advance(60_001);
    }
    expect(actions).toEqual(['retrying', 'retrying', 'failed']);
    expect(world.outbox.pendingFor('cfg_b')?.report).toMatchObject({ error_status: 'failed' });

    // The same file on a filesystem it fits: the disk's condition, no attempt.
    const roomy = await makeWorld();
    roomy.fs.statfs = async () => ({ blocks: 1024, bsize: 4096 });
    roomy.faults.push({ op: 'rename', match: renameTo('b.json'), code: 'ENOSPC' });
    roomy.service.put(makeInstance({ id: 'cfg_b', relative_filepath: 'b.json' }));
    for (let i = 0; i < 3; i += 1) {
      expect(outcomeOf((await pass(roomy)).outcomes, 'cfg_b').action).toBe('retrying');
      roomy.clock.advance(60_001);
    }
    expect(roomy.state.instances.get('cfg_b')).toMatchObject({ error: 'retrying', attempts: 0 });
  });

  it('EACCES creating the temp file: `retrying`; once the cause is fixed the next attempt writes and resets', async () => {
    const world = await makeWorld();
    world.vol.mkdirSync(`${ROOT}/locked`);
    world.faults.push({ op: 'open', match: tempFileIn('locked'), code: 'EACCES' });
    world.service.put(makeInstance({ id: 'cfg_1', relative_filepath: 'locked/app.json' }));

    const first = await pass(world);
    expect(outcomeOf(first.outcomes, 'cfg_1')).toMatchObject({ action: 'retrying' });
    expect(first.outcomes[0]?.message).toMatch(/EACCES/);
    expect(world.state.instances.get('cfg_1')?.attempts).toBe(1);

    world.faults.length = 0;
    world.clock.advance(5_000);
    const second = await pass(world);
    expect(outcomeOf(second.outcomes, 'cfg_1')).toMatchObject({ action: 'written', converged: true });
    expect(text(world, 'locked/app.json')).toBe(jsonText({ port: 8080 }));
    expect(world.state.instances.get('cfg_1')).toEqual({
      relativePath: 'locked/app.json',
      activity: 'deployed',
      error: 'none',
      attempts: 0,
    });
    expect(world.state.cooldowns.has('cfg_1')).toBe(false);
    // The undelivered `retrying` was superseded, not followed, by `deployed`.
    expect(pendingReports(world)).toEqual([
      { instanceId: 'cfg_1', activity_status: 'deployed', error_status: 'none' },
    ]);
  });

  describe('rootDir itself refusing the agent (EACCES, EPERM: chowned to root, an immutable attribute)', () => {
    /** maxAttempts 1: an attempt counted is `failed` at once. Ten passes, each past the longest hold-off. */
    async function passesUnderFault(world: World, id: string): Promise<string[]> {
      world.ctx.retry = { maxAttempts: 1, baseDelaySeconds: 10, maxDelaySeconds: 60 };
      const seen: string[] = [];
      for (let i = 0; i < 10; i += 1) {
        const outcome = outcomeOf((await pass(world)).outcomes, id);
        seen.push(outcome.action);
        expect(outcome.message).toMatch(/rootDir refuses the agent's user.*not counted as an attempt/);
        world.clock.advance(300_001);
      }
      expect(world.state.instances.get(id)).toMatchObject({ error: 'retrying', attempts: 0 });
      expect(world.outbox.pendingFor(id)?.report).not.toMatchObject({ error_status: 'failed' });
      return seen;
    }

    it.each([
      ['EACCES creating the temp file in the root', { op: 'open', match: tempFileIn(''), code: 'EACCES' }],
      ['EPERM renaming into the root', { op: 'rename', match: renameTo('b.json'), code: 'EPERM' }],
    ] as const)('%s: `retrying`, never an attempt nor `failed`; written once it may', async (_, fault) => {
      const world = await makeWorld();
      world.faults.push({ ...fault });
      world.service.put(makeInstance({ id: 'cfg_b', relative_filepath: 'b.json' }));
      expect(new Set(await passesUnderFault(world, 'cfg_b'))).toEqual(new Set(['retrying']));
      world.faults.length = 0;
      const after = await pass(world);
      expect(outcomeOf(after.outcomes, 'cfg_b')).toMatchObject({ action: 'written', converged: true });
      expect(text(world, 'b.json')).toBe(jsonText({ port: 8080 }));
    });

    it('EACCES making a first-level directory: the root refuses, not an attempt', async () => {
      const world = await makeWorld();
      world.faults.push({ op: 'mkdir', match: (absolute) => absolute.endsWith('/app'), code: 'EACCES' });
      world.service.put(makeInstance({ id: 'cfg_b', relative_filepath: 'app/b.json' }));
      expect(new Set(await passesUnderFault(world, 'cfg_b'))).toEqual(new Set(['retrying']));
    });

    it('EACCES removing a file of the root: the file stays, `retrying`, removed once it may', async () => {
      const world = await makeWorld();
      world.service.put(makeInstance({ id: 'cfg_1' }));
      await pass(world);
      await world.service.deliver(world.outbox);
      world.faults.push({
        op: 'unlink',
        match: (absolute) => absolute === `${ROOT}/app.json`,
        code: 'EACCES',
      });
      world.service.update('cfg_1', { target_status: 'removed' });
      expect(new Set(await passesUnderFault(world, 'cfg_1'))).toEqual(new Set(['retrying']));
      expect(exists(world, `${ROOT}/app.json`)).toBe(true);
      world.faults.length = 0;
      expect(outcomeOf((await pass(world)).outcomes, 'cfg_1').action).toBe('removed');
    });

    it("a subdirectory refusing under a root that refuses too (chown -R): the root's condition", async () => {
      const world = await makeWorld();
      world.fs.access = async (file) => {
        throw errnoError('EACCES', 'access', String(file));
      };
      world.vol.mkdirSync(`${ROOT}/locked`);
      world.faults.push({ op: 'open', match: tempFileIn('locked'), code: 'EACCES' });
      world.service.put(makeInstance({ id: 'cfg_1', relative_filepath: 'locked/app.json' }));
      expect(new Set(await passesUnderFault(world, 'cfg_1'))).toEqual(new Set(['retrying']));
      world.faults.length = 0;
      world.fs.access = async () => undefined;
      expect(outcomeOf((await pass(world)).outcomes, 'cfg_1').action).toBe('written');
    });

    it("the same refusal in a subdirectory is the instance's: an attempt, `failed` at maxAttempts", async () => {
      const world = await makeWorld();
      world.fs.access = async () => undefined;
      world.ctx.retry = { maxAttempts: 1, baseDelaySeconds: 10, maxDelaySeconds: 60 };
      world.vol.mkdirSync(`${ROOT}/locked`);
      world.faults.push({ op: 'open', match: tempFileIn('locked'), code: 'EACCES' });
      world.service.put(makeInstance({ id: 'cfg_1', relative_filepath: 'locked/app.json' }));
      expect(outcomeOf((await pass(world)).outcomes, 'cfg_1').action).toBe('failed');
    });
  });

  describe("a file of another user in a sticky directory the agent's user does not own (gaps19)", () => {
    const AGENT = 1000;
    const OTHER = 2000;
    const APP = 3000;
    /** `shared/` (or the root) of user 3000, mode `mode`; at `file` a file of `owner` with other bytes. */
    async function stickyWorld(
      options: { dir?: string; mode?: number; owner?: number; dirOwner?: number } = {},
    ) {
      const world = await makeWorld();
      const dir = options.dir ?? 'shared';
      const absoluteDir = dir === '' ? ROOT : path.join(ROOT, dir);
      world.vol.mkdirSync(absoluteDir, { recursive: true });
      world.vol.chmodSync(absoluteDir, options.mode ?? 0o1777);
      // Its group the agent's (memfs judges reads by owner, group and other).
      world.vol.chownSync(absoluteDir, options.dirOwner ?? APP, process.getgid?.() ?? 0);
      const file = path.posix.join(dir, 'app.json');
      world.vol.writeFileSync(path.join(ROOT, file), '{"planted": true}\n');
      world.vol.chownSync(path.join(ROOT, file), options.owner ?? OTHER, OTHER);
      world.ctx.euid = AGENT;
      world.ctx.retry = { maxAttempts: 1, baseDelaySeconds: 10, maxDelaySeconds: 60 };
      // What the kernel answers the agent's user for a rename over that file (memfs does not judge owners).
      world.faults.push({ op: 'rename', match: renameTo(file), code: 'EPERM' });
      world.service.put(makeInstance({ id: 'cfg_1', relative_filepath: file }));
      return { world, file };
    }

    it('a write over it: `retrying` naming the path and its owner, never an attempt; written once it goes', async () => {
      const { world, file } = await stickyWorld();
      for (let i = 0; i < 10; i += 1) {
        const outcome = outcomeOf((await pass(world)).outcomes, 'cfg_1');
        // Before: `failed` for good at the first pass (maxAttempts 1), an attempt of the instance.
        expect(outcome.action).toBe('retrying');
        expect(outcome.message).toMatch(
          /EPERM.*"shared\/app\.json" belongs to uid 2000, another user, and the directory "shared" is sticky \(mode 1777\).*not counted as an attempt/,
        );
        world.clock.advance(300_001);
      }
      expect(world.state.instances.get('cfg_1')).toMatchObject({ error: 'retrying', attempts: 0 });
      expect(text(world, file)).toBe('{"planted": true}\n');
      world.vol.unlinkSync(path.join(ROOT, file));
      world.faults.length = 0;
      expect(outcomeOf((await pass(world)).outcomes, 'cfg_1')).toMatchObject({
        action: 'written',
        converged: true,
      });
      expect(text(world, file)).toBe(jsonText({ port: 8080 }));
    });

    it('a 1770 directory of a group, and a sticky rootDir: the same', async () => {
      for (const options of [{ mode: 0o1770 }, { dir: '' }]) {
        const { world } = await stickyWorld(options);
        const outcome = outcomeOf((await pass(world)).outcomes, 'cfg_1');
        expect(outcome.action).toBe('retrying');
        expect(outcome.message).toMatch(
          options.dir === '' ? /and rootDir is sticky \(mode 1777\)/ : /sticky \(mode 1770\)/,
        );
      }
    });

    it("a removal of the agent's file there, now another user's: the file stays, `retrying`; removed once it may", async () => {
      const world = await makeWorld();
      world.vol.mkdirSync(`${ROOT}/shared`);
      world.vol.chmodSync(`${ROOT}/shared`, 0o1777);
      world.vol.chownSync(`${ROOT}/shared`, APP, APP);
      world.service.put(makeInstance({ id: 'cfg_1', relative_filepath: 'shared/app.json' }));
      await pass(world);
      await world.service.deliver(world.outbox);
      // Written by an agent that ran as another user (an install's earlier uid): the sticky bit keeps it from this one.
      world.vol.chownSync(`${ROOT}/shared/app.json`, OTHER, OTHER);
      world.vol.chmodSync(`${ROOT}/shared/app.json`, 0o644);
      world.ctx.euid = AGENT;
      world.ctx.retry = { maxAttempts: 1, baseDelaySeconds: 10, maxDelaySeconds: 60 };
      world.faults.push({ op: 'unlink', match: renameTo('shared/app.json'), code: 'EPERM' });
      world.service.update('cfg_1', { target_status: 'removed' });
      for (let i = 0; i < 3; i += 1) {
        const outcome = outcomeOf((await pass(world)).outcomes, 'cfg_1');
        expect(outcome.action).toBe('retrying');
        expect(outcome.message).toMatch(/belongs to uid 2000, another user/);
        world.clock.advance(300_001);
      }
      expect(exists(world, `${ROOT}/shared/app.json`)).toBe(true);
      world.faults.length = 0;
      expect(outcomeOf((await pass(world)).outcomes, 'cfg_1').action).toBe('removed');
    });

    // What the sticky bit does not explain stays the instance's attempt (docs/reliability.md, the attempt policy):
    // an attribute only root sets (chattr +i, +a), a directory an operator locked, the agent running as root.
    it.each([
      ["the agent's own file (an immutable or append-only attribute)", { owner: AGENT }, AGENT],
      ["a sticky directory of the agent's own", { dirOwner: AGENT }, AGENT],
      ['a directory without the sticky bit (the file immutable)', { mode: 0o777 }, AGENT],
      ['the agent running as root', {}, 0],
    ] as const)('%s: an attempt, `failed` at maxAttempts', async (_, options, euid) => {
      const { world } = await stickyWorld(options);
      world.ctx.euid = euid;
      expect(outcomeOf((await pass(world)).outcomes, 'cfg_1').action).toBe('failed');
    });
  });

  it('EROFS on unlink: the removal retries and the file stays until it succeeds', async () => {
    const world = await makeWorld();
    world.service.put(makeInstance({ id: 'cfg_1' }));
    await pass(world);
    await world.service.deliver(world.outbox);
    world.faults.push({ op: 'unlink', match: (absolute) => absolute === `${ROOT}/app.json`, code: 'EROFS' });
    world.service.update('cfg_1', { target_status: 'removed' });

    const first = await pass(world);
    expect(outcomeOf(first.outcomes, 'cfg_1')).toMatchObject({ action: 'retrying' });
    expect(world.outbox.pendingFor('cfg_1')?.report).toMatchObject({
      activity_status: 'deployed',
      error_status: 'retrying',
    });
    expect(exists(world, `${ROOT}/app.json`)).toBe(true);
    expect(world.state.files.has('app.json')).toBe(true);

    world.faults.length = 0;
    world.clock.advance(5_000);
    const second = await pass(world);
    expect(outcomeOf(second.outcomes, 'cfg_1').action).toBe('removed');
    expect(exists(world, `${ROOT}/app.json`)).toBe(false);
    expect(pendingReports(world)).toEqual([
      { instanceId: 'cfg_1', activity_status: 'removed', error_status: 'none' },
    ]);
  });
});

describe('backoffDelayMs', () => {
  const policy: RetryPolicy = { maxAttempts: 10, baseDelaySeconds: 15, maxDelaySeconds: 300 };
  it.each([
    // attempt, random, expected ms: uniform in [0, min(max, base × 2^(attempt-1))].
    [1, 0, 0],
    [1, 0.5, 7_500],
    [1, 0.999_999, 15_000],
    [2, 0.5, 15_000],
    [3, 0.5, 30_000],
    [5, 0.999_999, 240_000],
    [6, 0.999_999, 300_000],
    [6, 0.5, 150_000],
    [40, 0.999_999, 300_000],
    [0, 0.5, 7_500],
  ])('attempt %i with random %d → %i ms', (attempt, random, expected) => {
    expect(backoffDelayMs(policy, attempt, () => random)).toBe(expected);
  });

  it('never exceeds the cap and never goes below zero, whatever the attempt', () => {
    for (let attempt = 1; attempt <= 64; attempt += 1) {
      for (const random of [0, 0.25, 0.75, 0.999_999]) {
        const delay = backoffDelayMs(policy, attempt, () => random);
        expect(delay).toBeGreaterThanOrEqual(0);
        expect(delay).toBeLessThanOrEqual(policy.maxDelaySeconds * 1000);
        expect(delay).toBeLessThanOrEqual(policy.baseDelaySeconds * 2 ** (attempt - 1) * 1000);
      }
    }
  });
});

describe('applySteps: swaps (a removal displaced by a write of the same config schema)', () => {
  async function swapWorld(): Promise<World> {
    const world = await makeWorld();
    world.service.put(
      makeInstance({
        id: 'cfg_a',
        relative_filepath: 'conf/a.json',
        config_schema_id: 'sch_s',
        content: { v: 'a' },
      }),
    );
    await pass(world);
    await world.service.deliver(world.outbox);
    world.vol.chmodSync(`${ROOT}/conf/a.json`, FILE_MODE);
    world.service.update('cfg_a', { target_status: 'removed' });
    world.service.put(
      makeInstance({
        id: 'cfg_b',
        relative_filepath: 'conf/b.json',
        config_schema_id: 'sch_s',
        content: { v: 'b' },
      }),
    );
    return world;
  }

  it('a failed swap is not undone by the next pass: while the replacement waits, A stays and is not reported', async () => {
    const world = await swapWorld();
    world.faults.push({ op: 'rename', match: renameTo('conf/b.json'), code: 'EROFS' });
    await pass(world);
    expect(text(world, 'conf/a.json')).toBe(jsonText({ v: 'a' }));

    const next = await pass(world);

    expect(text(world, 'conf/a.json')).toBe(jsonText({ v: 'a' }));
    expect(outcomeOf(next.outcomes, 'cfg_a')).toMatchObject({ action: 'waiting', converged: false });
    expect(pendingReports(world).filter((report) => report.instanceId === 'cfg_a')).toEqual([]);
  });

  it('plans one write step that displaces the removal', async () => {
    const world = await swapWorld();
    const { steps } = await pass(world);
    expect(steps.map((step) => [step.kind, step.instance.id])).toEqual([['write', 'cfg_b']]);
  });

  it('success: A is gone and reported removed, B is written and reported deployed', async () => {
    const world = await swapWorld();
    const { outcomes } = await pass(world);

    expect(outcomeOf(outcomes, 'cfg_a')).toMatchObject({ action: 'removed', converged: true });
    expect(outcomeOf(outcomes, 'cfg_b')).toMatchObject({ action: 'written', converged: true });
    expect(exists(world, `${ROOT}/conf/a.json`)).toBe(false);
    expect(text(world, 'conf/b.json')).toBe(jsonText({ v: 'b' }));
    expect([...world.state.files.keys()]).toEqual(['conf/b.json']);
    expect(world.state.instances.get('cfg_a')).toMatchObject({ activity: 'removed', error: 'none' });
    expect(pendingReports(world)).toEqual([
      { instanceId: 'cfg_b', activity_status: 'deployed', error_status: 'none' },
      { instanceId: 'cfg_a', activity_status: 'removed', error_status: 'none' },
    ]);
  });

  it('failed write: A is restored byte-identical from the bytes read before its removal, B retries, no `removed` for A', async () => {
    const world = await swapWorld();
    const original = text(world, 'conf/a.json');
    world.faults.push({ op: 'rename', match: renameTo('conf/b.json'), code: 'ENOSPC' });

    const { outcomes } = await pass(world);

    expect(text(world, 'conf/a.json')).toBe(original);
    expect(modeOf(world, `${ROOT}/conf/a.json`)).toBe(FILE_MODE);
    expect(exists(world, `${ROOT}/conf/b.json`)).toBe(false);
    expect(leftoverTempFiles(world)).toEqual([]);
    expect(outcomeOf(outcomes, 'cfg_a')).toMatchObject({ action: 'unchanged', converged: false });
    expect(outcomeOf(outcomes, 'cfg_b')).toMatchObject({ action: 'retrying', converged: false });
    expect(world.state.files.get('conf/a.json')?.instanceId).toBe('cfg_a');
    expect(world.state.files.has('conf/b.json')).toBe(false);
    expect(world.outbox.pendingFor('cfg_a')).toBeUndefined();
    expect(world.outbox.pendingFor('cfg_b')?.report).toMatchObject({ error_status: 'retrying' });

    // Once the disk recovers, the swap completes.
    world.faults.length = 0;
    world.clock.advance(60_000);
    await pass(world);
    expect(exists(world, `${ROOT}/conf/a.json`)).toBe(false);
    expect(text(world, 'conf/b.json')).toBe(jsonText({ v: 'b' }));
    expect(world.outbox.pendingFor('cfg_a')?.report).toEqual({
      activity_status: 'removed',
      error_status: 'none',
    });
  });

  it('failed write whose rollback fails too: A stays removed and is reported so, B retries', async () => {
    const world = await swapWorld();
    world.faults.push({ op: 'rename', match: renameTo('conf/b.json'), code: 'ENOSPC' });
    world.faults.push({ op: 'rename', match: renameTo('conf/a.json'), code: 'ENOSPC' });

    const { outcomes } = await pass(world);

    expect(exists(world, `${ROOT}/conf/a.json`)).toBe(false);
    expect(outcomeOf(outcomes, 'cfg_a')).toMatchObject({
      action: 'removed',
      message: expect.stringMatching(/rollback impossible/),
    });
    expect(outcomeOf(outcomes, 'cfg_b').action).toBe('retrying');
    expect(world.state.files.size).toBe(0);
    expect(world.outbox.pendingFor('cfg_a')?.report).toEqual({
      activity_status: 'removed',
      error_status: 'none',
    });
  });
});

describe('applySteps: report coalescing', () => {
  it('sends nothing when the service already holds the status', async () => {
    const world = await makeWorld({ [`${ROOT}/app.json`]: jsonText({ port: 8080 }) });
    world.service.put(
      makeInstance({ id: 'cfg_in_place', activity_status: 'deployed' }),
      makeInstance({
        id: 'cfg_gone',
        relative_filepath: 'gone.json',
        target_status: 'removed',
        activity_status: 'removed',
      }),
    );
    await pass(world);
    await pass(world);
    expect(world.outbox.pending()).toEqual([]);
  });

  it('does not queue the same report twice while it is undelivered', async () => {
    const world = await makeWorld();
    world.service.put(makeInstance({ id: 'cfg_1', target_status: 'removed', activity_status: 'queued' }));
    await pass(world);
    const queued = world.outbox.pending().map((entry) => entry.seq);
    await pass(world);
    expect(world.outbox.pending().map((entry) => entry.seq)).toEqual(queued);
    expect(queued).toHaveLength(1);
  });

  it('a stale undelivered error report is superseded once the file is in place again', async () => {
    const world = await makeWorld();
    world.service.put(makeInstance({ id: 'cfg_1' }));
    await pass(world);
    await world.service.deliver(world.outbox);
    // Drift, and the repair fails while the service is unreachable (the `retrying` report stays queued).
    world.vol.writeFileSync(`${ROOT}/app.json`, 'tampered\n');
    world.faults.push({ op: 'rename', match: renameTo('app.json'), code: 'EINVAL' });
    await pass(world);
    expect(world.outbox.pendingFor('cfg_1')?.report.error_status).toBe('retrying');

    // Someone puts the right bytes back before the next attempt.
    world.vol.writeFileSync(`${ROOT}/app.json`, jsonText({ port: 8080 }));
    world.faults.length = 0;
    world.clock.advance(60_000);
    await pass(world);

    expect(pendingReports(world)).toEqual([
      { instanceId: 'cfg_1', activity_status: 'deployed', error_status: 'none' },
    ]);
    expect(world.state.instances.get('cfg_1')).toMatchObject({ error: 'none', attempts: 0 });
  });

  it('a file put back in place after a failed repair is reported `deployed` and its attempts start over', async () => {
    const world = await makeWorld();
    world.service.put(makeInstance({ id: 'cfg_1' }));
    await pass(world);
    await world.service.deliver(world.outbox);
    world.vol.writeFileSync(`${ROOT}/app.json`, 'tampered\n');
    world.faults.push({ op: 'rename', match: renameTo('app.json'), code: 'EINVAL' });
    await pass(world);
    await world.service.deliver(world.outbox);
    expect(world.service.get('cfg_1')).toMatchObject({
      activity_status: 'deployed',
      error_status: 'retrying',
    });
    expect(world.state.instances.get('cfg_1')?.attempts).toBe(1);

    world.vol.writeFileSync(`${ROOT}/app.json`, jsonText({ port: 8080 }));
    world.faults.length = 0;
    world.clock.advance(60_000);
    const { steps } = await pass(world);

    expect(steps).toMatchObject([{ kind: 'report', reason: 'already_in_place' }]);
    expect(pendingReports(world)).toEqual([
      { instanceId: 'cfg_1', activity_status: 'deployed', error_status: 'none' },
    ]);
    expect(world.state.instances.get('cfg_1')).toMatchObject({ error: 'none', attempts: 0 });
    expect(world.state.cooldowns.has('cfg_1')).toBe(false);
  });
});

describe('applySteps: a new instance taking over the same path', () => {
  async function takeoverWorld(): Promise<World> {
    const world = await makeWorld();
    world.service.put(makeInstance({ id: 'cfg_a', relative_filepath: 'app.json', content: { v: 'a' } }));
    await pass(world);
    await world.service.deliver(world.outbox);
    world.service.update('cfg_a', { target_status: 'removed' });
    world.service.put(makeInstance({ id: 'cfg_b', relative_filepath: 'app.json', content: { v: 'b' } }));
    return world;
  }

  it('success: B owns the file and A is reported removed with it', async () => {
    const world = await takeoverWorld();
    const { outcomes } = await pass(world);
    expect(text(world, 'app.json')).toBe(jsonText({ v: 'b' }));
    expect(world.state.files.get('app.json')?.instanceId).toBe('cfg_b');
    expect(outcomeOf(outcomes, 'cfg_a')).toMatchObject({ action: 'replaced', converged: true });
    expect(pendingReports(world)).toEqual([
      { instanceId: 'cfg_b', activity_status: 'deployed', error_status: 'none' },
      { instanceId: 'cfg_a', activity_status: 'removed', error_status: 'none' },
    ]);
  });

  it('failed write: A keeps its bytes and is not reported removed; later B succeeds and A goes with it', async () => {
    const world = await takeoverWorld();
    world.faults.push({ op: 'rename', match: renameTo('app.json'), code: 'ENOSPC' });
    const first = await pass(world);
    expect(text(world, 'app.json')).toBe(jsonText({ v: 'a' }));
    expect(outcomeOf(first.outcomes, 'cfg_a')).toMatchObject({ action: 'waiting', converged: false });
    expect(pendingReports(world).filter((report) => report.instanceId === 'cfg_a')).toEqual([]);

    world.faults.length = 0;
    world.clock.advance(3_600_000);
    const second = await pass(world);
    expect(text(world, 'app.json')).toBe(jsonText({ v: 'b' }));
    expect(outcomeOf(second.outcomes, 'cfg_a')).toMatchObject({ action: 'replaced', converged: true });
  });
});

describe('applySteps: removal checks the bytes it is about to delete', () => {
  it('a recorded file changed by someone else since it was written is left in place', async () => {
    const world = await makeWorld();
    world.service.put(makeInstance({ id: 'cfg_1', relative_filepath: 'app.json', content: { v: 1 } }));
    await pass(world);
    await world.service.deliver(world.outbox);
    world.vol.writeFileSync(`${ROOT}/app.json`, 'edited by the operator\n');
    world.service.update('cfg_1', { target_status: 'removed' });

    const { outcomes } = await pass(world);

    expect(text(world, 'app.json')).toBe('edited by the operator\n');
    expect(outcomeOf(outcomes, 'cfg_1')).toMatchObject({ action: 'archived', converged: true });
    expect(world.state.files.has('app.json')).toBe(false);
    expect(pendingReports(world)).toMatchObject([
      {
        instanceId: 'cfg_1',
        activity_status: 'removed',
        error_status: 'none',
        message: expect.stringMatching(/changed/),
      },
    ]);
  });
});

describe('applySteps: removal of a file grown huge after its hash', () => {
  it('is not read whole: the file is left in place, changed by someone else', async () => {
    const world = await makeWorld();
    world.service.put(makeInstance({ id: 'cfg_1', relative_filepath: 'app.json', content: { v: 1 } }));
    await pass(world);
    await world.service.deliver(world.outbox);
    world.service.update('cfg_1', { target_status: 'removed' });
    const huge = 16 * 1024 * 1024;
    let opens = 0;
    let largest = 0;
    const base = world.ctx.fs;
    // The removal hashes the file (ours), then reads it to keep its bytes: a local user grows it in between.
    world.ctx.fs = {
      ...base,
      open: (async (...args: Parameters<FsPort['open']>) => {
        if (String(args[0]) === `${ROOT}/app.json` && (Number(args[1]) & 3) === 0 && ++opens === 2) {
          world.vol.truncateSync(`${ROOT}/app.json`, huge);
        }
        const handle = await base.open(...args);
        const readFile = handle.readFile.bind(handle);
        const read = handle.read.bind(handle);
        return Object.assign(handle, {
          readFile: async (...rest: unknown[]) => {
            const data = await (readFile as (...a: unknown[]) => Promise<Buffer>)(...rest);
            largest = Math.max(largest, data.length);
            return data;
          },
          read: async (...rest: unknown[]) => {
            const result = await (read as (...a: unknown[]) => Promise<{ bytesRead: number }>)(...rest);
            largest = Math.max(largest, result.bytesRead);
            return result;
          },
        });
      }) as FsPort['open'],
    };

    const { outcomes } = await pass(world);

    expect(world.vol.statSync(`${ROOT}/app.json`).size).toBe(huge);
    expect(outcomeOf(outcomes, 'cfg_1')).toMatchObject({ action: 'archived', converged: true });
    expect(largest).toBeLessThanOrEqual(1024 * 1024);
  });
});

describe('applySteps: removal of a file swapped after its hash', () => {
  it('another file renamed into place between the check and the unlink is left in place, never deleted', async () => {
    const world = await makeWorld();
    world.service.put(makeInstance({ id: 'cfg_1', relative_filepath: 'app.json', content: { v: 1 } }));
    await pass(world);
    await world.service.deliver(world.outbox);
    world.service.update('cfg_1', { target_status: 'removed' });
    world.vol.writeFileSync(`${ROOT}/theirs.json`, 'a local user file\n');
    let opens = 0;
    const base = world.ctx.fs;
    // The removal hashes the file and reads it (ours, both); a local user then renames a file of theirs over it.
    world.ctx.fs = {
      ...base,
      open: (async (...args: Parameters<FsPort['open']>) => {
        const handle = await base.open(...args);
        if (String(args[0]) === `${ROOT}/app.json` && (Number(args[1]) & 3) === 0 && ++opens === 2) {
          const close = handle.close.bind(handle);
          return Object.assign(handle, {
            close: async () => {
              await close();
              world.vol.renameSync(`${ROOT}/theirs.json`, `${ROOT}/app.json`);
            },
          });
        }
        return handle;
      }) as FsPort['open'],
    };

    await pass(world);

    expect(world.vol.readFileSync(`${ROOT}/app.json`, 'utf8')).toBe('a local user file\n');
  });
});

describe('applySteps: stopping', () => {
  it('an abort during a write is neither an attempt nor a report, and leaves the old file whole', async () => {
    const world = await makeWorld();
    world.service.put(makeInstance({ id: 'cfg_1', relative_filepath: 'app.json', content: { v: 1 } }));
    await pass(world);
    await world.service.deliver(world.outbox);
    world.service.update('cfg_1', { content: { v: 2 }, activity_status: 'queued' });
    const controller = new AbortController();
    // Stop arrives while the temp file is being opened: mid-publish, not between steps.
    const stoppingFs: FsPort = {
      ...world.fs,
      open: (async (file: string, ...rest: unknown[]) => {
        if (path.basename(String(file)).startsWith(TEMP_PREFIX))
          controller.abort(new Error('agent stopping'));
        return (world.fs.open as (...args: unknown[]) => unknown)(file, ...rest);
      }) as FsPort['open'],
    };
    const steps = await planWorld(world);

    await expect(
      applyAndRecord(steps, { ...world.ctx, fs: stoppingFs, signal: controller.signal }),
    ).rejects.toThrow('agent stopping');

    expect(text(world, 'app.json')).toBe(jsonText({ v: 1 }));
    expect(world.state.instances.get('cfg_1')?.attempts ?? 0).toBe(0);
    expect(pendingReports(world)).toEqual([]);
    expect(leftoverTempFiles(world)).toEqual([]);
  });
});

describe('applySteps: one instance never stops the others', () => {
  it('an unexpected error in one step costs that instance an attempt and the next steps still run', async () => {
    const world = await makeWorld();
    world.service.put(
      makeInstance({ id: 'cfg_1', relative_filepath: 'one.json', target_status: 'removed' }),
      makeInstance({ id: 'cfg_2', relative_filepath: 'two.json', target_status: 'removed' }),
      makeInstance({ id: 'cfg_3', relative_filepath: 'three.json', config_schema_id: 's3' }),
    );
    const steps = await planWorld(world);
    // A bug (not a disk error) in the first archive's report: outside what the handler classifies.
    const enqueue = world.outbox.enqueue.bind(world.outbox);
    world.outbox.enqueue = (instanceId, report, now) => {
      if (instanceId === 'cfg_1' && report.activity_status === 'removed') throw new TypeError('outbox bug');
      enqueue(instanceId, report, now);
    };

    const outcomes = await applyAndRecord(steps, world.ctx);

    expect(outcomeOf(outcomes, 'cfg_1')).toMatchObject({ action: 'retrying', converged: false });
    expect(world.state.instances.get('cfg_1')).toMatchObject({ attempts: 1, error: 'retrying' });
    expect(outcomeOf(outcomes, 'cfg_2')).toMatchObject({ action: 'archived', converged: true });
    expect(outcomeOf(outcomes, 'cfg_3')).toMatchObject({ action: 'written', converged: true });
    expect(text(world, 'three.json')).toBe(jsonText({ port: 8080 }));
  });
});
