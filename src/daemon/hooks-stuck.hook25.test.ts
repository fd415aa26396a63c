// A hook SIGKILL cannot end (uninterruptible sleep on a hung mount) or whose program check hangs no longer holds the
// hook queue: stand-in processes and checks under fake timers, asserting which runs happened and what was logged.
import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import { GIVE_UP_MS, hookWorld } from '../../test/helpers/hook-system.js';
import { type HookSpec, runHooks } from './hooks.js';

const stuckHook: HookSpec = { match: 'nfs/**', run: ['stuck'], timeoutSeconds: 1 };
const nextHook: HookSpec = { match: '**', run: ['next'], timeoutSeconds: 1 };

beforeEach(() => {
  vi.useFakeTimers();
});
afterEach(() => {
  vi.useRealTimers();
});

describe('a hook SIGKILL cannot end', () => {
  it('is given up on a kill grace after SIGKILL, logged with its pid, and the next hook runs; it does not run again while its process is there', async () => {
    const { system, log, options } = hookWorld();
    const first = runHooks([stuckHook, nextHook], ['nfs/a.conf'], options);
    // Timeout (1 s), SIGTERM, the grace, SIGKILL, the grace again: given up on.
    await vi.advanceTimersByTimeAsync(GIVE_UP_MS);
    const [stuck, next] = await first;
    expect(stuck?.abandoned).toEqual({ pid: 1001, command: 'stuck' });
    expect(stuck?.timedOut).toBe(true);
    expect(stuck?.error).toMatch(/gave up: pid 1001 did not end within 100 ms of SIGKILL/);
    expect(next?.exitCode).toBe(0);
    expect(system.started).toEqual(['stuck:1001', 'next:1002']);
    const given = log.lines().filter((line) => line.msg.startsWith('hook given up on'));
    expect(given).toHaveLength(1);
    expect(given[0]).toMatchObject({ hook: 'nfs/**' });
    expect(given[0]?.msg).toContain('pid 1001');

    // While pid 1001 is still there, the same hook is not started again: failed, saying why; the next one runs.
    const second = runHooks([stuckHook, nextHook], ['nfs/b.conf'], options);
    await vi.advanceTimersByTimeAsync(10);
    const [refused, nextAgain] = await second;
    expect(refused?.error).toMatch(/pid 1001, stuck\) is still there/);
    expect(nextAgain?.exitCode).toBe(0);
    expect(system.started).toEqual(['stuck:1001', 'next:1002', 'next:1003']);

    // Once it has ended (the mount came back), the hook runs again.
    system.release(1001);
    expect(log.lines().some((line) => line.msg.includes('given up on has ended') && line.pid === 1001)).toBe(
      true,
    );
    const third = runHooks([stuckHook], ['nfs/c.conf'], options);
    await vi.advanceTimersByTimeAsync(GIVE_UP_MS);
    const [again] = await third;
    expect(again?.abandoned?.pid).toBe(1004);
    expect(system.started.at(-1)).toBe('stuck:1004');
  });
});

describe('a program check that never answers', () => {
  it('fails the run after its deadline, the next hook runs, and it is not checked again until it answers', async () => {
    const { system, log, options: world } = hookWorld();
    let answer: ((problem: string | undefined) => void) | undefined;
    const hungProgram: HookSpec = { match: 'nfs/**', run: ['/mnt/nfs/reload'], timeoutSeconds: 1 };
    const options = {
      ...world,
      programCheckMs: 500,
      vetProgram: (program: string) =>
        program === '/mnt/nfs/reload'
          ? new Promise<string | undefined>((resolve) => {
              answer = resolve;
            })
          : Promise.resolve(undefined),
    };
    const first = runHooks([hungProgram, nextHook], ['nfs/a.conf'], options);
    await vi.advanceTimersByTimeAsync(510);
    const [hung, next] = await first;
    expect(hung?.error).toMatch(/^not run: \/mnt\/nfs\/reload: its check .* did not answer within 500 ms/);
    expect(next?.exitCode).toBe(0);
    expect(system.started).toEqual(['next:1001']);
    expect(log.lines().some((line) => line.hook === 'nfs/**' && /did not answer/.test(line.msg))).toBe(true);

    // The first check still hangs: the next run is refused at once, without waiting another deadline.
    const second = runHooks([hungProgram, nextHook], ['nfs/b.conf'], options);
    await vi.advanceTimersByTimeAsync(1);
    const [refused] = await second;
    expect(refused?.error).toMatch(/an earlier check of it has not answered yet/);

    // It answers at last: the next run checks again and runs.
    answer?.(undefined);
    await vi.advanceTimersByTimeAsync(1);
    const third = runHooks([hungProgram], ['nfs/c.conf'], {
      ...options,
      vetProgram: () => Promise.resolve(undefined),
    });
    await vi.advanceTimersByTimeAsync(1);
    const [ran] = await third;
    expect(ran?.exitCode).toBe(0);
    expect(system.started).toEqual(['next:1001', 'next:1002', '/mnt/nfs/reload:1003']);
  });
});
