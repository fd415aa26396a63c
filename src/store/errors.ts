// Failures of the file store: a path the agent refuses to touch (final) and a disk that failed under it (retryable).
import { AgentError, errnoCode, errorMessage } from '../lib/errors.js';

/** Which rule a rejected path broke; stable, so callers and tests can match on it. */
export type PathRule =
  | 'empty'
  | 'absolute'
  | 'backslash'
  | 'control_character'
  | 'lone_surrogate'
  | 'not_nfc'
  | 'dot_segment'
  | 'empty_segment'
  | 'segment_too_long'
  | 'path_too_long'
  | 'too_long_under_root'
  | 'reserved_prefix'
  | 'crosses_symlink'
  | 'not_a_directory'
  | 'target_is_directory'
  | 'target_not_regular_file';

const RULE_TEXT: Record<PathRule, string> = {
  empty: 'is empty',
  absolute: 'is absolute (starts with "/")',
  backslash: 'contains a backslash',
  control_character: 'contains a NUL or control character',
  lone_surrogate: 'contains an unpaired UTF-16 surrogate (not valid Unicode)',
  not_nfc: 'is not in Unicode normalisation form NFC',
  dot_segment: 'contains a "." or ".." segment',
  empty_segment: 'contains an empty segment ("//" or a trailing "/")',
  segment_too_long: 'has a segment longer than 255 bytes (UTF-8)',
  path_too_long: 'is longer than 4095 bytes (UTF-8)',
  too_long_under_root: 'is too long under rootDir: with it, the file (or its temp file) passes 4095 bytes',
  reserved_prefix: 'has a segment starting with the reserved temp-file prefix',
  crosses_symlink: 'crosses a symlink',
  not_a_directory: 'has a parent component that exists but is not a directory',
  target_is_directory: 'names an existing directory',
  target_not_regular_file: 'names an existing file that is not a regular file',
};

/** Longer paths are cut in messages: a 4 KiB path would drown the log line it appears in. */
const MAX_QUOTED_CHARS = 200;

function quotePath(path: string): string {
  const shown = path.length > MAX_QUOTED_CHARS ? `${path.slice(0, MAX_QUOTED_CHARS)}…` : path;
  // JSON.stringify escapes control characters and lone surrogates, so a hostile path cannot forge log lines.
  return JSON.stringify(shown);
}

/**
 * Rules broken by what is on disk rather than by the path's text: a symlink, a file where a directory must go,
 * a directory where the file goes. Never written through, but retried: a removal later in the pass or an
 * operator may clear the way, and a tree restructured in one release must converge.
 */
const DISK_STATE_RULES: ReadonlySet<PathRule> = new Set([
  'crosses_symlink',
  'not_a_directory',
  'target_is_directory',
  'target_not_regular_file',
]);

/**
 * A path the agent refuses to touch, never repaired. A hostile path string is final (the server must change
 * it); an obstacle on disk (`DISK_STATE_RULES`) is the device's condition (`obstructed`): retried, never an attempt.
 */
export class PathRejectedError extends AgentError {
  readonly rule: PathRule;
  readonly path: string;

  constructor(rule: PathRule, path: string, detail?: string) {
    super(
      'path_rejected',
      `path rejected: ${quotePath(path)} ${RULE_TEXT[rule]}${detail ? ` (${detail})` : ''}`,
      { retryable: DISK_STATE_RULES.has(rule) },
    );
    this.rule = rule;
    this.path = path;
  }
}

const ERRNO_TEXT: Record<string, string> = {
  ENOSPC: 'no space left on device',
  EDQUOT: 'disk quota exceeded',
  EROFS: 'read-only file system',
  EACCES: 'permission denied',
  EPERM: 'operation not permitted',
  EIO: 'input/output error',
  ENOENT: 'no such file or directory',
  ENAMETOOLONG: 'file name too long',
  EMFILE: 'too many open files',
  ENFILE: 'too many open files in the system',
  ENOMEM: 'out of memory',
  ENOBUFS: 'no buffer space available',
};

