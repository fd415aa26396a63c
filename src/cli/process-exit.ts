// The process's end: process.exit, unless a thread of libuv's pool waits in the kernel for good (a hung mount), then a signal.
import { constants } from 'node:os';

/**
 * Kinds of `process.getActiveResourcesInfo()` that are work on libuv's thread pool in flight: `process.exit` joins
 * the pool's threads, so it waits until each of these returns. A call into a hung NFS or FUSE mount, or a FIFO's
 * open with no writer, never returns.
 */
function isPoolWork(kind: string): boolean {
  return (
    kind.startsWith('FSReq') ||
    kind === 'FileHandleCloseReq' ||
    kind.startsWith('GetAddrInfo') ||
    kind.startsWith('GetNameInfo')
  );
}

/** A name lookup (getaddrinfo, getnameinfo), which ends within the resolver's timeouts, unlike a hung mount's call. */
function isNameLookup(kind: string): boolean {
  return kind.startsWith('GetAddrInfo') || kind.startsWith('GetNameInfo');
}

/** How long an exit waits for pool work in flight to end before it takes the signal instead. */
export const POOL_DRAIN_MS = 1000;
/**
 * How long a command's exit waits for name lookups alone (`endProcess`'s `lookupDrainMs`): glibc's defaults (5 s,
 * 2 attempts) over its 3 name servers at most. A service whose DNS never answered left the last try's lookup in a
 * pool thread, and `--once` ended by SIGTERM (143, "Terminated") instead of exiting 3 (adv25).
 */
export const LOOKUP_DRAIN_MS = 30_000;
const POOL_POLL_MS = 20;

export interface ProcessEnd {
  /** process.getActiveResourcesInfo */
  activeResources(): string[];
  exit(code: number): void;
  /** Ends the process by `signal`'s default action (the process's own answer to it removed first). */
  endBySignal(signal: NodeJS.Signals): void;
  /** Resolves after `ms`; 0: after one turn of the event loop (its I/O callbacks run). */
  sleep(ms: number): Promise<void>;
}

/**
 * Exits with `code` once no pool work is in flight. Work still in flight after POOL_DRAIN_MS is taken as hung: the
 * process ends by a signal's default action instead, which the kernel carries out whatever its threads wait for
 * (a FUSE or NFS wait ends on a fatal signal). The signal is the one `code` names as 128 + n (143: SIGTERM, 130:
 * SIGINT, 129: SIGHUP: a shell sees the same status), else SIGTERM. Before, a stop past its deadline (rootDir on a
 * hung mount) said "exiting now" and the process stayed until the mount answered or systemd's SIGKILL.
 * Name lookups alone, which end by themselves, are waited for up to `lookupDrainMs` before the signal (not for a
 * stop's code), so a command whose service's DNS never answered exits with its own code.
 */
export async function endProcess(
  code: number,
  end: ProcessEnd,
  options: { lookupDrainMs?: number } = {},
): Promise<void> {
  // A stop's code (130, 143, 129) is what its signal gives a shell too: a Ctrl+C never waits on a lookup.
  const lookupDrainMs = isStopCode(code)
    ? POOL_DRAIN_MS
    : Math.max(POOL_DRAIN_MS, options.lookupDrainMs ?? POOL_DRAIN_MS);
  // The request whose completion ran the code that led here (the state dir's last `unlink`, stdout's last write to a
  // file) is still listed until its callback returns: one turn lets it go. Every idle `--once` waited a whole poll
  // (20 ms, ~8 % of its wall time) for it.
  if (end.activeResources().some(isPoolWork)) await end.sleep(0);
  for (let waited = 0; ; waited += POOL_POLL_MS) {
    const inFlight = end.activeResources().filter(isPoolWork);
    if (inFlight.length === 0) break;
    // Lookups alone are waited for longer when asked (a command's exit code is its answer); a mount's call is not.
    const drainMs = inFlight.every(isNameLookup) ? lookupDrainMs : POOL_DRAIN_MS;
    if (waited >= drainMs) {
      end.endBySignal(signalOfExitCode(code));
      return;
    }
    await end.sleep(POOL_POLL_MS);
  }
  end.exit(code);
}

const STOP_SIGNALS = ['SIGHUP', 'SIGINT', 'SIGTERM'] as const;

/** The stop signal an exit code of 128 + n stands for (SIGHUP, SIGINT, SIGTERM), else SIGTERM. */
export function signalOfExitCode(code: number): NodeJS.Signals {
  return STOP_SIGNALS.find((signal) => constants.signals[signal] === code - 128) ?? 'SIGTERM';
}

/** Whether `code` is 128 + a stop signal's number: ending by that signal gives a shell the same status. */
function isStopCode(code: number): boolean {
  return STOP_SIGNALS.some((signal) => constants.signals[signal] === code - 128);
}

/** The real process's end. */
export const nodeProcessEnd: ProcessEnd = {
  activeResources: () => process.getActiveResourcesInfo(),
  exit: (code) => process.exit(code),
  endBySignal(signal) {
    process.removeAllListeners(signal);
    process.kill(process.pid, signal);
    // Ignored since before Node started (nohup's SIGHUP): what cannot be ignored, shortly after.
    setTimeout(() => process.kill(process.pid, 'SIGKILL'), 500);
  },
  sleep: (ms) => new Promise((resolve) => (ms === 0 ? setImmediate(resolve) : setTimeout(resolve, ms))),
};
