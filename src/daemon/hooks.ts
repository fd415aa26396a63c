// Post-pass hooks: run each configured command once when a pass changed files matching its glob.
import { type ChildProcess, type SpawnOptions, spawn } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { isProxyVariable, splitProxyCredentials } from '../api/proxy.js';
import { compileGlob } from '../config/glob-match.js';
import type { Clock } from '../lib/clock.js';
import { systemClock } from '../lib/clock.js';
import { errorMessage } from '../lib/errors.js';
import type { Logger } from '../lib/logger.js';
import type { HookProcessLeftBehind, OwedHookPaths } from '../store/state.js';
import {
  environHolds,
  hookProcesses,
  hookRunProcessTable,
  type ProcessEntry,
  type ProcessTable,
  procProcessTable,
  signalQuietly,
  stillRunning,
} from './hook-processes.js';
import { NOTIFY_FD_VARIABLE } from './watchdog.js';

/** Same shape as the config's `hooks` entries (HookConfig in src/config/schema.ts). */
export interface HookSpec {
  match: string;
  run: readonly [string, ...string[]];
  timeoutSeconds: number;
  /** The proxy variables with their credentials (`user:password@`); without them when not true. */
  proxyCredentials?: boolean | undefined;
}

export interface HookRunResult {
  match: string;
  argv: readonly string[];
  changedPaths: string[];
  /** null when the process did not exit on its own (killed by a signal) or never started. */
  exitCode: number | null;
  signal: NodeJS.Signals | null;
  timedOut: boolean;
  durationMs: number;
  /** The last STDERR_TAIL_BYTES of stderr at most, from a line start when cut (ByteTail), decoded as UTF-8. */
  stderrTail: string;
  /**
   * Why the hook did not run or was stopped: a spawn failure (`spawn /bin/sh E2BIG`), a refusal (`not run: ...`),
   * a give-up or an abort. A program that is not there is the shell's exit 127 instead (`spawnThroughShell`).
   */
  error?: string;
  /** Processes it started that were still running when it ended: each was sent SIGTERM, then SIGKILL. */
  leftovers: { pid: number; command: string }[];
  /**
   * Its own process when SIGKILL had not ended it a kill grace later (uninterruptible sleep on a hung mount): the
   * run was given up on and left behind, so the hooks after it could run.
   */
  abandoned?: { pid: number; command: string };
}

/** Starts a hook's process: `spawnThroughShell` by default; a stand-in in tests. */
export type SpawnHook = (command: string, args: string[], options: SpawnOptions) => ChildProcess;

/**
 * Enters the hook's directory and execs its program (searching PATH as execvp does) in the child. Its name is
 * `$0`, which prefixes the shell's own errors (`config-agent-hook: 1: exec: /x: not found`, exit 127).
 */
const CHILD_ENTRY = 'cd -- "$1" || exit 126; shift; exec "$@"';

/**
 * child_process.spawn of `/bin/sh` (a local file), which changes to `options.cwd` and execs the hook's program
 * itself. libuv's spawn holds the agent's one thread until the child has exec'd or failed to: a chdir to a
 * directory on a hung NFS or FUSE mount (rootDir), or an exec of a program there, never returns, and the whole
 * agent stopped (no pass, no local API, no SIGTERM handled; seen with a FUSE mount nobody serves). Now only the
 * shell's exec is waited on; what hangs after it hangs in the hook's own process, which its timeout ends (FUSE
 * waits end on SIGKILL) or gives up on (NFS). A program that cannot be run is the shell's exit 127 (not found) or
 * 126 (not executable, or the directory cannot be entered) with its reason in stderr, not a spawn error.
 */
export function spawnThroughShell(command: string, args: string[], options: SpawnOptions): ChildProcess {
  const cwd = options.cwd === undefined ? '.' : String(options.cwd);
  return spawn('/bin/sh', ['-c', CHILD_ENTRY, 'config-agent-hook', cwd, command, ...args], {
    ...options,
    cwd: '/',
  });
}

/** A hook's process given up on after SIGKILL, still there (in uninterruptible sleep) as far as the runner knows. */
export interface LeftBehind {
  /** The hook's glob, which names it in logs and health. */
  match: string;
  /** The hook's command: with its glob, it names the hook in state.json (`HookProcessLeftBehind`). */
  run: readonly string[];
  process: ProcessEntry;
}

/** Changed paths of runs of one hook that were not started, for its next run that starts. */
export interface OwedPaths {
  /** The hook's glob and command, which name it in state.json (`OwedHookPaths`). */
  match: string;
  run: readonly string[];
  paths: Set<string>;
  /** More than MAX_OWED_PATHS were owed: the next run is told its list is incomplete (CHANGED_TRUNCATED_ENV). */
  truncated: boolean;
}

/**
 * What earlier runs left hanging, kept across runs by the caller (the daemon keeps one for its life): a hook whose
 * process was given up on does not run again while that process is there, a program whose check has not
 * answered is not checked again (each hung check holds one of libuv's four pool threads) until it answers, and no
 * check starts while MAX_UNANSWERED_CHECKS have not answered. The paths of a run not started wait for the next
 * run of that hook that starts.
 */