/**
 * errno codes that mean the agent itself ran out of something (descriptors, memory), whatever file it was
 * touching: the instance is not at fault, so such a failure never counts as an attempt, is never reported
 * `failed` (nor `retrying`) to the service, and the next pass simply tries again.
 */
export const AGENT_RESOURCE_ERRNOS: ReadonlySet<string> = new Set(['EMFILE', 'ENFILE', 'ENOMEM', 'ENOBUFS']);

/**
 * Whether `error` is the agent's own resource trouble: a DiskError with `resource`, or any error (or one of
 * its causes) whose errno is in AGENT_RESOURCE_ERRNOS.
 */
export function isAgentResourceError(error: unknown): boolean {
  let current = error;
  // Causes form a chain; a bound keeps a cyclic one from looping.
  for (let depth = 0; depth < 8 && current !== undefined && current !== null; depth += 1) {
    if (current instanceof DiskError) return current.resource;
    const code = errnoCode(current);
    if (code !== undefined && AGENT_RESOURCE_ERRNOS.has(code)) return true;
    current = typeof current === 'object' && 'cause' in current ? current.cause : undefined;
  }
  return false;
}

/**
 * The root's own condition, not the instance's: the disk holding it is full (ENOSPC, EDQUOT), it is mounted
 * read-only (EROFS), or rootDir itself is no directory any more (replaced by a file or a symlink, or gone with its
 * parent, so it cannot be made again: `DiskError.rootItself`), or it refuses the agent's user (`rootRefuses`), or
 * it was a mount point and is not any more (`DiskError.mountGone`, root-mount.ts), or it resolves to another
 * directory than it did (`DiskError.rootMoved`: it or a directory above it replaced by a symlink), or the state directory could not
 * declare the write first (`WriteNotDeclaredError`: the device's condition too, though not the root's), or the
 * disk fails (`failing`: EIO and the like, FAILING_DISK_ERRNOS), or something on the device is in the way of the
 * path (`obstructed`: a PathRejectedError of DISK_STATE_RULES, a symlink, directory, FIFO, socket or device there),
 * or a directory on the path is at a renewal's aside name, which the agent must put back first (`renamed_aside`:
 * `DiskError.renamedAside`, store/directory-asides.ts: its rename back or the start's restore failed), or a file of
 * another user in a sticky directory neither of theirs is the agent's refused the rename over it or its unlink
 * (`held_by_another_user`: judged by apply.ts, never by rootConditionOf), or the file or its filesystem answered
 * "try again" (`busy`: TRY_AGAIN_ERRNOS, a lease held on the file).
 * Such a failure is no attempt of the instance (record.ts): it waits, `retrying`, until the condition ends; only a file larger than the whole filesystem (judged by apply.ts) counts attempts as before.
 */
export type RootCondition =
  | 'full'
  | 'read_only'
  | 'not_a_directory'
  | 'not_writable'
  | 'mount_gone'
  | 'moved'
  | 'not_declared'
  | 'failing'
  | 'obstructed'
  | 'renamed_aside'
  | 'held_by_another_user'
  | 'busy';

/**
 * Errnos of a disk or filesystem failing rather than of one write: an I/O error, the device gone (a card or USB
 * disk pulled), a FUSE daemon gone, a stale or timed-out network filesystem, a filesystem that found itself
 * corrupt (ext4, xfs and btrfs answer EUCLEAN, their EFSCORRUPTED, and EBADMSG, EFSBADCRC, for a metadata
 * checksum that does not match: until an fsck). None says anything about the instance, and all may clear.
 */
const FAILING_DISK_ERRNOS: ReadonlySet<string> = new Set([
  'EIO',
  'ENXIO',
  'ENODEV',
  'ENOTCONN',
  'ESTALE',
  'ETIMEDOUT',
  'EUCLEAN',
  'EBADMSG',
]);

