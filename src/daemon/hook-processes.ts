// The processes of a hook's session, found in /proc, and signals that reach only them (never a reused pid).
import { readdirSync, readFileSync } from 'node:fs';
import path from 'node:path';
import type { MessagePort, Worker } from 'node:worker_threads';

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
  /** Lets go of what reading took (procProcessTable's reader thread); a read after it starts another. */
  close?(): void;
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

/**
 * How long one read of `/proc/<pid>/environ` may hold the agent's thread: that read takes the process's `mmap_lock`,
 * which a process stuck on a hung mount can keep taken (`ps` hangs on its `cmdline` the same way).
 */
export const ENVIRON_READ_MS = 500;
/** How long the reader thread may take to start (once per table). */
const READER_START_MS = 5_000;
/** Reader threads left stuck in a read at most; past them environ is not read (its process is not taken as marked). */
export const MAX_STUCK_READERS = 2;

/** The reader thread's code: reads each file it is sent and answers on its port, then wakes the waiting thread. */
const READER_SOURCE = `
const { workerData } = require('node:worker_threads');
const { readFileSync } = require('node:fs');
const { port, flag } = workerData;
port.on('message', ({ id, file }) => {
  let bytes = null;
  try { bytes = readFileSync(file); } catch {}
  port.postMessage({ id, bytes });
  Atomics.store(flag, 0, id);
  Atomics.notify(flag, 0);
});
Atomics.store(flag, 0, -1);
Atomics.notify(flag, 0);
`;

interface Reader {
  worker: Worker;
  port: MessagePort;
  flag: Int32Array;
}

/** node:worker_threads as the reader takes it: only once a read is asked for; a stand-in in tests. */
export type WorkerThreads = () => typeof import('node:worker_threads');

/**
 * Reads files synchronously with a deadline: a thread of its own reads, the caller's thread waits for its answer
 * at most `ms` (Atomics.wait). A read past it is given up on ('late'): its thread stays stuck in the kernel, is left
 * (unref'd), and the next read starts another, at most MAX_STUCK_READERS stuck at once. When a stuck one's read
 * answers after all (a busy machine, a mount back), it ends and `freed` is told the file. A file not read at all
 * (MAX_STUCK_READERS stuck, or no thread to read with) is undefined, not 'late': nothing of it hung.
 */
export function boundedFileReader(
  ms = ENVIRON_READ_MS,
  freed: (file: string) => void = () => undefined,
  // node:worker_threads only once a read is asked for: a daemon without hooks never loads it (pino-bundle.test.ts).
  threads: WorkerThreads = () => process.getBuiltinModule('node:worker_threads'),
): {
  read(file: string): Buffer | undefined | 'late';
  close(): void;
} {
  let reader: Reader | undefined;
  let stuck = 0;
  let next = 0;
  const start = (): Reader | undefined => {
    const { MessageChannel, Worker } = threads();
    const flag = new Int32Array(new SharedArrayBuffer(4));
    const { port1, port2 } = new MessageChannel();
    let worker: Worker;
    try {
      worker = new Worker(READER_SOURCE, {
        eval: true,
        workerData: { port: port2, flag },
        transferList: [port2],
        stdout: false,
        stderr: false,
      });
    } catch {
      // No thread to be had (ERR_WORKER_INIT_FAILED, EAGAIN: the service's TasksMax= or the user's RLIMIT_NPROC
      // reached, as by a hook's processes): it threw out of the hook's 'exit' listener and ended the agent (review33).
      port1.close();
      return undefined;
    }
    worker.unref();
    port1.unref();
    worker.on('error', () => undefined);
    if (Atomics.wait(flag, 0, 0, READER_START_MS) === 'timed-out' && Atomics.load(flag, 0) === 0) {
      void worker.terminate();
      port1.close();
      return undefined;
    }
    return { worker, port: port1, flag };
  };
  return {
    read(file) {
      // Not read, nothing of it hung: unknown now, read again later (a 'late' pid was never read again; review33).
      if (stuck >= MAX_STUCK_READERS) return undefined;
      reader ??= start();
      if (reader === undefined) return undefined;
      next += 1;
      const id = next;
      Atomics.store(reader.flag, 0, 0);
      reader.port.postMessage({ id, file });
      // The answer is on the port before the flag is set: one wait, and one more look should a wake come early.
      for (let tries = 0; tries < 2; tries += 1) {
        const waited = Atomics.wait(reader.flag, 0, 0, ms);
        const answer = threads().receiveMessageOnPort(reader.port)?.message as
          | { id: number; bytes: Uint8Array | null }
          | undefined;
        if (answer?.id === id)
          return answer.bytes === null
            ? undefined
            : Buffer.from(answer.bytes.buffer, answer.bytes.byteOffset, answer.bytes.byteLength);
        if (waited === 'timed-out') break;
      }
      // Stuck in the kernel: left as it is (it cannot be ended while in the read), and no longer used.
      stuck += 1;
      reader.worker.once('exit', () => {
        stuck -= 1;
        freed(file);
      });
      void reader.worker.terminate();
      reader.port.close();
      reader = undefined;
      return 'late';
    },
    close() {
      if (reader === undefined) return;
      void reader.worker.terminate();
      reader.port.close();
      reader = undefined;
    },
  };
}

/**
 * /proc, synchronously: `stat` takes none of the process's locks and answers from memory. `environ` takes its
 * `mmap_lock` and is read through `boundedFileReader`: a process whose read does not answer in ENVIRON_READ_MS is
 * not read again (its environ is unknown: undefined).
 */
export function procProcessTable(
  procDir = '/proc',
  environMs = ENVIRON_READ_MS,
  threads?: WorkerThreads,
): ProcessTable {
  let reader: ReturnType<typeof boundedFileReader> | undefined;
  const unreadable = new Set<number>();
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
      if (unreadable.has(pid)) return undefined;
      reader ??= boundedFileReader(
        environMs,
        (file) => unreadable.delete(Number(path.basename(path.dirname(file)))),
        threads,
      );
      const bytes = reader.read(`${procDir}/${pid}/environ`);
      if (bytes !== 'late') return bytes;
      unreadable.add(pid);
      return undefined;
    },
    kill: (pid, signal) => {
      process.kill(pid, signal);
    },
    // Ends the reader thread (~10 MiB, ~30 ms of CPU to start): kept only while a hook batch runs. What stays stuck
    // still counts against MAX_STUCK_READERS.
    close: () => reader?.close(),
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