export interface HookHangs {
  /** By hook (`hookKey`): the process of a run given up on after SIGKILL. */
  processes: Map<string, LeftBehind>;
  /** Programs (`run[0]`) whose check before a run has not answered yet. */
  checks: Set<string>;
  /** By hook (`hookKey`): the paths of its runs not started (refused), bounded by MAX_OWED_PATHS. */
  owed: Map<string, OwedPaths>;
  /**
   * Called when something that refused runs has gone: a process given up on has ended, a hung check answered.
   * The daemon queues a hook run then, so the paths owed are run without waiting for another change.
   */
  onCleared?: (() => void) | undefined;
  /**
   * Called when a run is given up on and its process left behind (now in `processes`): the daemon records it in
   * state.json at once (bound26), so a crash before the next pass's write still holds the hook back after it.
   */
  onLeftBehind?: (() => void) | undefined;
  /** /proc as runHooks reads it when given no table: one for the daemon's life (processes whose environ hung). */
  table?: ProcessTable;
  /**
   * By hook: the processes left behind that state.json kept from before this start (`restoreLeftBehind`). No exit
   * event comes for them (not this agent's children): `pollRestoredLeftBehind` looks for their end.
   */
  restored?: Map<string, ProcessEntry>;
}

export function hookHangs(): HookHangs {
  return { processes: new Map(), checks: new Set(), owed: new Map() };
}

/** The hook processes given up on that are still there (pid and start time): for health and metrics. */
export function hooksLeftBehind(
  hangs: HookHangs,
  processes: ProcessTable = procProcessTable(),
): { hook: string; pid: number; command: string }[] {
  const out: { hook: string; pid: number; command: string }[] = [];
  for (const [key, left] of hangs.processes) {
    const now = stillRunning(processes, left.process);
    if (now === undefined) hangs.processes.delete(key);
    else out.push({ hook: left.match, pid: now.pid, command: now.comm });
  }
  return out;
}

/**
 * Every path some hook is owed, once each: at most MAX_OWED_PATHS a hook. For a runner that keeps no per-hook record
 * (`owedRecords`): the daemon's stop hands them back to its pending paths then.
 */
export function owedPathList(hangs: HookHangs): string[] {
  const all = new Set<string>();
  for (const owed of hangs.owed.values()) for (const changed of owed.paths) all.add(changed);
  return [...all];
}

/**
 * Each hook's owed paths as state.json keeps them (sorted, the cut-short mark): the daemon records them after each
 * hook run, in the same turn as it settles the pending paths that run took, so whatever state.json a crash or power
 * cut leaves holds every path either pending or owed to the hooks that have not heard of it.
 */
export function owedRecords(hangs: HookHangs): OwedHookPaths[] {
  const out: OwedHookPaths[] = [];
  for (const owed of hangs.owed.values()) {
    if (owed.paths.size === 0 && !owed.truncated) continue;
    const record = { match: owed.match, run: owed.run, paths: [...owed.paths].sort() };
    out.push(owed.truncated ? { ...record, truncated: true } : record);
  }
  return out.sort((a, b) => (hookKey(a) < hookKey(b) ? -1 : hookKey(a) > hookKey(b) ? 1 : 0));
}

/** Takes back what state.json kept (`owedRecords`) into `hangs`, as a start finds it; the next run prunes hooks gone. */
export function restoreOwed(hangs: HookHangs, records: readonly OwedHookPaths[]): void {
  for (const record of records) {
    hangs.owed.set(hookKey(record), {
      match: record.match,
      run: [...record.run],
      paths: new Set(record.paths),
      truncated: record.truncated === true,
    });
  }
}

/**
 * Each hook's process left behind as state.json keeps it (pid, start time and the boot, from `processes`), sorted: recorded with the owed paths,
 * so an agent started after a crash or a power cut still holds that hook back while the process is there (hook30).
 */
export function leftBehindRecords(hangs: HookHangs, processes: ProcessTable): HookProcessLeftBehind[] {
  const out: HookProcessLeftBehind[] = [];
  const bootId = hangs.processes.size === 0 ? undefined : processes.bootId?.();
  for (const left of hangs.processes.values())
    out.push({
      match: left.match,
      run: left.run,
      pid: left.process.pid,
      startTime: left.process.startTime,
      ...(bootId === undefined ? {} : { bootId }),
    });
  const key = (left: HookProcessLeftBehind) => JSON.stringify([left.match, left.run, left.pid]);
  return out.sort((a, b) => (key(a) < key(b) ? -1 : key(a) > key(b) ? 1 : 0));
}

/**
 * Takes back what state.json kept (`leftBehindRecords`) as a start finds it: a record whose pid runs with the same
 * start time (`/proc/<pid>/stat` field 22; another start time is a pid handed out again) in the same boot (a record
 * of another boot is stale: `HookProcessLeftBehind.bootId`) is that process, still
 * there: its hook is held back as before, and `pollRestoredLeftBehind` watches for its end. Returns those taken.
 */
