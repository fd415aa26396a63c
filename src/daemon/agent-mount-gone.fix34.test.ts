// The daemon while a mount below rootDir is gone: health and status say degraded naming it, and stop saying so once it is back (fix34).
import { Volume } from 'memfs';
import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import { HeldClock, ScriptedRunner } from '../../test/helpers/held-daemon.js';
import { memfsPort } from '../../test/helpers/memfs.js';
import { parseAgentConfig } from '../config/load.js';
import { silentLogger } from '../lib/logger.js';
import { AgentDaemon } from './agent.js';
import { AgentMetrics } from './metrics.js';

/** A runner whose last check found the mounts in `gone` gone (as RootMountWatch.goneBelow says them). */
class MountRunner extends ScriptedRunner {
  gone: string[] = [];
  mountsGoneBelow(): string[] {
    return this.gone;
  }
}

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

describe('a mount below rootDir gone (fix34)', () => {
  it('health stays healthy with degraded naming the mount, status the same; back: neither says it', async () => {
    const config = parseAgentConfig(
      {
        deviceId: 'dvc_unit',
        server: { baseUrl: 'https://dcds.example.com' },
        rootDir: '/srv/root',
        stateDir: '/var/lib/config-agent',
        drift: 'off',
      },
      'fix34',
    );
    const clock = new HeldClock();
    const runner = new MountRunner();
    const daemon = new AgentDaemon({
      deps: { fs: memfsPort(new Volume()), clock, random: () => 0, logger: silentLogger() },
      config,
      runner,
      metrics: new AgentMetrics({ deviceId: 'dvc_unit' }),
      hookEnv: {},
      scrub: (text) => text,
    });
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
      const stopped = daemon.stop(1_000);
      await vi.advanceTimersByTimeAsync(1_000);
      await stopped;
    }
  });
});
