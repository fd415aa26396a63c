// applySteps's batches leave the fsync of a new directory's parent to the batch: a power cut never loses a file handed on.
import path from 'node:path';
import { Volume } from 'memfs';
import { beforeEach, describe, expect, it } from 'vitest';
import { instanceFactory } from '../../test/helpers/instances.js';
import { memfsPort } from '../../test/helpers/memfs.js';
import { PowerCutFs } from '../../test/helpers/power-cut-fs.js';
import { writeStep as write } from '../../test/helpers/write-steps.js';
import type { FileHandle, FsPort } from '../lib/fs-port.js';
import { sha256Hex } from '../lib/hash.js';
import { silentLogger } from '../lib/logger.js';
import { ContentCache } from '../store/content-cache.js';
import { DirectoryAsides } from '../store/directory-asides.js';
import { DirectorySyncLedger } from '../store/directory-syncs.js';
import { rootConditionOf } from '../store/errors.js';
import { TEMP_PREFIX } from '../store/path-guard.js';
import { type AppliedStep, type ApplyContext, applySteps } from './apply.js';
import type { RemoveStep, WriteStep } from './plan.js';

const ROOT = '/srv/config';
const STATE_DIR = '/var/lib/config-agent';
const makeInstance = instanceFactory({ relative_filepath: 'app.json' });

let vol: InstanceType<typeof Volume>;

beforeEach(() => {
  vol = new Volume();
  vol.mkdirSync(ROOT, { recursive: true });
  vol.mkdirSync(STATE_DIR, { recursive: true });
});

/** `fs` whose directory fsyncs of the directories in `failing` (relative to the root) fail with EIO. */
function failingDirectorySyncs(fs: FsPort, failing: ReadonlySet<string>): FsPort {
  return {
    ...fs,
    open: (async (...args: Parameters<FsPort['open']>) => {
      const handle: FileHandle = await fs.open(...args);
      const relative = path.relative(ROOT, String(args[0]));
      if (!failing.has(relative)) return handle;
      return new Proxy(handle, {
        get(target, property) {
          const value = Reflect.get(target, property) as unknown;
          if (property === 'sync') {
            return async () => {
              if ((await target.stat()).isDirectory()) throw Object.assign(new Error('EIO'), { code: 'EIO' });
              return target.sync();
            };
          }
          return typeof value === 'function' ? (value as () => unknown).bind(target) : value;
        },
      });
    }) as FsPort['open'],
  };
}

async function run(
  steps: readonly WriteStep[],
  model: PowerCutFs,
  fs: FsPort,
  batchSteps: number,
  files: ApplyContext['files'] = new Map(),
) {
  const ctx: ApplyContext = {
    fs,
    logger: silentLogger(),
    rootDir: ROOT,
    fileMode: 0o640,
    dirMode: 0o750,
    files,
    cache: new ContentCache(fs, STATE_DIR),
    batchSteps,
  };
  const lost: string[] = [];
  const handed: AppliedStep[] = [];
  const outcome = await applySteps(steps, ctx, (applied) => {
    handed.push(applied);
    // A power cut at the moment a step is handed on (recorded, then reported): every file handed on as
    // written so far must survive it whole.
    const left = model.afterPowerCut();
    for (const done of handed) {
      const landed = done.result.kind === 'written' || done.result.kind === 'unchanged';
      if (!landed || done.step.kind !== 'write') continue;
      if (left[done.step.path] !== `640 ${done.step.instance.id}\n`) lost.push(done.step.path);
    }
  });
  return { outcome, lost: [...new Set(lost)] };
}