export function restoreLeftBehind(
  hangs: HookHangs,
  records: readonly HookProcessLeftBehind[],
  processes: ProcessTable,
): HookProcessLeftBehind[] {
  const taken: HookProcessLeftBehind[] = [];
  const bootId = records.length === 0 ? undefined : processes.bootId?.();
  for (const record of records) {
    // Recorded in another boot: every process of that boot is gone, whichever now has its pid and start time.
    if (record.bootId !== undefined && bootId !== undefined && record.bootId !== bootId) continue;
    const now = stillRunning(processes, { ...record, ppid: 0, pgrp: 0, session: 0, comm: '', exited: false });
    if (now === undefined) continue;
    const key = hookKey(record);
    hangs.processes.set(key, { match: record.match, run: [...record.run], process: now });
    hangs.restored ??= new Map();
    hangs.restored.set(key, now);
    taken.push(record);
  }
  return taken;
}

/**
 * Looks once for the end of each restored process left behind (no exit event comes for them); any that ended is no
 * longer left behind, and `onCleared` is called so the paths owed run. Returns whether any is still watched.
 */
export function pollRestoredLeftBehind(hangs: HookHangs, processes: ProcessTable, logger: Logger): boolean {
  const restored = hangs.restored;
  if (restored === undefined) return false;
  let cleared = false;
  for (const [key, entry] of restored) {
    if (stillRunning(processes, entry) !== undefined) continue;
    restored.delete(key);
    if (hangs.processes.get(key)?.process === entry) hangs.processes.delete(key);
    logger.info({ pid: entry.pid }, 'the process of a hook run given up on before this start has ended');
    cleared = true;
  }
  if (cleared) hangs.onCleared?.();
  return restored.size > 0;
}

/** How often a restored process left behind is looked for (one read of `/proc/<pid>/stat` each). */
export const LEFT_BEHIND_POLL_MS = 5_000;

/**
 * Polls the restored processes left behind on `clock` until none is left or `signal` aborts. Never rejects.
 */
export async function watchRestoredLeftBehind(
  hangs: HookHangs,
  options: { clock: Pick<Clock, 'sleep'>; signal: AbortSignal; processes: ProcessTable; logger: Logger },
): Promise<void> {
  while ((hangs.restored?.size ?? 0) > 0 && !options.signal.aborted) {
    try {
      await options.clock.sleep(LEFT_BEHIND_POLL_MS, options.signal);
    } catch {
      return;
    }
    if (options.signal.aborted) return;
    try {
      pollRestoredLeftBehind(hangs, options.processes, options.logger);
    } catch (error) {
      options.logger.error({ err: error }, 'could not look for a hook process left behind');
    }
  }
}

/** Whether some hook has paths waiting from a run that was not started. */
export function hookPathsOwed(hangs: HookHangs): boolean {
  return hangs.owed.size > 0;
}

export interface RunHooksOptions {
  /** The root directory: hooks run there, and `match` is relative to it. */
  cwd: string;
  /** The agent's environment; secrets are removed before a hook sees it. */
  env: NodeJS.ProcessEnv;
  logger: Logger;
  /** Aborting kills the running hook (whole process group) and skips the ones not yet started. */
  signal?: AbortSignal;
  /** Time between SIGTERM and SIGKILL after a timeout, an abort, or for what a hook left running. Default 2000. */
  killGraceMs?: number;
  clock?: Pick<Clock, 'monotonic'>;
  /** Where the hook's processes are looked up and signalled: /proc by default. */
  processes?: ProcessTable;
  /**
   * Asked just before each hook starts: why its program (`run[0]`) may no longer be run (another user could
   * have changed it since start), or undefined. Such a hook is not started; it counts as failed.
   */
  vetProgram?: (program: string) => Promise<string | undefined>;
  /** How long `vetProgram` may take (a `stat` on a hung mount never answers): then the run counts as failed. */
  programCheckMs?: number;
  /** What earlier runs left hanging; a fresh one (nothing) by default. */
  hangs?: HookHangs;
  /** spawnThroughShell by default. */
  spawn?: SpawnHook;
}

export const CHANGED_ENV = 'CONFIG_AGENT_CHANGED';
/**
 * A value of its own for each hook run, inherited by every process the hook starts: how one that left the hook's
 * session and lost its parent (a daemon that double-forked with setsid) is still known as the hook's.
 */
const HOOK_RUN_ENV = 'CONFIG_AGENT_HOOK_RUN';
/** Set to "1" when CHANGED_ENV could not hold every changed path (see `changedList`). */
export const CHANGED_TRUNCATED_ENV = 'CONFIG_AGENT_CHANGED_TRUNCATED';
/**
 * Linux's MAX_ARG_STRLEN (32 pages): no single `NAME=value` string of a new process may be longer, or exec
 * fails with E2BIG and the hook never runs. A first sync of a few thousand files reaches it.
 */
