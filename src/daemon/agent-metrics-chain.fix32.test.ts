// The daemon's queues (metrics textfile writes, hook runs) outlive a turn that threw (fix32): fake clocks, memfs, fake spawn.
import { Volume } from 'memfs';
import pino from 'pino';
import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import { HeldClock, ScriptedRunner } from '../../test/helpers/held-daemon.js';
import { fakeSystem } from '../../test/helpers/hook-system.js';
import { memfsPort } from '../../test/helpers/memfs.js';
import { parseAgentConfig } from '../config/load.js';
import { silentLogger } from '../lib/logger.js';
import { AgentDaemon } from './agent.js';
import { AgentMetrics } from './metrics.js';

const daemons: AgentDaemon<ScriptedRunner>[] = [];

afterEach(async () => {
  await Promise.all(daemons.splice(0).map((daemon) => daemon.stop()));
});

/** Lets the daemon's promise chains run until `done` holds; bounded, nothing here waits on real time. */
async function settle(done: () => boolean, what: string): Promise<void> {
  for (let turn = 0; turn < 500; turn += 1) {
    if (done()) return;
    await new Promise((resolve) => setImmediate(resolve));
  }
  throw new Error(`the daemon never reached: ${what}`);
}

describe('the metrics textfile after a write that threw (fix32)', () => {
  it('is written by the passes after it: the queue of writes holds each turn settled', async () => {
    // The log's destination throws once, at the first warning that the textfile could not be written: the write's
    // own catch then throws, and its turn rejects.
    let thrown = 0;
    let text = '';
    const logger = pino(
      { level: 'info' },
      {
        write(line: string) {
          if (thrown === 0 && line.includes('could not write the metrics textfile')) {
            thrown += 1;
            throw new Error('log destination failed');
          }
          text += line;
        },
      },
    );
    const volume = new Volume();
    const config = parseAgentConfig(
      {
        deviceId: 'dvc_unit',
        server: { baseUrl: 'https://dcds.example.com' },
        rootDir: '/srv/config',
        stateDir: '/var/lib/config-agent',
        drift: 'off',
        metrics: { textfile: '/metrics/agent.prom' },
      },
      'fix32',
    );
    const clock = new HeldClock();
    clock.mono = 1_000_000;
    const runner = new ScriptedRunner();
    const daemon = new AgentDaemon({
      deps: { fs: memfsPort(volume), clock, random: () => 0, logger },
      config,
      runner,
      metrics: new AgentMetrics({ deviceId: 'dvc_unit' }),
      hookEnv: {},
      scrub: (line) => line,
    });
    daemons.push(daemon);
    await daemon.start();
    await settle(() => clock.waits.length === 1, 'the boot wait');
    const nextPass = async () => {
      const passes = runner.passes;
      clock.waits.shift()?.();
      await settle(() => runner.passes === passes + 1 && clock.waits.length === 1, `pass ${passes + 1}`);
    };

    // Pass 1: /metrics is missing, and telling so throws.
    await nextPass();
    expect(thrown).toBe(1);
    // The directory is there now: the next passes write the file.
    volume.mkdirSync('/metrics');
    await nextPass();
    await nextPass();
    expect(volume.existsSync('/metrics/agent.prom')).toBe(true);
    expect(String(volume.readFileSync('/metrics/agent.prom', 'utf8'))).toMatch(/config_agent_passes_total/);
    // The failure was told once, at error, through the same logger once it worked again.
    expect(text.split('\n').filter((line) => line.includes('metrics textfile write failed'))).toHaveLength(1);
  });
});

/** A scripted runner whose settling of hook paths throws `throwOnSettle` times (state.json not writable). */
class HookedRunner extends ScriptedRunner {
  throwOnSettle = 0;
  override settleHookPaths(paths: readonly string[]): void {
    if (this.throwOnSettle > 0) {
      this.throwOnSettle -= 1;
      throw new Error('state not writable');
    }
    super.settleHookPaths(paths);
  }
}

describe('the hook runs after a run that threw (fix32)', () => {
  beforeEach(() => {
    vi.useFakeTimers();
  });
  afterEach(() => {
    vi.useRealTimers();
  });

  /** Lets timers and promises run in 10 ms steps of fake time until `done` (at most 10 s of it). */
  async function until(done: () => boolean): Promise<void> {
    for (let spent = 0; !done() && spent < 10_000; spent += 10) await vi.advanceTimersByTimeAsync(10);
    expect(done()).toBe(true);
  }

  it('runs the hook again for the next change, with the paths the failed run left pending; stop() flushes', async () => {
    const system = fakeSystem();
    const config = parseAgentConfig(
      {
        deviceId: 'dvc_unit',
        server: { baseUrl: 'https://dcds.example.com' },
        rootDir: '/srv/root',
        stateDir: '/var/lib/config-agent',
        drift: 'off',
        hooks: [{ match: '*.json', run: ['/usr/bin/reload'], timeoutSeconds: 1 }],
      },
      'fix32',
    );
    const clock = new HeldClock();
    clock.mono = 1_000_000;
    const runner = new HookedRunner();
    runner.writes.push('a.json', 'b.json');
    runner.throwOnSettle = 1;
    let flushed = 0;
    runner.flushState = async () => {
      flushed += 1;
    };
    const daemon = new AgentDaemon({
      deps: { fs: memfsPort(new Volume()), clock, random: () => 0, logger: silentLogger() },
      config,
      runner,
      metrics: new AgentMetrics({ deviceId: 'dvc_unit' }),
      hookEnv: {},
      scrub: (line) => line,
      hookProcesses: system.processes,
      hookSpawn: system.spawn,
    });
    let stopped = false;
    try {
      await daemon.start();
      await until(() => clock.waits.length === 1);
      // Pass 1 writes a.json: its hook runs, and settling its path throws.
      clock.waits.shift()?.();
      await until(() => runner.passes === 1 && system.started.length === 1 && clock.waits.length === 1);
      // Pass 2 writes b.json: the hook runs again, given both.
      clock.waits.shift()?.();
      await until(() => runner.passes === 2 && system.started.length === 2);
      await until(() => runner.pending.size === 0);
      expect([...system.changed.values()].map((run) => run.list)).toEqual([['a.json'], ['a.json', 'b.json']]);
      const stopping = daemon.stop(1_000);
      await vi.advanceTimersByTimeAsync(10);
      await stopping;
      stopped = true;
      expect(flushed).toBeGreaterThan(0);
    } finally {
      if (!stopped) {
        const stopping = daemon.stop(1_000).catch(() => undefined);
        await vi.advanceTimersByTimeAsync(2_000);
        await stopping;
      }
    }
  });
});
