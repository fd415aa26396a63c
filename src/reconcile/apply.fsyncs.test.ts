// What applySteps costs the disk, counted (memfs): one fsync per written file, and per batch one fsync of each
// directory that got a file, however many files it got; a swap or a removal makes its own directory durable.
import path from 'node:path';
import { Volume } from 'memfs';
import { beforeEach, describe, expect, it } from 'vitest';
import { instanceFactory } from '../../test/helpers/instances.js';
import { memfsPort } from '../../test/helpers/memfs.js';
import { writeStep as write } from '../../test/helpers/write-steps.js';
import type { FileHandle, FsPort } from '../lib/fs-port.js';
import { sha256Hex } from '../lib/hash.js';
import { silentLogger } from '../lib/logger.js';
import { ContentCache } from '../store/content-cache.js';
import type { ManagedFile } from '../store/state.js';
import { type ApplyContext, applySteps, BATCH_STEPS } from './apply.js';
import type { RemoveStep, Step, WriteStep } from './plan.js';

const ROOT = '/srv/config';
const STATE_DIR = '/var/lib/config-agent';
const makeInstance = instanceFactory({ relative_filepath: 'app.json' });

let vol: InstanceType<typeof Volume>;
let files: Map<string, ManagedFile>;
/** fsyncs by what was synced: a directory by its path under the root ('.' for the root), a file as 'file'. */
let fsyncs: Map<string, number>;
let ctx: ApplyContext;

/** memfs whose handles count their fsyncs; a handle opened on a directory under the root counts as it. */
function countingFs(base: FsPort): FsPort {
  return {
    ...base,
    open: (async (...args: Parameters<FsPort['open']>) => {
      const handle: FileHandle = await base.open(...args);
      const target = String(args[0]);
      const sync = handle.sync.bind(handle);
      handle.sync = async () => {
        const isDirectory = (await handle.stat()).isDirectory();
        const key = !isDirectory ? 'file' : path.relative(ROOT, target) || '.';
        if (isDirectory && target.startsWith(STATE_DIR)) return sync();
        fsyncs.set(key, (fsyncs.get(key) ?? 0) + 1);
        return sync();
      };
      return handle;
    }) as FsPort['open'],
  };
}

beforeEach(() => {
  vol = new Volume();
  for (const dir of ['a', 'b', 'c']) vol.mkdirSync(path.join(ROOT, dir), { recursive: true });
  vol.mkdirSync(STATE_DIR, { recursive: true });
  files = new Map();
  fsyncs = new Map();
  const fs = countingFs(memfsPort(vol));
  ctx = {
    fs,
    logger: silentLogger(),
    rootDir: ROOT,
    fileMode: 0o640,
    dirMode: 0o750,
    files,
    cache: new ContentCache(fs, STATE_DIR),
  };
});

function managed(id: string, relative: string, text: string): void {
  vol.writeFileSync(path.join(ROOT, relative), text, { mode: 0o640 });
  files.set(relative, {
    instanceId: id,
    sha256: sha256Hex(Buffer.from(text)),
    mode: 0o640,
    createdDirs: [],
    writtenAt: '2026-01-01T00:00:00.000Z',
  });
}

function remove(id: string, relative: string): RemoveStep {
  return {
    kind: 'remove',
    instance: makeInstance({ id, relative_filepath: relative, target_status: 'removed' }),
    path: relative,
    report: { activity_status: 'removed', error_status: 'none' },
  };
}

const many = (dir: string, count: number): WriteStep[] =>
  Array.from({ length: count }, (_, i) => write(`cfg_${dir}${i}`, `${dir}/f${i}.json`, `${dir}${i}\n`));

async function apply(steps: readonly Step[]) {
  const outcome = await applySteps(steps, ctx, () => undefined);
  expect(outcome.aborted).toBe(false);
  expect(outcome.applied.map((applied) => applied.result.kind)).toEqual(
    steps.map((step) => (step.kind === 'remove' ? 'removed' : 'written')),
  );
  return Object.fromEntries([...fsyncs].sort(([x], [y]) => x.localeCompare(y)));
}