const MAX_ENV_STRING_BYTES = 32 * 4096;
export const STDERR_TAIL_BYTES = 4096;
const STDOUT_TAIL_BYTES = 1024;
const DEFAULT_KILL_GRACE_MS = 2000;
const DEFAULT_PROGRAM_CHECK_MS = 10_000;
/**
 * The most program checks (of different programs) left unanswered at once: each hung `stat` holds one of libuv's
 * four pool threads, which every fs call of the agent shares; two leave the writer two.
 */
export const MAX_UNANSWERED_CHECKS = 2;
/** The most paths one hook keeps from runs not started; past it the run is told its list is incomplete. */
export const MAX_OWED_PATHS = 4096;
/**
 * After the hook's own process exits, how long to wait for its pipes to close. A grandchild it left running
 * in the background may hold them open forever; waiting on that would stall every later pass.
 */
const PIPE_DRAIN_MS = 250;
/** How often, within the kill grace, to look whether what a hook left running has gone after SIGTERM. */
const LEFTOVER_POLL_MS = 50;

// A hook must never see the API key: not the variable, not the credentials directory that holds the file.
const SECRET_ENV = /API_?KEY|CREDENTIALS_DIRECTORY/i;
/**
 * systemd's notify and watchdog variables and the wrapper's descriptor (daemon/watchdog.ts) are the agent's own: a
 * hook's program that speaks sd_notify sent its READY=1 or WATCHDOG=1 as the agent's unit (refused and logged by
 * systemd under NotifyAccess=main; taken under a drop-in's NotifyAccess=all), and one that checks NOTIFY_SOCKET
 * took itself for a service systemd watches (review33).
 */
const SUPERVISOR_ENV = new Set(['NOTIFY_SOCKET', 'WATCHDOG_USEC', 'WATCHDOG_PID', NOTIFY_FD_VARIABLE]);

/** The changed paths (relative to rootDir) that the hook's glob matches, dot files included, in input order. */
export function matchingPaths(hook: HookSpec, changedPaths: readonly string[]): string[] {
  const isMatch = compileGlob(hook.match);
  return [...new Set(changedPaths)].filter((changed) => isMatch(changed));
}

/**
 * The environment a hook runs with: the agent's minus anything secret, plus the list of changed paths. The proxy
 * variables (HTTPS_PROXY, http_proxy, ...) go without their credentials unless the hook is configured to get
 * them (`proxyCredentials`): a hook's `curl -v` printed them to its stderr, which the agent logs.
 */
function hookEnvironment(
  env: NodeJS.ProcessEnv,
  changedPaths: readonly string[],
  proxyCredentials: boolean,
  listRoom: number,
  cutShort: boolean,
): NodeJS.ProcessEnv {
  const out: NodeJS.ProcessEnv = {};
  for (const [name, value] of Object.entries(env)) {
    if (
      value !== undefined &&
      !SECRET_ENV.test(name) &&
      !SUPERVISOR_ENV.has(name) &&
      name !== CHANGED_TRUNCATED_ENV &&
      name !== HOOK_RUN_ENV
    )
      out[name] = proxyCredentials || !isProxyVariable(name) ? value : splitProxyCredentials(value).value;
  }
  const { list, truncated } = changedList(changedPaths, listRoom);
  out[CHANGED_ENV] = list;
  if (truncated || cutShort) out[CHANGED_TRUNCATED_ENV] = '1';
  return out;
}

/**
 * The changed paths, one per line, as many whole paths as one environment string can carry: a hook must run
 * even when the list is too long for exec, and it is then told the list is incomplete.
 */
function changedList(
  changedPaths: readonly string[],
  listRoom: number,
): { list: string; truncated: boolean } {
  // `NAME=` before the value and the terminating NUL after it count too.
  const room = Math.min(listRoom, MAX_ENV_STRING_BYTES - Buffer.byteLength(CHANGED_ENV) - 2);
  let bytes = 0;
  let count = 0;
  for (const changed of changedPaths) {
    const needed = Buffer.byteLength(changed) + (count === 0 ? 0 : 1);
    if (bytes + needed > room) break;
    bytes += needed;
    count += 1;
  }
  return { list: changedPaths.slice(0, count).join('\n'), truncated: count < changedPaths.length };
}

/**
 * Keeps the last `limit` bytes written to it. A tail cut inside a line starts at the next line: the line cut short
 * could end with the rest of a secret (a proxy's `Basic` token), which the log's scrub, taking whole secrets only,
 * would not see. Kept from the cut when that line is its last.
 */
class ByteTail {
  private chunks: Buffer[] = [];
  private size = 0;
  /** Whether bytes before the kept chunks were dropped. */
  private dropped = false;

  constructor(private readonly limit: number) {}

  push(chunk: Buffer): void {
    this.chunks.push(chunk);
    this.size += chunk.length;
    while (this.chunks.length > 1 && this.size - this.chunks[0]!.length >= this.limit) {
      this.size -= this.chunks.shift()!.length;
      this.dropped = true;
    }
  }

