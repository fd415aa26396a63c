// Base class of every error the agent raises on purpose: match on `code`, never on message text.
import { constants as osConstants } from 'node:os';

/**
 * Every `code` the agent's errors carry. A union, so the compiler checks each place that matches on one: a
 * misspelt or retired code there is a type error, not a branch that never runs.
 */
export type ErrorCode =
  /** argv (cli/args.ts); exit 2. */
  | 'usage'
  /** `config-agent init` could not set the device up (cli/init.ts InitFailure, which carries its exit code). */
  | 'init_failed'
  /** config file or environment (config/errors.ts); exit 78. */
  | 'invalid_config'
  | 'api_key_unavailable'
  /** The service client (api/errors.ts, api/order-by.ts). */
  | 'http_status'
  | 'network_error'
  | 'timeout'
  | 'response_too_large'
  | 'malformed_response'
  | 'report_contradicted'
  | 'invalid_response'
  | 'invalid_argument'
  | 'invalid_order_by'
  /** Wire JSON (api/json.ts) and the pull's pager (api/pager.ts). */
  | 'invalid_json'
  | 'pull_deadline'
  | 'listing_unstable'
  | 'listing_runaway'
  /** The store (store/errors.ts, store/lock.ts). */
  | 'path_rejected'
  | 'disk_error'
  | 'state_locked'
  /** stateDir read-only, not writable or failing (store/errors.ts); exit 78 when not retryable. */
  | 'state_dir_unusable'
  /** A file of stateDir heavier to parse than any the agent writes (store/errors.ts): read as corrupt, never parsed. */
  | 'state_file_overweight'
  /** A write's bytes set aside in the content cache by the pull were gone when written (reconcile/apply.ts). */
  | 'set_aside_bytes_lost'
  /** The daemon is stopping (daemon/agent.ts): the reason its requests and pass are aborted with; no failure. */
  | 'stopping'
  /** socketPath is taken (daemon/local-api.ts): the agent runs on without its local API. */
  | 'socket_path_taken'
  /** The mock service's fixtures (mock-server/fixtures.ts). */
  | 'invalid_fixtures'
  /** Not an AgentError: a bug or an unexpected failure, as a pass reports it. */
  | 'internal';

/** `C` is widened only by the mock service, whose errors carry the service's wire codes. */
export class AgentError<C extends string = ErrorCode> extends Error {
  readonly code: C;
  readonly retryable: boolean;

  constructor(code: C, message: string, options: { retryable: boolean; cause?: unknown }) {
    super(message, options.cause === undefined ? undefined : { cause: options.cause });
    this.name = new.target.name;
    this.code = code;
    this.retryable = options.retryable;
  }
}

export function isAgentError(value: unknown): value is AgentError {
  return value instanceof AgentError;
}

/**
 * The node errno code (`ENOSPC`, `EACCES`, ...) of an error, if it has one. An errno libuv has no name for
 * comes with the code `UNKNOWN` or `Unknown system error -122`: it is named from its number by the system's
 * own table (`os.constants.errno`). On Node 20 that is EDQUOT (a disk quota exceeded), which went unrecognised
 * as a full disk: every write or mkdir over a quota counted an attempt and ended `failed` for good (adv20).
 */
export function errnoCode(error: unknown): string | undefined {
  if (typeof error === 'object' && error !== null && 'code' in error) {
    const code = (error as { code: unknown }).code;
    if (typeof code !== 'string') return undefined;
    if (code !== 'UNKNOWN' && !code.startsWith('Unknown system error')) return code;
    const errno = (error as { errno?: unknown }).errno;
    return (typeof errno === 'number' && errnoName(-errno)) || code;
  }
  return undefined;
}

/** The system's first name for an errno number (only asked for errors libuv could not name: rare). */
function errnoName(errno: number): string | undefined {
  for (const [name, value] of Object.entries(osConstants.errno)) if (value === errno) return name;
  // Node's table lacks it: Linux's EUCLEAN (117 on x86 and arm, asm-generic), which ext4, xfs and btrfs answer
  // as EFSCORRUPTED, a filesystem that found itself corrupt.
  return process.platform === 'linux' && errno === 117 ? 'EUCLEAN' : undefined;
}

/** A misuse of a command line (the agent's or the mock's): printed with the usage hint, exit 2. */
export class UsageError extends AgentError {
  constructor(message: string) {
    super('usage', message, { retryable: false });
  }
}

export function errorMessage(error: unknown): string {
  return error instanceof Error ? error.message : String(error);
}
