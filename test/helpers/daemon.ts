// A running agent daemon (the compiled binary without --once) as integration tests drive it: logs, signals, exit.

import type { ChildProcess } from 'node:child_process';
import { readdir } from 'node:fs/promises';
import path from 'node:path';
import { callAgent, type LocalResponse } from '../../src/cli/local-client.js';
import { TEMP_PREFIX } from '../../src/store/path-guard.js';
import type { AgentHarness, RunResult, SpawnIdentity } from './harness.js';
import { waitFor } from './wait-for.js';

/** One pino JSON line the agent logged. */
export interface LogLine {
  level: string;
  msg: string;
  component?: string;
  [field: string]: unknown;
}

/** The summary the daemon logs after every pass (agent.ts #logPass). */
export interface PassLog extends LogLine {
  mode: 'full' | 'incremental';
  converged: boolean;
  reachable: boolean;
  counts: Record<string, number>;
}

export interface DaemonExit extends RunResult {
  /** From the signal being sent (or from start, when no signal was sent) to the process closing. */
  elapsedMs: number;
}

const PASS_MESSAGES = new Set(['pass finished', 'pass could not reach the service']);

export class DaemonProcess {
  readonly child: ChildProcess;
  readonly logs: LogLine[] = [];
  stdout = '';
  stderr = '';
  #exit: RunResult | undefined;
  readonly #closed: Promise<RunResult>;
  #signalSentAt = performance.now();
  #partialLine = '';

  private constructor(child: ChildProcess) {
    this.child = child;
    child.stdout?.setEncoding('utf8').on('data', (chunk: string) => {
      this.stdout += chunk;
    });
    child.stderr?.setEncoding('utf8').on('data', (chunk: string) => {
      this.stderr += chunk;
      this.#parseLogs(chunk);
    });
    this.#closed = new Promise((resolve, reject) => {
      child.on('error', reject);
      child.on('close', (code, signal) => {
        this.#exit = { code, signal, stdout: this.stdout, stderr: this.stderr };
        resolve(this.#exit);
      });
    });
  }

  /** Spawns the daemon (no --once) with the harness's config; `identity`: another node or entry (a launcher). */
  static start(harness: AgentHarness, env?: NodeJS.ProcessEnv, identity?: SpawnIdentity): DaemonProcess {
    const daemon = new DaemonProcess(harness.spawn([], env, identity));
    running.add(daemon);
    return daemon;
  }

  get alive(): boolean {
    return this.#exit === undefined;
  }

  get exit(): RunResult | undefined {
    return this.#exit;
  }

  /** Every pass summary logged so far, in order. */
  passes(): PassLog[] {
    return this.logs.filter((line): line is PassLog => PASS_MESSAGES.has(line.msg));
  }

  logsWith(msg: string | RegExp): LogLine[] {
    return this.logs.filter((line) => (typeof msg === 'string' ? line.msg === msg : msg.test(line.msg)));
  }

  /** Waits for a log line; fails early, with the log tail, when the daemon exits first. */
  waitForLog(predicate: (line: LogLine) => boolean, timeoutMs: number, what = 'log line'): Promise<LogLine> {
    return waitFor(
      () => {
        const found = this.logs.find(predicate);
        if (found === undefined && !this.alive) {
          throw new Error(`daemon exited (${JSON.stringify(this.#exit?.code)}) before ${what}`);
        }
        return found;
      },
      timeoutMs,
      { what: `${what}; stderr tail:\n${this.stderr.slice(-2000)}` },
    );
  }

  /** Waits until `count` passes (after the first `after` ones) matching `predicate` have been logged. */
  async waitForPasses(
    count: number,
    timeoutMs: number,
    options: { after?: number; predicate?: (pass: PassLog) => boolean } = {},
  ): Promise<PassLog[]> {
    const after = options.after ?? 0;
    const predicate = options.predicate ?? (() => true);
    return waitFor(
      () => {
        if (!this.alive) throw new Error(`daemon exited (${JSON.stringify(this.#exit?.code)})`);
        const matching = this.passes().slice(after).filter(predicate);
        return matching.length >= count ? matching : undefined;
      },
      timeoutMs,
      { what: `${count} more passes; stderr tail:\n${this.stderr.slice(-2000)}` },
    );
  }

  signal(signal: NodeJS.Signals): void {
    this.#signalSentAt = performance.now();
    this.child.kill(signal);
  }

  /** Sends `signal` and waits for the process to close, SIGKILLing it after `timeoutMs`. */
  stop(signal: NodeJS.Signals = 'SIGTERM', timeoutMs = 60_000): Promise<DaemonExit> {
    if (this.alive) this.signal(signal);
    return this.waitForExit(timeoutMs);
  }

  /** Waits for the process to close on its own, SIGKILLing it after `timeoutMs`. */
  async waitForExit(timeoutMs: number): Promise<DaemonExit> {
    const timer = setTimeout(() => this.child.kill('SIGKILL'), timeoutMs);
    try {
      const result = await this.#closed;
      return { ...result, elapsedMs: performance.now() - this.#signalSentAt };
    } finally {
      clearTimeout(timer);
    }
  }

  /** For afterEach: whatever state the test left, no daemon survives it. */
  async kill(): Promise<void> {
    running.delete(this);
    if (this.alive) this.child.kill('SIGKILL');
    await this.#closed.catch(() => undefined);
  }

  #parseLogs(chunk: string): void {
    const lines = (this.#partialLine + chunk).split('\n');
    this.#partialLine = lines.pop() ?? '';
    for (const line of lines) {
      if (!line.startsWith('{')) continue;
      try {
        const parsed = JSON.parse(line) as LogLine;
        if (typeof parsed.msg === 'string') this.logs.push(parsed);
      } catch {
        // A line that is not JSON (a crash trace) stays in `stderr` for the failure message.
      }
    }
  }
}

const running = new Set<DaemonProcess>();

/** Kills every daemon a test started and did not stop: call it in afterEach. */
export async function killAllDaemons(): Promise<void> {
  await Promise.all([...running].map((daemon) => daemon.kill()));
}

/** The agent's temp files (`.config-agent.tmp-*`) anywhere under `root`. */
export async function findTempFiles(root: string): Promise<string[]> {
  const files: string[] = [];
  const walk = async (dir: string): Promise<void> => {
    const entries = await readdir(dir, { withFileTypes: true }).catch(() => []);
    for (const entry of entries) {
      const full = path.join(dir, entry.name);
      if (entry.name.startsWith(TEMP_PREFIX)) files.push(full);
      if (entry.isDirectory()) await walk(full);
    }
  };
  await walk(root);
  return files;
}

export type LocalApiAnswer = LocalResponse;

/** One request to the agent's local API over its unix socket, as an application would make it. */
export function callLocalApi(socketPath: string, method: string, route: string): Promise<LocalApiAnswer> {
  return callAgent(socketPath, method, route, 15_000);
}
