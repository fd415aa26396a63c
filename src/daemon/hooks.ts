// Post-pass hooks: run each configured command once when a pass changed files matching its glob.
import { type ChildProcess, spawn } from 'node:child_process';
import picomatch from 'picomatch';
import type { Clock } from '../lib/clock.js';
import { systemClock } from '../lib/clock.js';
import { errnoCode, errorMessage } from '../lib/errors.js';
import type { Logger } from '../lib/logger.js';

/** Same shape as the config's `hooks` entries (HookConfig in src/config/schema.ts). */
export interface HookSpec {
  match: string;
  run: readonly [string, ...string[]];
  timeoutSeconds: number;
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
  /** Last STDERR_TAIL_BYTES of stderr, decoded as UTF-8. */
  stderrTail: string;
  /** Why the hook did not run or was stopped: a spawn failure (`spawn ENOENT: ...`) or an abort. */
  error?: string;
}

export interface RunHooksOptions {
  /** The root directory: hooks run there, and `match` is relative to it. */
  cwd: string;
  /** The agent's environment; secrets are removed before a hook sees it. */
  env: NodeJS.ProcessEnv;
  logger: Logger;
  /** Aborting kills the running hook (whole process group) and skips the ones not yet started. */
  signal?: AbortSignal;
  /** Time between SIGTERM and SIGKILL after a timeout or abort. Default 2000. */
  killGraceMs?: number;
  clock?: Pick<Clock, 'monotonic'>;
  /**
   * Asked just before each hook starts: why its program (`run[0]`) may no longer be run (another user could
   * have changed it since start), or undefined. Such a hook is not started; it counts as failed.
   */
  vetProgram?: (program: string) => Promise<string | undefined>;
}

export const CHANGED_ENV = 'CONFIG_AGENT_CHANGED';
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
/**
 * After the hook's own process exits, how long to wait for its pipes to close. A grandchild it left running
 * in the background may hold them open forever; waiting on that would stall every later pass.
 */
const PIPE_DRAIN_MS = 250;

// A hook must never see the API key: not the variable, not the credentials directory that holds the file.
const SECRET_ENV = /API_?KEY|CREDENTIALS_DIRECTORY/i;

/** The changed paths (relative to rootDir) that the hook's glob matches, dot files included, in input order. */
export function matchingPaths(hook: HookSpec, changedPaths: readonly string[]): string[] {
  const isMatch = picomatch(hook.match, { dot: true });
  return [...new Set(changedPaths)].filter((changed) => isMatch(changed));
}

/** The environment a hook runs with: the agent's minus anything secret, plus the list of changed paths. */
export function hookEnvironment(env: NodeJS.ProcessEnv, changedPaths: readonly string[]): NodeJS.ProcessEnv {
  const out: NodeJS.ProcessEnv = {};
  for (const [name, value] of Object.entries(env)) {
    if (value !== undefined && !SECRET_ENV.test(name) && name !== CHANGED_TRUNCATED_ENV) out[name] = value;
  }
  const { list, truncated } = changedList(changedPaths);
  out[CHANGED_ENV] = list;
  if (truncated) out[CHANGED_TRUNCATED_ENV] = '1';
  return out;
}

/**
 * The changed paths, one per line, as many whole paths as one environment string can carry: a hook must run
 * even when the list is too long for exec, and it is then told the list is incomplete.
 */
