// applySteps across batches (memfs): a batch's directory fsyncs run while the next batch writes, and nothing of
// either is handed on before them; a later write to a path the unsettled batch wrote waits for it.
import { constants } from 'node:fs';
import path from 'node:path';
import { Volume } from 'memfs';
import { beforeEach, describe, expect, it } from 'vitest';
import { memfsPort } from '../../test/helpers/memfs.js';
import { writeStep as write } from '../../test/helpers/write-steps.js';
import type { FsPort } from '../lib/fs-port.js';
import { silentLogger } from '../lib/logger.js';
import { ContentCache } from '../store/content-cache.js';
import { type AppliedStep, type ApplyContext, applySteps } from './apply.js';

const ROOT = '/srv/config';
const STATE_DIR = '/var/lib/config-agent';

let vol: InstanceType<typeof Volume>;
let fs: FsPort;
let ctx: ApplyContext;

beforeEach(() => {
  vol = new Volume();
  vol.mkdirSync(`${ROOT}/a`, { recursive: true });
  vol.mkdirSync(`${ROOT}/b`, { recursive: true });
  vol.mkdirSync(STATE_DIR, { recursive: true });
  fs = memfsPort(vol);
  ctx = {
    fs,
    logger: silentLogger(),
    rootDir: ROOT,
    fileMode: 0o640,
    dirMode: 0o750,
    files: new Map(),
    cache: new ContentCache(fs, STATE_DIR),
    batchSteps: 2,
  };
});

function text(relative: string): string | undefined {
  const absolute = path.join(ROOT, relative);
  return vol.existsSync(absolute) ? (vol.readFileSync(absolute, 'utf8') as string) : undefined;
}

/**
 * The fs with the first fsync of directory `relativeDir` held until `release()`; `held` resolves once it is
 * waiting. `renamed(target)` resolves once a rename onto `target` (relative) has completed.
 */
function holdingDirectorySync(relativeDir: string) {
  const target = path.join(ROOT, relativeDir);
  let release!: () => void;
  const released = new Promise<void>((resolve) => {
    release = resolve;
  });
  let entered!: () => void;
  const held = new Promise<void>((resolve) => {
    entered = resolve;
  });
  let holding = true;
  const renames = new Map<string, () => void>();
  const renamed = (relative: string) =>
    new Promise<void>((resolve) => renames.set(path.join(ROOT, relative), resolve));
  const port: FsPort = {
    ...fs,
    open: (async (file: string, flags: number, mode?: number) => {
      const handle = await fs.open(file, flags, mode);
      if (String(file) !== target || (flags & constants.O_DIRECTORY) === 0 || !holding) return handle;
      holding = false;
      return Object.assign(Object.create(handle) as typeof handle, {
        sync: async () => {
          entered();
          await released;
          return handle.sync();
        },
        close: () => handle.close(),
      });
    }) as FsPort['open'],
    rename: (async (from: string, to: string) => {
      await fs.rename(from, to);
      renames.get(String(to))?.();
    }) as FsPort['rename'],
  };
  return { port, release, held, renamed };
}

async function turns(count: number): Promise<void> {
  for (let i = 0; i < count; i += 1) await new Promise((resolve) => setImmediate(resolve));
}

describe('applySteps: a batch settles while the next one writes', () => {
  it("the next batch's files land while a directory fsync of the one before is held; nothing is handed on before it", async () => {
    const hold = holdingDirectorySync('a');
    const steps = [
      write('cfg_1', 'a/1.json', '1\n'),
      write('cfg_2', 'a/2.json', '2\n'),
      write('cfg_3', 'b/3.json', '3\n'),
      write('cfg_4', 'b/4.json', '4\n'),
    ];
    const handed: AppliedStep[] = [];
    const lastLanded = hold.renamed('b/4.json');

    const running = applySteps(steps, { ...ctx, fs: hold.port }, (applied) => handed.push(applied));
    // Before, the second batch waited for the first one's directory fsyncs: this never resolved.
    await lastLanded;
    expect([text('b/3.json'), text('b/4.json')]).toEqual(['3\n', '4\n']);
    expect(handed).toEqual([]);

    hold.release();
    const outcome = await running;
    expect(outcome.aborted).toBe(false);
    expect(handed.map((applied) => [applied.step.instance.id, applied.result.kind])).toEqual([
      ['cfg_1', 'written'],
      ['cfg_2', 'written'],
      ['cfg_3', 'written'],
      ['cfg_4', 'written'],
    ]);
  }, 5_000);

  it('a write to a path the unsettled batch wrote waits until that batch is handed on', async () => {
    const hold = holdingDirectorySync('a');
    const steps = [
      write('cfg_1', 'a/x.json', 'one\n'),
      write('cfg_2', 'b/y.json', 'y\n'),
      write('cfg_3', 'a/x.json', 'two\n'),
    ];
    const handed: AppliedStep[] = [];

    const running = applySteps(steps, { ...ctx, fs: hold.port }, (applied) => handed.push(applied));
    await hold.held;
    await turns(50);
    expect(text('a/x.json')).toBe('one\n');
    expect(handed).toEqual([]);

    hold.release();
    await running;
    expect(text('a/x.json')).toBe('two\n');
    expect(handed.map((applied) => applied.step.instance.id)).toEqual(['cfg_1', 'cfg_2', 'cfg_3']);
  });

  it('also when a batch between them wrote other paths', async () => {
    const hold = holdingDirectorySync('a');
    const steps = [
      write('cfg_1', 'a/x.json', 'one\n'),
      write('cfg_2', 'b/y.json', 'y\n'),
      write('cfg_3', 'b/z.json', 'z\n'),
      write('cfg_4', 'b/w.json', 'w\n'),
      write('cfg_5', 'a/x.json', 'two\n'),
    ];
    const handed: AppliedStep[] = [];
    const between = hold.renamed('b/w.json');

    const running = applySteps(steps, { ...ctx, fs: hold.port }, (applied) => handed.push(applied));
    await between;
    await turns(50);
    expect(text('a/x.json')).toBe('one\n');
    expect(handed).toEqual([]);

    hold.release();
    await running;
    expect(text('a/x.json')).toBe('two\n');
    expect(handed.map((applied) => applied.step.instance.id)).toEqual([
      'cfg_1',
      'cfg_2',
      'cfg_3',
      'cfg_4',
      'cfg_5',
    ]);
  });
});
