// Child processes for the bench: wall time from spawn to exit, and peak RSS through GNU time when present.
import { type ChildProcess, execFile, execFileSync, spawn } from 'node:child_process';
import { existsSync } from 'node:fs';
import { mkdtemp, readFile, rm } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';

const GNU_TIME = '/usr/bin/time';
export const hasGnuTime = existsSync(GNU_TIME);

export interface TimedRun {
  ms: number;
  code: number | null;
  stdout: string;
  stderr: string;
  /** Peak resident set of the process (and its waited-for children), KiB; undefined without GNU time. */
  maxRssKiB: number | undefined;
  /** CPU seconds (user + system) of the process, from GNU time with `rss`: does not depend on the load. */
  cpuSeconds: number | undefined;
  /** Its user and system parts, from the same GNU time line. */
  userSeconds: number | undefined;
  systemSeconds: number | undefined;
}

export interface RunOptions {
  env?: NodeJS.ProcessEnv;
  timeoutMs?: number;
  /** Measure peak RSS with GNU time (costs one extra exec, ~1 ms, inside the timed span). */
  rss?: boolean;
}

/** Runs `command args…` to completion and measures it. Never throws for a non-zero exit: callers judge. */
export async function runTimed(
  command: string,
  args: readonly string[],
  options: RunOptions = {},
): Promise<TimedRun> {
  const env = { PATH: process.env.PATH, HOME: process.env.HOME, ...options.env };
  let rssDir: string | undefined;
  let file = command;
  let argv = [...args];
  if (options.rss && hasGnuTime) {
    rssDir = await mkdtemp(path.join(os.tmpdir(), 'bench-rss-'));
    file = GNU_TIME;
    argv = ['-f', '%M %U %S', '-o', path.join(rssDir, 'rss'), command, ...args];
  }
  const started = performance.now();
  const child = spawn(file, argv, { env, stdio: ['ignore', 'pipe', 'pipe'] });
  const result = await collect(child, options.timeoutMs ?? 30 * 60_000);
  const ms = performance.now() - started;
  let maxRssKiB: number | undefined;
  let cpuSeconds: number | undefined;
  let userSeconds: number | undefined;
  let systemSeconds: number | undefined;
  if (rssDir !== undefined) {
    const text = await readFile(path.join(rssDir, 'rss'), 'utf8').catch(() => '');
    const last = /^(\d+) (\d+\.\d+) (\d+\.\d+)$/.exec(text.trim().split('\n').pop() ?? '');
    if (last !== null) {
      maxRssKiB = Number(last[1]);
      userSeconds = Number(last[2]);
      systemSeconds = Number(last[3]);
      cpuSeconds = userSeconds + systemSeconds;
    }
    await rm(rssDir, { recursive: true, force: true });
  }
  return { ms, ...result, maxRssKiB, cpuSeconds, userSeconds, systemSeconds };
}

function collect(
  child: ChildProcess,
  timeoutMs: number,
): Promise<Omit<TimedRun, 'ms' | 'maxRssKiB' | 'cpuSeconds' | 'userSeconds' | 'systemSeconds'>> {
  return new Promise((resolve, reject) => {
    let stdout = '';
    let stderr = '';
    child.stdout?.setEncoding('utf8').on('data', (chunk: string) => {
      stdout += chunk;
    });
    child.stderr?.setEncoding('utf8').on('data', (chunk: string) => {
      stderr += chunk;
    });
    const timer = setTimeout(() => child.kill('SIGKILL'), timeoutMs);
    child.once('error', (error) => {
      clearTimeout(timer);
      reject(error);
    });
    child.once('close', (code) => {
      clearTimeout(timer);
      resolve({ code, stdout, stderr });
    });
  });
}

export const hasPerf = (() => {
  try {
    execFileSync('perf', ['stat', '-x,', '-e', 'task-clock', 'true'], { stdio: 'ignore' });
    return true;
  } catch {
    return false;
  }
})();

