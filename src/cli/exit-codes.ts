// The process exit codes of config-agent, in one place: scripts and systemd match on these numbers.
import { isServiceUnusableStatus } from '../api/http-status.js';
import { errnoCode, isAgentError } from '../lib/errors.js';
import type { PassError, PassResult } from '../reconcile/pass-runner.js';

export const ExitCode = {
  /** Converged: every instance targeting deployed is on disk, every removal done, every report delivered. */
  Converged: 0,
  /** The server was reached but something did not converge (an instance retrying or failed, a report undelivered). */
  NotConverged: 1,
  /** Bad command line: unknown flag or command, missing value, flags that do not go together. */
  Usage: 2,
  /** The server was unreachable, timed out, rejected the API key, or answered what no working service sends. */
  Unreachable: 3,
  /**
   * The command's output could not be written to stdout (a full disk, an I/O error) where it would otherwise have
   * exited 0 (EX_IOERR of sysexits.h). A reader that went away (EPIPE) is not this, nor a stdout closed at start
   * (`>&-`): Node opens /dev/null on it before the agent runs, so the output is written there (fix37).
   */
  OutputFailed: 74,
  /** Invalid configuration: config file, API key, environment, or an unusable stateDir (EX_CONFIG of sysexits.h). */
  Config: 78,
  /** `--once` stopped by SIGHUP (128 + 1: the terminal it ran in closed), as for SIGINT. */
  HungUp: 129,
  /** `--once` stopped by SIGINT (128 + 2, as a shell reports it): what landed is recorded, reports kept queued. */
  Interrupted: 130,
  /** `--once` stopped by SIGTERM (128 + 15). */
  Terminated: 143,
} as const;

export type ExitCode = (typeof ExitCode)[keyof typeof ExitCode];

/** One line per code, for --help and the docs. */
export const EXIT_CODE_MEANINGS: Readonly<Record<ExitCode, string>> = {
  [ExitCode.Converged]:
    'converged: every deployed instance is on disk, every removal done, every report delivered',
  [ExitCode.NotConverged]:
    'not converged: an instance retrying or failed, a report undelivered (server reached), or stateDir in use',
  [ExitCode.Usage]: 'usage error',
  [ExitCode.Unreachable]: 'server unreachable, timed out, API key rejected, or a broken answer (304, 3xx)',
  [ExitCode.OutputFailed]:
    'output not written to stdout (full disk, I/O error), else 0; a reader gone (EPIPE) or >&- keeps the code',
  [ExitCode.Config]:
    'invalid configuration (config file, API key, environment), or a read-only or unwritable stateDir',
  [ExitCode.HungUp]: 'stopped by SIGHUP (--once: its terminal closed), as for SIGINT',
  [ExitCode.Interrupted]:
    'stopped by SIGINT (--once): files on disk are whole, what landed is recorded, reports stay queued',
  [ExitCode.Terminated]: 'stopped by SIGTERM (--once), as for SIGINT',
};

/**
 * The exit code of an error raised before any pass runs (argv, config, key), matched on the stable `code`;
 * undefined for anything else, which the caller classifies.
 */
export function exitCodeForStartupError(error: unknown): ExitCode | undefined {
  if (!isAgentError(error)) return undefined;
  switch (error.code) {
    case 'usage':
      return ExitCode.Usage;
    case 'invalid_config':
      // rootDir or stateDir that could not be created on a full or failing disk (ENOSPC, EIO, ...) may clear
      // like the same errno on stateDir's files: exit 1, not "fix the configuration" (the daemon waits it out).
      // The config file, the key file or another file the configuration names that could not be read for a reason
      // that may pass (EIO of a failing disk, no descriptors, no memory, a mount that did not answer): exit 1,
      // which systemd restarts (Restart=on-failure), not 78, which it never does (RestartPreventExitStatus=): one
      // I/O error at boot left the device unmanaged for good (adv35). Its contents, mode or absence stay 78.
      if (waitsOutAtStart(error)) return undefined;
      return transientErrnoIn(error) ? ExitCode.NotConverged : ExitCode.Config;
    case 'api_key_unavailable':
      return transientErrnoIn(error) ? ExitCode.NotConverged : ExitCode.Config;
    case 'state_dir_unusable':
      // A read-only or foreign-owned stateDir needs an operator; a full disk may clear up (exit 1; the daemon
      // waits instead: see waitsOutAtStart).
      return error.retryable ? undefined : ExitCode.Config;
    default:
      return undefined;
  }
}

/**
 * Whether a failed pull means the service could not be used at all (exit 3): no connection, a timeout (of a
 * request or of the whole pull), a truncated transfer, or a status `http-status.ts` judges an outage (a refused key,
 * overload, a server error, an answer no working service gives: a 304, a redirect, a 418). Anything else (a 404
 * from a wrong base URL or version, a response that breaks the schema) reached a server that answered: exit 1.
 */
function isUnreachable(error: PassError | undefined): boolean {
  if (error === undefined) return true;
  switch (error.code) {
    case 'network_error':
    case 'timeout':
    // The whole pull outlived its deadline: a trickling or stalled service is a timeout too.
    case 'pull_deadline':
    // A body cut mid-JSON is a broken transfer (FIELD-NOTES: it arrives as a 200), not a server's answer.
    case 'malformed_response':
      return true;
    case 'http_status':
      return error.status !== undefined && isServiceUnusableStatus(error.status);
    default:
      return false;
  }
}

/** The exit code of `--once` and `sync` for a pass's result. */
export function exitCodeForPass(result: PassResult): ExitCode {
  if (!result.reachable) return isUnreachable(result.error) ? ExitCode.Unreachable : ExitCode.NotConverged;
  if (result.dryRun) return ExitCode.Converged;
  return result.converged ? ExitCode.Converged : ExitCode.NotConverged;
}

/** errno codes of a disk or a device that may recover by itself: space freed, a flaky medium, descriptors back. */
const TRANSIENT_ERRNOS: ReadonlySet<string> = new Set([
  'ENOSPC',
  'EDQUOT',
  'EIO',
  'EMFILE',
  'ENFILE',
  'ENOMEM',
  'ENOBUFS',
  // A mount that did not answer in time (cli/mount-gate.ts: a dead NFS server, a wedged FUSE daemon).
  'ETIMEDOUT',
]);

/**
 * Whether the daemon should wait and try to start again in-process rather than exit: stateDir or rootDir
 * could not be opened, locked, created or swept for a reason that may pass (a full disk, EIO, no
 * descriptors). Exiting 1 had systemd restart the whole agent (every 30 s; under the start limit the unit once
 * had, a disk full for a minute at boot left it failed for good); waiting in-process starts as soon as it passes.
 */
export function waitsOutAtStart(error: unknown): boolean {
  if (!isAgentError(error)) return false;
  const from = error.code === 'invalid_config' ? (error as { source?: unknown }).source : undefined;
  if (error.code !== 'state_dir_unusable' && error.code !== 'disk_error' && from !== 'directories') {
    return false;
  }
  return transientErrnoIn(error);
}

/** Whether `error` or one of its causes carries an errno of TRANSIENT_ERRNOS. */
function transientErrnoIn(error: unknown): boolean {
  let current: unknown = error;
  // Causes form a chain; a bound keeps a cyclic one from looping.
  for (let depth = 0; depth < 8 && typeof current === 'object' && current !== null; depth += 1) {
    const code = errnoCode(current);
    if (code !== undefined && TRANSIENT_ERRNOS.has(code)) return true;
    current = 'cause' in current ? current.cause : undefined;
  }
  return false;
}
