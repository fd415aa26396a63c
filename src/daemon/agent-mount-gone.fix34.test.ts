// The daemon while a mount below rootDir is gone: health and status say degraded naming it, and stop saying so once it is back (fix34).
import { describe, expect, it } from 'vitest';
import { HeldClock, ScriptedRunner } from '../../test/helpers/held-daemon.js';
import { stopFaked, untilFaked as until } from '../../test/helpers/hook-crash-daemon.js';
import { fakeTimersEachTest, unitDaemon, unitDaemonConfig } from '../../test/helpers/unit-daemon.js';

/** A runner whose last check found the mounts in `gone` gone (as RootMountWatch.goneBelow says them). */
class MountRunner extends ScriptedRunner {
  gone: string[] = [];
  mountsGoneBelow(): string[] {
    return this.gone;
  }
}

fakeTimersEachTest();

describe('a mount below rootDir gone (fix34)', () => {
  it('health stays healthy with degraded naming the mount, status the same; back: neither says it', async () => {
    const clock = new HeldClock();
    const runner = new MountRunner();
    const daemon = unitDaemon({ config: unitDaemonConfig('fix34'), runner, clock });
    try {
      await daemon.start();
      await until(() => clock.waits.length === 1);
      clock.waits.shift()?.();
      await until(() => runner.passes === 1 && clock.waits.length === 1);
      runner.gone = [
        '/srv/root/data is no mount point any more (a filesystem below rootDir /srv/root; it was one, st_dev 7)',
      ];
      const health = daemon.health();
      expect(health.healthy).toBe(true);
      expect(health.degraded).toEqual([
        '/srv/root/data is no mount point any more (a filesystem below rootDir /srv/root; it was one, st_dev 7): the files under it wait',
      ]);
      expect(daemon.status().degraded).toEqual(health.degraded);

      runner.gone = [];
      expect(daemon.health()).toEqual({ healthy: true, lastLoopAt: expect.any(String) });
      expect(daemon.status().degraded).toBeUndefined();
    } finally {
      await stopFaked(daemon);
    }
  });
});
