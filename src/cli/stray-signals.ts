// Signals the daemon has no use for, whose default action would end it: ignored, each kind logged sparingly.

/**
 * Signals whose default action ends the process (or dumps its core) and that mean nothing to the agent: a stray
 * `kill -USR2` (many daemons reopen their logs on it), a power-failure notice (SIGPWR: init's business), a timer
 * signal (SIGALRM, SIGVTALRM), SIGIO (SIGPOLL), SIGTRAP from a debugger, SIGSTKFLT. The
 * daemon ends only when asked (SIGTERM, SIGINT): ended by one of these, systemd restarted it 30 s later.
 * SIGPIPE and SIGXFSZ Node ignores already; SIGUSR1 and SIGHUP have their own listeners; faults (SIGSEGV, SIGBUS,
 * SIGILL, SIGFPE, SIGABRT, SIGSYS) and SIGQUIT keep their defaults, and so do SIGXCPU (the CPU limit's notice)
 * and the job-control stops. Real-time signals (34–64) cannot be listened to from Node: the packages' launcher
 * starts the daemon with them ignored (packaging/launcher.mjs REAL_TIME_SIGNALS). SIGPROF keeps its default
 * too: it is V8's sampling profiler's own signal (`--cpu-prof`, the inspector's Profiler), and a listener's handler
 * is set back to the default as the process exits while the profiler still samples, so a profiled daemon was
 * killed by it at its stop (exit 155, no profile written).
 */
export const STRAY_SIGNALS = [
  'SIGUSR2',
  'SIGALRM',
  'SIGIO',
  'SIGPWR',
  'SIGTRAP',
  'SIGVTALRM',
  'SIGSTKFLT',
] as const satisfies readonly NodeJS.Signals[];

export type StraySignal = (typeof STRAY_SIGNALS)[number];

/**
 * Counts each stray signal and tells when one is worth a log line: its 1st, 10th, 100th, ... of a kind, so a
 * sender in a loop costs a handful of lines, not a journal flood, and the count still shows it.
 */
export function strayCounter(): (signal: StraySignal) => number | undefined {
  const counts = new Map<StraySignal, number>();
  return (signal) => {
    const count = (counts.get(signal) ?? 0) + 1;
    counts.set(signal, count);
    return /^10*$/.test(String(count)) ? count : undefined;
  };
}