  text(): string {
    const all = Buffer.concat(this.chunks);
    const start = Math.max(0, all.length - this.limit);
    let tail = all.subarray(start);
    const midLine = start > 0 ? all[start - 1] !== 0x0a : this.dropped;
    const newline = tail.indexOf(0x0a);
    if (midLine && newline !== -1 && newline < tail.length - 1) tail = tail.subarray(newline + 1);
    // Do not start the tail in the middle of a multi-byte character.
    while (tail.length > 0 && (tail[0]! & 0xc0) === 0x80) tail = tail.subarray(1);
    return tail.toString('utf8');
  }
}

interface RunOneOptions {
  /** The most bytes the list of changed paths may take (less than one environment string allows: see runHooks). */
  listRoom: number;
  cwd: string;
  env: NodeJS.ProcessEnv;
  logger: Logger;
  signal: AbortSignal | undefined;
  killGraceMs: number;
  clock: Pick<Clock, 'monotonic'>;
  processes: ProcessTable;
  spawn: SpawnHook;
  /** The list is known to be incomplete already (paths owed past MAX_OWED_PATHS). */
  cutShort: boolean;
  /** Called when the process of a run given up on ends at last. */
  onLeftBehindEnded: (pid: number) => void;
}

function runOne(hook: HookSpec, changedPaths: string[], options: RunOneOptions): Promise<HookRunResult> {
  const { clock, killGraceMs, signal, processes } = options;
  const started = clock.monotonic();
  const stderr = new ByteTail(STDERR_TAIL_BYTES);
  const stdout = new ByteTail(STDOUT_TAIL_BYTES);
  const [command, ...args] = hook.run;
  const base = { match: hook.match, argv: [...hook.run], changedPaths, leftovers: [] };

  const runMark = `${HOOK_RUN_ENV}=${randomUUID()}`;
  return new Promise<HookRunResult>((resolve) => {
    let child: ChildProcess;
    try {
      child = options.spawn(command, args, {
        cwd: options.cwd,
        env: {
          ...hookEnvironment(
            options.env,
            changedPaths,
            hook.proxyCredentials === true,
            options.listRoom,
            options.cutShort,
          ),
          [HOOK_RUN_ENV]: runMark.slice(HOOK_RUN_ENV.length + 1),
        },
        stdio: ['ignore', 'pipe', 'pipe'],
        // Its own session and process group (setsid), so everything it starts can be found and ended.
        detached: true,
        shell: false,
        windowsHide: true,
      });
    } catch (error) {
      resolve({
        ...base,
        exitCode: null,
        signal: null,
        timedOut: false,
        durationMs: clock.monotonic() - started,
        stderrTail: '',
        error: errorMessage(error),
      });
      return;
    }

    let timedOut = false;
    let stopReason: string | undefined;
    let spawnError: string | undefined;
    let exit: { code: number | null; signal: NodeJS.Signals | null } | undefined;
    let settled = false;
    let killTimer: NodeJS.Timeout | undefined;
    let drainTimer: NodeJS.Timeout | undefined;
    let leftoverTimer: NodeJS.Timeout | undefined;
    let stdoutClosed = false;
    let stderrClosed = false;
    let drained = false;
    let leftoversEnded = false;
    let abandoned: ProcessEntry | undefined;
    const leftovers: ProcessEntry[] = [];
    // The hook's processes seen so far, each with its start time: a pid handed out again is never taken for one.
    const known = new Map<number, ProcessEntry>();
    const leader = child.pid;
    // Its start time (read while it cannot have been reaped): what carries the mark started no earlier.
    const leaderStart = leader === undefined ? undefined : Number(processes.get(leader)?.startTime);
    /**
     * The pids of `table` that carry the run's mark: those the session and group do not tie to the hook, started no
     * earlier than it, their environ read all at once (one reader per look: bound26; pid by pid for a table without).
     */
    const markedIn = (table: readonly ProcessEntry[]): Set<number> => {
      if (leader === undefined || leaderStart === undefined || Number.isNaN(leaderStart)) return new Set();
      const asked = table
        .filter(
          (entry) =>
            entry.pid !== process.pid &&
            !entry.exited &&
            entry.session !== leader &&
            entry.pgrp !== leader &&
            Number(entry.startTime) >= leaderStart,
        )
        .map((entry) => entry.pid);
      if (asked.length === 0) return new Set();
      const environs =
        processes.environs?.(asked) ?? new Map(asked.map((pid) => [pid, processes.environ(pid)]));
      const marked = new Set<number>();
      for (const [pid, environ] of environs)
        if (environ !== undefined && environHolds(environ, runMark)) marked.add(pid);
      return marked;
    };

    /**
     * Records the processes of the hook's session and their descendants. Only while the session id is surely
     * still the hook's: its leader not reaped yet, or reaped a moment ago in this same turn of the event loop
     * (its pid stays taken while any process uses it as a group or session id).
     */
    const lookAround = (): void => {
      if (leader === undefined) return;
      const table = processes.list() ?? [];
      const marked = markedIn(table);
      for (const entry of hookProcesses(table, leader, (each) => marked.has(each.pid))) {
        // A pid seen before with another start time was handed out again, here to another of the hook's.
        if (entry.pid !== leader && known.get(entry.pid)?.startTime !== entry.startTime)
          known.set(entry.pid, entry);
      }
    };

    const runningKnown = (): ProcessEntry[] => {
      const running: ProcessEntry[] = [];
      for (const entry of known.values()) {
        const now = stillRunning(processes, entry);
        if (now !== undefined) running.push(now);
      }
      return running;
    };

    /**
     * Signals the hook's process group and each known process outside it. The group by its id only while it is
     * surely the hook's: the leader unreaped (`groupIsOurs`), or a process seen in it before still in it.
     */
    const signalHook = (sig: NodeJS.Signals, groupIsOurs: boolean): ProcessEntry[] => {
      const running = runningKnown();
      const groupStands = groupIsOurs || running.some((entry) => entry.pgrp === leader);
      if (leader !== undefined && groupStands) signalQuietly(processes, -leader, sig);
      for (const entry of running) {
        if (!groupStands || entry.pgrp !== leader) signalQuietly(processes, entry.pid, sig);
      }
      return running;
    };

    /**
     * SIGKILL did not end it within the grace (uninterruptible sleep: a read on a hung NFS or FUSE mount): no
     * 'exit' may ever come, and waiting on it would hold every later hook. The run ends here, failed.
     */
    const giveUp = (): void => {
      if (exit !== undefined || settled) return;
      abandoned = leader === undefined ? undefined : processes.get(leader);
      const gaveUp = `gave up: pid ${leader} did not end within ${killGraceMs} ms of SIGKILL (uninterruptible sleep on a hung mount?): left behind`;
      stopReason = stopReason === undefined ? gaveUp : `${stopReason}; ${gaveUp}`;
      finish();
    };

    const stop = (why: 'timeout' | 'abort'): void => {
      if (exit !== undefined || killTimer !== undefined) return;
      if (why === 'timeout') timedOut = true;
      else stopReason = 'aborted: the agent is shutting down';
      lookAround();
      signalHook('SIGTERM', true);
      killTimer = setTimeout(() => {
        if (exit !== undefined) return;
        lookAround();
        signalHook('SIGKILL', true);
        killTimer = setTimeout(giveUp, killGraceMs);
      }, killGraceMs);
    };

    /** After the leader's exit: what it left running gets SIGTERM, then SIGKILL once the grace has passed. */
    const endLeftovers = (): void => {
      lookAround();
      const running = signalHook('SIGTERM', true);
      leftovers.push(...running);
      if (running.length === 0) {
        leftoversEnded = true;
        return;
      }
      // A stopped process acts on SIGTERM only once continued.
      signalHook('SIGCONT', true);
      const deadline = clock.monotonic() + killGraceMs;
      const check = (): void => {
        const past = clock.monotonic() >= deadline;
        if (past) signalHook('SIGKILL', false);
        if (past || runningKnown().length === 0) {
          leftoversEnded = true;
          maybeFinish();
        } else {
          leftoverTimer = setTimeout(check, LEFTOVER_POLL_MS);
        }
      };
      leftoverTimer = setTimeout(check, LEFTOVER_POLL_MS);
    };

    const timeoutTimer = setTimeout(() => stop('timeout'), hook.timeoutSeconds * 1000);
    const onAbort = (): void => stop('abort');
    signal?.addEventListener('abort', onAbort, { once: true });

    const finish = (): void => {
      if (settled) return;
      settled = true;
      clearTimeout(timeoutTimer);
      clearTimeout(drainTimer);
      clearTimeout(killTimer);
      clearTimeout(leftoverTimer);
      signal?.removeEventListener('abort', onAbort);
      child.stdout?.destroy();
      child.stderr?.destroy();
      const result: HookRunResult = {
        ...base,
        exitCode: exit?.code ?? null,
        signal: exit?.signal ?? null,
        timedOut,
        durationMs: clock.monotonic() - started,
        stderrTail: stderr.text(),
        leftovers: leftovers.map((entry) => ({ pid: entry.pid, command: entry.comm })),
      };
      const error = spawnError ?? stopReason;
      if (error !== undefined) result.error = error;
      if (leader !== undefined && exit === undefined)
        result.abandoned = { pid: leader, command: abandoned?.comm ?? command };
      const out = stdout.text();
      if (out !== '') options.logger.debug({ hook: hook.match, stdoutTail: out }, 'hook output');
      resolve(result);
    };

    function maybeFinish(): void {
      if (exit !== undefined && leftoversEnded && (drained || (stdoutClosed && stderrClosed))) finish();
    }

    child.stdout?.on('data', (chunk: Buffer) => stdout.push(chunk));
    child.stderr?.on('data', (chunk: Buffer) => stderr.push(chunk));
    child.stdout?.on('close', () => {
      stdoutClosed = true;
      maybeFinish();
    });
    child.stderr?.on('close', () => {
      stderrClosed = true;
      maybeFinish();
    });
    child.on('exit', (code, exitSignal) => {
      if (settled) {
        // Only a run given up on (giveUp) settles before its exit.
        options.logger.info(
          { hook: hook.match, pid: leader },
          'the process of a hook run given up on has ended',
        );
        if (leader !== undefined) options.onLeftBehindEnded(leader);
        return;
      }
      exit = { code, signal: exitSignal };
      clearTimeout(killTimer);
      // In the same turn as the reap: the session id cannot have been handed out again yet.
      endLeftovers();
      drainTimer = setTimeout(() => {
        drained = true;
        maybeFinish();
      }, PIPE_DRAIN_MS);
      maybeFinish();
    });
    child.on('error', (error) => {
      // Spawn failures (ENOENT, EACCES) arrive here without an 'exit'.
      spawnError = errorMessage(error);
      if (child.pid === undefined) {
        exit ??= { code: null, signal: null };
        leftoversEnded = true;
        finish();
      }
    });

    if (signal?.aborted) stop('abort');
  });
}