describe('applySteps: directories a batch makes', () => {
  it('a power cut when any step is handed on loses no file handed on, across batches sharing new directories', async () => {
    const base = memfsPort(vol);
    const model = await PowerCutFs.over(base, ROOT);
    // Three levels of new directories, files spread so later batches write into directories earlier ones made.
    const steps = Array.from({ length: 24 }, (_, i) =>
      write(`cfg_${i}`, `top/g${i % 3}/s${i % 4}/f${i}.json`),
    );
    const { outcome, lost } = await run(steps, model, model.fs, 5);
    expect(outcome.applied.map((applied) => applied.result.kind)).toEqual(steps.map(() => 'written'));
    expect(lost).toEqual([]);
  });

  it("when a new directory's parent cannot be fsynced, every file under it fails, in the batch that made it and in later ones", async () => {
    const base = memfsPort(vol);
    const model = await PowerCutFs.over(base, ROOT);
    vol.mkdirSync(path.join(ROOT, 'ok'));
    const fs = failingDirectorySyncs(model.fs, new Set(['top']));
    const steps = [
      write('cfg_a', 'top/new/a.json'),
      write('cfg_b', 'ok/b.json'),
      write('cfg_c', 'top/new/c.json'),
      // Later batches: into the directory an earlier batch made, and into a new one beside it.
      write('cfg_d', 'top/new/d.json'),
      write('cfg_e', 'top/other/e.json'),
      write('cfg_f', 'ok/f.json'),
    ];
    const { outcome, lost } = await run(steps, model, fs, 3);
    const kinds = Object.fromEntries(
      outcome.applied.map((a) => [a.step.kind === 'write' ? a.step.path : '?', a.result.kind]),
    );
    expect(kinds).toEqual({
      'top/new/a.json': 'failed',
      'ok/b.json': 'written',
      'top/new/c.json': 'failed',
      'top/new/d.json': 'failed',
      'top/other/e.json': 'failed',
      'ok/f.json': 'written',
    });
    expect(lost).toEqual([]);
    // The bytes are in place all the same: a pass that can fsync again reports them, without rewriting.
    expect(vol.readFileSync(path.join(ROOT, 'top/new/d.json'), 'utf8')).toBe('cfg_d\n');
  });

  it('bytes a killed run left in directories it made (their entries never fsynced) are durable, chain and all, before they are handed on', async () => {
    const base = memfsPort(vol);
    const model = await PowerCutFs.over(base, ROOT);
    // What the killed run left: directories made and the file renamed in, nothing of it fsynced.
    vol.mkdirSync(path.join(ROOT, 'x/y/z'), { recursive: true });
    vol.writeFileSync(path.join(ROOT, 'x/y/z/left.json'), 'cfg_left\n', { mode: 0o640 });
    const { outcome, lost } = await run([write('cfg_left', 'x/y/z/left.json')], model, model.fs, 5);
    expect(outcome.applied.map((applied) => applied.result.kind)).toEqual(['unchanged']);
    expect(lost).toEqual([]);
    expect(model.afterPowerCut()['x/y/z/left.json']).toBe('640 cfg_left\n');
  });
  it('a file written into directories a killed run made (their entries never fsynced) survives a power cut once handed on', async () => {
    const base = memfsPort(vol);
    const model = await PowerCutFs.over(base, ROOT);
    // What the killed run left: directories made, nothing of them fsynced, its file never renamed in.
    vol.mkdirSync(path.join(ROOT, 'x/y/z'), { recursive: true });
    const { outcome, lost } = await run([write('cfg_new', 'x/y/z/new.json')], model, model.fs, 5);
    expect(outcome.applied.map((applied) => applied.result.kind)).toEqual(['written']);
    expect(lost).toEqual([]);
    expect(model.afterPowerCut()['x/y/z/new.json']).toBe('640 cfg_new\n');
  });

  it("after a pass whose new directory's parent fsync failed, the next pass's file written under it survives a power cut once handed on", async () => {
    const base = memfsPort(vol);
    const model = await PowerCutFs.over(base, ROOT);
    const first = await run(
      [write('cfg_a', 'top/new/a.json')],
      model,
      failingDirectorySyncs(model.fs, new Set(['top'])),
      5,
    );
    expect(first.outcome.applied.map((applied) => applied.result.kind)).toEqual(['failed']);
    // The disk answers again (EIO then success): a new file into the directory the failed pass made.
    const { outcome, lost } = await run([write('cfg_b', 'top/new/b.json')], model, model.fs, 5);
    expect(outcome.applied.map((applied) => applied.result.kind)).toEqual(['written']);
    expect(lost).toEqual([]);
    expect(model.afterPowerCut()['top/new/b.json']).toBe('640 cfg_b\n');
  });
  it("a directory whose own parent's fsync failed is fsynced up again by later batches of the pass, though its child's entry was", async () => {
    const base = memfsPort(vol);
    const model = await PowerCutFs.over(base, ROOT);
    vol.mkdirSync(path.join(ROOT, 'p/q'), { recursive: true });
    let failing = new Set(['']);
    const fs: FsPort = {
      ...model.fs,
      open: ((...args: Parameters<FsPort['open']>) =>
        failingDirectorySyncs(model.fs, failing).open(...args)) as FsPort['open'],
    };
    const steps = [write('cfg_a', 'p/q/a.json'), write('cfg_b', 'p/q/b.json')];
    const handedKinds: string[] = [];
    const ctx: ApplyContext = {
      fs,
      logger: silentLogger(),
      rootDir: ROOT,
      fileMode: 0o640,
      dirMode: 0o750,
      files: new Map(),
      cache: new ContentCache(fs, STATE_DIR),
      batchSteps: 1,
    };
    const lost: string[] = [];
    await applySteps(steps, ctx, (applied) => {
      handedKinds.push(applied.result.kind);
      // The root answers again from the second batch on.
      failing = new Set();
      const left = model.afterPowerCut();
      if (applied.result.kind === 'written' && applied.step.kind === 'write') {
        if (left[applied.step.path] !== `640 ${applied.step.instance.id}\n`) lost.push(applied.step.path);
      }
    });
    expect(handedKinds).toEqual(['failed', 'written']);
    expect(lost).toEqual([]);
  });
  it.each([
    ['ENOSPC', 'every time'],
    ['EACCES', 'every time'],
    ['ENOSPC', 'once'],
  ])(
    'a new directory whose mkdir fails (%s, %s): the files waiting for it are each judged on their own, none hangs, none lost',
    async (code, how) => {
      const base = memfsPort(vol);
      const model = await PowerCutFs.over(base, ROOT);
      let left = how === 'once' ? 1 : Number.POSITIVE_INFINITY;
      const fs: FsPort = {
        ...model.fs,
        mkdir: (async (...args: Parameters<FsPort['mkdir']>) => {
          if (path.relative(ROOT, String(args[0])) === 'shared' && left > 0) {
            left -= 1;
            throw Object.assign(new Error(code), { code });
          }
          return model.fs.mkdir(...args);
        }) as FsPort['mkdir'],
      };
      const steps = Array.from({ length: 16 }, (_, i) => write(`cfg_${i}`, `shared/f${i}.json`));
      const { outcome, lost } = await run(steps, model, fs, 16);
      const kinds = outcome.applied.map((applied) => applied.result.kind);
      if (how === 'once') {
        expect(kinds.filter((kind) => kind === 'failed')).toHaveLength(1);
        expect(kinds.filter((kind) => kind === 'written')).toHaveLength(15);
      } else {
        expect(kinds).toEqual(steps.map(() => 'failed'));
        expect(vol.existsSync(path.join(ROOT, 'shared'))).toBe(false);
      }
      expect(lost).toEqual([]);
    },
  );

  describe('a new directory removed by the rollback of the publish that made it (its write failed)', () => {
    /** `fs` whose first rename into `new/` fails (ENOSPC); `removed` settles once `new` is rmdir'ed. */
    function rollbackFs(base: FsPort) {
      let renames = 0;
      let settle: () => void = () => undefined;
      const removed = new Promise<void>((resolve) => (settle = resolve));
      const fs: FsPort = {
        ...base,
        rename: (async (...args: Parameters<FsPort['rename']>) => {
          if (path.dirname(String(args[1])) === path.join(ROOT, 'new') && renames++ === 0)
            throw Object.assign(new Error('ENOSPC'), { code: 'ENOSPC' });
          return base.rename(...args);
        }) as FsPort['rename'],
        rmdir: (async (...args: Parameters<FsPort['rmdir']>) => {
          await base.rmdir(...args);
          if (String(args[0]) === path.join(ROOT, 'new')) settle();
        }) as FsPort['rmdir'],
      };
      return { fs, removed };
    }

    beforeEach(() => {
      // Sealed (the agent's, 0755): the batch trusts the directories it found or made there without a lookup.
      vol.chmodSync(ROOT, 0o755);
    });

    it('a later write of the batch below it makes it again and lands in that pass, its chain durable', async () => {
      const base = memfsPort(vol);
      const model = await PowerCutFs.over(base, ROOT);
      const { fs, removed } = rollbackFs(model.fs);
      const b = write('cfg_b', 'new/deeper/b.json');
      // cfg_b's bytes were set aside by the pull: it starts once they are read back, after cfg_a's rollback.
      const cache = new (class extends ContentCache {
        override async get(sha256: string): Promise<Buffer | undefined> {
          await removed;
          return sha256 === b.sha256 ? Buffer.from('cfg_b\n') : undefined;
        }
      })(fs, STATE_DIR);
      const { data: _data, ...setAside } = b;
      const steps = [write('cfg_a', 'new/a.json'), { ...setAside, size: 6 }];
      const handed: AppliedStep[] = [];
      const lost: string[] = [];
      const ctx: ApplyContext = {
        fs,
        logger: silentLogger(),
        rootDir: ROOT,
        fileMode: 0o640,
        dirMode: 0o750,
        files: new Map(),
        cache,
        batchSteps: 16,
      };
      await applySteps(steps, ctx, (applied) => {
        handed.push(applied);
        const left = model.afterPowerCut();
        if (applied.result.kind === 'written' && left[b.path] !== '640 cfg_b\n') lost.push(b.path);
      });
      expect(handed.map((applied) => applied.result.kind)).toEqual(['failed', 'written']);
      expect(vol.readdirSync(path.join(ROOT, 'new'))).toEqual(['deeper']);
      expect(vol.readFileSync(path.join(ROOT, b.path), 'utf8')).toBe('cfg_b\n');
      expect(lost).toEqual([]);
      expect(model.afterPowerCut()).toEqual({
        new: 'dir',
        'new/deeper': 'dir',
        'new/deeper/b.json': '640 cfg_b\n',
      });
    });

    it('a write of the batch already on its way into it when it goes is made again, not failed', async () => {
      const base = memfsPort(vol);
      const model = await PowerCutFs.over(base, ROOT);
      const { fs: rollingBack, removed } = rollbackFs(model.fs);
      // The second temp file created in `new/` waits until the first publish's rollback removed `new`.
      let temps = 0;
      const fs: FsPort = {
        ...rollingBack,
        open: (async (...args: Parameters<FsPort['open']>) => {
          const target = String(args[0]);
          const temp =
            path.dirname(target) === path.join(ROOT, 'new') && path.basename(target).startsWith(TEMP_PREFIX);
          if (temp && ++temps === 2) await removed;
          return rollingBack.open(...args);
        }) as FsPort['open'],
      };
      const { outcome, lost } = await run(
        [write('cfg_a', 'new/a.json'), write('cfg_b', 'new/b.json')],
        model,
        fs,
        16,
      );
      const kinds = outcome.applied.map((applied) => applied.result.kind).sort();
      expect(kinds).toEqual(['failed', 'written']);
      const landed = outcome.applied.find((applied) => applied.result.kind === 'written')!.step as WriteStep;
      const name = path.basename(landed.path);
      expect(vol.readdirSync(path.join(ROOT, 'new'))).toEqual([name]);
      expect(lost).toEqual([]);
      expect(model.afterPowerCut()[landed.path]).toBe(`640 ${landed.instance.id}\n`);
    });
  });

  describe('a directory whose fsync failed (EIO) once and then succeeds (Linux reports a writeback error once)', () => {
    /**
     * The model's fs with the process's DirectorySyncLedger, whose next fsync of each directory in `failing`
     * (relative to the root) fails with EIO and drops what changed in it since its last good fsync, as the
     * kernel may; every later one succeeds.
     */
    async function failingOnce(model: PowerCutFs, failing: Set<string>): Promise<FsPort> {
      const base = model.fs;
      const ledger = new DirectorySyncLedger();
      // As StateDir.open does: renewals record their aside names in the state directory first.
      ledger.keepAsidesIn(
        await DirectoryAsides.open(base, STATE_DIR, ROOT, ledger, silentLogger(), {
          euid: process.geteuid?.() ?? -1,
          clock: { now: () => 0 },
        }),
      );
      return {
        ...base,
        directorySyncs: ledger,
        open: (async (...args: Parameters<FsPort['open']>) => {
          const handle: FileHandle = await base.open(...args);
          const target = String(args[0]);
          return new Proxy(handle, {
            get(inner, property) {
              const value = Reflect.get(inner, property) as unknown;
              if (property === 'sync') {
                return async () => {
                  const relative = path.relative(ROOT, target);
                  if ((await inner.stat()).isDirectory() && failing.delete(relative)) {
                    await model.dropUnsynced(target);
                    throw Object.assign(new Error('EIO'), { code: 'EIO' });
                  }
                  return inner.sync();
                };
              }
              return typeof value === 'function' ? (value as () => unknown).bind(inner) : value;
            },
          });
        }) as FsPort['open'],
      };
    }

    beforeEach(() => {
      vol.chmodSync(ROOT, 0o755);
      vol.mkdirSync(path.join(ROOT, 'top'), { mode: 0o755 });
    });

    it('a file renamed in before the failure is published again, not taken as in place, before it is handed on', async () => {
      const model = await PowerCutFs.over(memfsPort(vol), ROOT);
      const fs = await failingOnce(model, new Set(['top']));
      const first = await run([write('cfg_a', 'top/a.json')], model, fs, 5);
      expect(first.outcome.applied.map((applied) => applied.result.kind)).toEqual(['failed']);
      // The bytes are in place; the fsync of `top` now succeeds, but the dropped entry is not on disk.
      const { outcome, lost } = await run([write('cfg_a', 'top/a.json')], model, fs, 5);
      expect(outcome.applied.map((applied) => applied.result.kind)).toEqual(['written']);
      expect(lost).toEqual([]);
      expect(model.afterPowerCut()['top/a.json']).toBe('640 cfg_a\n');
    });

    it('a directory made before the failure is renewed (renamed aside and back) before a file below it is handed on', async () => {
      const model = await PowerCutFs.over(memfsPort(vol), ROOT);
      const fs = await failingOnce(model, new Set(['top']));
      const first = await run([write('cfg_a', 'top/new/a.json')], model, fs, 5);
      expect(first.outcome.applied.map((applied) => applied.result.kind)).toEqual(['failed']);
      const { outcome, lost } = await run(
        [write('cfg_a', 'top/new/a.json'), write('cfg_b', 'top/new/b.json')],
        model,
        fs,
        5,
      );
      expect(outcome.applied.map((applied) => applied.result.kind).sort()).toEqual(['unchanged', 'written']);
      expect(lost).toEqual([]);
      expect(model.afterPowerCut()).toMatchObject({
        'top/new': 'dir',
        'top/new/a.json': '640 cfg_a\n',
        'top/new/b.json': '640 cfg_b\n',
      });
      expect(vol.readdirSync(path.join(ROOT, 'top'))).toEqual(['new']);
    });

    it('a directory that cannot be renewed (a mount point: EBUSY) keeps its files back, and the rest of the batch lands', async () => {
      const model = await PowerCutFs.over(memfsPort(vol), ROOT);
      const failing = await failingOnce(model, new Set(['top']));
      const first = await run([write('cfg_a', 'top/new/a.json')], model, failing, 5);
      expect(first.outcome.applied.map((applied) => applied.result.kind)).toEqual(['failed']);
      const fs: FsPort = {
        ...failing,
        rename: (async (...args: Parameters<FsPort['rename']>) => {
          if (String(args[0]) === path.join(ROOT, 'top/new'))
            throw Object.assign(new Error('EBUSY'), { code: 'EBUSY' });
          return failing.rename(...args);
        }) as FsPort['rename'],
      };
      const steps = [write('cfg_a', 'top/new/a.json'), write('cfg_b', 'b.json')];
      const { outcome, lost } = await run(steps, model, fs, 5);
      expect(outcome.applied.map((applied) => applied.result.kind)).toEqual(['failed', 'written']);
      expect(lost).toEqual([]);
      expect(model.afterPowerCut()['b.json']).toBe('640 cfg_b\n');
    });

    it("a swap (run alone) below a directory that cannot be renewed (EBUSY) fails as the disk's condition, not an attempt", async () => {
      vol.writeFileSync(path.join(ROOT, 'old.json'), 'old\n', { mode: 0o640 });
      const model = await PowerCutFs.over(memfsPort(vol), ROOT);
      const failing = await failingOnce(model, new Set(['top']));
      const first = await run([write('cfg_a', 'top/new/a.json')], model, failing, 5);
      expect(first.outcome.applied.map((applied) => applied.result.kind)).toEqual(['failed']);
      const fs: FsPort = {
        ...failing,
        rename: (async (...args: Parameters<FsPort['rename']>) => {
          if (String(args[0]) === path.join(ROOT, 'top/new'))
            throw Object.assign(new Error('EBUSY'), { code: 'EBUSY' });
          return failing.rename(...args);
        }) as FsPort['rename'],
      };
      const files: ApplyContext['files'] = new Map([
        [
          'old.json',
          {
            instanceId: 'cfg_old',
            sha256: sha256Hex(Buffer.from('old\n')),
            mode: 0o640,
            createdDirs: [],
            writtenAt: '2026-01-01T00:00:00.000Z',
          },
        ],
      ]);
      const swap: WriteStep = {
        ...write('cfg_a', 'top/new/a.json'),
        displaces: [
          {
            kind: 'remove',
            instance: makeInstance({
              id: 'cfg_old',
              relative_filepath: 'old.json',
              target_status: 'removed',
            }),
            path: 'old.json',
            report: { activity_status: 'removed', error_status: 'none' },
          },
        ],
      };
      const { outcome, lost } = await run([swap], model, fs, 5, files);
      const [applied] = outcome.applied;
      expect(applied?.result.kind).toBe('failed');
      // Before: the publish threw the rename's EBUSY, an attempt each pass until `failed` for good; as in a batch,
      // the file is now held back as not durable (its directory's entry dropped): the disk's condition, retried.
      expect(applied?.result.kind === 'failed' && rootConditionOf(applied.result.error)).toBe('failing');
      expect(lost).toEqual([]);
    });

    it.each([
      ['a file a local user put at the name since (EEXIST)', 'EEXIST'],
      ['a failing disk (EIO)', 'EIO'],
    ] as const)(
      'a removal whose unlink the failure dropped, renewed while %s: never handed on as removed, nothing of theirs removed',
      async (_, errno) => {
        vol.writeFileSync(path.join(ROOT, 'top/old.json'), 'old\n', { mode: 0o640 });
        const model = await PowerCutFs.over(memfsPort(vol), ROOT);
        const failing = await failingOnce(model, new Set(['top']));
        const target = path.join(ROOT, 'top/old.json');
        const renewal = { meets: false };
        const fs: FsPort = {
          ...failing,
          mkdir: (async (...args: Parameters<FsPort['mkdir']>) => {
            if (renewal.meets && String(args[0]) === target) {
              if (errno === 'EEXIST') vol.writeFileSync(target, 'theirs\n');
              else throw Object.assign(new Error(`${errno}: mkdir`), { code: errno });
            }
            return failing.mkdir(...args);
          }) as FsPort['mkdir'],
        };
        const removal: RemoveStep = {
          kind: 'remove',
          instance: makeInstance({
            id: 'cfg_old',
            relative_filepath: 'top/old.json',
            target_status: 'removed',
          }),
          path: 'top/old.json',
          report: { activity_status: 'removed', error_status: 'none' },
        };
        const ctx: ApplyContext = {
          fs,
          logger: silentLogger(),
          rootDir: ROOT,
          fileMode: 0o640,
          dirMode: 0o750,
          files: new Map([
            [
              'top/old.json',
              {
                instanceId: 'cfg_old',
                sha256: sha256Hex(Buffer.from('old\n')),
                mode: 0o640,
                size: 4,
                createdDirs: [],
                writtenAt: '2026-01-01T00:00:00.000Z',
              },
            ],
          ]),
          cache: new ContentCache(fs, STATE_DIR),
        };
        const first = await applySteps([removal], ctx, () => undefined);
        expect(first.applied.map((applied) => applied.result.kind)).toEqual(['failed']);
        renewal.meets = true;
        const second = await applySteps([removal], ctx, () => undefined);
        // Reported failed (retrying), with what stopped it: the entry still unsettled, or the mkdir's own failure.
        expect(second.applied.map((applied) => applied.result)).toMatchObject([
          {
            kind: 'failed',
            error:
              errno === 'EEXIST'
                ? { code: 'disk_error', operation: expect.stringMatching(/an earlier fsync of it failed/) }
                : { code: 'disk_error', operation: 'create directory', errno: 'EIO' },
          },
        ]);
        if (errno === 'EEXIST') expect(String(vol.readFileSync(target))).toBe('theirs\n');
        else expect(vol.existsSync(target)).toBe(false);
      },
    );

    it('a removal whose unlink the failure dropped is made again before it is handed on as removed', async () => {
      vol.writeFileSync(path.join(ROOT, 'top/old.json'), 'old\n', { mode: 0o640 });
      const model = await PowerCutFs.over(memfsPort(vol), ROOT);
      const fs = await failingOnce(model, new Set(['top']));
      const files: ApplyContext['files'] = new Map([
        [
          'top/old.json',
          {
            instanceId: 'cfg_old',
            sha256: sha256Hex(Buffer.from('old\n')),
            mode: 0o640,
            size: 4,
            createdDirs: [],
            writtenAt: '2026-01-01T00:00:00.000Z',
          },
        ],
      ]);
      const removal: RemoveStep = {
        kind: 'remove',
        instance: makeInstance({
          id: 'cfg_old',
          relative_filepath: 'top/old.json',
          target_status: 'removed',
        }),
        path: 'top/old.json',
        report: { activity_status: 'removed', error_status: 'none' },
      };
      const ctx: ApplyContext = {
        fs,
        logger: silentLogger(),
        rootDir: ROOT,
        fileMode: 0o640,
        dirMode: 0o750,
        files,
        cache: new ContentCache(fs, STATE_DIR),
      };
      const resurrected: string[] = [];
      const onApplied = (applied: AppliedStep) => {
        if (applied.result.kind === 'removed' && model.afterPowerCut()['top/old.json'] !== undefined)
          resurrected.push('top/old.json');
      };
      const first = await applySteps([removal], ctx, onApplied);
      expect(first.applied.map((applied) => applied.result.kind)).toEqual(['failed']);
      const second = await applySteps([removal], ctx, onApplied);
      expect(second.applied.map((applied) => applied.result.kind)).toEqual(['removed']);
      expect(resurrected).toEqual([]);
      expect(vol.readdirSync(path.join(ROOT, 'top'))).toEqual([]);
    });
  });

  it('a symlink a local user plants where a new directory goes: no waiting file is written through it', async () => {
    const base = memfsPort(vol);
    const model = await PowerCutFs.over(base, ROOT);
    vol.mkdirSync('/elsewhere');
    const fs: FsPort = {
      ...model.fs,
      mkdir: (async (...args: Parameters<FsPort['mkdir']>) => {
        if (path.relative(ROOT, String(args[0])) === 'shared' && !vol.existsSync(path.join(ROOT, 'shared'))) {
          vol.symlinkSync('/elsewhere', path.join(ROOT, 'shared'));
        }
        return model.fs.mkdir(...args);
      }) as FsPort['mkdir'],
    };
    const steps = Array.from({ length: 8 }, (_, i) => write(`cfg_${i}`, `shared/f${i}.json`));
    const { outcome } = await run(steps, model, fs, 8);
    expect(outcome.applied.map((applied) => applied.result.kind)).toEqual(steps.map(() => 'failed'));
    expect(vol.readdirSync('/elsewhere')).toEqual([]);
  });
  it('a swap writing into directories a killed run made (their entries never fsynced): its file survives a power cut once handed on', async () => {
    vol.writeFileSync(path.join(ROOT, 'old.json'), 'old\n', { mode: 0o640 });
    const base = memfsPort(vol);
    const model = await PowerCutFs.over(base, ROOT);
    vol.mkdirSync(path.join(ROOT, 'x/y'), { recursive: true });
    const files: ApplyContext['files'] = new Map([
      [
        'old.json',
        {
          instanceId: 'cfg_old',
          sha256: sha256Hex(Buffer.from('old\n')),
          mode: 0o640,
          createdDirs: [],
          writtenAt: '2026-01-01T00:00:00.000Z',
        },
      ],
    ]);
    const swap: WriteStep = {
      ...write('cfg_new', 'x/y/new.json'),
      displaces: [
        {
          kind: 'remove',
          instance: makeInstance({ id: 'cfg_old', relative_filepath: 'old.json', target_status: 'removed' }),
          path: 'old.json',
          report: { activity_status: 'removed', error_status: 'none' },
        },
      ],
    };
    const { outcome, lost } = await run([swap], model, model.fs, 5, files);
    expect(outcome.applied.map((applied) => applied.result.kind)).toEqual(['written']);
    expect(vol.existsSync(path.join(ROOT, 'old.json'))).toBe(false);
    expect(lost).toEqual([]);
  });
});
