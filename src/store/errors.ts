// Failures of the file store: a path the agent refuses to touch (final) and a disk that failed under it (retryable).
import { AgentError, errnoCode } from '../lib/errors.js';

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

/** A server-supplied path that breaks a rule: never repaired, never retried (the server must change it). */
export class PathRejectedError extends AgentError {
  readonly rule: PathRule;
  readonly path: string;

  constructor(rule: PathRule, path: string, detail?: string) {
    super(
      'path_rejected',
      `path rejected: ${quotePath(path)} ${RULE_TEXT[rule]}${detail ? ` (${detail})` : ''}`,
      {
        retryable: false,
      },
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
};

export interface DiskErrorOptions {
  /** What the store was doing: 'write temp file', 'rename', 'fsync directory', ... */
  operation: string;
  /** Relative to the root the caller passed ('' for the root itself), so messages never leak unrelated paths. */
  path: string;
  /** Defaults to the errno code of `cause`. */
  errno?: string | undefined;
  cause?: unknown;
}

/** The filesystem failed an operation: retryable, because full disks get cleaned and mounts come back. */
export class DiskError extends AgentError {
  readonly errno: string | undefined;
  readonly path: string;
  readonly operation: string;

  constructor(options: DiskErrorOptions) {
    const errno = options.errno ?? errnoCode(options.cause);
    super('disk_error', diskMessage(options.operation, options.path, errno), {
      retryable: true,
      cause: options.cause,
    });
    this.errno = errno;
    this.path = options.path;
    this.operation = options.operation;
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
