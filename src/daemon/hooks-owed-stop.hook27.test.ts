// A run of owed paths that the agent's stop ends before it ends on its own still owes them: the stop hands them to
// state.json (agent.ts), and the first run after the restart has them. Stand-in processes under fake timers.
import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import { capturedLogger, fakeSystem } from '../../test/helpers/hook-system.js';
import { type HookSpec, hookHangs, owedPathList, runHooks } from './hooks.js';

const stuckHook: HookSpec = { match: 'nfs/**', run: ['stuck'], timeoutSeconds: 1 };
/** The hook's 1 s timeout, SIGTERM's 100 ms grace, SIGKILL's: a stuck run is given up on by then. */
const GIVE_UP_MS = 1000 + 100 + 100 + 10;

beforeEach(() => {
  vi.useFakeTimers();
});
afterEach(() => {
  vi.useRealTimers();
});

describe('owed paths of a run the stop ends (hook27)', () => {
  it('are owed again, for the stop to hand back', async () => {
    const system = fakeSystem();
    const hangs = hookHangs();
    const options = {
      cwd: '/',
      env: {},
      logger: capturedLogger().logger,
      killGraceMs: 100,
      clock: { monotonic: () => Date.now() },
      processes: system.processes,
      spawn: system.spawn,
      hangs,
    };
    const first = runHooks([stuckHook], ['nfs/a.conf'], options);
    await vi.advanceTimersByTimeAsync(GIVE_UP_MS);
    expect((await first)[0]?.abandoned?.pid).toBe(1001);
    const refused = runHooks([stuckHook], ['nfs/b.conf'], options);
    await vi.advanceTimersByTimeAsync(10);
    expect((await refused)[0]?.error).toMatch(/still there/);
    expect(owedPathList(hangs)).toEqual(['nfs/b.conf']);
    system.release(1001);

    // The run with the owed path starts, and the agent's stop comes while it runs.
    const stop = new AbortController();
    const stopped = runHooks([stuckHook], [], { ...options, signal: stop.signal });
    await vi.advanceTimersByTimeAsync(10);
    expect(system.changed.get(1002)).toEqual({ list: ['nfs/b.conf'], truncated: false });
    stop.abort();
    await vi.advanceTimersByTimeAsync(GIVE_UP_MS);
    expect((await stopped)[0]?.error).toMatch(/aborted/);
    expect(owedPathList(hangs)).toEqual(['nfs/b.conf']);
  });
});
