// A hook's process left behind (SIGKILL could not end it) is in state.json from when it is given up on (bound26): a
// power cut right after, before any later pass wrote state.json, still has the next agent hold the hook back. Before,
// it was kept in memory until the next write of state.json (hook30), and a crash before that forgot it.
import { Volume } from 'memfs';
import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import { HeldClock } from '../../test/helpers/held-daemon.js';
import { fakeSystem } from '../../test/helpers/hook-system.js';
import { memfsPort } from '../../test/helpers/memfs.js';
import { PowerCutFs } from '../../test/helpers/power-cut-fs.js';
import {
  RUNNER_ROOT,
  RUNNER_STATE_DIR,
  StateFileRunner,
  volumeAfterPowerCut,
} from '../../test/helpers/state-file-runner.js';
import { parseAgentConfig } from '../config/load.js';
import type { FsPort } from '../lib/fs-port.js';
import { silentLogger } from '../lib/logger.js';
import { STATE_FILE } from '../store/state.js';
import { AgentDaemon } from './agent.js';
import type { ProcessTable } from './hook-processes.js';
import { LEFT_BEHIND_POLL_MS } from './hooks.js';
import { AgentMetrics } from './metrics.js';

const ROOT = RUNNER_ROOT;
const STATE_DIR = RUNNER_STATE_DIR;
const STATE_PATH = `${STATE_DIR}/${STATE_FILE}`;

/** Lets timers and promises run in 10 ms steps until `done` (at most `ms` of fake time). */
async function until(done: () => boolean, ms = 10_000): Promise<void> {
  for (let spent = 0; !done() && spent < ms; spent += 10) await vi.advanceTimersByTimeAsync(10);
  expect(done()).toBe(true);
}

const config = parseAgentConfig(
  {
    deviceId: 'dvc_unit',
    server: { baseUrl: 'https://dcds.example.com' },
    rootDir: ROOT,
    stateDir: STATE_DIR,
    drift: 'off',
    hooks: [
      { match: 'nfs/**', run: ['/usr/bin/reload', '--all'], timeoutSeconds: 1 },
      { match: '**', run: ['/usr/bin/every'], timeoutSeconds: 1 },
    ],
  },
  'bound26',
);

function daemonOver(
  fs: FsPort,
  runner: StateFileRunner,
  clock: HeldClock,
  system: ReturnType<typeof fakeSystem>,
) {
  return daemonWith(fs, runner, clock, system, system.processes);
}

function daemonWith(
  fs: FsPort,
  runner: StateFileRunner,
  clock: HeldClock,
  system: ReturnType<typeof fakeSystem>,
  processes: ProcessTable,
): AgentDaemon {
  return new AgentDaemon({
    deps: { fs, clock, random: () => 0, logger: silentLogger() },
    config,
    runner,
    metrics: new AgentMetrics({ deviceId: 'dvc_unit' }),
    hookEnv: {},
    scrub: (text) => text,
    hookProcesses: processes,
    hookSpawn: system.spawn,
  });
}

/** Ends the daemon's wait before its next pass (not the left-behind poll's). */
async function nextPass(clock: HeldClock): Promise<void> {
  await until(() => clock.waits.some((wait) => wait.ms !== LEFT_BEHIND_POLL_MS));
  const index = clock.waits.findIndex((wait) => wait.ms !== LEFT_BEHIND_POLL_MS);
  clock.waits.splice(index, 1)[0]?.();
}

const RELOAD_LEFT = { match: 'nfs/**', run: ['/usr/bin/reload', '--all'], pid: 1001, startTime: '1001' };

async function stopped(daemon: AgentDaemon): Promise<void> {
  const stopping = daemon.stop(1_000);
  await vi.advanceTimersByTimeAsync(1_000);
  await stopping;
}

beforeEach(() => {
  vi.useFakeTimers();
});
afterEach(() => {
  vi.useRealTimers();
});

describe('a hook process left behind, recorded when found (bound26)', () => {
  it('is durable in state.json right after it is given up on, and the next agent holds its hook back', async () => {
    const vol = new Volume();
    vol.mkdirSync(ROOT, { recursive: true });
    vol.mkdirSync(STATE_DIR, { recursive: true, mode: 0o700 });
    const model = await PowerCutFs.over(memfsPort(vol), '/');
    const runner = await StateFileRunner.open(model.fs);
    runner.writes.push('nfs/a.json');
    const first = fakeSystem((command, pid) => command === '/usr/bin/reload' && pid === 1001);
    const clock = new HeldClock();
    const daemon = daemonOver(model.fs, runner, clock, first);
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
    const restarted = daemonOver(after, restartedRunner, restartedClock, next);
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
