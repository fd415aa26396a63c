// A stop while a hook is held back (its process left behind) no longer loses the paths its refused runs owe: they
// are pending again in state.json, and the first run after the restart has them.
import { describe, expect, it } from 'vitest';
import { HeldClock, ScriptedRunner } from '../../test/helpers/held-daemon.js';
import { stopFaked, untilFaked as until } from '../../test/helpers/hook-crash-daemon.js';
import { fakeSystem } from '../../test/helpers/hook-system.js';
import { fakeTimersEachTest, unitDaemon, unitDaemonConfig } from '../../test/helpers/unit-daemon.js';

fakeTimersEachTest();

describe('paths owed to a hook held back, across a restart (hook27)', () => {
  it('are pending again after the stop, and the first run of the next daemon has them', async () => {
    const config = unitDaemonConfig('hook27', {
      hooks: [
        { match: 'nfs/**', run: ['/usr/bin/reload'], timeoutSeconds: 1 },
        { match: 'web/**', run: ['/usr/bin/web'], timeoutSeconds: 1 },
      ],
    });
    // The runner stands for state.json: what is pending in it at the stop is what the next start reads.
    const runner = new ScriptedRunner();
    runner.writes.push('nfs/a.json', 'nfs/b.json');
    const daemonWith = (clock: HeldClock, system: ReturnType<typeof fakeSystem>) =>
      unitDaemon({ config, runner, clock, system });

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
    await stopFaked(daemon);
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
      await stopFaked(restarted);
    }
  });
});
