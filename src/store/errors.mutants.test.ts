// Every message the store's errors can carry, word for word: they reach logs, `status` and the service's reports.
import { describe, expect, it } from 'vitest';
import {
  DiskError,
  isAgentResourceError,
  PathRejectedError,
  type PathRule,
  StateDirError,
} from './errors.js';

function errno(code: string): NodeJS.ErrnoException {
  return Object.assign(new Error(`${code}: failed`), { code });
}

describe('PathRejectedError', () => {
  it.each<[PathRule, string, boolean]>([
    ['empty', 'is empty', false],
    ['absolute', 'is absolute (starts with "/")', false],
    ['backslash', 'contains a backslash', false],
    ['control_character', 'contains a NUL or control character', false],
    ['lone_surrogate', 'contains an unpaired UTF-16 surrogate (not valid Unicode)', false],
    ['not_nfc', 'is not in Unicode normalisation form NFC', false],
    ['dot_segment', 'contains a "." or ".." segment', false],
    ['empty_segment', 'contains an empty segment ("//" or a trailing "/")', false],
    ['segment_too_long', 'has a segment longer than 255 bytes (UTF-8)', false],
    ['path_too_long', 'is longer than 4095 bytes (UTF-8)', false],
    ['reserved_prefix', 'has a segment starting with the reserved temp-file prefix', false],
    ['crosses_symlink', 'crosses a symlink', true],
    ['not_a_directory', 'has a parent component that exists but is not a directory', true],
    ['target_is_directory', 'names an existing directory', true],
    ['target_not_regular_file', 'names an existing file that is not a regular file', true],
  ])('%s: "path rejected: <path> %s", retryable %s (only obstacles on disk are)', (rule, text, retryable) => {
    const error = new PathRejectedError(rule, 'etc/app.conf');
    expect(error.message).toBe(`path rejected: "etc/app.conf" ${text}`);
    expect(error).toMatchObject({ code: 'path_rejected', retryable, rule, path: 'etc/app.conf' });
  });

  it('adds a detail in parentheses only when there is one', () => {
    expect(new PathRejectedError('crosses_symlink', 'a/b', 'a is a symlink').message).toBe(
      'path rejected: "a/b" crosses a symlink (a is a symlink)',
    );
    expect(new PathRejectedError('crosses_symlink', 'a/b', '').message).toBe(
      'path rejected: "a/b" crosses a symlink',
    );
  });

  it('quotes the path as JSON (no forged log lines) and cuts it after 200 characters', () => {
    expect(new PathRejectedError('control_character', 'a\nb').message).toBe(
      'path rejected: "a\\nb" contains a NUL or control character',
    );
    const exactly = 'x'.repeat(200);
    expect(new PathRejectedError('path_too_long', exactly).message).toBe(
      `path rejected: "${exactly}" is longer than 4095 bytes (UTF-8)`,
    );
    const long = `${'y'.repeat(200)}zzz`;
    const error = new PathRejectedError('path_too_long', long);
    expect(error.message).toBe(`path rejected: "${'y'.repeat(200)}…" is longer than 4095 bytes (UTF-8)`);
    expect(error.path).toBe(long);
  });
});

