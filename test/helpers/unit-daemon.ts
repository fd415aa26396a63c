// The daemon of the daemon's fake-timer unit tests: its config, an AgentDaemon over memfs and a held clock, fake timers.
import { Volume } from 'memfs';
import { afterEach, beforeEach, vi } from 'vitest';
import { parseAgentConfig } from '../../src/config/load.js';
import type { AgentConfig } from '../../src/config/schema.js';
import { AgentDaemon } from '../../src/daemon/agent.js';
import type { ProcessTable } from '../../src/daemon/hook-processes.js';
import { LEFT_BEHIND_POLL_MS } from '../../src/daemon/hooks.js';
import { AgentMetrics } from '../../src/daemon/metrics.js';
import type { FsPort } from '../../src/lib/fs-port.js';
import { type Logger, silentLogger } from '../../src/lib/logger.js';
import type { PassRunner } from '../../src/reconcile/pass-runner.js';
import type { HeldClock, HeldWait } from './held-daemon.js';
import { untilFaked } from './hook-crash-daemon.js';
import type { fakeSystem } from './hook-system.js';
import { memfsPort } from './memfs.js';

/** vi's fake timers for each test of the file that calls it: installed before, the real ones back after. */
export function fakeTimersEachTest(): void {
  beforeEach(() => {
    vi.useFakeTimers();
  });
  afterEach(() => {
    vi.useRealTimers();
  });
}

/**
 * A daemon's config for unit tests: device dvc_unit of https://dcds.example.com, rootDir /srv/root, stateDir
 * /var/lib/config-agent, drift off, `fields` over them. `source` names it in errors.
 */
export function unitDaemonConfig(source: string, fields: Record<string, unknown> = {}): AgentConfig {
  return parseAgentConfig(
    {
      deviceId: 'dvc_unit',
      server: { baseUrl: 'https://dcds.example.com' },
      rootDir: '/srv/root',
      stateDir: '/var/lib/config-agent',
      drift: 'off',
      ...fields,
    },
    source,
  );
}

export interface UnitDaemonOptions<R extends PassRunner> {
  config: AgentConfig;
  runner: R;
  clock: HeldClock;
  /** Default: an empty memfs volume. */
  fs?: FsPort;
  /** Default: silent. */
  logger?: Logger;
  /** Default: fresh ones of dvc_unit. */
  metrics?: AgentMetrics;
  /** Runs the hooks (its spawn) and answers for their processes (its table, unless `processes`). */
  system?: ReturnType<typeof fakeSystem>;
  processes?: ProcessTable;
}

/** An AgentDaemon of `options` (random 0, no hook environment, nothing scrubbed). */
export function unitDaemon<R extends PassRunner>(options: UnitDaemonOptions<R>): AgentDaemon<R> {
  const { system } = options;
  const processes = options.processes ?? system?.processes;
  return new AgentDaemon({
    deps: {
      fs: options.fs ?? memfsPort(new Volume()),
      clock: options.clock,
      random: () => 0,
      logger: options.logger ?? silentLogger(),
    },
    config: options.config,
    runner: options.runner,
    metrics: options.metrics ?? new AgentMetrics({ deviceId: 'dvc_unit' }),
    hookEnv: {},
    scrub: (text) => text,
    ...(processes === undefined ? {} : { hookProcesses: processes }),
    ...(system === undefined ? {} : { hookSpawn: system.spawn }),
  });
}

/** What state.json records of crashTestConfig's `reload` run given up on as pid 1001 (hook-crash-daemon.ts). */
export const RELOAD_LEFT = {
  match: 'nfs/**',
  run: ['/usr/bin/reload', '--all'],
  pid: 1001,
  startTime: '1001',
};

/** Ends `clock`'s first wait that `which` picks, once there is one (fake timers run meanwhile). */
async function endWait(clock: HeldClock, which: (wait: HeldWait) => boolean): Promise<void> {
  await untilFaked(() => clock.waits.some(which));
  clock.waits.splice(clock.waits.findIndex(which), 1)[0]?.();
}

/** Ends the daemon's wait before its next pass (not the left-behind poll's). */
export const nextPass = (clock: HeldClock): Promise<void> =>
  endWait(clock, (wait) => wait.ms !== LEFT_BEHIND_POLL_MS);

/** Ends the left-behind poll's wait. */
export const nextPoll = (clock: HeldClock): Promise<void> =>
  endWait(clock, (wait) => wait.ms === LEFT_BEHIND_POLL_MS);