/** A hook that was not started because its program could be changed by another user. */
function refusedRun(hook: HookSpec, changedPaths: string[], error: string): HookRunResult {
  return {
    match: hook.match,
    argv: [...hook.run],
    changedPaths,
    exitCode: null,
    signal: null,
    timedOut: false,
    durationMs: 0,
    stderrTail: '',
    error,
    leftovers: [],
  };
}

/** Which hook a run is of, for HookHangs: its glob and its command. */
function hookKey(hook: Pick<HookSpec, 'match'> & { run: readonly string[] }): string {
  return JSON.stringify([hook.match, hook.run]);
}

/**
 * The program check with a deadline: a `stat` on a hung mount never answers, and waiting on it would hold every
 * later hook. Never rejects. While it has not answered, the program is in `hangs.checks`.
 */
function boundedCheck(
  vet: (program: string) => Promise<string | undefined>,
  program: string,
  ms: number,
  hangs: HookHangs,
): Promise<string | undefined> {
  hangs.checks.add(program);
  let late = false;
  const check = Promise.resolve()
    .then(() => vet(program))
    // A check that cannot be made refuses too: never a rejection here, which would stop every later hook run.
    .catch((error: unknown) => `its check failed: ${errorMessage(error)}`)
    .finally(() => {
      hangs.checks.delete(program);
      // Runs were refused while it hung: the paths they owe can run now.
      if (late) hangs.onCleared?.();
    });
  let timer: NodeJS.Timeout | undefined;
  const deadline = new Promise<string>((resolve) => {
    timer = setTimeout(() => {
      late = true;
      resolve(
        `its check (a stat of the program and the directories on its way) did not answer within ${ms} ms (a hung mount?)`,
      );
    }, ms);
  });
  return Promise.race([check, deadline]).finally(() => clearTimeout(timer));
}