/**
 * CPU time of `command args…` (all its threads) from `perf stat -e task-clock`, in ms, or undefined without
 * perf or when the command fails. GNU time's user + system come in 10 ms steps, each truncated: `node -e 0`'s
 * ~16–20 ms read as 10 (docs/performance.md, "`--once` with nothing to do").
 */
export async function taskClockMs(
  command: string,
  args: readonly string[],
  env: NodeJS.ProcessEnv = {},
): Promise<number | undefined> {
  if (!hasPerf) return undefined;
  const dir = await mkdtemp(path.join(os.tmpdir(), 'bench-perf-'));
  try {
    const out = path.join(dir, 'perf.csv');
    const run = await runTimed('perf', ['stat', '-x,', '-e', 'task-clock', '-o', out, command, ...args], {
      env,
    });
    if (run.code !== 0) return undefined;
    const line = (await readFile(out, 'utf8')).split('\n').find((l) => l.includes('task-clock'));
    const ms = Number(line?.split(',')[0]);
    return Number.isFinite(ms) ? ms : undefined;
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
}

/** Resident set size of a running process from /proc, in KiB. */
export async function currentRssKiB(pid: number): Promise<number | undefined> {
  return (await currentMemoryKiB(pid))?.rss;
}

/**
 * RSS and its anonymous part (heap, malloc, stacks: what the process itself allocated), KiB. The rest is
 * file-backed — mostly the pages of the node binary that were touched — shared and reclaimable.
 */
export async function currentMemoryKiB(pid: number): Promise<{ rss: number; anon: number } | undefined> {
  const status = await readFile(`/proc/${pid}/status`, 'utf8').catch(() => '');
  const rss = /^VmRSS:\s+(\d+)\s+kB/m.exec(status);
  const anon = /^RssAnon:\s+(\d+)\s+kB/m.exec(status);
  return rss && anon ? { rss: Number(rss[1]), anon: Number(anon[1]) } : undefined;
}

export function median(values: readonly number[]): number {
  if (values.length === 0) return Number.NaN;
  const sorted = [...values].sort((a, b) => a - b);
  const middle = Math.floor(sorted.length / 2);
  return sorted.length % 2 === 1 ? sorted[middle]! : (sorted[middle - 1]! + sorted[middle]!) / 2;
}

/** Dirty and under-writeback page cache, KiB (/proc/meminfo): what the disk still owes earlier runs. */
export async function unwrittenKiB(): Promise<number | undefined> {
  const meminfo = await readFile('/proc/meminfo', 'utf8').catch(() => '');
  const dirty = /^Dirty:\s+(\d+)\s+kB/m.exec(meminfo);
  const writeback = /^Writeback:\s+(\d+)\s+kB/m.exec(meminfo);
  return dirty && writeback ? Number(dirty[1]) + Number(writeback[1]) : undefined;
}

/**
 * Waits until the disk has written back what earlier runs left dirty (`sync -f` of the file system the worlds are
 * made on, then /proc/meminfo's Dirty + Writeback under 4 MiB, at most 30 s), so that no timed run pays for its
 * predecessors' writeback. Every contender gets the same settling before each of its timed runs. (The slow-down
 * from one repetition to the next seen on this VM outlives it: docs/performance.md, Method.) Not a plain `sync`:
 * that waits on every mount, and a hung FUSE mount (the hung-mount tests') held each bench run for good. Returns the
 * milliseconds waited.
 */
export async function settleDisk(): Promise<number> {
  const started = performance.now();
  await new Promise<void>((resolve) => execFile('sync', ['-f', os.tmpdir()], () => resolve()));
  for (;;) {
    const unwritten = await unwrittenKiB();
    if (unwritten === undefined || unwritten < 4096 || performance.now() - started > 30_000) break;
    await new Promise((resolve) => setTimeout(resolve, 100));
  }
  return performance.now() - started;
}
