// intent27: what a start takes back of the hooks' owed paths and processes left behind, and how their end is watched.
import { describe, expect, it } from 'vitest';
import { silentLogger } from '../lib/logger.js';
import type { HookProcessLeftBehind } from '../store/state.js';
import type { ProcessEntry, ProcessTable } from './hook-processes.js';
import {
  type HookHangs,
  hookHangs,
  hooksLeftBehind,
  leftBehindRecords,
  owedRecords,
  pollRestoredLeftBehind,
  restoreLeftBehind,
  restoreOwed,
  watchRestoredLeftBehind,
} from './hooks.js';

function entry(pid: number, startTime: string): ProcessEntry {
  return { pid, ppid: 1, pgrp: pid, session: pid, startTime, comm: 'reload', exited: false };
}

/** A stand-in /proc: the processes in `running` (by pid), this boot's id `boot` (none when undefined). */
function table(running: Map<number, ProcessEntry>, boot?: string): ProcessTable {
  return {
    list: () => [...running.values()],
    get: (pid) => running.get(pid),
    environ: () => undefined,
    kill: () => undefined,
    ...(boot === undefined ? {} : { bootId: () => boot }),
  };
}

const RELOAD = { match: 'nfs/**', run: ['/usr/bin/reload', 'nginx'] };
const EVERY = { match: '**', run: ['/usr/bin/every'] };
const AUDIT = { match: 'audit/*', run: ['/usr/bin/audit'] };

describe("the hooks' owed paths as state.json keeps them (intent27)", () => {
  it('one record a hook owing something, its paths sorted, sorted by hook; a cut-short mark kept alone', () => {
    const hangs = hookHangs();
    restoreOwed(hangs, [
      { ...RELOAD, paths: ['nfs/c.json', 'nfs/a.json', 'nfs/b.json'] },
      { ...EVERY, paths: [] },
      { ...AUDIT, paths: [], truncated: true },
    ]);
    // Owed nothing at all: no record.
    hangs.owed.set('none', { match: 'x/*', run: ['/bin/x'], paths: new Set(), truncated: false });
    expect(owedRecords(hangs)).toStrictEqual([
      { ...AUDIT, paths: [], truncated: true },
      { ...RELOAD, paths: ['nfs/a.json', 'nfs/b.json', 'nfs/c.json'] },
    ]);
  });

  it('taken back as written: the hook, its command and paths, the mark; records again the same', () => {
    const records = [
      { ...AUDIT, paths: ['audit/a.json'], truncated: true as const },
      { ...RELOAD, paths: ['nfs/a.json', 'nfs/b.json'] },
    ];
    const hangs = hookHangs();
    restoreOwed(hangs, records);
    const reload = hangs.owed.get(JSON.stringify([RELOAD.match, RELOAD.run]));
    expect(reload).toStrictEqual({
      ...RELOAD,
      paths: new Set(['nfs/a.json', 'nfs/b.json']),
      truncated: false,
    });
    expect(owedRecords(hangs)).toStrictEqual(records);
  });
});