/**
 * Why `hook` is not to be started now, or undefined: its process given up on before is still there, its program's
 * check hangs or too many checks hang, or the check found a problem (or did not answer in time).
 */
async function whyNotRun(
  hook: HookSpec,
  key: string,
  hangs: HookHangs,
  processes: ProcessTable,
  vet: ((program: string) => Promise<string | undefined>) | undefined,
  checkMs: number,
): Promise<string | undefined> {
  const left = hangs.processes.get(key);
  const stillThere = left === undefined ? undefined : stillRunning(processes, left.process);
  if (left !== undefined && stillThere === undefined) hangs.processes.delete(key);
  if (stillThere !== undefined)
    return `its run before was given up on and its process (pid ${stillThere.pid}, ${stillThere.comm}) is still there: SIGKILL has not ended it (a hung mount?)`;
  if (vet === undefined) return undefined;
  const program = hook.run[0];
  if (hangs.checks.has(program))
    return `an earlier check of it has not answered yet (a hung mount?): not checked again until it does`;
  if (hangs.checks.size >= MAX_UNANSWERED_CHECKS)
    return `not checked: the checks of ${[...hangs.checks].join(', ')} have not answered yet (a hung mount?), and each holds one of the agent's four fs threads: no other check starts until one answers`;
  return boundedCheck(vet, program, checkMs, hangs);
}

/** Keeps `paths` for the hook's next run that starts: at most MAX_OWED_PATHS, then the list is marked cut short. */
function owePaths(hangs: HookHangs, hook: HookSpec, key: string, paths: readonly string[]): OwedPaths {
  let owed = hangs.owed.get(key);
  if (owed === undefined) {
    owed = { match: hook.match, run: [...hook.run], paths: new Set(), truncated: false };
    hangs.owed.set(key, owed);
  }
  for (const changed of paths) {
    if (owed.paths.has(changed)) continue;
    if (owed.paths.size >= MAX_OWED_PATHS) {
      owed.truncated = true;
      break;
    }
    owed.paths.add(changed);
  }
  return owed;
}

/** True when a hook run did not end on its own with exit code 0. */
export function hookFailed(result: HookRunResult): boolean {
  return result.error !== undefined || result.timedOut || result.exitCode !== 0 || result.signal !== null;
}

/**
 * Runs, one after another, every hook whose glob matches at least one of `changedPaths` (relative to the
 * root), each exactly once. Never throws: each failure is logged and returned, and the next hook still runs.
 * Hooks not yet started when `signal` aborts are skipped and absent from the result.
 */
