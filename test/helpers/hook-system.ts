// Stand-ins for the hook runner's processes and logs: a spawn over a fake process table (a process named `stuck`
// ignores every signal, as one in uninterruptible sleep does), a logger whose lines a test can read, and the world
// of runHooks over them under fake timers.
import { EventEmitter } from 'node:events';
import { PassThrough, Writable } from 'node:stream';
import { vi } from 'vitest';
import type { ProcessEntry, ProcessTable } from '../../src/daemon/hook-processes.js';
import {
  type HookSpec,
  hookHangs,
  type RunHooksOptions,
  runHooks,
  type SpawnHook,
} from '../../src/daemon/hooks.js';
import { createLogger } from '../../src/lib/logger.js';
import { createSecretRegistry } from '../../src/lib/secrets.js';

interface FakeProcess {
  entry: ProcessEntry;
  child: EventEmitter & { pid: number; stdout: PassThrough; stderr: PassThrough };
  /** In uninterruptible sleep: signals stay pending, it never exits. */
  stuck: boolean;
}

/**
 * A process table and a spawn over it: a process ends on SIGTERM or SIGKILL unless it is stuck, which by default
 * one running `stuck` is.
 */
export function fakeSystem(
  isStuck: (command: string, pid: number) => boolean = (command) => command === 'stuck',
) {
  const table = new Map<number, FakeProcess>();
  const started: string[] = [];
  /** By pid: the changed-path list each process was started with, and whether it was marked incomplete. */
  const changed = new Map<number, { list: string[]; truncated: boolean }>();
  let nextPid = 1000;
  const exitNow = (proc: FakeProcess, signal: NodeJS.Signals | null, code: number | null) => {
    table.delete(proc.entry.pid);
    proc.child.stdout.end();
    proc.child.stderr.end();
    proc.child.emit('exit', code, signal);
  };
  const processes: ProcessTable = {
    list: () => [...table.values()].map((proc) => proc.entry),
    get: (pid) => table.get(pid)?.entry,
    environ: () => undefined,
    kill: (pid, signal) => {
      const proc = table.get(Math.abs(pid));
      if (proc === undefined) throw Object.assign(new Error('kill ESRCH'), { code: 'ESRCH' });
      if (proc.stuck || (signal !== 'SIGTERM' && signal !== 'SIGKILL')) return;
      queueMicrotask(() => exitNow(proc, signal, null));
    },
  };
  const spawn: SpawnHook = (command, _args, options) => {
    nextPid += 1;
    const pid = nextPid;
    const child = Object.assign(new EventEmitter(), {
      pid,
      stdout: new PassThrough(),
      stderr: new PassThrough(),
    });
    const proc: FakeProcess = {
      entry: {
        pid,
        ppid: process.pid,
        pgrp: pid,
        session: pid,
        startTime: String(pid),
        comm: command,
        exited: false,
      },
      child,
      stuck: isStuck(command, pid),
    };
    table.set(pid, proc);
    started.push(`${command}:${pid}`);
    const list = options.env?.CONFIG_AGENT_CHANGED ?? '';
    changed.set(pid, {
      list: list === '' ? [] : list.split('\n'),
      truncated: options.env?.CONFIG_AGENT_CHANGED_TRUNCATED === '1',
    });
    // A program that is not stuck exits 0 at once.
    if (!proc.stuck) queueMicrotask(() => exitNow(proc, null, 0));
    return child as unknown as ReturnType<SpawnHook>;
  };
  /** The stuck process finally ends (the mount came back). */
  const release = (pid: number) => {
    const proc = table.get(pid);
    if (proc !== undefined) exitNow(proc, 'SIGKILL', null);
  };
  return { processes, spawn, started, changed, release };
}

export function capturedLogger() {
  let text = '';
  const destination = new Writable({
    write(chunk: Buffer, _encoding, callback) {
      text += chunk.toString();
      callback();
    },
  });
  return {
    logger: createLogger({ level: 'debug', secrets: createSecretRegistry(), destination }),
    lines: () =>
      text
        .split('\n')
        .filter((line) => line !== '')
        .map((line) => JSON.parse(line) as { msg: string; hook?: string; pid?: number }),
  };
}

/** The hook's 1 s timeout, SIGTERM's 100 ms grace, SIGKILL's: a stuck run is given up on by then (fake time). */
export const GIVE_UP_MS = 1000 + 100 + 100 + 10;

/**
 * A hook runner's world under fake timers (vi.useFakeTimers): the stand-in processes, a logger whose lines can be
 * read, the hangs kept between runs (`cleared()` counts the daemon being told one ended), runHooks' options over
 * them (a 100 ms kill grace) and `run`, which runs `hooks` for `changed` letting fake time go on for `ms`.
 */
export function hookWorld() {
  const system = fakeSystem();
  const log = capturedLogger();
  const hangs = hookHangs();
  let cleared = 0;
  hangs.onCleared = () => {
    cleared += 1;
  };
  const options = {
    cwd: '/',
    env: {},
    logger: log.logger,
    killGraceMs: 100,
    clock: { monotonic: () => Date.now() },
    processes: system.processes,
    spawn: system.spawn,
    hangs,
  };
  const run = async (hooks: HookSpec[], changed: string[], ms = 10, extra: Partial<RunHooksOptions> = {}) => {
    const running = runHooks(hooks, changed, { ...options, ...extra });
    await vi.advanceTimersByTimeAsync(ms);
    return await running;
  };
  return { system, log, hangs, options, run, cleared: () => cleared };
}
