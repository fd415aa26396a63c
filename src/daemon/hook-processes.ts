// The processes of a hook's session, found in /proc, and signals that reach only them (never a reused pid).
import { readdirSync, readFileSync } from 'node:fs';

/** One process as `/proc/<pid>/stat` shows it. `startTime` (clock ticks since boot) tells a reused pid apart. */
export interface ProcessEntry {
  pid: number;
  ppid: number;
  pgrp: number;
  session: number;
  startTime: string;
  comm: string;
  /** Zombie or dead: it has exited and only waits to be reaped. */
  exited: boolean;
}

/** Reads /proc; injected in tests. */
export interface ProcessTable {
  /** Every process, or undefined where there is no /proc to read. */
  list(): ProcessEntry[] | undefined;
  /** One process, or undefined when there is none with that pid. */
  get(pid: number): ProcessEntry | undefined;
  /** The environment a process was started with (`/proc/<pid>/environ`), or undefined when it cannot be read. */
  environ(pid: number): Buffer | undefined;
  /** `process.kill`: throws ESRCH when nothing has that pid (or group, for a negative one). */
  kill(pid: number, signal: NodeJS.Signals): void;
}

export function parseStat(text: string): ProcessEntry | undefined {
  const open = text.indexOf('(');
  const close = text.lastIndexOf(')');
  if (open < 0 || close < open) return undefined;
  const fields = text.slice(close + 2).split(' ');
  // After the comm: state ppid pgrp session tty_nr tpgid flags minflt cminflt majflt cmajflt utime stime
  // cutime cstime priority nice num_threads itrealvalue starttime.
  const pid = Number(text.slice(0, open).trim());
  const [state, ppid, pgrp, session] = fields;
  const startTime = fields[19];
  if (!Number.isInteger(pid) || state === undefined || startTime === undefined) return undefined;
  return {
    pid,
    ppid: Number(ppid),
    pgrp: Number(pgrp),
    session: Number(session),
    startTime,
    comm: text.slice(open + 1, close),
    exited: state === 'Z' || state === 'X' || state === 'x',
  };
}

function readStat(procDir: string, pid: number): ProcessEntry | undefined {
  try {
    return parseStat(readFileSync(`${procDir}/${pid}/stat`, 'latin1'));
  } catch {
    return undefined;
  }
}

/** Synchronous on purpose: /proc never waits on a disk, and a scan is a few ms for a few hundred processes. */
export function procProcessTable(procDir = '/proc'): ProcessTable {
  return {
    list() {
      let names: string[];
      try {
        names = readdirSync(procDir);
      } catch {
        return undefined;
      }
      const entries: ProcessEntry[] = [];
      for (const name of names) {
        if (!/^[0-9]+$/.test(name)) continue;
        const entry = readStat(procDir, Number(name));
        if (entry !== undefined) entries.push(entry);
      }
      return entries;
    },
    get: (pid) => readStat(procDir, pid),
    environ: (pid) => {
      try {
        return readFileSync(`${procDir}/${pid}/environ`);
      } catch {
        return undefined;
      }
    },
    kill: (pid, signal) => {
      process.kill(pid, signal);
    },
  };
}

/**
 * The processes of the hook whose session and process group are `leader`'s pid: the members of that session
 * (whatever group they moved to), those `marked` says carry the hook's mark (one that left the session and
 * lost its parent: a daemon that double-forked), and every descendant of one. Only to be called while that
 * session is known to be the hook's: its leader not yet reaped, or just reaped (a pid is not handed out again
 * while a process still uses it as its group or session).
 */
export function hookProcesses(
  table: readonly ProcessEntry[],
  leader: number,
  marked: (entry: ProcessEntry) => boolean = () => false,
): ProcessEntry[] {
  const found = new Map<number, ProcessEntry>();
  for (const entry of table) {
    if (entry.pid === process.pid || entry.exited) continue;
    if (entry.session === leader || entry.pgrp === leader || marked(entry)) found.set(entry.pid, entry);
  }
  const children = new Map<number, ProcessEntry[]>();
  for (const entry of table) {
    const siblings = children.get(entry.ppid);
    if (siblings === undefined) children.set(entry.ppid, [entry]);
    else siblings.push(entry);
  }
  const queue = [...found.values()];
  for (let next = queue.pop(); next !== undefined; next = queue.pop()) {
    for (const child of children.get(next.pid) ?? []) {
      if (child.pid === process.pid || child.exited || found.has(child.pid)) continue;
      found.set(child.pid, child);
      queue.push(child);
    }
  }
  return [...found.values()];
}

/** The same process still running: same pid and start time (a pid handed out again starts later), not exited. */
export function stillRunning(table: ProcessTable, known: ProcessEntry): ProcessEntry | undefined {
  const now = table.get(known.pid);
  return now !== undefined && now.startTime === known.startTime && !now.exited ? now : undefined;
}

/** `kill` that never throws: the caller sees what is left by looking again. */
export function signalQuietly(table: ProcessTable, pid: number, signal: NodeJS.Signals): void {
  try {
    table.kill(pid, signal);
  } catch {
    // ESRCH: already gone, which is what was wanted. EPERM: one that changed its user (a setuid program);
    // nothing more can be done from here.
  }
}

/**
 * Whether `environ` (as /proc shows it: NUL-separated) holds exactly `variable` (`NAME=value`). A process's
 * initial environment, which it cannot change afterwards; only an exec with another environment drops it.
 */
export function environHolds(environ: Buffer, variable: string): boolean {
  const needle = Buffer.from(`${variable}\0`);
  let at = environ.indexOf(needle);
  while (at >= 0) {
    if (at === 0 || environ[at - 1] === 0) return true;
    at = environ.indexOf(needle, at + 1);
  }
  return false;
}
