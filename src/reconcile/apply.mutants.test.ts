// applySteps on hand-made steps (memfs): what each step returns, aborts, bugs met in a handler, groups, and
// why removals and swaps never share a batch. Assertions are on the returned outcome and the files.
import { constants } from 'node:fs';
import path from 'node:path';
import { Volume } from 'memfs';
import { beforeEach, describe, expect, it } from 'vitest';
import { instanceFactory } from '../../test/helpers/instances.js';
import { memfsPort } from '../../test/helpers/memfs.js';
import { writeStep as write } from '../../test/helpers/write-steps.js';
import type { FsPort } from '../lib/fs-port.js';
import { sha256Hex } from '../lib/hash.js';
import { silentLogger } from '../lib/logger.js';
import { ContentCache } from '../store/content-cache.js';
import type { ManagedFile } from '../store/state.js';
import {
  type AppliedStep,
  type ApplyContext,
  applySteps,
  SET_ASIDE_BYTES_IN_FLIGHT,
  WRITE_CONCURRENCY,
} from './apply.js';
import type { RemoveStep, Step, WriteStep } from './plan.js';

const ROOT = '/srv/config';
const STATE_DIR = '/var/lib/config-agent';
const makeInstance = instanceFactory({ relative_filepath: 'app.json' });

let vol: InstanceType<typeof Volume>;
let fs: FsPort;
let files: Map<string, ManagedFile>;
let ctx: ApplyContext;

