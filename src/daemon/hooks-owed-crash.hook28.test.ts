// Paths owed to a hook held back survive a crash and a power cut, per hook: state.json records them with the pass's
// own write (no write of their own), and the first run after the restart runs only the hook that is owed them.
import { Volume } from 'memfs';
import { describe, expect, it } from 'vitest';
import { HeldClock } from '../../test/helpers/held-daemon.js';
import {
  crashTestConfig,
  crashTestDaemon,
  runnerVolume,
  RUNNER_STATE_PATH as STATE_PATH,
  startThroughTwoPasses,
  stopFaked,
  untilFaked as until,
} from '../../test/helpers/hook-crash-daemon.js';
import { fakeSystem } from '../../test/helpers/hook-system.js';
import { memfsPort } from '../../test/helpers/memfs.js';
import { PowerCutFs } from '../../test/helpers/power-cut-fs.js';
import {
  RUNNER_ROOT,
  RUNNER_STATE_DIR,
  StateFileRunner,
  volumeAfterPowerCut,
} from '../../test/helpers/state-file-runner.js';
import { fakeTimersEachTest } from '../../test/helpers/unit-daemon.js';
import type { FsPort } from '../lib/fs-port.js';
import { silentLogger } from '../lib/logger.js';
import { type LocalState, loadLocalState, quickStateFile, stateSchemas } from '../store/state.js';
import { sameAsSnapshot, snapshotState } from '../store/state-snapshot.js';
import type { AgentDaemon } from './agent.js';

const ROOT = RUNNER_ROOT;
const STATE_DIR = RUNNER_STATE_DIR;
const config = crashTestConfig('hook28');

function daemonOver(
  fs: FsPort,
  runner: StateFileRunner,
  clock: HeldClock,
  system: ReturnType<typeof fakeSystem>,
): AgentDaemon {
  return crashTestDaemon({ config, fs, runner, clock, system });
}

/** Ends the daemon's one wait (before its next pass). */
async function releaseWait(clock: HeldClock): Promise<void> {
  await until(() => clock.waits.length === 1);
  clock.waits.shift()?.();
}

fakeTimersEachTest();

describe('paths owed to a hook held back, across a crash and a power cut (hook28)', () => {
  it('are in state.json with the next pass, and after a power cut only the hook owed them runs', async () => {
    const model = await PowerCutFs.over(memfsPort(runnerVolume()), '/');
    const runner = await StateFileRunner.open(model.fs);
    runner.writes.push('nfs/a.json', 'nfs/b.json');

    // reload's first process never ends (uninterruptible sleep): given up on; pass 2's nfs/b.json is refused to it
    // and owed, while `every` runs with it.
    const first = fakeSystem((command, pid) => command === '/usr/bin/reload' && pid === 1001);
    const clock = new HeldClock();
    const daemon = daemonOver(model.fs, runner, clock, first);
    await startThroughTwoPasses(daemon, runner, first, () => releaseWait(clock));
    expect(first.started).toEqual(['/usr/bin/reload:1001', '/usr/bin/every:1002', '/usr/bin/every:1003']);
    // Pass 3 changes nothing but what the hook run after pass 2 settled and owed: one write of state.json.
    const writesBefore = runner.stateWrites;
    await releaseWait(clock);
    await until(() => runner.passes === 3);
    expect(runner.stateWrites).toBe(writesBefore + 1);
    // Pass 4 changes nothing at all: state.json is not written again.
    await releaseWait(clock);
    await until(() => runner.passes === 4);
    expect(runner.stateWrites).toBe(writesBefore + 1);

    // The power cut (no stop: the process is gone with pid 1001 still there): what is durable is all there is.
    const after = volumeAfterPowerCut(model);
    const kept = JSON.parse(String(await after.readFile(STATE_PATH, 'utf8'))) as Record<string, unknown>;
    expect(kept.pendingHookPaths).toEqual([]);
    expect(kept.owedHookPaths).toEqual([
      { match: 'nfs/**', run: ['/usr/bin/reload', '--all'], paths: ['nfs/b.json'] },
    ]);

    // The next daemon: no pass writes anything; its first hook run hands nfs/b.json to reload, and to reload only.
    const next = fakeSystem(() => false);
    const nextRunner = await StateFileRunner.open(after);
    const nextClock = new HeldClock();
    const restarted = daemonOver(after, nextRunner, nextClock, next);
    try {
      await restarted.start();
      await releaseWait(nextClock);
      await until(() => nextRunner.passes === 1 && next.started.length === 1);
      await releaseWait(nextClock);
      await until(() => nextRunner.passes === 2);
      expect(next.started).toEqual(['/usr/bin/reload:1001']);
      expect(next.changed.get(1001)).toEqual({ list: ['nfs/b.json'], truncated: false });
      // Run: owed to nobody now, and state.json says so after the next pass's write.
      const settled = JSON.parse(String(await after.readFile(STATE_PATH, 'utf8'))) as Record<string, unknown>;
      expect(settled.owedHookPaths).toBeUndefined();
    } finally {
      await stopFaked(restarted);
    }
  });

  it('keep their cut-short mark across a clean stop, and a hook not owed them does not run again', async () => {
    const fs = memfsPort(runnerVolume());
    const runner = await StateFileRunner.open(fs);
    // Pass 2 writes one more file than a hook keeps owed (MAX_OWED_PATHS).
    const many = Array.from({ length: 4097 }, (_, i) => `nfs/${String(i).padStart(4, '0')}.json`);
    runner.writes.push(['nfs/a.json'], many);
    const first = fakeSystem((command) => command === '/usr/bin/reload');
    const clock = new HeldClock();
    const daemon = daemonOver(fs, runner, clock, first);
    await startThroughTwoPasses(daemon, runner, first, () => releaseWait(clock));
    await stopFaked(daemon);
    const kept = JSON.parse(String(await fs.readFile(STATE_PATH, 'utf8'))) as {
      pendingHookPaths: string[];
      owedHookPaths: { match: string; paths: string[]; truncated?: boolean }[];
    };
    // hook27's handback at the stop made them pending for every hook (`every` ran again with them), unmarked.
    expect(kept.pendingHookPaths).toEqual([]);
    expect(kept.owedHookPaths.map((owed) => [owed.match, owed.paths.length, owed.truncated])).toEqual([
      ['nfs/**', 4096, true],
    ]);

    const next = fakeSystem(() => false);
    const nextRunner = await StateFileRunner.open(fs);
    const nextClock = new HeldClock();
    const restarted = daemonOver(fs, nextRunner, nextClock, next);
    try {
      await restarted.start();
      await releaseWait(nextClock);
      await until(() => nextRunner.passes === 1 && next.started.length === 1);
      expect(next.started).toEqual(['/usr/bin/reload:1001']);
      expect(next.changed.get(1001)?.truncated).toBe(true);
      expect(next.changed.get(1001)?.list).toHaveLength(4096);
    } finally {
      await stopFaked(restarted);
    }
  });
});

