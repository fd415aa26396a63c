// The daemon of the hook crash tests (hook28, hook30): StateFileRunner's state.json, two hooks, fake timers.
import { Volume } from 'memfs';
import { expect, vi } from 'vitest';
import { parseAgentConfig } from '../../src/config/load.js';
import type { AgentConfig } from '../../src/config/schema.js';
import { AgentDaemon } from '../../src/daemon/agent.js';
import type { ProcessTable } from '../../src/daemon/hook-processes.js';
import { AgentMetrics } from '../../src/daemon/metrics.js';
import type { FsPort } from '../../src/lib/fs-port.js';
import { silentLogger } from '../../src/lib/logger.js';
import { STATE_FILE } from '../../src/store/state.js';
import type { HeldClock } from './held-daemon.js';
import type { fakeSystem } from './hook-system.js';
import { RUNNER_ROOT, RUNNER_STATE_DIR, type StateFileRunner } from './state-file-runner.js';

/** Where StateFileRunner keeps state.json. */
export const RUNNER_STATE_PATH = `${RUNNER_STATE_DIR}/${STATE_FILE}`;

/** Lets timers and promises run in 10 ms steps until `done` (at most `ms` of fake time); fails if it never is. */
export async function untilFaked(done: () => boolean, ms = 10_000): Promise<void> {
  for (let spent = 0; !done() && spent < ms; spent += 10) await vi.advanceTimersByTimeAsync(10);
  expect(done()).toBe(true);
}

/**
 * The config of the crash tests: StateFileRunner's rootDir and stateDir, drift off, `reload --all` for nfs/** and
 * `every` for everything, 1 s timeouts each. `source` names it in errors.
 */
export function crashTestConfig(source: string): AgentConfig {
  return parseAgentConfig(
    {
      deviceId: 'dvc_unit',
      server: { baseUrl: 'https://dcds.example.com' },
      rootDir: RUNNER_ROOT,
      stateDir: RUNNER_STATE_DIR,
      drift: 'off',
      hooks: [
        { match: 'nfs/**', run: ['/usr/bin/reload', '--all'], timeoutSeconds: 1 },
        { match: '**', run: ['/usr/bin/every'], timeoutSeconds: 1 },
      ],
    },
    source,
  );
}

/** A memfs volume with StateFileRunner's rootDir and stateDir (0700) made, empty. */
export function runnerVolume(): Volume {
  const vol = new Volume();
  vol.mkdirSync(RUNNER_ROOT, { recursive: true });
  vol.mkdirSync(RUNNER_STATE_DIR, { recursive: true, mode: 0o700 });
  return vol;
}

/** A daemon of `config` over `fs` and `runner`, its waits on `clock`, its hooks run by `system` (or `processes`). */
export function crashTestDaemon(options: {
  config: AgentConfig;
  fs: FsPort;
  runner: StateFileRunner;
  clock: HeldClock;
  system: ReturnType<typeof fakeSystem>;
  /** The process table the daemon reads (default the system's). */
  processes?: ProcessTable;
}): AgentDaemon {
  const { system } = options;
  return new AgentDaemon({
    deps: { fs: options.fs, clock: options.clock, random: () => 0, logger: silentLogger() },
    config: options.config,
    runner: options.runner,
    metrics: new AgentMetrics({ deviceId: 'dvc_unit' }),
    hookEnv: {},
    scrub: (text) => text,
    hookProcesses: options.processes ?? system.processes,
    hookSpawn: system.spawn,
  });
}

/**
 * Starts `daemon` and lets it through its first two passes (each begun by `nextPass`): the first runs both hooks,
 * the second one more (`every`: reload's process is held), and nothing is left pending after either.
 */
export async function startThroughTwoPasses(
  daemon: AgentDaemon,
  runner: StateFileRunner,
  system: ReturnType<typeof fakeSystem>,
  nextPass: () => Promise<void>,
): Promise<void> {
  await daemon.start();
  await nextPass();
  await untilFaked(
    () => runner.passes === 1 && system.started.length === 2 && runner.state.pendingHookPaths.size === 0,
  );
  await nextPass();
  await untilFaked(
    () => runner.passes === 2 && system.started.length === 3 && runner.state.pendingHookPaths.size === 0,
  );
}

/** Stops `daemon`, its 1 s deadline passed on the fake clock. */
export async function stopFaked(daemon: AgentDaemon): Promise<void> {
  const stopping = daemon.stop(1_000);
  await vi.advanceTimersByTimeAsync(1_000);
  await stopping;
}
