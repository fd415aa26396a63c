// The /proc reading that decides which processes a hook's cleanup may signal: a stat line parsed as the kernel
// writes it (a comm holding parentheses and spaces, zombies), the hook's processes told from the rest of the
// table, a pid handed out again told from the process first seen under it, and the run's mark matched exactly.
import { spawn } from 'node:child_process';
import { describe, expect, it } from 'vitest';
import {
  environHolds,
  hookProcesses,
  type ProcessEntry,
  type ProcessTable,
  parseStat,
  procProcessTable,
  stillRunning,
} from './hook-processes.js';

/** A stat line as /proc/<pid>/stat has it: the fields after the comm up to starttime (the 20th after it). */
function statLine(
  pid: number,
  comm: string,
  state: string,
  ppid: number,
  pgrp: number,
  session: number,
  start: number,
) {
  const middle = '0 -1 4194560 100 0 0 0 1 2 0 0 20 0 1 0';
  return `${pid} (${comm}) ${state} ${ppid} ${pgrp} ${session} ${middle} ${start} 1000 200 18446744073709551615\n`;
}

function entry(fields: Partial<ProcessEntry> & { pid: number }): ProcessEntry {
  return {
    ppid: 1,
    pgrp: fields.pid,
    session: fields.pid,
    startTime: '100',
    comm: 'x',
    exited: false,
    ...fields,
  };
}

describe('parseStat', () => {
  it('reads every field it keeps, with a comm holding parentheses and spaces', () => {
    expect(parseStat(statLine(4242, 'a) b (c', 'S', 17, 4000, 3999, 987654))).toEqual({
      pid: 4242,
      ppid: 17,
      pgrp: 4000,
      session: 3999,
      startTime: '987654',
      comm: 'a) b (c',
      exited: false,
    });
  });

  it('takes a zombie or a dead process as exited, any other state as not', () => {
    const exited = (state: string) => parseStat(statLine(5, 'z', state, 1, 5, 5, 9))?.exited;
    expect(['Z', 'X', 'x'].map(exited)).toEqual([true, true, true]);
    expect(['R', 'S', 'D', 'T', 't', 'I'].map(exited)).toEqual([false, false, false, false, false, false]);
  });

  it('answers undefined for what is not a whole stat line', () => {
    expect(parseStat('')).toBeUndefined();
    expect(parseStat('4242 no parentheses S 1 2 3')).toBeUndefined();
    expect(parseStat('4242 )backwards( S 1 2 3')).toBeUndefined();
    expect(parseStat('4242 (cut) S 1 4242 4242 0 -1')).toBeUndefined();
    expect(parseStat(statLine(4242, 'x', 'S', 1, 2, 3, 4).replace('4242', 'abc'))).toBeUndefined();
  });

  it("reads this process's own line", () => {
    const self = procProcessTable().get(process.pid);
    expect(self?.pid).toBe(process.pid);
    expect(self?.ppid).toBe(process.ppid);
    expect(self?.exited).toBe(false);
    expect(Number(self?.startTime)).toBeGreaterThan(0);
  });
});

describe('hookProcesses', () => {
  const leader = 500;
  const table = [
    entry({ pid: leader, session: leader, pgrp: leader }),
    // Its session, in a group of its own (set -m).
    entry({ pid: 501, ppid: leader, session: leader, pgrp: 501 }),
    // Its group, in another session (setsid would have made it its own group too; a group member all the same).
    entry({ pid: 502, ppid: leader, session: 777, pgrp: leader }),
    // A double-forked daemon: own session, reparented to init, found by the mark.
    entry({ pid: 503, ppid: 1, session: 503, pgrp: 503, comm: 'marked' }),
    // A child of that daemon: a descendant.
    entry({ pid: 504, ppid: 503, session: 503, pgrp: 503 }),
    // A zombie of the session: exited, never signalled.
    entry({ pid: 505, ppid: leader, session: leader, pgrp: leader, exited: true }),
    // Unrelated processes, one a child of init like the daemon.
    entry({ pid: 600, ppid: 1, session: 600, pgrp: 600 }),
    entry({ pid: 601, ppid: 600, session: 600, pgrp: 600 }),
    // The agent itself, whatever it looks like.
    entry({ pid: process.pid, ppid: 1, session: leader, pgrp: leader }),
  ];

  it('finds its session, its group, the marked and their descendants; nothing else', () => {
    const found = hookProcesses(table, leader, (e) => e.comm === 'marked').map((e) => e.pid);
    expect(found.sort((a, b) => a - b)).toEqual([leader, 501, 502, 503, 504]);
  });

  it('without a mark, a process outside its session and group is not its', () => {
    const found = hookProcesses(table, leader).map((e) => e.pid);
    expect(found.sort((a, b) => a - b)).toEqual([leader, 501, 502]);
  });
});

describe('stillRunning', () => {
  function tableOf(entries: ProcessEntry[]): ProcessTable {
    return {
      list: () => entries,
      get: (pid) => entries.find((e) => e.pid === pid),
      environ: () => undefined,
      kill: () => undefined,
    };
  }
  const seen = entry({ pid: 42, startTime: '1000' });

  it('is the process seen before only with the same start time, and not once it exited', () => {
    expect(stillRunning(tableOf([seen]), seen)).toEqual(seen);
    // The pid handed out again: another process, never signalled for the first.
    expect(stillRunning(tableOf([{ ...seen, startTime: '2000' }]), seen)).toBeUndefined();
    expect(stillRunning(tableOf([{ ...seen, exited: true }]), seen)).toBeUndefined();
    expect(stillRunning(tableOf([]), seen)).toBeUndefined();
  });
});

describe('environHolds', () => {
  const environ = (...variables: string[]) => Buffer.from(`${variables.join('\0')}\0`);

  it('matches the variable whole, wherever it is', () => {
    expect(environHolds(environ('RUN=abc', 'PATH=/bin'), 'RUN=abc')).toBe(true);
    expect(environHolds(environ('PATH=/bin', 'RUN=abc'), 'RUN=abc')).toBe(true);
    expect(environHolds(environ('X=1', 'RUN=abd', 'Y=RUN=abc'), 'RUN=abc')).toBe(false);
    // A longer value, or a longer name ending in it, is another variable.
    expect(environHolds(environ('RUN=abcd'), 'RUN=abc')).toBe(false);
    expect(environHolds(environ('XRUN=abc'), 'RUN=abc')).toBe(false);
    // A near miss first, the variable after it.
    expect(environHolds(environ('XRUN=abc', 'RUN=abc'), 'RUN=abc')).toBe(true);
  });

  it("reads a child's environment as it was started", async () => {
    const child = spawn('sleep', ['30'], {
      env: { ...process.env, CONFIG_AGENT_PROBE: 'r14' },
      stdio: 'ignore',
    });
    try {
      await new Promise((resolve) => child.once('spawn', resolve));
      const table = procProcessTable();
      const env = table.environ(child.pid!);
      expect(env !== undefined && environHolds(env, 'CONFIG_AGENT_PROBE=r14')).toBe(true);
      expect(table.list()?.some((e) => e.pid === child.pid)).toBe(true);
    } finally {
      child.kill('SIGKILL');
      await new Promise((resolve) => child.once('exit', resolve));
    }
  });
});