describe('DiskError', () => {
  it.each([
    ['ENOSPC', 'no space left on device'],
    ['EDQUOT', 'disk quota exceeded'],
    ['EROFS', 'read-only file system'],
    ['EACCES', 'permission denied'],
    ['EPERM', 'operation not permitted'],
    ['EIO', 'input/output error'],
    ['ENOENT', 'no such file or directory'],
    ['ENAMETOOLONG', 'file name too long'],
    ['EMFILE', 'too many open files'],
    ['ENFILE', 'too many open files in the system'],
    ['ENOMEM', 'out of memory'],
    ['ENOBUFS', 'no buffer space available'],
  ])('%s is named in words: "%s"', (code, words) => {
    const error = new DiskError({ operation: 'write temp file', path: 'etc/a.conf', cause: errno(code) });
    expect(error.message).toBe(`disk error: write temp file failed for "etc/a.conf": ${code} (${words})`);
  });

  it('an errno without words is shown bare, a missing one as "unknown error"', () => {
    expect(new DiskError({ operation: 'rename', path: 'a', cause: errno('EXDEV') }).message).toBe(
      'disk error: rename failed for "a": EXDEV',
    );
    const unknown = new DiskError({ operation: 'fsync', path: '', cause: new Error('odd') });
    expect(unknown.message).toBe('disk error: fsync failed for "": unknown error');
    expect(unknown.errno).toBeUndefined();
    expect(unknown.resource).toBe(false);
  });

  it('EBUSY on rename explains the bind-mounted single file; EBUSY elsewhere does not', () => {
    const rename = new DiskError({ operation: 'rename', path: 'etc/hosts', cause: errno('EBUSY') });
    expect(rename.message).toBe(
      'disk error: rename failed for "etc/hosts": EBUSY; the target is probably a bind-mounted single file ' +
        '(e.g. a container file mount), which cannot be replaced atomically by rename: bind-mount its parent ' +
        'directory instead',
    );
    expect(new DiskError({ operation: 'unlink', path: 'etc/hosts', cause: errno('EBUSY') }).message).toBe(
      'disk error: unlink failed for "etc/hosts": EBUSY',
    );
  });

  it('keeps operation, path, cause; an explicit errno wins over the cause', () => {
    const cause = errno('EIO');
    const error = new DiskError({ operation: 'open', path: 'x/y', errno: 'ENOSPC', cause });
    expect(error).toMatchObject({
      code: 'disk_error',
      retryable: true,
      errno: 'ENOSPC',
      operation: 'open',
      path: 'x/y',
      resource: false,
    });
    expect(error.cause).toBe(cause);
  });
});

describe('isAgentResourceError', () => {
  it('walks a chain of causes, stopping at null and at non-objects', () => {
    expect(isAgentResourceError(null)).toBe(false);
    expect(isAgentResourceError(Object.assign(new Error('a'), { cause: null }))).toBe(false);
    let chain: unknown = errno('EMFILE');
    for (let k = 0; k < 7; k += 1) chain = new Error(`layer ${k}`, { cause: chain });
    expect(isAgentResourceError(chain)).toBe(true);
  });
});

describe('StateDirError', () => {
  const STATE = '/var/lib/config-agent';

  it.each([
    [
      'EROFS',
      'read-only file system: stateDir must be on a writable file system (under systemd: inside ' +
        'StateDirectory= or ReadWritePaths=) (EROFS)',
      false,
    ],
    ['EACCES', "permission denied: the agent's user must own stateDir (chown it, mode 0700) (EACCES)", false],
    [
      'EPERM',
      "operation not permitted: the agent's user must own stateDir (chown it, mode 0700) (EPERM)",
      false,
    ],
    ['ENOTDIR', 'ENOTDIR', false],
    ['ELOOP', 'ELOOP', false],
    ['ENAMETOOLONG', 'ENAMETOOLONG', false],
    ['EISDIR', 'EISDIR', false],
    ['ENOSPC', 'no space left on device (ENOSPC)', true],
    ['EDQUOT', 'disk quota exceeded (EDQUOT)', true],
    ['EIO', 'input/output error (EIO)', true],
    ['EMFILE', 'EMFILE', true],
    ['EBUSY', 'EBUSY', true],
  ])('%s: "<stateDir> is not usable: <operation>: %s", retryable %s', (code, reason, retryable) => {
    const cause = errno(code);
    const error = new StateDirError(STATE, 'cannot create agent.lock', cause);
    expect(error.message).toBe(`stateDir ${STATE} is not usable: cannot create agent.lock: ${reason}`);
    expect(error).toMatchObject({ code: 'state_dir_unusable', retryable, stateDir: STATE, errno: code });
    expect(error.cause).toBe(cause);
  });

  it("without an errno: the cause's own message, and retryable", () => {
    const error = new StateDirError(STATE, 'cannot read state.json', new Error('odd failure'));
    expect(error.message).toBe(`stateDir ${STATE} is not usable: cannot read state.json: odd failure`);
    expect(error).toMatchObject({ retryable: true, errno: undefined });
  });
});