function changedList(changedPaths: readonly string[]): { list: string; truncated: boolean } {
  // `NAME=` before the value and the terminating NUL after it count too.
  const room = MAX_ENV_STRING_BYTES - Buffer.byteLength(CHANGED_ENV) - 2;
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

/** Keeps the last `limit` bytes written to it. */
class ByteTail {
  private chunks: Buffer[] = [];
  private size = 0;

  constructor(private readonly limit: number) {}

  push(chunk: Buffer): void {
    this.chunks.push(chunk);
    this.size += chunk.length;
    while (this.chunks.length > 1 && this.size - this.chunks[0]!.length >= this.limit) {
      this.size -= this.chunks.shift()!.length;
    }
  }

  text(): string {
    const all = Buffer.concat(this.chunks);
    let tail = all.subarray(Math.max(0, all.length - this.limit));
    // Do not start the tail in the middle of a multi-byte character.
    while (tail.length > 0 && (tail[0]! & 0xc0) === 0x80) tail = tail.subarray(1);
    return tail.toString('utf8');
  }
}

/** Signals the hook's whole process group, so grandchildren (a shell's children) die with it. */
function killGroup(child: ChildProcess, signal: NodeJS.Signals): void {
  if (child.pid === undefined) return;
  try {
    process.kill(-child.pid, signal);
  } catch (error) {
    // ESRCH: the group is already gone, which is what we wanted.
    if (errnoCode(error) !== 'ESRCH') {
      try {
        child.kill(signal);
      } catch {
        // Nothing more can be done from here; the exit (or not) is reported by the caller.
      }
    }
  }
}

interface RunOneOptions {
  cwd: string;
  env: NodeJS.ProcessEnv;
  logger: Logger;
  signal: AbortSignal | undefined;
  killGraceMs: number;
  clock: Pick<Clock, 'monotonic'>;
}

function runOne(hook: HookSpec, changedPaths: string[], options: RunOneOptions): Promise<HookRunResult> {
  const { clock, killGraceMs, signal } = options;
  const started = clock.monotonic();
  const stderr = new ByteTail(STDERR_TAIL_BYTES);
  const stdout = new ByteTail(STDOUT_TAIL_BYTES);
  const [command, ...args] = hook.run;
  const base = { match: hook.match, argv: [...hook.run], changedPaths };

  return new Promise<HookRunResult>((resolve) => {
    let child: ChildProcess;
    try {
      child = spawn(command, args, {
        cwd: options.cwd,
        env: hookEnvironment(options.env, changedPaths),
        stdio: ['ignore', 'pipe', 'pipe'],
        // Its own process group, so a timeout can kill everything it started.
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
    let stdoutClosed = false;
    let stderrClosed = false;

    const stop = (why: 'timeout' | 'abort'): void => {
      if (exit !== undefined || killTimer !== undefined) return;
      if (why === 'timeout') timedOut = true;
      else stopReason = 'aborted: the agent is shutting down';
      killGroup(child, 'SIGTERM');
      // Kept even after the leader exits: a grandchild that ignores SIGTERM must still go.
      killTimer = setTimeout(() => killGroup(child, 'SIGKILL'), killGraceMs);
    };

    const timeoutTimer = setTimeout(() => stop('timeout'), hook.timeoutSeconds * 1000);
    const onAbort = (): void => stop('abort');
    signal?.addEventListener('abort', onAbort, { once: true });

    const finish = (): void => {
      if (settled) return;
      settled = true;
      clearTimeout(timeoutTimer);
      clearTimeout(drainTimer);
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
      };
      const error = spawnError ?? stopReason;
      if (error !== undefined) result.error = error;
      const out = stdout.text();
      if (out !== '') options.logger.debug({ hook: hook.match, stdoutTail: out }, 'hook output');
      resolve(result);
    };

    const maybeFinish = (): void => {
      if (exit !== undefined && stdoutClosed && stderrClosed) finish();
    };

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
      exit = { code, signal: exitSignal };
      // Only a pending escalation for an already-killed group stays; a clean exit needs nothing more.
      if (!timedOut && stopReason === undefined) clearTimeout(killTimer);
      drainTimer = setTimeout(finish, PIPE_DRAIN_MS);
      maybeFinish();
    });
    child.on('error', (error) => {
      // Spawn failures (ENOENT, EACCES) arrive here without an 'exit'.
      spawnError = errorMessage(error);
      if (child.pid === undefined) {
        exit ??= { code: null, signal: null };
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
  };
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
  const runOptions: RunOneOptions = {
    cwd: options.cwd,
    env: options.env,
    logger: options.logger,
    signal: options.signal,
    killGraceMs: options.killGraceMs ?? DEFAULT_KILL_GRACE_MS,
    clock: options.clock ?? systemClock,
  };
  for (const hook of hooks) {
    const matched = matchingPaths(hook, changedPaths);
    if (matched.length === 0) continue;
    if (options.signal?.aborted) {
      options.logger.info({ hook: hook.match }, 'hook skipped: the agent is shutting down');
      continue;
    }
    // A check that cannot be made refuses too: never a rejection here, which would stop every later hook run.
    const refused = await options
      .vetProgram?.(hook.run[0])
      .catch((error: unknown) => `its check failed: ${errorMessage(error)}`);
    const result =
      refused === undefined
        ? await runOne(hook, matched, runOptions)
        : refusedRun(hook, matched, `not run: ${hook.run[0]}: ${refused}`);
    results.push(result);
    const fields = {
      hook: hook.match,
      argv: result.argv,
      changed: matched.length,
      exitCode: result.exitCode,
      signal: result.signal,
      timedOut: result.timedOut,
      durationMs: Math.round(result.durationMs),
    };
    if (hookFailed(result)) {
      options.logger.warn(
        { ...fields, stderrTail: result.stderrTail, error: result.error },
        result.timedOut
          ? `hook killed after ${hook.timeoutSeconds}s timeout`
          : result.error !== undefined
            ? `hook failed: ${result.error}`
            : 'hook failed',
      );
    } else {
      options.logger.info(fields, 'hook ran');
    }
  }
  return results;
}
