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

/** How long an exit waits for pool work in flight to end before it takes the signal instead. */
export const POOL_DRAIN_MS = 1000;
const POOL_POLL_MS = 20;

export interface ProcessEnd {
  /** process.getActiveResourcesInfo */
  activeResources(): string[];
  exit(code: number): void;
  /** Ends the process by `signal`'s default action (the process's own answer to it removed first). */
  endBySignal(signal: NodeJS.Signals): void;
  sleep(ms: number): Promise<void>;
}

/**
 * Exits with `code` once no pool work is in flight. Work still in flight after POOL_DRAIN_MS is taken as hung: the
 * process ends by a signal's default action instead, which the kernel carries out whatever its threads wait for
 * (a FUSE or NFS wait ends on a fatal signal). The signal is the one `code` names as 128 + n (143: SIGTERM, 130:
 * SIGINT, 129: SIGHUP: a shell sees the same status), else SIGTERM. Before, a stop past its deadline (rootDir on a
 * hung mount) said "exiting now" and the process stayed until the mount answered or systemd's SIGKILL.
 */
export async function endProcess(code: number, end: ProcessEnd): Promise<void> {
  for (let waited = 0; end.activeResources().some(isPoolWork); waited += POOL_POLL_MS) {
    if (waited >= POOL_DRAIN_MS) {
      end.endBySignal(signalOfExitCode(code));
      return;
    }
    await end.sleep(POOL_POLL_MS);
  }
  end.exit(code);
}

/** The stop signal an exit code of 128 + n stands for (SIGHUP, SIGINT, SIGTERM), else SIGTERM. */
export function signalOfExitCode(code: number): NodeJS.Signals {
  const stops = ['SIGHUP', 'SIGINT', 'SIGTERM'] as const;
  return stops.find((signal) => constants.signals[signal] === code - 128) ?? 'SIGTERM';
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
  sleep: (ms) => new Promise((resolve) => setTimeout(resolve, ms)),
};