/**
 * Errnos that say "try again" (adv26): EAGAIN (EWOULDBLOCK), which an O_NONBLOCK open of a file another process
 * holds a write lease on answers until the lease is given up (Samba's kernel oplocks, nfsd's delegations, the
 * owner of a file in a sticky directory), and EINTR, which libuv passes on for a read (a network or FUSE
 * filesystem's interrupted call). Nothing about the instance: `busy`, retried, never an attempt.
 */
const TRY_AGAIN_ERRNOS: ReadonlySet<string> = new Set(['EAGAIN', 'EWOULDBLOCK', 'EINTR']);

/** Steps that add or remove an entry of the directory holding their path. */
const ENTRY_OPERATIONS = new Set([
  'create temp file',
  'rename',
  'unlink',
  'create directory',
  'remove directory',
]);
/** Steps on a directory itself: the root's own when their path is ''. */
const DIRECTORY_OPERATIONS = new Set(['open directory', 'stat directory', 'chmod directory']);

/**
 * Whether a DiskError is rootDir itself refusing the agent's user (EACCES, EPERM: chowned to another user, its
 * mode, an immutable attribute): a step on an entry of the root (a path without '/') or on the root (''). The
 * same refusal in a subdirectory is that directory's, which an operator may have locked on purpose: the
 * instance's attempt, as before. Judged by where it happened, not probed.
 */
function rootRefuses(error: DiskError): boolean {
  if (error.errno !== 'EACCES' && error.errno !== 'EPERM') return false;
  if (error.rootItself) return true;
  if (DIRECTORY_OPERATIONS.has(error.operation)) return error.path === '';
  return ENTRY_OPERATIONS.has(error.operation) && error.path !== '' && !error.path.includes('/');
}

/** Whether an error (or the first DiskError among its causes) is a refusal of the agent's user: EACCES, EPERM. */
export function permissionDenied(error: unknown): boolean {
  let current = error;
  for (let depth = 0; depth < 8 && current !== undefined && current !== null; depth += 1) {
    const code = current instanceof DiskError ? current.errno : errnoCode(current);
    if (code === 'EACCES' || code === 'EPERM') return true;
    if (current instanceof DiskError) return false;
    current = typeof current === 'object' && 'cause' in current ? current.cause : undefined;
  }
  return false;
}

/**
 * The rename or unlink (the first DiskError among an error's causes) that EPERM or EACCES refused: what a sticky
 * directory answers the agent's user for an entry of another user (apply.ts judges whether that was it).
 */
export function refusedEntryChange(error: unknown): DiskError | undefined {
  let current = error;
  for (let depth = 0; depth < 8 && current !== undefined && current !== null; depth += 1) {
    if (current instanceof DiskError) {
      const refused = current.errno === 'EPERM' || current.errno === 'EACCES';
      return refused && (current.operation === 'rename' || current.operation === 'unlink')
        ? current
        : undefined;
    }
    current = typeof current === 'object' && 'cause' in current ? current.cause : undefined;
  }
  return undefined;
}

/** The RootCondition an error (or one of its causes) stands for, if any. */
export function rootConditionOf(error: unknown): RootCondition | undefined {
  let current = error;
  for (let depth = 0; depth < 8 && current !== undefined && current !== null; depth += 1) {
    if (current instanceof WriteNotDeclaredError) return 'not_declared';
    if (current instanceof PathRejectedError)
      return DISK_STATE_RULES.has(current.rule) ? 'obstructed' : undefined;
    if (current instanceof DiskError && current.mountGone !== undefined) return 'mount_gone';
    if (current instanceof DiskError && current.rootMoved !== undefined) return 'moved';
    if (current instanceof DiskError && current.renamedAside) return 'renamed_aside';
    if (current instanceof DiskError && rootRefuses(current)) return 'not_writable';
    if (current instanceof DiskError && current.rootItself && !current.resource) return 'not_a_directory';
    const code = current instanceof DiskError ? current.errno : errnoCode(current);
    if (code === 'ENOSPC' || code === 'EDQUOT') return 'full';
    if (code === 'EROFS') return 'read_only';
    if (current instanceof DiskError && code !== undefined && FAILING_DISK_ERRNOS.has(code)) return 'failing';
    if (current instanceof DiskError && code !== undefined && TRY_AGAIN_ERRNOS.has(code)) return 'busy';
    if (current instanceof DiskError) return undefined;
    current = typeof current === 'object' && 'cause' in current ? current.cause : undefined;
  }
  return undefined;
}

