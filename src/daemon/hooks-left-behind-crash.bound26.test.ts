// A hook's process left behind (SIGKILL could not end it) is in state.json from when it is given up on (bound26): a
// power cut right after, before any later pass wrote state.json, still has the next agent hold the hook back. Before,
// it was kept in memory until the next write of state.json (hook30), and a crash before that forgot it.
import { describe, expect, it, vi } from 'vitest';
import { HeldClock } from '../../test/helpers/held-daemon.js';
import {
  crashTestConfig,
  crashTestDaemon,
  runnerVolume,
  RUNNER_STATE_PATH as STATE_PATH,
  stopFaked as stopped,
  untilFaked as until,
} from '../../test/helpers/hook-crash-daemon.js';
import { fakeSystem } from '../../test/helpers/hook-system.js';
import { memfsPort } from '../../test/helpers/memfs.js';
import { PowerCutFs } from '../../test/helpers/power-cut-fs.js';
import { StateFileRunner, volumeAfterPowerCut } from '../../test/helpers/state-file-runner.js';
import { fakeTimersEachTest, nextPass, RELOAD_LEFT } from '../../test/helpers/unit-daemon.js';

const config = crashTestConfig('bound26');

fakeTimersEachTest();

describe('a hook process left behind, recorded when found (bound26)', () => {
  it('is durable in state.json right after it is given up on, and the next agent holds its hook back', async () => {
    const model = await PowerCutFs.over(memfsPort(runnerVolume()), '/');
    const runner = await StateFileRunner.open(model.fs);
    runner.writes.push('nfs/a.json');
    const first = fakeSystem((command, pid) => command === '/usr/bin/reload' && pid === 1001);
    const clock = new HeldClock();
    const daemon = crashTestDaemon({ config, fs: model.fs, runner, clock, system: first });
    await daemon.start();
    await nextPass(clock);
    // reload (pid 1001) given up on, and `every` started after it: the hook run goes on (every's 1 s), no pass since.
    await until(() => runner.passes === 1 && first.started.length === 2);
    await vi.advanceTimersByTimeAsync(10);
    expect(runner.passes).toBe(1);
    // A power cut now, with no stop and no later pass.
    const after = volumeAfterPowerCut(model);
    const kept = JSON.parse(String(await after.readFile(STATE_PATH, 'utf8'))) as Record<string, unknown>;
    // Before: no record (it waited in memory for the next pass's write).
    expect(kept.hookProcessesLeftBehind).toEqual([RELOAD_LEFT]);
    // The run that found it had not settled its paths: still pending, so no hook loses them.
    expect(kept.pendingHookPaths).toEqual(['nfs/a.json']);
    await stopped(daemon);

    // The next daemon's machine: pid 1001 still there, started when it was (stuck on the hung mount).
    const next = fakeSystem((command) => command === 'leftover');
    next.spawn('leftover', [], {});
    const restartedRunner = await StateFileRunner.open(after);
    const restartedClock = new HeldClock();
    const restarted = crashTestDaemon({
      config,
      fs: after,
      runner: restartedRunner,
      clock: restartedClock,
      system: next,
    });
    try {
      await restarted.start();
      await nextPass(restartedClock);
      await until(() => restartedRunner.passes === 1 && next.started.length === 2);
      await vi.advanceTimersByTimeAsync(100);
      // `every` hears of nfs/a.json again; reload is not run beside pid 1001 (before: started as pid 1003).
      expect(next.started).toEqual(['leftover:1001', '/usr/bin/every:1002']);
      expect(restarted.health().degraded?.[0]).toContain('hook nfs/**: its process (pid 1001, leftover)');
    } finally {
      await stopped(restarted);
    }
  });
});