describe('processes left behind: recorded, taken back at a start, their end looked for (intent27)', () => {
  const hook = (spec: { match: string; run: string[] }) => JSON.stringify([spec.match, spec.run]);

  it('recorded sorted by hook, with the boot where it can be read and without it where not', () => {
    const running = new Map([
      [1001, entry(1001, '500')],
      [1002, entry(1002, '600')],
      [1003, entry(1003, '700')],
    ]);
    const hangs = hookHangs();
    hangs.processes.set(hook(RELOAD), { ...RELOAD, process: running.get(1001)! });
    hangs.processes.set(hook(EVERY), { ...EVERY, process: running.get(1002)! });
    hangs.processes.set(hook(AUDIT), { ...AUDIT, process: running.get(1003)! });
    expect(leftBehindRecords(hangs, table(running, 'boot-1'))).toStrictEqual([
      { ...EVERY, pid: 1002, startTime: '600', bootId: 'boot-1' },
      { ...AUDIT, pid: 1003, startTime: '700', bootId: 'boot-1' },
      { ...RELOAD, pid: 1001, startTime: '500', bootId: 'boot-1' },
    ]);
    expect(leftBehindRecords(hangs, table(running))[0]).toStrictEqual({
      ...EVERY,
      pid: 1002,
      startTime: '600',
    });
  });

  it('a record is taken back when its pid runs with its start time, in its boot or where a boot is unknown', () => {
    const running = new Map([
      [1001, entry(1001, '500')],
      [1002, entry(1002, '600')],
    ]);
    const records: HookProcessLeftBehind[] = [
      { ...RELOAD, pid: 1001, startTime: '500' },
      { ...EVERY, pid: 1002, startTime: '600', bootId: 'boot-1' },
      // Its pid handed out again (another start time), and one gone.
      { ...AUDIT, pid: 1002, startTime: '999' },
      { match: 'gone/*', run: ['/bin/gone'], pid: 1005, startTime: '1' },
    ];
    const hangs = hookHangs();
    // This boot unknown: the record of boot-1 is taken too; a record without a boot is taken in any boot.
    expect(restoreLeftBehind(hangs, records, table(running))).toStrictEqual(records.slice(0, 2));
    expect(hangs.processes.get(hook(RELOAD))).toStrictEqual({ ...RELOAD, process: running.get(1001) });
    expect([...(hangs.restored?.keys() ?? [])]).toEqual([hook(RELOAD), hook(EVERY)]);
    expect(leftBehindRecords(hangs, table(running))).toStrictEqual([
      { ...EVERY, pid: 1002, startTime: '600' },
      { ...RELOAD, pid: 1001, startTime: '500' },
    ]);

    const inBoot2 = hookHangs();
    expect(restoreLeftBehind(inBoot2, records, table(running, 'boot-2'))).toStrictEqual(records.slice(0, 1));
    const inBoot1 = hookHangs();
    expect(restoreLeftBehind(inBoot1, records, table(running, 'boot-1'))).toStrictEqual(records.slice(0, 2));
    const none = hookHangs();
    expect(restoreLeftBehind(none, [], table(running, 'boot-1'))).toStrictEqual([]);
    expect(none.restored).toBeUndefined();
  });

  /** Restored pid 1001 for RELOAD and 1002 for EVERY; `cleared` counts the hook runs the end of one queued. */
  function restoredTwo() {
    const running = new Map([
      [1001, entry(1001, '500')],
      [1002, entry(1002, '600')],
    ]);
    const hangs: HookHangs = hookHangs();
    const queued = { runs: 0 };
    hangs.onCleared = () => {
      queued.runs += 1;
    };
    restoreLeftBehind(
      hangs,
      [
        { ...RELOAD, pid: 1001, startTime: '500' },
        { ...EVERY, pid: 1002, startTime: '600' },
      ],
      table(running),
    );
    return { running, hangs, queued, processes: table(running) };
  }

  it('looked for: nothing ended, nothing run; one ended: its hook free, a run queued once, the other still watched', () => {
    const { running, hangs, queued, processes } = restoredTwo();
    expect(pollRestoredLeftBehind(hangs, processes, silentLogger())).toBe(true);
    expect(queued.runs).toBe(0);
    expect(hangs.processes.size).toBe(2);

    running.delete(1001);
    expect(pollRestoredLeftBehind(hangs, processes, silentLogger())).toBe(true);
    expect(queued.runs).toBe(1);
    expect([...hangs.processes.keys()]).toEqual([hook(EVERY)]);

    // Its pid now another process's (another start time): ended too. None left: nothing more to watch.
    running.set(1002, entry(1002, '601'));
    expect(pollRestoredLeftBehind(hangs, processes, silentLogger())).toBe(false);
    expect(queued.runs).toBe(2);
    expect(hangs.processes.size).toBe(0);
    expect(pollRestoredLeftBehind(hookHangs(), processes, silentLogger())).toBe(false);
  });

  it('one the health check already found gone (hooksLeftBehind) is still seen to end: its hook run queued', () => {
    const { running, hangs, queued, processes } = restoredTwo();
    running.delete(1001);
    expect(hooksLeftBehind(hangs, processes).map((left) => left.pid)).toEqual([1002]);
    expect(pollRestoredLeftBehind(hangs, processes, silentLogger())).toBe(true);
    expect(queued.runs).toBe(1);
    expect([...(hangs.restored?.keys() ?? [])]).toEqual([hook(EVERY)]);
  });

  it('a watch with nothing restored ends at once', async () => {
    const clock = {
      sleep: async () => {
        throw new Error('never waited');
      },
    };
    await expect(
      watchRestoredLeftBehind(hookHangs(), {
        clock,
        signal: new AbortController().signal,
        processes: table(new Map()),
        logger: silentLogger(),
      }),
    ).resolves.toBeUndefined();
  });

  it('a restored process that ended leaves alone a process of its hook given up on since this start', () => {
    const { running, hangs, processes } = restoredTwo();
    const since = { ...RELOAD, process: entry(2001, '900') };
    hangs.processes.set(hook(RELOAD), since);
    hangs.onCleared = undefined;
    running.delete(1001);
    expect(pollRestoredLeftBehind(hangs, processes, silentLogger())).toBe(true);
    expect(hangs.processes.get(hook(RELOAD))).toBe(since);
  });

  it('the watch ends once none is left, when stopped during its wait or after it, and when its clock fails', async () => {
    const { running, hangs, queued, processes } = restoredTwo();
    const controller = new AbortController();
    let waits = 0;
    // Each wait: pid 1001 ends after the first, pid 1002 after the second.
    const clock = {
      sleep: async () => {
        waits += 1;
        running.delete(waits === 1 ? 1001 : 1002);
      },
    };
    await watchRestoredLeftBehind(hangs, {
      clock,
      signal: controller.signal,
      processes,
      logger: silentLogger(),
    });
    expect(waits).toBe(2);
    expect(queued.runs).toBe(2);
    expect(hangs.restored?.size).toBe(0);

    // Stopped while it waited: it looks no more, whatever ended meanwhile.
    const stopped = restoredTwo();
    const stopping = new AbortController();
    const stopClock = {
      sleep: async () => {
        stopped.running.clear();
        stopping.abort();
      },
    };
    await watchRestoredLeftBehind(stopped.hangs, {
      clock: stopClock,
      signal: stopping.signal,
      processes: stopped.processes,
      logger: silentLogger(),
    });
    expect(stopped.hangs.restored?.size).toBe(2);
    expect(stopped.queued.runs).toBe(0);

    // A clock whose wait fails (not a stop): the watch ends rather than looking without waiting.
    const failing = restoredTwo();
    const failClock = {
      sleep: async () => {
        throw new Error('the clock failed');
      },
    };
    await watchRestoredLeftBehind(failing.hangs, {
      clock: failClock,
      signal: new AbortController().signal,
      processes: failing.processes,
      logger: silentLogger(),
    });
    expect(failing.hangs.restored?.size).toBe(2);
  });
});