/**
 * Whether a 'full' root condition is a disk quota (EDQUOT) rather than the filesystem itself: the same wait, but
 * its remedy differs (the quota, not space), and a quota is not visible to statfs, so a file larger than the
 * quota (smaller than the filesystem) is never told from one waiting for room: it stays `retrying`.
 */
export function quotaExceeded(error: unknown): boolean {
  let current = error;
  for (let depth = 0; depth < 8 && current !== undefined && current !== null; depth += 1) {
    const code = current instanceof DiskError ? current.errno : errnoCode(current);
    if (code === 'EDQUOT') return true;
    if (current instanceof DiskError) return false;
    current = typeof current === 'object' && 'cause' in current ? current.cause : undefined;
  }
  return false;
}

export interface DiskErrorOptions {
  /** What the store was doing: 'write temp file', 'rename', 'fsync directory', ... */
  operation: string;
  /** Relative to the root the caller passed ('' for the root itself), so messages never leak unrelated paths. */
  path: string;
  /** Defaults to the errno code of `cause`. */
  errno?: string | undefined;
  cause?: unknown;
  /** The failure is the root directory's own (`checkRoot`): missing, not a directory, or not reachable. */
  rootItself?: boolean;
  /** rootDir was a mount point and is not any more (root-mount.ts): what was seen, for the message. */
  mountGone?: string;
  /** rootDir resolves to another directory than it did (root-mount.ts): what was seen, for the message. */
  rootMoved?: string;
  /** A directory on the path is at a renewal's aside name (store/directory-asides.ts): put back first. */
  renamedAside?: boolean;
}

/**
 * The filesystem failed an operation: retryable, because full disks get cleaned and mounts come back.
 * `resource` is true when the agent itself ran out of descriptors or memory: see AGENT_RESOURCE_ERRNOS.
 */
export class DiskError extends AgentError {
  readonly errno: string | undefined;
  readonly path: string;
  readonly operation: string;
  /** The agent's own resource trouble, not the instance's: never an attempt, never reported. */
  readonly resource: boolean;
  readonly rootItself: boolean;
  readonly mountGone: string | undefined;
  readonly rootMoved: string | undefined;
  readonly renamedAside: boolean;

  constructor(options: DiskErrorOptions) {
    const errno = options.errno ?? errnoCode(options.cause);
    const resource = errno !== undefined && AGENT_RESOURCE_ERRNOS.has(errno);
    super(
      'disk_error',
      options.mountGone ?? options.rootMoved ?? diskMessage(options.operation, options.path, errno),
      {
        retryable: true,
        cause: options.cause,
      },
    );
    this.errno = errno;
    this.path = options.path;
    this.operation = options.operation;
    this.resource = resource;
    this.rootItself = options.rootItself === true;
    this.mountGone = options.mountGone;
    this.rootMoved = options.rootMoved;
    this.renamedAside = options.renamedAside === true;
  }
}

function diskMessage(operation: string, path: string, errno: string | undefined): string {
  const what =
    errno === undefined ? 'unknown error' : `${errno}${ERRNO_TEXT[errno] ? ` (${ERRNO_TEXT[errno]})` : ''}`;
  let message = `disk error: ${operation} failed for ${quotePath(path)}: ${what}`;
  if (errno === 'EBUSY' && operation === 'rename') {
    message +=
      '; the target is probably a bind-mounted single file (e.g. a container file mount), which cannot be ' +
      'replaced atomically by rename: bind-mount its parent directory instead';
  }
  return message;
}

