// The changed paths of a hook run that was not started (its process before still stuck, its program's check hung)
// are handed to that hook's next run that starts, bounded: stand-in processes and checks under fake timers.
import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import { GIVE_UP_MS, hookWorld as world } from '../../test/helpers/hook-system.js';
import { type HookSpec, MAX_OWED_PATHS, runHooks } from './hooks.js';

const stuckHook: HookSpec = { match: 'nfs/**', run: ['stuck'], timeoutSeconds: 1 };
const nextHook: HookSpec = { match: '**', run: ['next'], timeoutSeconds: 1 };

beforeEach(() => {
  vi.useFakeTimers();
});
afterEach(() => {
  vi.useRealTimers();
});

describe('a run refused while the hook process before it is stuck', () => {
  it('keeps its paths and hands them to the next run that starts, once that process has ended, with no new change', async () => {
    const { system, options, cleared } = world();
    const first = runHooks([stuckHook, nextHook], ['nfs/a.conf'], options);
    await vi.advanceTimersByTimeAsync(GIVE_UP_MS);
    expect((await first)[0]?.abandoned?.pid).toBe(1001);

    // Refused twice while pid 1001 is stuck: b, then c and b again.
    for (const batch of [['nfs/b.conf'], ['nfs/c.conf', 'nfs/b.conf']]) {
      const refused = runHooks([stuckHook, nextHook], batch, options);
      await vi.advanceTimersByTimeAsync(10);
      expect((await refused)[0]?.error).toMatch(/pid 1001, stuck\) is still there/);
    }
    // A batch that changes nothing of its own is no run of it (nor a second failure): it is still held back.
    const held = runHooks([stuckHook, nextHook], ['other.conf'], options);
    await vi.advanceTimersByTimeAsync(10);
    expect((await held).map((run) => run.argv[0])).toEqual(['next']);
    expect(cleared()).toBe(0);

    // The stuck process ends (the mount came back): the daemon is told, and its next run, with no change of
    // its own, runs the hook with what the refused runs were given.
    system.release(1001);
    expect(cleared()).toBe(1);
    const after = runHooks([stuckHook, nextHook], [], options);
    await vi.advanceTimersByTimeAsync(GIVE_UP_MS);
    const [owedRun] = await after;
    expect(owedRun?.changedPaths).toEqual(['nfs/b.conf', 'nfs/c.conf']);
    const pid = owedRun?.abandoned?.pid;
    expect(pid).toBeDefined();
    expect(system.changed.get(pid ?? 0)).toEqual({ list: ['nfs/b.conf', 'nfs/c.conf'], truncated: false });
    expect(system.started.filter((started) => started.startsWith('stuck:'))).toHaveLength(2);
  });

  it('keeps at most MAX_OWED_PATHS paths and tells the run its list is incomplete', async () => {
    const { system, options } = world();
    const first = runHooks([stuckHook], ['nfs/a.conf'], options);
    await vi.advanceTimersByTimeAsync(GIVE_UP_MS);
    await first;
    const many = Array.from({ length: MAX_OWED_PATHS + 10 }, (_, i) => `nfs/${i}.conf`);
    const refused = runHooks([stuckHook], many, options);
    await vi.advanceTimersByTimeAsync(10);
    await refused;
    system.release(1001);
    const after = runHooks([stuckHook], ['nfs/last.conf'], options);
    await vi.advanceTimersByTimeAsync(GIVE_UP_MS);
    const [run] = await after;
    const seen = system.changed.get(run?.abandoned?.pid ?? 0);
    expect(seen?.truncated).toBe(true);
    expect(seen?.list).toHaveLength(MAX_OWED_PATHS + 1);
    expect(seen?.list.slice(0, 2)).toEqual(['nfs/0.conf', 'nfs/1.conf']);
    expect(seen?.list.at(-1)).toBe('nfs/last.conf');
  });

  it('owes nothing to a hook a reload removed', async () => {
    const { system, options, hangs } = world();
    const first = runHooks([stuckHook], ['nfs/a.conf'], options);
    await vi.advanceTimersByTimeAsync(GIVE_UP_MS);
    await first;
    const refused = runHooks([stuckHook], ['nfs/b.conf'], options);
    await vi.advanceTimersByTimeAsync(10);
    await refused;
    expect(hangs.owed.size).toBe(1);
    system.release(1001);
    const other = runHooks([nextHook], ['x.conf'], options);
    await vi.advanceTimersByTimeAsync(10);
    const runs = await other;
    expect(runs.map((run) => run.changedPaths)).toEqual([['x.conf']]);
    expect(hangs.owed.size).toBe(0);
  });
});

describe('a run refused while its program check hangs', () => {
  it('hands its paths to the next run that starts once the check answered, and the daemon is told when it does', async () => {
    const { system, options, cleared } = world();
    const hungProgram: HookSpec = { match: 'nfs/**', run: ['/mnt/nfs/reload'], timeoutSeconds: 1 };
    let answer: ((problem: string | undefined) => void) | undefined;
    const checking = {
      ...options,
      programCheckMs: 500,
      vetProgram: (program: string) =>
        program === '/mnt/nfs/reload' && answer === undefined
          ? new Promise<string | undefined>((resolve) => {
              answer = resolve;
            })
          : Promise.resolve(undefined),
    };
    const first = runHooks([hungProgram], ['nfs/a.conf'], checking);
    await vi.advanceTimersByTimeAsync(510);
    expect((await first)[0]?.error).toMatch(/did not answer within 500 ms/);
    const second = runHooks([hungProgram], ['nfs/b.conf'], checking);
    await vi.advanceTimersByTimeAsync(1);
    expect((await second)[0]?.error).toMatch(/an earlier check of it has not answered yet/);
    expect(cleared()).toBe(0);

    answer?.(undefined);
    await vi.advanceTimersByTimeAsync(1);
    expect(cleared()).toBe(1);
    const third = runHooks([hungProgram], [], checking);
    await vi.advanceTimersByTimeAsync(10);
    const [ran] = await third;
    expect(ran?.exitCode).toBe(0);
    expect(system.changed.get(1001)).toEqual({ list: ['nfs/a.conf', 'nfs/b.conf'], truncated: false });
  });
});
