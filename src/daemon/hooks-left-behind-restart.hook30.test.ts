// A hook's process left behind (SIGKILL could not end it) is still held against its hook after the agent restarts
// from a crash or a power cut: state.json keeps its pid and start time, a start takes it back while that process
// runs (not a pid handed out again), health says so, and its end is polled for on the injected clock.
import { describe, expect, it, vi } from 'vitest';
import { HeldClock } from '../../test/helpers/held-daemon.js';
import {
  crashTestConfig,
  crashTestDaemon,
  runnerVolume,
  RUNNER_STATE_PATH as STATE_PATH,
  startThroughTwoPasses,
  stopFaked as stopped,
  untilFaked as until,
} from '../../test/helpers/hook-crash-daemon.js';
import { fakeSystem } from '../../test/helpers/hook-system.js';
import { memfsPort } from '../../test/helpers/memfs.js';
import { PowerCutFs } from '../../test/helpers/power-cut-fs.js';
import { RUNNER_ROOT, StateFileRunner, volumeAfterPowerCut } from '../../test/helpers/state-file-runner.js';
import { fakeTimersEachTest, nextPass, nextPoll, RELOAD_LEFT } from '../../test/helpers/unit-daemon.js';
import type { FsPort } from '../lib/fs-port.js';
import { quickStateFile, stateSchemas } from '../store/state.js';
import type { AgentDaemon } from './agent.js';
import type { ProcessTable } from './hook-processes.js';
import { LEFT_BEHIND_POLL_MS } from './hooks.js';

const ROOT = RUNNER_ROOT;
const config = crashTestConfig('hook30');

function daemonOver(
  fs: FsPort,
  runner: StateFileRunner,
  clock: HeldClock,
  system: ReturnType<typeof fakeSystem>,
): AgentDaemon {
  return crashTestDaemon({ config, fs, runner, clock, system });
}

function daemonWith(
  fs: FsPort,
  runner: StateFileRunner,
  clock: HeldClock,
  system: ReturnType<typeof fakeSystem>,
  processes: ProcessTable,
): AgentDaemon {
  return crashTestDaemon({ config, fs, runner, clock, system, processes });
}

/**
 * A daemon whose `reload` run (pid 1001) is given up on, pass 2's nfs/b.json refused to it, then a power cut with no
 * stop: what is durable afterwards.
 */
async function leftBehindThenPowerCut(bootId?: string): Promise<FsPort> {
  const model = await PowerCutFs.over(memfsPort(runnerVolume()), '/');
  const runner = await StateFileRunner.open(model.fs);
  runner.writes.push('nfs/a.json', 'nfs/b.json');
  const first = fakeSystem((command, pid) => command === '/usr/bin/reload' && pid === 1001);
  const clock = new HeldClock();
  const daemon =
    bootId === undefined
      ? daemonOver(model.fs, runner, clock, first)
      : daemonWith(model.fs, runner, clock, first, { ...first.processes, bootId: () => bootId });
  await startThroughTwoPasses(daemon, runner, first, () => nextPass(clock));
  // Pass 3 writes what pass 2's hook run settled and owed; pass 4 changes nothing and writes nothing.
  const writesBefore = runner.stateWrites;
  await nextPass(clock);
  await until(() => runner.passes === 3);
  expect(runner.stateWrites).toBe(writesBefore + 1);
  await nextPass(clock);
  await until(() => runner.passes === 4);
  expect(runner.stateWrites).toBe(writesBefore + 1);
  const after = volumeAfterPowerCut(model);
  const kept = JSON.parse(String(await after.readFile(STATE_PATH, 'utf8'))) as Record<string, unknown>;
  expect(kept.hookProcessesLeftBehind).toEqual([
    bootId === undefined ? RELOAD_LEFT : { ...RELOAD_LEFT, bootId },
  ]);
  expect(kept.owedHookPaths).toEqual([
    { match: 'nfs/**', run: ['/usr/bin/reload', '--all'], paths: ['nfs/b.json'] },
  ]);
  return after;
}

fakeTimersEachTest();