/**
 * The state directory cannot be used: read-only, not writable by the agent's user, or failing. `retryable`
 * is false for what only an operator can fix (EROFS, EACCES, EPERM, ...): the agent exits 78 instead of
 * entering a restart loop. The message names stateDir and the reason.
 */
export class StateDirError extends AgentError {
  readonly stateDir: string;
  readonly errno: string | undefined;
  /** `refusal`: not an fs failure but a reason of the agent's own, always for an operator to resolve. */
  constructor(stateDir: string, operation: string, cause: unknown, refusal?: string) {
    const errno = errnoCode(cause);
    const permanent = refusal !== undefined || (errno !== undefined && OPERATOR_ERRNOS.has(errno));
    const message =
      refusal === undefined
        ? stateDirMessage(stateDir, operation, errno, cause)
        : `stateDir ${stateDir} is not usable: ${operation}: ${refusal}`;
    super('state_dir_unusable', message, { retryable: !permanent, cause });
    this.stateDir = stateDir;
    this.errno = errno;
  }
}

/**
 * A file of stateDir that would cost more to read or parse than any the agent writes (`readStateDirFile`: its tokens
 * or depth weighed on its bytes before any parse, or longer than a string can be): not parsed, and taken as each
 * file takes one that is corrupt (state.json kept aside, the others started empty). Returned by the read, thrown
 * by `parseStateFile` into the caller's handling of a corrupt file, so the log says why.
 */
export class StateFileOverweightError extends AgentError {
  readonly file: string;
  readonly over: 'tokens' | 'depth' | 'bytes';
  readonly bound: number;
  constructor(file: string, over: 'tokens' | 'depth' | 'bytes', bound: number) {
    const why =
      over === 'tokens'
        ? `holds more than ${bound} JSON values, more than any ${file} the agent writes`
        : over === 'depth'
          ? `nests deeper than ${bound} levels, deeper than any ${file} the agent writes`
          : `is longer than any string can be (${bound} characters)`;
    super('state_file_overweight', `${file} ${why}: not parsed`, { retryable: false });
    this.file = file;
    this.over = over;
    this.bound = bound;
  }
}

/** Errors only an operator can fix; anything else (ENOSPC, EIO, EMFILE) may pass by itself. */
const OPERATOR_ERRNOS = new Set(['EROFS', 'EACCES', 'EPERM', 'ENOTDIR', 'ELOOP', 'ENAMETOOLONG', 'EISDIR']);

const STATE_DIR_HINTS: Record<string, string> = {
  EROFS:
    'read-only file system: stateDir must be on a writable file system (under systemd: inside ' +
    'StateDirectory= or ReadWritePaths=)',
  EACCES: "permission denied: the agent's user must own stateDir (chown it, mode 0700)",
  EPERM: "operation not permitted: the agent's user must own stateDir (chown it, mode 0700)",
  ENOSPC: 'no space left on device',
  EDQUOT: 'disk quota exceeded',
  EIO: 'input/output error',
};

function stateDirMessage(stateDir: string, operation: string, errno: string | undefined, cause: unknown) {
  const reason =
    errno === undefined
      ? errorMessage(cause)
      : STATE_DIR_HINTS[errno] === undefined
        ? errno
        : `${STATE_DIR_HINTS[errno]} (${errno})`;
  return `stateDir ${stateDir} is not usable: ${operation}: ${reason}`;
}

/**
 * A batch's writes could not be declared in `stateDir/intent.json` (the state directory full, failing or
 * read-only): none of them is written. Written undeclared, a crash before the next durable state.json left files
 * that nothing proves the agent's: never removed when retired, never claimed. `cause`: the publish's error.
 */
export class WriteNotDeclaredError extends AgentError {
  /** `what`: a removal of a file whose write is declared and not yet recorded (intent-journal.ts declareRemovals). */
  constructor(cause: unknown, what: 'write' | 'removal' = 'write') {
    super(
      'disk_error',
      `could not declare the ${what} in stateDir/intent.json first (${errorMessage(cause)})`,
      {
        retryable: true,
        cause,
      },
    );
  }
}
