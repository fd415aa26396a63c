// The processes of a hook's session, found in /proc, and signals that reach only them (never a reused pid).
import { readdirSync, readFileSync } from 'node:fs';
import path from 'node:path';

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
  /** `environ` of each pid, read together (one reader for all: bound26); a table without it is asked pid by pid. */
  environs?(pids: readonly number[]): Map<number, Buffer | undefined>;
  /** `process.kill`: throws ESRCH when nothing has that pid (or group, for a negative one). */
  kill(pid: number, signal: NodeJS.Signals): void;
  /** Lets go of what reading took; a read after it starts again. */
  close?(): void;
  /** This boot's id (`/proc/sys/kernel/random/boot_id`), or undefined where it cannot be read. */
  bootId?(): string | undefined;
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

function readBootId(procDir: string): string | undefined {
  try {
    const id = readFileSync(`${procDir}/sys/kernel/random/boot_id`, 'latin1').trim();
    return id === '' ? undefined : id;
  } catch {
    return undefined;
  }
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
/**
 * Added to a reader's bound for starting it: the bound is for the read, but `spawnSync`'s deadline also runs while
 * `sh` and grep are forked and exec'd, which on a loaded device takes hundreds of milliseconds (at a load of ~37 on
 * two cores, readers of answering files ran past 0.4-0.5 s: their environs taken for unknown, a hook's leftover
 * process not known for the hook's). A read stuck for good now holds the thread this much longer, at most
 * MAX_STUCK_READERS times until they end.
 */
export const READER_START_MS = 1_000;
/** Reader processes left stuck in a read at most; past them environ is not read (its process is not taken as marked). */
export const MAX_STUCK_READERS = 2;
/** The most bytes one read may answer (an environment is at most a quarter of the stack limit). */
const READ_MAX_BYTES = 32 * 1024 * 1024;
/**
 * The most records read of one file (grep's `-m`, per file): an environ of empty records (rewritten with NULs) grew
 * ~21-fold in the reader's output and passed READ_MAX_BYTES alone, and every file after it went unread (fix36).
 */
export const READ_MAX_RECORDS = 4096;
/**
 * Readers started again in one look after a reader's output passed READ_MAX_BYTES (many processes, or a few with
 * 6 MiB environs): each goes on from the file the last one was reading. Bounds a look's time; its memory is one
 * reader's output at a time.
 */
export const MAX_OVERFLOW_READERS = 2;

/** Read between each file and the next: one record (it holds no NUL) that never waits, telling where a file ended. */
const SEPARATOR_FILE = '/proc/version';
/**
 * SEPARATOR_FILE of a reader given `records`: its one record, `Linux` and a newline, is matched whole by `Linux.`
 * (GNU grep's `.` takes a newline under `-z`), so a record of another file passing for it is six bytes at most.
 */
const RECORDS_SEPARATOR_FILE = '/proc/sys/kernel/ostype';
/**
 * The most records read of one file when the reader is given `records` (grep's `-m`): a hook run's mark is once in an
 * environ, so a process forging marks costs the output at most ~1 KB (fix38).
 */
export const READ_MAX_MARKS = 8;

/**
 * A hook run's mark as a whole record (`CONFIG_AGENT_HOOK_RUN=` and a `randomUUID()`, as hooks.ts makes it): a POSIX
 * basic regular expression for grep's `-x` (GNU grep at /bin/grep, C locale: the reader's environment is empty).
 * procProcessTable's `records` for the hook runner: each process then answers ~100 bytes of the reader's output
 * whatever its environ holds, so no environ (6 MiB ones, or rewritten with NULs) brings the output near its cap (fix38).
 */
export const HOOK_RUN_RECORD =
  'CONFIG_AGENT_HOOK_RUN=[0-9a-f]\\{8\\}-[0-9a-f]\\{4\\}-[0-9a-f]\\{4\\}-[0-9a-f]\\{4\\}-[0-9a-f]\\{12\\}';

/**
 * The reader: `sh` starts grep in the background on every file, each followed by SEPARATOR_FILE, prints grep's pid
 * and exits at once. grep prints each NUL-terminated record of each file (its first READ_MAX_RECORDS) as `<file>:<record>` and a NUL (`-z -H`,
 * `-a`: bytes as they are), so a record, which holds no NUL, can never pass for another file's or for a separator.
 * Given `records` (a basic regular expression), only records it matches whole (`-x`) are printed, and counted by
 * `-m` (READ_MAX_MARKS), each file followed by RECORDS_SEPARATOR_FILE, whose record `Linux.` matches. What stays stuck is that grep, which is not the agent's child
 * (orphaned, init reaps it), so nothing of it is waited for when the agent exits.
 */
function readerScript(records: string | undefined): string {
  // Between single quotes (one inside closed, escaped, opened again): the shell hands grep the pattern as it is.
  const pattern =
    records === undefined
      ? `-m ${READ_MAX_RECORDS} ""`
      : `-m ${READ_MAX_MARKS} -x -e '${records.replaceAll("'", "'\\''")}' -e 'Linux.'`;
  return `/bin/grep --line-buffered -a -s -H -z ${pattern} -- "$@" & echo "pid $!" >&2`;
}

/** node:child_process as the reader takes it: only once a read is asked for; a stand-in in tests. */
export type ChildProcesses = () => Pick<typeof import('node:child_process'), 'spawnSync'>;

/**
 * What the reader's output says: each file's records (joined back with their NULs) up to where it stopped, and how
 * many files it finished (their separators seen). Two walks over the output, the first measuring each file, the
 * second copying its records into one buffer: no object per record. A buffer and a prefix per record took ~330
 * bytes of heap for each 21 of output, so an environ of empty records (a process's own, rewritten with NULs, or
 * started with 600,000 one-letter variables) cost the daemon ~500 MB and 15 s of its thread at the 32 MiB cap
 * (review36).
 */
function parseReadOut(
  out: Buffer,
  files: readonly string[],
  separatorFile: string,
): { read: Map<string, Buffer>; finished: number } {
  const separator = Buffer.from(`${separatorFile}:`, 'latin1');
  const prefixes = files.map((file) => Buffer.from(`${file}:`, 'latin1'));
  const startsWith = (at: number, end: number, prefix: Buffer) =>
    end - at >= prefix.length && out.compare(prefix, 0, prefix.length, at, at + prefix.length) === 0;
  /** Each record of a file (`out[start, end)`, its NUL at `end`), in order; how many files were finished. */
  const walk = (each: (index: number, start: number, end: number) => void): number => {
    let finished = 0;
    for (let at = 0, end = out.indexOf(0); end >= 0; at = end + 1, end = out.indexOf(0, at)) {
      if (startsWith(at, end, separator)) {
        finished += 1;
        continue;
      }
      const prefix = prefixes[finished];
      if (prefix === undefined) break;
      if (startsWith(at, end, prefix)) each(finished, at + prefix.length, end);
    }
    return finished;
  };
  const sizes = files.map(() => 0);
  walk((index, start, end) => {
    sizes[index] = (sizes[index] ?? 0) + end - start + 1;
  });
  const buffers = sizes.map((size) => (size === 0 ? undefined : Buffer.alloc(size)));
  const filled = files.map(() => 0);
  const finished = walk((index, start, end) => {
    const at = filled[index] ?? 0;
    // Its NUL is the buffer's zero already.
    if (buffers[index] !== undefined) out.copy(buffers[index], at, start, end);
    filled[index] = at + end - start + 1;
  });
  const read = new Map<string, Buffer>();
  files.forEach((file, index) => {
    const buffer = buffers[index];
    if (buffer !== undefined) read.set(file, buffer);
  });
  return { read, finished };
}

/**
 * Reads files synchronously with a deadline, all of one call in one short-lived process (`spawnSync` of `/bin/sh`,
 * cwd `/`: its program and cwd on the root filesystem, so the spawn itself does not wait on a hung mount, which
 * starts one grep reading every file: bound26, where fix33 started a reader per file, two forks and two execs each),
 * whose pipes are closed after `ms`. A file whose read is past it is given up on ('late'): its reader is left where
 * it is, counted stuck until its process ends (looked for in /proc at each later read: then `freed` is told the
 * file), at most MAX_STUCK_READERS at once; the files after it are read by another reader. Before fix33, the reader
 * was a worker thread, which Node joins at exit even after `terminate()`: a thread stuck in the read held the
 * agent's exit until systemd's SIGKILL (review33). A file not read at all (MAX_STUCK_READERS stuck, no process to
 * be had, a reader too slow to say its pid) is undefined, not 'late': nothing of it is known to hang; so is one
 * that cannot be read or is empty.
 */
export function boundedFileReader(
  ms = ENVIRON_READ_MS,
  freed: (file: string) => void = () => undefined,
  // node:child_process only once a read is asked for (pino-bundle.test.ts: a daemon without hooks stays lean).
  processes: ChildProcesses = () => process.getBuiltinModule('node:child_process'),
  /** Only the records this basic regular expression matches whole (HOOK_RUN_RECORD); every record when undefined. */
  records?: string,
): {
  read(file: string): Buffer | undefined | 'late';
  /** Every file of `files` (distinct), read by one reader while none is late. */
  readAll(files: readonly string[]): Map<string, Buffer | undefined | 'late'>;
  /** Tells `freed` of each stuck read that has ended since. */
  settle(): void;
} {
  const script = readerScript(records);
  const separatorFile = records === undefined ? SEPARATOR_FILE : RECORDS_SEPARATOR_FILE;
  const stuck: { pid: number; startTime: string | undefined; file: string }[] = [];
  const settle = (): void => {
    for (let at = stuck.length - 1; at >= 0; at -= 1) {
      const left = stuck[at];
      if (left === undefined) continue;
      const now = readStat('/proc', left.pid);
      if (now !== undefined && !now.exited && now.startTime === left.startTime) continue;
      stuck.splice(at, 1);
      freed(left.file);
    }
  };
  const readAll = (files: readonly string[]): Map<string, Buffer | undefined | 'late'> => {
    const answers = new Map<string, Buffer | undefined | 'late'>(files.map((file) => [file, undefined]));
    let left = [...files];
    let overflows = 0;
    settle();
    // Not read, nothing of it hung: unknown now, read again later (a 'late' pid was never read again; review33).
    while (left.length > 0 && stuck.length < MAX_STUCK_READERS) {
      const args = left.flatMap((file) => [file, separatorFile]);
      const result = processes().spawnSync('/bin/sh', ['-c', script, 'sh', ...args], {
        cwd: '/',
        env: {},
        stdio: ['ignore', 'pipe', 'pipe'],
        timeout: ms + READER_START_MS,
        killSignal: 'SIGKILL',
        maxBuffer: READ_MAX_BYTES,
      });
      const { read, finished } = parseReadOut(result.stdout ?? Buffer.alloc(0), left, separatorFile);
      for (const file of left.slice(0, finished)) answers.set(file, read.get(file));
      if (result.error === undefined || finished >= left.length) return answers;
      // Its output passed READ_MAX_BYTES: a fresh reader goes on from the file it was reading, or after it when
      // that file was its first (it alone passed the cap: left unknown), so no file after it goes unread (fix36).
      if ((result.error as NodeJS.ErrnoException).code === 'ENOBUFS' && overflows < MAX_OVERFLOW_READERS) {
        overflows += 1;
        left = left.slice(Math.max(finished, 1));
        continue;
      }
      const pid = /pid ([0-9]+)/.exec(result.stderr?.toString('latin1') ?? '')?.[1];
      const late = left[finished];
      // Not started (EAGAIN: TasksMax= or RLIMIT_NPROC reached), too large, or too slow to say what to wait for.
      if (
        (result.error as NodeJS.ErrnoException).code !== 'ETIMEDOUT' ||
        pid === undefined ||
        late === undefined
      )
        return answers;
      stuck.push({ pid: Number(pid), startTime: readStat('/proc', Number(pid))?.startTime, file: late });
      answers.set(late, 'late');
      left = left.slice(finished + 1);
    }
    return answers;
  };
  return {
    settle,
    readAll,
    read: (file) => readAll([file]).get(file),
  };
}

/**
 * /proc, synchronously: `stat` takes none of the process's locks and answers from memory. `environ` takes its
 * `mmap_lock` and is read through `boundedFileReader`: a process whose read does not answer in ENVIRON_READ_MS is
 * not read again until that read has ended (its environ is unknown meanwhile: undefined).
 */
export function procProcessTable(
  procDir = '/proc',
  environMs = ENVIRON_READ_MS,
  processes?: ChildProcesses,
  /** Read only these records of each environ (HOOK_RUN_RECORD: all the hook runner needs); every one when undefined. */
  records?: string,
): ProcessTable {
  let reader: ReturnType<typeof boundedFileReader> | undefined;
  const unreadable = new Set<number>();
  /** Each pid's environ, all read by one reader (a stuck one's pid not read again until its read has ended). */
  const environs = (pids: readonly number[]): Map<number, Buffer | undefined> => {
    reader ??= boundedFileReader(
      environMs,
      (file) => unreadable.delete(Number(path.basename(path.dirname(file)))),
      processes,
      records,
    );
    // Reads that have ended since free their pids first.
    reader.settle();
    const answers = new Map<number, Buffer | undefined>();
    const asked = [...new Set(pids)].filter((pid) => !unreadable.has(pid));
    for (const pid of pids) answers.set(pid, undefined);
    if (asked.length === 0) return answers;
    const read = reader.readAll(asked.map((pid) => `${procDir}/${pid}/environ`));
    for (const pid of asked) {
      const bytes = read.get(`${procDir}/${pid}/environ`);
      if (bytes === 'late') unreadable.add(pid);
      else answers.set(pid, bytes);
    }
    return answers;
  };
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
    bootId: () => readBootId(procDir),
    environ: (pid) => environs([pid]).get(pid),
    environs,
    kill: (pid, signal) => {
      process.kill(pid, signal);
    },
  };
}

/** /proc as the hook runner reads it: of each process's environ only a hook run's mark (HOOK_RUN_RECORD: fix38). */
export function hookRunProcessTable(): ProcessTable {
  return procProcessTable('/proc', ENVIRON_READ_MS, undefined, HOOK_RUN_RECORD);
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