describe("state.json's owedHookPaths (hook28)", () => {
  const file = {
    version: 1,
    deviceId: 'dvc_unit',
    rootDir: ROOT,
    files: {},
    instances: {},
    pendingHookPaths: [],
    owedHookPaths: [
      { match: 'nfs/**', run: ['/usr/bin/reload'], paths: ['nfs/a.json', '../etc/passwd'] },
      { match: '**', run: ['/usr/bin/every', '-q'], paths: ['x.json'], truncated: true },
    ],
  };

  it('is read alike by the quick check and the schema, and its paths go through the path guard', async () => {
    expect(quickStateFile(file)).toEqual(stateSchemas().LocalStateFile.parse(file));
    const vol = new Volume();
    vol.mkdirSync(STATE_DIR, { recursive: true });
    vol.writeFileSync(STATE_PATH, JSON.stringify(file));
    const { state } = await loadLocalState(memfsPort(vol), STATE_DIR, 'dvc_unit', silentLogger(), ROOT);
    expect(state.owedHookPaths).toEqual([
      { match: 'nfs/**', run: ['/usr/bin/reload'], paths: ['nfs/a.json'] },
      { match: '**', run: ['/usr/bin/every', '-q'], paths: ['x.json'], truncated: true },
    ]);
  });

  it('counts as a change of state only when its contents change', () => {
    const state = { ...emptyStateOf(), owedHookPaths: [{ match: 'a', run: ['b'], paths: ['x'] }] };
    const snapshot = snapshotState(state);
    state.owedHookPaths = [{ match: 'a', run: ['b'], paths: ['x'] }];
    expect(sameAsSnapshot(state, snapshot)).toBe(true);
    state.owedHookPaths = [{ match: 'a', run: ['b'], paths: ['x', 'y'] }];
    expect(sameAsSnapshot(state, snapshot)).toBe(false);
    state.owedHookPaths = [];
    expect(sameAsSnapshot(state, snapshotState({ ...emptyStateOf() }))).toBe(true);
  });
});

function emptyStateOf(): LocalState {
  return {
    deviceId: 'dvc_unit',
    rootDir: ROOT,
    files: new Map(),
    instances: new Map(),
    cooldowns: new Map(),
    pendingHookPaths: new Set(),
  };
}
