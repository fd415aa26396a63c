// intent27: a hook run's owed paths across the agent's stop, and one run per batch: stand-in processes, fake timers.
import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import { GIVE_UP_MS, hookWorld } from '../../test/helpers/hook-system.js';
import { type HookSpec, owedPathList, owedRecords, restoreOwed } from './hooks.js';

const reload: HookSpec = { match: 'nfs/**', run: ['reload'], timeoutSeconds: 1 };
const stuck: HookSpec = { match: 'nfs/**', run: ['stuck'], timeoutSeconds: 1 };

beforeEach(() => {
  vi.useFakeTimers();
});
afterEach(() => {
  vi.useRealTimers();
});

describe('a batch runs each hook once (intent27)', () => {
  it('one process for a run that ends on its own, none for a run refused while its process is left behind', async () => {
    const world = hookWorld();
    const [ran] = await world.run([reload], ['nfs/a.conf']);
    expect(ran).toMatchObject({ exitCode: 0 });
    expect(world.system.started).toEqual(['reload:1001']);
    expect(world.system.changed.get(1001)).toEqual({ list: ['nfs/a.conf'], truncated: false });

    await world.run([stuck], ['nfs/b.conf'], GIVE_UP_MS);
    const [refused] = await world.run([stuck], ['nfs/c.conf']);
    expect(refused?.error).toMatch(/still there/);
    expect(world.system.started).toEqual(['reload:1001', 'stuck:1002']);
    expect(owedPathList(world.hangs)).toEqual(['nfs/c.conf']);
  });
});

describe("the agent's stop during a hook's run (intent27)", () => {
  it('no stop: a run of owed paths that ends on its own owes nothing after it', async () => {
    const world = hookWorld();
    restoreOwed(world.hangs, [
      { match: reload.match, run: reload.run, paths: ['nfs/b.conf'], truncated: true },
    ]);
    const [ran] = await world.run([reload], ['nfs/c.conf']);
    expect(ran).toMatchObject({ exitCode: 0 });
    expect(world.system.changed.get(1001)).toEqual({ list: ['nfs/b.conf', 'nfs/c.conf'], truncated: true });
    expect(owedRecords(world.hangs)).toEqual([]);
  });

  it('of paths owed to nobody: nothing owed after it', async () => {
    const world = hookWorld();
    const stop = new AbortController();
    const running = world.run([stuck], ['nfs/a.conf'], 10, { signal: stop.signal });
    stop.abort();
    await vi.advanceTimersByTimeAsync(GIVE_UP_MS);
    expect((await running)[0]?.error).toMatch(/aborted/);
    expect(owedPathList(world.hangs)).toEqual([]);
  });

  it.each([false, true])(
    'of owed paths (cut short: %s): owed again as they were, the mark kept',
    async (truncated) => {
      const world = hookWorld();
      restoreOwed(world.hangs, [
        { match: stuck.match, run: stuck.run, paths: ['nfs/b.conf'], ...(truncated ? { truncated } : {}) },
      ]);
      const stop = new AbortController();
      const running = world.run([stuck], [], 10, { signal: stop.signal });
      await vi.advanceTimersByTimeAsync(10);
      expect(world.system.changed.get(1001)).toEqual({ list: ['nfs/b.conf'], truncated });
      stop.abort();
      await vi.advanceTimersByTimeAsync(GIVE_UP_MS);
      expect((await running)[0]?.error).toMatch(/aborted/);
      expect(owedRecords(world.hangs)).toStrictEqual([
        { match: stuck.match, run: stuck.run, paths: ['nfs/b.conf'], ...(truncated ? { truncated } : {}) },
      ]);
    },
  );
});
