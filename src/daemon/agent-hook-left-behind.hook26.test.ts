// The daemon while a hook process SIGKILL could not end is left behind: health and status say degraded naming the
// hook and pid, the metrics count it, and once it ends the paths its refused runs owed are run without a new change.
import { describe, expect, it } from 'vitest';
import { HeldClock, ScriptedRunner } from '../../test/helpers/held-daemon.js';
import { stopFaked, untilFaked as until } from '../../test/helpers/hook-crash-daemon.js';
import { fakeSystem } from '../../test/helpers/hook-system.js';
import { fakeTimersEachTest, unitDaemon, unitDaemonConfig } from '../../test/helpers/unit-daemon.js';
import { AgentMetrics } from './metrics.js';

fakeTimersEachTest();

describe('a hook process left behind (hook26)', () => {
  it('makes health and status degraded, naming the hook and pid, and counts it; its end recovers them and runs what it held back', async () => {
    // Only the first process is stuck (in uninterruptible sleep); the hook's later runs end at once.
    const system = fakeSystem((_command, pid) => pid === 1001);
    const config = unitDaemonConfig('hook26', {
      hooks: [{ match: 'nfs/**', run: ['/usr/bin/reload'], timeoutSeconds: 1 }],
    });
    const clock = new HeldClock();
    const runner = new ScriptedRunner();
    runner.writes.push('nfs/a.json', 'nfs/b.json');
    const metrics = new AgentMetrics({ deviceId: 'dvc_unit' });
    const daemon = unitDaemon({ config, runner, clock, metrics, system });
    const leftGauge = async () =>
      /config_agent_hook_processes_left_behind\{[^}]*\} (\d+)/.exec(await metrics.render())?.[1];
    try {
      await daemon.start();
      await until(() => clock.waits.length === 1);
      // Pass 1 writes nfs/a.json; its hook's process never ends: given up on after 1 s + 2 s + 2 s.
      clock.waits.shift()?.();
      await until(() => runner.passes === 1 && system.started.length === 1);
      await until(() => runner.pending.size === 0);
      const health = daemon.health();
      expect(health.healthy).toBe(true);
      expect(health.degraded).toHaveLength(1);
      expect(health.degraded?.[0]).toMatch(/^hook nfs\/\*\*: its process \(pid 1001, \/usr\/bin\/reload\)/);
      expect(daemon.status().degraded).toEqual(health.degraded);
      expect(await leftGauge()).toBe('1');

      // Pass 2 writes nfs/b.json: refused while pid 1001 is there, and settled in state; still degraded.
      await until(() => clock.waits.length === 1);
      clock.waits.shift()?.();
      await until(() => runner.passes === 2 && runner.pending.size === 0);
      expect(system.started).toHaveLength(1);
      expect(daemon.health().degraded).toHaveLength(1);

      // The mount comes back and pid 1001 ends: healthy without a word, the gauge 0, and the hook runs for
      // nfs/b.json with no pass in between.
      system.release(1001);
      await until(() => system.started.length === 2);
      expect(system.changed.get(1002)).toEqual({ list: ['nfs/b.json'], truncated: false });
      expect(runner.passes).toBe(2);
      expect(daemon.health()).toEqual({ healthy: true, lastLoopAt: expect.any(String) });
      expect(daemon.status().degraded).toBeUndefined();
      await until(() => system.started.length === 2);
      expect(await leftGauge()).toBe('0');
    } finally {
      await stopFaked(daemon);
    }
  });
});
