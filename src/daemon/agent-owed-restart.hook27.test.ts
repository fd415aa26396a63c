// A stop while a hook is held back (its process left behind) no longer loses the paths its refused runs owe: they
// are pending again in state.json, and the first run after the restart has them.
import { Volume } from 'memfs';
import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import { HeldClock, ScriptedRunner } from '../../test/helpers/held-daemon.js';
import { fakeSystem } from '../../test/helpers/hook-system.js';
import { memfsPort } from '../../test/helpers/memfs.js';
import { parseAgentConfig } from '../config/load.js';
import { silentLogger } from '../lib/logger.js';
import { AgentDaemon } from './agent.js';
import { AgentMetrics } from './metrics.js';

/** Lets timers and promises run in 10 ms steps until `done` (at most `ms` of fake time). */
async function until(done: () => boolean, ms = 10_000): Promise<void> {
  for (let spent = 0; !done() && spent < ms; spent += 10) await vi.advanceTimersByTimeAsync(10);
  expect(done()).toBe(true);
}

beforeEach(() => {
  vi.useFakeTimers();
});
afterEach(() => {
  vi.useRealTimers();
});

describe('paths owed to a hook held back, across a restart (hook27)', () => {
  it('are pending again after the stop, and the first run of the next daemon has them', async () => {
    const config = parseAgentConfig(
      {
        deviceId: 'dvc_unit',
        server: { baseUrl: 'https://dcds.example.com' },
        rootDir: '/srv/root',
        stateDir: '/var/lib/config-agent',
        drift: 'off',
        hooks: [
          { match: 'nfs/**', run: ['/usr/bin/reload'], timeoutSeconds: 1 },
          { match: 'web/**', run: ['/usr/bin/web'], timeoutSeconds: 1 },
        ],
      },
      'hook27',
    );
    // The runner stands for state.json: what is pending in it at the stop is what the next start reads.
    const runner = new ScriptedRunner();
    runner.writes.push('nfs/a.json', 'nfs/b.json');
    const daemonWith = (clock: HeldClock, system: ReturnType<typeof fakeSystem>) =>
      new AgentDaemon({
        deps: { fs: memfsPort(new Volume()), clock, random: () => 0, logger: silentLogger() },
        config,
        runner,
        metrics: new AgentMetrics({ deviceId: 'dvc_unit' }),
        hookEnv: {},
        scrub: (text) => text,
        hookProcesses: system.processes,
        hookSpawn: system.spawn,
      });

    // The first process never ends (uninterruptible sleep): given up on, and pass 2's run of nfs/b.json refused.
    const first = fakeSystem((_command, pid) => pid === 1001);
    const clock = new HeldClock();
    const daemon = daemonWith(clock, first);
    await daemon.start();
    await until(() => clock.waits.length === 1);
    clock.waits.shift()?.();
    await until(() => runner.passes === 1 && first.started.length === 1 && runner.pending.size === 0);
    await until(() => clock.waits.length === 1);
    clock.waits.shift()?.();
    await until(() => runner.passes === 2 && runner.pending.size === 0);
    expect(first.started).toHaveLength(1);
    // Stopped (systemctl restart) while pid 1001 is still there.
    const stopped = daemon.stop(1_000);
    await vi.advanceTimersByTimeAsync(1_000);
    await stopped;
    expect([...runner.pending]).toEqual(['nfs/b.json']);

    // The next daemon: no pass writes anything, and its first run hands nfs/b.json to the hook.
    const next = fakeSystem(() => false);
    const nextClock = new HeldClock();
    const restarted = daemonWith(nextClock, next);
    try {
      await restarted.start();
      await until(() => nextClock.waits.length === 1);
      nextClock.waits.shift()?.();
      await until(() => runner.passes === 3 && next.started.length === 1 && runner.pending.size === 0);
      expect(next.changed.get(1001)).toEqual({ list: ['nfs/b.json'], truncated: false });
      expect(next.started).toHaveLength(1);
    } finally {
      const stopping = restarted.stop(1_000);
      await vi.advanceTimersByTimeAsync(1_000);
      await stopping;
    }
  });
});