beforeEach(() => {
  vol = new Volume();
  vol.mkdirSync(ROOT, { recursive: true });
  vol.mkdirSync(STATE_DIR, { recursive: true });
  fs = memfsPort(vol);
  files = new Map();
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

function remove(id: string, relative: string): RemoveStep {
  return {
    kind: 'remove',
    instance: makeInstance({
      id,
      relative_filepath: relative,
      target_status: 'removed',
      activity_status: 'deployed',
    }),
    path: relative,
    report: { activity_status: 'removed', error_status: 'none' },
  };
}

/** A file on disk as the agent recorded writing it, with the directories it created for it. */
function managed(id: string, relative: string, text: string, createdDirs: string[] = []): void {
  vol.mkdirSync(path.dirname(path.join(ROOT, relative)), { recursive: true });
  vol.writeFileSync(path.join(ROOT, relative), text, { mode: 0o640 });
  files.set(relative, {
    instanceId: id,
    sha256: sha256Hex(Buffer.from(text)),
    mode: 0o640,
    createdDirs,
    writtenAt: '2026-01-01T00:00:00.000Z',
  });
}

function text(relative: string): string | undefined {
  const absolute = path.join(ROOT, relative);
  return vol.existsSync(absolute) ? (vol.readFileSync(absolute, 'utf8') as string) : undefined;
}

/** Runs the steps and returns the outcome plus what `onApplied` was handed, in order. */
async function run(steps: readonly Step[], context: ApplyContext = ctx) {
  const handed: AppliedStep[] = [];
  const outcome = await applySteps(steps, context, (applied) => handed.push(applied));
  return { ...outcome, handed };
}

/** The fs with `hook` run before each call of `op` (its first argument given). */
function hooked(op: 'unlink' | 'open' | 'rename', hook: (target: string) => void): FsPort {
  return {
    ...fs,
    [op]: (async (...args: unknown[]) => {
      hook(String(args[0]));
      return (fs[op] as (...rest: unknown[]) => Promise<unknown>)(...args);
    }) as never,
  };
}

/** The fs with the fsync of directory `relativeDir` under the root failing with EIO. */
function directorySyncFails(relativeDir: string): FsPort {
  const target = path.join(ROOT, relativeDir);
  return {
    ...fs,
    open: (async (file: string, flags: number, mode?: number) => {
      const handle = await fs.open(file, flags, mode);
      if (String(file) !== target || (flags & constants.O_DIRECTORY) === 0) return handle;
      return Object.assign(Object.create(handle) as typeof handle, {
        sync: async () => {
          throw Object.assign(new Error(`EIO: i/o error, fsync '${target}'`), { code: 'EIO' });
        },
        close: () => handle.close(),
      });
    }) as FsPort['open'],
  };
}

describe('applySteps: what each step returns', () => {
  it('steps without a disk effect return `none` with nothing displaced; a run without a signal is not aborted', async () => {
    const instance = makeInstance({ id: 'cfg_1' });
    const steps: Step[] = [
      { kind: 'report', instance, report: undefined, reason: 'archive' },
      { kind: 'confirm', instance, report: undefined },
      { kind: 'keep', instance, reason: 'drift_kept' },
      { kind: 'skip', instance },
      { kind: 'fail', instance, message: 'bad path' },
      { kind: 'refuse', instance, message: 'two owners' },
      { kind: 'wait', instance, until: 5 },
    ];

    const outcome = await run(steps);

    expect(outcome.aborted).toBe(false);
    expect(outcome.applied).toEqual(steps.map((step) => ({ step, result: { kind: 'none' }, displaced: [] })));
    expect(outcome.handed).toEqual(outcome.applied);
    expect(vol.toJSON(ROOT)).toEqual({ [ROOT]: null });
  });

  it('a removal returns `removed` with nothing displaced, and the file is gone', async () => {
    managed('cfg_1', 'conf/app.json', 'old\n', ['conf']);

    const outcome = await run([remove('cfg_1', 'conf/app.json')]);

    expect(outcome).toMatchObject({ aborted: false });
    expect(outcome.applied.map(({ result, displaced }) => ({ result, displaced }))).toEqual([
      { result: { kind: 'removed' }, displaced: [] },
    ]);
    expect(vol.existsSync(`${ROOT}/conf`)).toBe(false);
  });

  it('a write with a group gets that group; without one, the group the process gives it', async () => {
    const outcome = await run([
      write('cfg_1', 'grouped.json', '{}\n', { gid: 65534, mode: 0o640 }),
      write('cfg_2', 'plain.json', '{}\n'),
    ]);

    expect(outcome.applied.map((applied) => applied.result.kind)).toEqual(['written', 'written']);
    expect(vol.statSync(`${ROOT}/grouped.json`).gid).toBe(65534);
    expect(vol.statSync(`${ROOT}/plain.json`).gid).not.toBe(65534);
  });
});

describe('applySteps: stopping', () => {
  it('a signal already aborted: nothing is applied, nothing written, and the outcome says aborted', async () => {
    const controller = new AbortController();
    controller.abort(new Error('agent stopping'));

    const outcome = await run([write('cfg_1', 'app.json', '{}\n')], { ...ctx, signal: controller.signal });

    expect(outcome).toEqual({ applied: [], aborted: true, handed: [] });
    expect(text('app.json')).toBeUndefined();
  });

  it('an abort during a removal: the removal is not handed on, no later step starts, the outcome says aborted', async () => {
    managed('cfg_1', 'one.json', 'one\n');
    const controller = new AbortController();
    const stopping = hooked('unlink', (target) => {
      if (target === `${ROOT}/one.json`) controller.abort(new Error('agent stopping'));
    });
    const failing: FsPort = {
      ...stopping,
      unlink: (async (target: string) => {
        await stopping.unlink(target);
        throw Object.assign(new Error('EINTR: interrupted'), { code: 'EINTR' });
      }) as FsPort['unlink'],
    };

    const outcome = await run([remove('cfg_1', 'one.json'), write('cfg_2', 'two.json', 'two\n')], {
      ...ctx,
      fs: failing,
      signal: controller.signal,
    });

    expect(outcome).toEqual({ applied: [], aborted: true, handed: [] });
    expect(text('two.json')).toBeUndefined();
  });

  it('an abort during the write of a swap: the rollback puts the displaced file back and nothing is handed on', async () => {
    managed('cfg_a', 'a.json', 'a\n');
    const controller = new AbortController();
    const stopping = hooked('open', (target) => {
      if (path.dirname(target) === ROOT && path.basename(target).startsWith('.config-agent'))
        controller.abort(new Error('agent stopping'));
    });

    const outcome = await run(
      [
        write('cfg_b', 'b.json', 'b\n', { displaces: [remove('cfg_a', 'a.json')] }),
        write('cfg_c', 'c.json', 'c\n'),
      ],
      { ...ctx, fs: stopping, signal: controller.signal },
    );

    expect(outcome).toEqual({ applied: [], aborted: true, handed: [] });
    expect(text('a.json')).toBe('a\n');
    expect(text('b.json')).toBeUndefined();
    expect(text('c.json')).toBeUndefined();
  });
});

describe('applySteps: a bug met in a handler costs only its step', () => {
  /** The recorded files, with a lookup that throws for one path: a bug outside what the handlers classify. */
  function brokenAt(broken: string): ReadonlyMap<string, ManagedFile> {
    const map = new Map(files);
    return Object.assign(map, {
      get: (key: string) => {
        if (key === broken) throw new TypeError('state bug');
        return files.get(key);
      },
    });
  }

  it('a removal fails as a removal, a swap as a write; the steps after them still run', async () => {
    managed('cfg_1', 'one.json', 'one\n');
    managed('cfg_a', 'a.json', 'a\n');
    const swap = write('cfg_b', 'b.json', 'b\n', { displaces: [remove('cfg_a', 'a.json')] });

    const outcome = await run([remove('cfg_1', 'one.json'), swap, write('cfg_3', 'three.json', 'three\n')], {
      ...ctx,
      files: brokenAt('one.json'),
    });
    const again = await run([swap], { ...ctx, files: brokenAt('a.json') });

    expect(outcome.aborted).toBe(false);
    expect(outcome.applied[0]).toEqual({
      step: expect.objectContaining({ kind: 'remove', path: 'one.json' }),
      result: { kind: 'failed', error: new TypeError('state bug'), operation: 'remove' },
      displaced: [],
    });
    expect(outcome.applied.slice(1).map((applied) => applied.result.kind)).toEqual(['written', 'written']);
    expect(again.applied).toEqual([
      {
        step: swap,
        result: { kind: 'failed', error: new TypeError('state bug'), operation: 'write' },
        displaced: [],
      },
    ]);
    expect(text('one.json')).toBe('one\n');
    expect(text('three.json')).toBe('three\n');
  });
});

describe('applySteps: removals and swaps run alone', () => {
  it('a removal that prunes the directory it created, then a new file in that directory: the new file is written and owns the directory', async () => {
    managed('cfg_1', 'conf/old.json', 'old\n', ['conf']);

    const outcome = await run([remove('cfg_1', 'conf/old.json'), write('cfg_2', 'conf/new.json', 'new\n')]);

    expect(outcome.applied.map((applied) => applied.result)).toEqual([
      { kind: 'removed' },
      { kind: 'written', sha256: sha256Hex(Buffer.from('new\n')), createdDirs: ['conf'] },
    ]);
    expect(text('conf/old.json')).toBeUndefined();
    expect(text('conf/new.json')).toBe('new\n');
  });

  it('a new file in a directory, then a removal that would prune it: the directory stays with the new file', async () => {
    managed('cfg_1', 'conf/old.json', 'old\n', ['conf']);

    const outcome = await run([write('cfg_2', 'conf/new.json', 'new\n'), remove('cfg_1', 'conf/old.json')]);

    expect(outcome.applied.map((applied) => applied.result)).toEqual([
      { kind: 'written', sha256: sha256Hex(Buffer.from('new\n')), createdDirs: [] },
      { kind: 'removed' },
    ]);
    expect(text('conf/new.json')).toBe('new\n');
  });

  it('a swap that empties a directory, then a new file there: the new file is written and owns the directory', async () => {
    managed('cfg_a', 'conf/a.json', 'a\n', ['conf']);
    const swap = write('cfg_b', 'b.json', 'b\n', { displaces: [remove('cfg_a', 'conf/a.json')] });

    const outcome = await run([swap, write('cfg_c', 'conf/c.json', 'c\n')]);

    expect(outcome.applied.map((applied) => applied.result)).toEqual([
      { kind: 'written', sha256: sha256Hex(Buffer.from('b\n')), createdDirs: [] },
      { kind: 'written', sha256: sha256Hex(Buffer.from('c\n')), createdDirs: ['conf'] },
    ]);
    expect(outcome.applied[0]?.displaced).toEqual([{ step: swap.displaces[0], result: { kind: 'removed' } }]);
    expect(text('conf/c.json')).toBe('c\n');
  });

  it('two swaps, the first emptying a directory the second writes into: the second owns the directory', async () => {
    managed('cfg_a', 'conf/a.json', 'a\n', ['conf']);
    managed('cfg_d', 'd.json', 'd\n');
    const first = write('cfg_b', 'b.json', 'b\n', { displaces: [remove('cfg_a', 'conf/a.json')] });
    const second = write('cfg_c', 'conf/c.json', 'c\n', { displaces: [remove('cfg_d', 'd.json')] });

    const outcome = await run([first, second]);

    expect(outcome.applied.map((applied) => applied.result)).toEqual([
      { kind: 'written', sha256: sha256Hex(Buffer.from('b\n')), createdDirs: [] },
      { kind: 'written', sha256: sha256Hex(Buffer.from('c\n')), createdDirs: ['conf'] },
    ]);
    expect(text('conf/c.json')).toBe('c\n');
    expect(text('d.json')).toBeUndefined();
  });

  it('two removals run one after the other: the first finds its directory still holding the other file and keeps it', async () => {
    managed('cfg_1', 'conf/x.json', 'x\n', ['conf']);
    managed('cfg_2', 'conf/y.json', 'y\n');

    const outcome = await run([remove('cfg_1', 'conf/x.json'), remove('cfg_2', 'conf/y.json')]);

    expect(outcome.applied.map((applied) => applied.result)).toEqual([
      { kind: 'removed' },
      { kind: 'removed' },
    ]);
    // Nobody recorded the directory as created for y.json (record.ts hands it down between steps of a pass).
    expect(vol.existsSync(`${ROOT}/conf`)).toBe(true);
  });

  it('two writes of one path land in plan order: the later one is what stays', async () => {
    vol.writeFileSync(`${ROOT}/app.json`, 'AA\n', { mode: 0o640 });

    const outcome = await run([write('cfg_1', 'app.json', 'BB\n'), write('cfg_2', 'app.json', 'AA\n')]);

    expect(outcome.applied.map((applied) => applied.result.kind)).toEqual(['written', 'written']);
    expect(text('app.json')).toBe('AA\n');
  });
});

describe('applySteps: directories fsynced before anything is handed on', () => {
  it('a batch whose directory cannot be fsynced: its written, unchanged and mode-only files all fail; others land', async () => {
    vol.mkdirSync(`${ROOT}/conf`);
    vol.writeFileSync(`${ROOT}/conf/same.json`, 'same\n', { mode: 0o640 });
    vol.writeFileSync(`${ROOT}/conf/mode.json`, 'mode\n', { mode: 0o600 });

    const outcome = await run(
      [
        write('cfg_1', 'conf/new.json', 'new\n'),
        write('cfg_2', 'conf/same.json', 'same\n', { reason: 'adopt' }),
        write('cfg_3', 'conf/mode.json', 'mode\n', { reason: 'metadata' }),
        write('cfg_4', 'other.json', 'other\n'),
      ],
      { ...ctx, fs: directorySyncFails('conf') },
    );

    expect(outcome.applied.map((applied) => applied.result)).toEqual([
      {
        kind: 'failed',
        error: expect.objectContaining({ errno: 'EIO', operation: 'fsync directory' }),
        operation: 'write',
      },
      {
        kind: 'failed',
        error: expect.objectContaining({ errno: 'EIO', operation: 'fsync directory' }),
        operation: 'write',
      },
      {
        kind: 'failed',
        error: expect.objectContaining({ errno: 'EIO', operation: 'fsync directory' }),
        operation: 'write',
      },
      { kind: 'written', sha256: sha256Hex(Buffer.from('other\n')), createdDirs: [] },
    ]);
  });

  it("a swap whose new file's directory cannot be fsynced is rolled back: the displaced file is put back", async () => {
    managed('cfg_a', 'old/a.json', 'a\n');
    vol.mkdirSync(`${ROOT}/new`);
    const swap = write('cfg_b', 'new/b.json', 'b\n', { displaces: [remove('cfg_a', 'old/a.json')] });

    const outcome = await run([swap], { ...ctx, fs: directorySyncFails('new') });

    expect(outcome.applied).toEqual([
      {
        step: swap,
        result: {
          kind: 'failed',
          error: expect.objectContaining({ errno: 'EIO', operation: 'fsync directory' }),
          operation: 'write',
        },
        displaced: [{ step: swap.displaces[0], result: { kind: 'restored' } }],
      },
    ]);
    expect(text('old/a.json')).toBe('a\n');
  });

  it('a failed swap leaves a displaced file that was kept (changed by someone else) as kept', async () => {
    managed('cfg_a', 'a.json', 'a\n');
    vol.writeFileSync(`${ROOT}/a.json`, 'edited\n');
    vol.mkdirSync(`${ROOT}/new`);
    const swap = write('cfg_b', 'new/b.json', 'b\n', { displaces: [remove('cfg_a', 'a.json')] });

    const outcome = await run([swap], { ...ctx, fs: directorySyncFails('new') });

    expect(outcome.applied[0]?.displaced).toEqual([
      { step: swap.displaces[0], result: { kind: 'kept', message: expect.stringMatching(/changed/) } },
    ]);
    expect(text('a.json')).toBe('edited\n');
  });
});

describe('applySteps: an abort in a batch', () => {
  it('stops starting steps: a step queued behind a full set of writes is not handed on', async () => {
    const controller = new AbortController();
    const stopping = hooked('open', (target) => {
      if (path.basename(target).startsWith('.config-agent')) controller.abort(new Error('agent stopping'));
    });
    const writes = Array.from({ length: WRITE_CONCURRENCY }, (_, i) =>
      write(`cfg_${i}`, `f${i}.json`, `${i}\n`),
    );
    const late: Step = { kind: 'confirm', instance: makeInstance({ id: 'cfg_late' }), report: undefined };

    const outcome = await run([...writes, late], { ...ctx, fs: stopping, signal: controller.signal });

    expect(outcome.aborted).toBe(true);
    expect(outcome.applied).toEqual([]);
    expect(vol.toJSON(ROOT)).toEqual({ [ROOT]: null });
  });
});

describe('applySteps: bytes set aside by the pull are read back a few at a time', () => {
  const LIMIT = 3_000;

  /** A write whose bytes the pull set aside in the content cache (spill.ts): no data, its sha256 and size. */
  async function setAside(id: string, relative: string, data: Buffer): Promise<WriteStep> {
    await ctx.cache.put(data);
    const { data: _inMemory, ...step } = write(id, relative, '');
    return { ...step, sha256: sha256Hex(data), size: data.length };
  }

  /**
   * A context whose fs counts the set-aside bytes read back from the state directory and not yet renamed into
   * place under the root: what the batch holds of them.
   */
  function counting(base: FsPort = fs): { context: ApplyContext; most: () => number } {
    let held = 0;
    let most = 0;
    const counted: FsPort = {
      ...base,
      open: (async (file: string, flags: number, mode?: number) => {
        const handle = await base.open(file, flags, mode);
        // A cache entry opened to be read (content-cache.ts get): its bytes are about to be held.
        const reading = (flags & (constants.O_WRONLY | constants.O_RDWR | constants.O_CREAT)) === 0;
        if (reading && String(file).startsWith(STATE_DIR) && vol.statSync(file).isFile()) {
          held += vol.statSync(file).size;
          most = Math.max(most, held);
        }
        return handle;
      }) as FsPort['open'],
      rename: (async (from: string, to: string) => {
        const size = vol.statSync(from).size;
        await base.rename(from, to);
        if (String(to).startsWith(ROOT)) held -= size;
      }) as FsPort['rename'],
    };
    const context = {
      ...ctx,
      fs: counted,
      cache: new ContentCache(counted, STATE_DIR),
      setAsideBytesInFlight: LIMIT,
    };
    return { context, most: () => most };
  }

  it('never more than the limit at once, and every file written byte for byte', async () => {
    const size = Math.floor(LIMIT / 3) + 1;
    const contents = Array.from({ length: 6 }, (_, i) => Buffer.alloc(size, String(i)));
    const steps = await Promise.all(contents.map((data, i) => setAside(`cfg_${i}`, `big/f${i}.bin`, data)));
    const small = write('cfg_small', 'small.json', 'small\n');
    const counted = counting();

    const outcome = await run([...steps, small], counted.context);

    expect(outcome.applied.map((applied) => applied.result.kind)).toEqual(Array(7).fill('written'));
    contents.forEach((data, i) => {
      expect(vol.readFileSync(`${ROOT}/big/f${i}.bin`)).toEqual(data);
    });
    expect(text('small.json')).toBe('small\n');
    // Two fit (2 × size ≤ the limit), a third would not.
    expect(counted.most()).toBe(2 * size);
  });

  it('by default, SET_ASIDE_BYTES_IN_FLIGHT: a batch of large files holds a few, not WRITE_CONCURRENCY', () => {
    expect(SET_ASIDE_BYTES_IN_FLIGHT).toBeLessThanOrEqual(4 * 3 * 1024 * 1024);
    expect(SET_ASIDE_BYTES_IN_FLIGHT).toBeGreaterThanOrEqual(1024 * 1024);
  });

  it('a file larger than the limit is written alone, not refused', async () => {
    const huge = Buffer.alloc(LIMIT + 1, 'h');
    const other = Buffer.alloc(100, 'o');
    const steps = [
      await setAside('cfg_huge', 'huge.bin', huge),
      await setAside('cfg_other', 'other.bin', other),
    ];
    const counted = counting();

    const outcome = await run(steps, counted.context);

    expect(outcome.applied.map((applied) => applied.result.kind)).toEqual(['written', 'written']);
    expect(vol.readFileSync(`${ROOT}/huge.bin`)).toEqual(huge);
    expect(vol.readFileSync(`${ROOT}/other.bin`)).toEqual(other);
    expect(counted.most()).toBe(huge.length);
  });

  it('an abort while a write waits for room: it is cut off, what landed is handed on', async () => {
    const controller = new AbortController();
    const size = Math.floor(LIMIT / 2) + 1;
    const steps = [
      await setAside('cfg_a', 'a.bin', Buffer.alloc(size, 'a')),
      await setAside('cfg_b', 'b.bin', Buffer.alloc(size, 'b')),
    ];
    // The first write's bytes are in place when the agent is told to stop; the second still waits for room.
    const stopping: FsPort = {
      ...fs,
      rename: (async (from: string, to: string) => {
        await fs.rename(from, to);
        if (String(to) === `${ROOT}/a.bin`) controller.abort(new Error('agent stopping'));
      }) as FsPort['rename'],
    };
    const counted = counting(stopping);

    const outcome = await run(steps, { ...counted.context, signal: controller.signal });

    expect(outcome.aborted).toBe(true);
    expect(vol.existsSync(`${ROOT}/b.bin`)).toBe(false);
    expect(counted.most()).toBe(size);
  });
});