describe('a hook process left behind, across a crash or a power cut (hook30)', () => {
  it('holds its hook back after the restart, health degraded, until it ends; then the owed run happens', async () => {
    const after = await leftBehindThenPowerCut();
    // The next daemon's machine: pid 1001 still there, started when it was (stuck on the hung mount).
    const next = fakeSystem((command) => command === 'leftover');
    next.spawn('leftover', [], {});
    const runner = await StateFileRunner.open(after);
    const clock = new HeldClock();
    const restarted = daemonOver(after, runner, clock, next);
    try {
      await restarted.start();
      await nextPass(clock);
      await until(() => runner.passes === 1);
      await nextPass(clock);
      await until(() => runner.passes === 2);
      await vi.advanceTimersByTimeAsync(100);
      // reload is not run beside it, and nothing else runs.
      expect(next.started).toEqual(['leftover:1001']);
      const degraded = restarted.health().degraded ?? [];
      expect(degraded).toHaveLength(1);
      expect(degraded[0]).toContain('hook nfs/**: its process (pid 1001, leftover)');
      // Still there at the first look: still held back.
      await nextPoll(clock);
      await vi.advanceTimersByTimeAsync(100);
      expect(next.started).toEqual(['leftover:1001']);

      // The mount comes back and the process ends: at the next look the owed paths run, with no pass in between.
      next.release(1001);
      await nextPoll(clock);
      await until(() => next.started.length === 2);
      expect(next.started).toEqual(['leftover:1001', '/usr/bin/reload:1002']);
      expect(next.changed.get(1002)).toEqual({ list: ['nfs/b.json'], truncated: false });
      expect(restarted.health().degraded).toBeUndefined();
      expect(runner.passes).toBe(2);
      // Neither owed nor left behind any more, and state.json says so after the next pass's write.
      await nextPass(clock);
      await until(() => runner.passes === 3);
      const settled = JSON.parse(String(await after.readFile(STATE_PATH, 'utf8'))) as Record<string, unknown>;
      expect(settled.owedHookPaths).toBeUndefined();
      expect(settled.hookProcessesLeftBehind).toBeUndefined();
    } finally {
      await stopped(restarted);
    }
  });

  it('a pid handed out again (another start time) is not taken for it: the hook runs at once', async () => {
    const after = await leftBehindThenPowerCut();
    const next = fakeSystem((command) => command === 'leftover');
    next.spawn('leftover', [], {});
    // pid 1001 is another process now: started at another time than the one recorded.
    const processes: ProcessTable = {
      ...next.processes,
      get: (pid) => {
        const entry = next.processes.get(pid);
        return entry === undefined || pid !== 1001 ? entry : { ...entry, startTime: '987654' };
      },
    };
    const runner = await StateFileRunner.open(after);
    const clock = new HeldClock();
    const restarted = daemonWith(after, runner, clock, next, processes);
    try {
      await restarted.start();
      await nextPass(clock);
      await until(() => runner.passes === 1 && next.started.length === 2);
      expect(next.started).toEqual(['leftover:1001', '/usr/bin/reload:1002']);
      expect(next.changed.get(1002)).toEqual({ list: ['nfs/b.json'], truncated: false });
      expect(restarted.health().degraded).toBeUndefined();
      // Nothing is polled for: no wait of the left-behind poll.
      expect(clock.waits.some((wait) => wait.ms === LEFT_BEHIND_POLL_MS)).toBe(false);
    } finally {
      await stopped(restarted);
    }
  });

  it('a record of another boot is not taken, though a process of this boot has its pid and start time', async () => {
    const after = await leftBehindThenPowerCut('boot-1');
    // A power cut and a boot: pid 1001 handed out again, by chance at the very tick the old one started.
    const next = fakeSystem((command) => command === 'leftover');
    next.spawn('leftover', [], {});
    const runner = await StateFileRunner.open(after);
    const clock = new HeldClock();
    const restarted = daemonWith(after, runner, clock, next, { ...next.processes, bootId: () => 'boot-2' });
    try {
      await restarted.start();
      await nextPass(clock);
      await until(() => runner.passes === 1 && next.started.length === 2);
      expect(next.started).toEqual(['leftover:1001', '/usr/bin/reload:1002']);
      expect(next.changed.get(1002)).toEqual({ list: ['nfs/b.json'], truncated: false });
      expect(restarted.health().degraded).toBeUndefined();
    } finally {
      await stopped(restarted);
    }
    // The same boot: taken back, as in the first case.
    const again = await leftBehindThenPowerCut('boot-1');
    const same = fakeSystem((command) => command === 'leftover');
    same.spawn('leftover', [], {});
    const sameRunner = await StateFileRunner.open(again);
    const sameClock = new HeldClock();
    const resumed = daemonWith(again, sameRunner, sameClock, same, {
      ...same.processes,
      bootId: () => 'boot-1',
    });
    try {
      await resumed.start();
      await nextPass(sameClock);
      await until(() => sameRunner.passes === 1);
      await vi.advanceTimersByTimeAsync(100);
      expect(same.started).toEqual(['leftover:1001']);
      expect(resumed.health().degraded ?? []).toHaveLength(1);
    } finally {
      await stopped(resumed);
    }
  });

  it('quickStateFile and the schema read the field alike; a bad record is refused by both', () => {
    const file = {
      version: 1,
      deviceId: 'dvc_unit',
      rootDir: ROOT,
      files: {},
      instances: {},
      pendingHookPaths: [],
      hookProcessesLeftBehind: [RELOAD_LEFT],
    };
    const quick = quickStateFile(file);
    expect(quick?.hookProcessesLeftBehind).toEqual([RELOAD_LEFT]);
    expect(stateSchemas().LocalStateFile.parse(file).hookProcessesLeftBehind).toEqual([RELOAD_LEFT]);
    const booted = { ...file, hookProcessesLeftBehind: [{ ...RELOAD_LEFT, bootId: 'boot-1' }] };
    expect(quickStateFile(booted)?.hookProcessesLeftBehind).toEqual([{ ...RELOAD_LEFT, bootId: 'boot-1' }]);
    expect(stateSchemas().LocalStateFile.parse(booted).hookProcessesLeftBehind).toEqual([
      { ...RELOAD_LEFT, bootId: 'boot-1' },
    ]);
    for (const bad of [
      { ...RELOAD_LEFT, pid: 0 },
      { ...RELOAD_LEFT, startTime: '' },
      { ...RELOAD_LEFT, run: [] },
      { ...RELOAD_LEFT, bootId: '' },
      { ...RELOAD_LEFT, bootId: 7 },
    ]) {
      const wrong = { ...file, hookProcessesLeftBehind: [bad] };
      expect(quickStateFile(wrong)).toBeUndefined();
      expect(stateSchemas().LocalStateFile.safeParse(wrong).success).toBe(false);
    }
  });
});