describe('applySteps: fsyncs', () => {
  it('a batch of new files: one fsync each, and one per directory that got any', async () => {
    expect(await apply([...many('a', 10), ...many('b', 5)])).toEqual({ file: 15, a: 1, b: 1, '.': 1 });
    expect(vol.readdirSync(path.join(ROOT, 'a'))).toHaveLength(10);
  });

  it('past one batch, each batch fsyncs its own directories before its steps are handed on', async () => {
    // One file more than a batch takes: two batches, two fsyncs of the directory.
    expect(await apply(many('a', BATCH_STEPS + 1))).toEqual({ file: BATCH_STEPS + 1, a: 2, '.': 1 });
    expect(vol.readdirSync(path.join(ROOT, 'a'))).toHaveLength(BATCH_STEPS + 1);
  });

  it('ten new directories in one new parent: the parent fsynced once for its ten entries, not once per directory made', async () => {
    const steps = Array.from({ length: 10 }, (_, i) => write(`cfg_n${i}`, `n/d${i}/f.json`, `n${i}\n`));
    const counted = await apply(steps);
    // Before: n ten times (each publish fsynced the parent of each directory it made, at once).
    expect(counted).toEqual({
      file: 10,
      '.': 1,
      n: 1,
      ...Object.fromEntries(Array.from({ length: 10 }, (_, i) => [`n/d${i}`, 1])),
    });
    expect(vol.readdirSync(path.join(ROOT, 'n'))).toHaveLength(10);
  });

  it('sixteen files into one new directory: it is made once, not tried by each publish in flight', async () => {
    const steps = Array.from({ length: 16 }, (_, i) => write(`cfg_m${i}`, `m/d/f${i}.json`, `m${i}\n`));
    const made = new Map<string, number>();
    // A root only the agent's user can write to (memfs makes directories 0777): the chain below it is stable.
    vol.chmodSync(ROOT, 0o755);
    const base = ctx.fs;
    ctx = {
      ...ctx,
      fs: {
        ...base,
        mkdir: (async (...args: Parameters<FsPort['mkdir']>) => {
          const key = path.relative(ROOT, String(args[0]));
          made.set(key, (made.get(key) ?? 0) + 1);
          return base.mkdir(...args);
        }) as FsPort['mkdir'],
      },
    };
    await apply(steps);
    // Before: each of the 16 publishes in flight found `m/d` missing and tried it (15 EEXIST, each then opened).
    expect(Object.fromEntries(made)).toEqual({ m: 1, 'm/d': 1 });
    expect(vol.readdirSync(path.join(ROOT, 'm/d'))).toHaveLength(16);
  });

  it('a removal whose file is already gone (a crash or a failed fsync after the unlink) still fsyncs its directory before it is reported', async () => {
    managed('cfg_gone', 'b/gone.json', 'gone\n');
    vol.unlinkSync(path.join(ROOT, 'b/gone.json'));

    // The unlink may still be only in memory: a power cut would bring the file back after `removed` was sent.
    expect(await apply([remove('cfg_gone', 'b/gone.json')])).toEqual({ b: 1 });
  });

  it('a swap and a removal are not batched: each makes its own directory durable', async () => {
    managed('cfg_old', 'c/old.json', 'old\n');
    managed('cfg_gone', 'b/gone.json', 'gone\n');
    const swap = write('cfg_new', 'c/new.json', 'new\n', { displaces: [remove('cfg_old', 'c/old.json')] });

    const counted = await apply([...many('a', 2), swap, remove('cfg_gone', 'b/gone.json')]);

    // c twice: the new file's entry is durable before the old file goes, and the removal before it is reported.
    // The root twice: for a's entry with the first batch, for c's with the swap (its chain, review18).
    expect(counted).toEqual({ file: 3, a: 1, b: 1, c: 2, '.': 2 });
    expect(vol.existsSync(path.join(ROOT, 'c/old.json'))).toBe(false);
    expect(vol.existsSync(path.join(ROOT, 'b/gone.json'))).toBe(false);
  });
});