export async function runHooks(
  hooks: readonly HookSpec[],
  changedPaths: readonly string[],
  options: RunHooksOptions,
): Promise<HookRunResult[]> {
  const results: HookRunResult[] = [];
  const hangs = options.hangs ?? hookHangs();
  hangs.table ??= hookRunProcessTable();
  const runOptions: RunOneOptions = {
    listRoom: MAX_ENV_STRING_BYTES,
    cwd: options.cwd,
    env: options.env,
    logger: options.logger,
    signal: options.signal,
    killGraceMs: options.killGraceMs ?? DEFAULT_KILL_GRACE_MS,
    clock: options.clock ?? systemClock,
    processes: options.processes ?? hangs.table,
    spawn: options.spawn ?? spawnThroughShell,
    cutShort: false,
    onLeftBehindEnded: (pid) => {
      for (const [key, left] of hangs.processes) if (left.process.pid === pid) hangs.processes.delete(key);
      hangs.onCleared?.();
    },
  };
  const checkMs = options.programCheckMs ?? DEFAULT_PROGRAM_CHECK_MS;
  // Paths owed to a hook no longer configured (a reload removed or changed it) are owed to nobody.
  const configured = new Set(hooks.map(hookKey));
  for (const key of hangs.owed.keys()) if (!configured.has(key)) hangs.owed.delete(key);
  for (const hook of hooks) {
    const key = hookKey(hook);
    const matched = matchingPaths(hook, changedPaths);
    const owed = hangs.owed.get(key);
    if (matched.length === 0 && owed === undefined) continue;
    if (options.signal?.aborted) {
      options.logger.info({ hook: hook.match }, 'hook skipped: the agent is shutting down');
      continue;
    }
    // The paths of its runs not started first, then this batch's: one run hears of all of them.
    const paths = owed === undefined ? matched : [...new Set([...owed.paths, ...matched])];
    const refused = await whyNotRun(hook, key, hangs, runOptions.processes, options.vetProgram, checkMs);
    if (refused !== undefined) {
      owePaths(hangs, hook, key, matched);
      // Only paths owed from before: refused again for what refused them then, counted and logged then.
      if (matched.length === 0) {
        options.logger.debug({ hook: hook.match, owed: paths.length, why: refused }, 'hook still held back');
        continue;
      }
    } else {
      hangs.owed.delete(key);
    }
    const cutShort = owed?.truncated === true;
    let result =
      refused === undefined
        ? await runOne(hook, paths, { ...runOptions, cutShort })
        : refusedRun(hook, paths, `not run: ${hook.run[0]}: ${refused}`);
    // exec refused argv and environment together as too large (E2BIG: past ARG_MAX, a quarter of the stack limit,
    // 128 KiB at least, which the list alone may fill): run once more without the list, told it is cut short.
    if (refused === undefined && /\bE2BIG\b/.test(result.error ?? ''))
      result = await runOne(hook, paths, { ...runOptions, cutShort, listRoom: 0 });
    results.push(result);
    // Stopped by the agent's stop before it ended on its own: its owed paths are owed still (the pass's own stay
    // pending in state.json, which the daemon does not settle at a stop).
    if (refused === undefined && options.signal?.aborted === true && owed !== undefined) {
      owePaths(hangs, hook, key, [...owed.paths]);
      if (owed.truncated) owePaths(hangs, hook, key, []).truncated = true;
    }
    if (result.abandoned !== undefined) {
      // Its pid cannot be handed out again before it is reaped: what is there now is that process.
      const entry = runOptions.processes.get(result.abandoned.pid);
      if (entry !== undefined && !entry.exited) {
        hangs.processes.set(key, { match: hook.match, run: [...hook.run], process: entry });
        hangs.onLeftBehind?.();
      }
    }
    const fields = {
      hook: hook.match,
      argv: result.argv,
      changed: paths.length,
      exitCode: result.exitCode,
      signal: result.signal,
      timedOut: result.timedOut,
      durationMs: Math.round(result.durationMs),
    };
    if (hookFailed(result)) {
      options.logger.warn(
        { ...fields, stderrTail: result.stderrTail, error: result.error },
        result.abandoned !== undefined
          ? `hook given up on: its process (pid ${result.abandoned.pid}, ${result.abandoned.command}) did not end after SIGKILL and is left behind; the next hooks go on`
          : result.timedOut
            ? `hook killed after ${hook.timeoutSeconds}s timeout`
            : result.error !== undefined
              ? `hook failed: ${result.error}`
              : 'hook failed',
      );
    } else {
      options.logger.info(fields, 'hook ran');
    }
    if (result.leftovers.length > 0) {
      options.logger.warn(
        { hook: hook.match, leftovers: result.leftovers },
        `hook left ${result.leftovers.length} process(es) running: ended them (SIGTERM, then SIGKILL after ${runOptions.killGraceMs} ms)`,
      );
    }
  }
  // The environ reader's thread (hook-processes.ts) is not kept between batches: ~10 MiB idle.
  if (options.processes === undefined) runOptions.processes.close?.();
  return results;
}
