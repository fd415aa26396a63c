// mut24: what the hook runner keeps between runs (hook26: paths owed by refused runs, processes left behind, program
// checks), pinned where mutants of it survived hook26's own tests: stand-in processes and checks under fake timers.
import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import { fakeSystem, GIVE_UP_MS, hookWorld as world } from '../../test/helpers/hook-system.js';
import { type HookSpec, hookHangs, hookPathsOwed, hooksLeftBehind, MAX_OWED_PATHS } from './hooks.js';

const stuckA: HookSpec = { match: 'a/**', run: ['stuck'], timeoutSeconds: 1 };
const stuckB: HookSpec = { match: 'b/**', run: ['stuck', 'b'], timeoutSeconds: 1 };

beforeEach(() => {
  vi.useFakeTimers();
});
afterEach(() => {
  vi.useRealTimers();
});

describe('the hook runner between runs (mut24)', () => {
  it("one hook's process left behind ending frees that hook only: another's, still there, keeps it refused", async () => {
    const { system, hangs, run } = world();
    const first = await run([stuckA, stuckB], ['a/1.conf', 'b/1.conf'], 2 * GIVE_UP_MS);
    expect(first.map((result) => result.abandoned?.pid)).toEqual([1001, 1002]);
    expect(hooksLeftBehind(hangs, system.processes).map((left) => [left.hook, left.pid])).toEqual([
      ['a/**', 1001],
      ['b/**', 1002],
    ]);

    system.release(1001);
    expect(hooksLeftBehind(hangs, system.processes).map((left) => left.pid)).toEqual([1002]);
    const next = await run([stuckA, stuckB], ['a/2.conf', 'b/2.conf'], GIVE_UP_MS);
    // a's hook ran again (a new process, itself given up on); b's is still held back by pid 1002.
    expect(next[0]?.abandoned?.pid).toBe(1003);
    expect(next[1]?.error).toMatch(/pid 1002, stuck\) is still there/);
    expect(system.started).toEqual(['stuck:1001', 'stuck:1002', 'stuck:1003']);
  });

  it('hands owed paths to one run only: the run after it hears of its own paths, and nothing is owed any more', async () => {
    const { system, hangs, run } = world();
    const quick: HookSpec = { match: 'a/**', run: ['quick'], timeoutSeconds: 1 };
    await run([stuckA], ['a/1.conf'], GIVE_UP_MS);
    await run([stuckA], ['a/2.conf']);
    expect(hookPathsOwed(hangs)).toBe(true);
    system.release(1001);
    // The same hook's glob, now a program that ends: owed paths go to the hook by its key.
    const owedRun = await run([{ ...stuckA, run: ['stuck'] }], ['a/3.conf'], GIVE_UP_MS);
    expect(owedRun[0]?.changedPaths).toEqual(['a/2.conf', 'a/3.conf']);
    expect(hookPathsOwed(hangs)).toBe(false);
    system.release(owedRun[0]?.abandoned?.pid ?? 0);
    const after = await run([stuckA, quick], ['a/4.conf'], GIVE_UP_MS);
    expect(after.map((result) => result.changedPaths)).toEqual([['a/4.conf'], ['a/4.conf']]);
    expect(hookPathsOwed(hangs)).toBe(false);
    expect(hookPathsOwed(hookHangs())).toBe(false);
  });

  it('a path owed again when MAX_OWED_PATHS are owed does not mark the list cut short', async () => {
    const { system, run } = world();
    await run([stuckA], ['a/first.conf'], GIVE_UP_MS);
    const many = Array.from({ length: MAX_OWED_PATHS }, (_, i) => `a/${i}.conf`);
    await run([stuckA], many);
    // Refused again with paths it already owes: the list is still whole.
    await run([stuckA], many.slice(0, 3));
    system.release(1001);
    const [owedRun] = await run([stuckA], [], GIVE_UP_MS);
    const seen = system.changed.get(owedRun?.abandoned?.pid ?? 0);
    expect(seen?.list).toHaveLength(MAX_OWED_PATHS);
    expect(seen?.truncated).toBe(false);
  });

  it('runs no hook whose glob matches nothing changed and nothing owed, and none once the agent is stopping', async () => {
    const { system, run } = world();
    const quick: HookSpec = { match: 'a/**', run: ['quick'], timeoutSeconds: 1 };
    const other: HookSpec = { match: 'b/**', run: ['other'], timeoutSeconds: 1 };
    expect((await run([quick, other], ['a/1.conf'])).map((result) => result.argv[0])).toEqual(['quick']);
    const stopping = new AbortController();
    stopping.abort();
    expect(await run([quick, other], ['a/2.conf', 'b/2.conf'], 10, { signal: stopping.signal })).toEqual([]);
    expect(system.started).toEqual(['quick:1001']);
  });

  it('refuses a run whose program check fails (throws), and leaves no check timer behind once checks answer', async () => {
    const { system, run } = world();
    const checked: HookSpec = { match: 'a/**', run: ['/opt/app/reload'], timeoutSeconds: 1 };
    const broken = await run([checked], ['a/1.conf'], 10, {
      programCheckMs: 500,
      vetProgram: async () => {
        throw new Error('EIO: i/o error, stat');
      },
    });
    expect(broken[0]?.error).toBe('not run: /opt/app/reload: its check failed: EIO: i/o error, stat');
    const fine = await run([checked], ['a/2.conf'], 10, {
      programCheckMs: 500,
      vetProgram: async () => undefined,
    });
    expect(fine[0]?.changedPaths).toEqual(['a/1.conf', 'a/2.conf']);
    expect(system.started).toEqual(['/opt/app/reload:1001']);
    // Each check's deadline is cleared when it answers: nothing left to keep a --once process alive.
    expect(vi.getTimerCount()).toBe(0);
  });

  it('forgets a process left behind that is gone when health asks, though its end was never seen', async () => {
    const { hangs } = world();
    hangs.processes.set('k', {
      match: 'x/**',
      run: ['/x'],
      process: { pid: 4242, ppid: 1, pgrp: 4242, session: 4242, startTime: '7', comm: 'gone', exited: false },
    });
    const table = { ...fakeSystem().processes, get: () => undefined };
    expect(hooksLeftBehind(hangs, table)).toEqual([]);
    expect(hangs.processes.size).toBe(0);
  });

  it('runs once more without the list when exec refuses argv and environment as too large (E2BIG)', async () => {
    const { system, run } = world();
    const quick: HookSpec = { match: 'a/**', run: ['quick'], timeoutSeconds: 1 };
    const tooLarge: typeof system.spawn = (command, args, options) => {
      if ((options.env?.CONFIG_AGENT_CHANGED ?? '') !== '') throw new Error('spawn E2BIG');
      return system.spawn(command, args, options);
    };
    const [result] = await run([quick], ['a/1.conf', 'a/2.conf'], 10, { spawn: tooLarge });
    expect(result?.error).toBeUndefined();
    expect(result?.exitCode).toBe(0);
    expect(system.changed.get(1001)).toEqual({ list: [], truncated: true });
  });
});
