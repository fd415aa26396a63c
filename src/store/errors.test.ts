// Store errors: which failures are the agent's own resource trouble (never an instance's attempt), and messages.
import { describe, expect, it } from 'vitest';
import type { FsPort } from '../lib/fs-port.js';
import {
  AGENT_RESOURCE_ERRNOS,
  DiskError,
  isAgentResourceError,
  PathRejectedError,
  rootConditionOf,
} from './errors.js';
import { checkRoot } from './path-guard.js';

function errno(code: string): NodeJS.ErrnoException {
  return Object.assign(new Error(`${code}: failed`), { code });
}

describe('agent resource errors', () => {
  it.each(['EMFILE', 'ENFILE', 'ENOMEM', 'ENOBUFS'])('%s is the agent’s own trouble', (code) => {
    const error = new DiskError({ operation: 'write temp file', path: 'app/a.json', cause: errno(code) });
    expect(error).toMatchObject({ code: 'disk_error', errno: code, resource: true, retryable: true });
    expect(isAgentResourceError(error)).toBe(true);
    expect(isAgentResourceError(errno(code))).toBe(true);
    // However deep a layer wrapped it.
    expect(isAgentResourceError(new Error('pass failed', { cause: new Error('x', { cause: error }) }))).toBe(
      true,
    );
  });

  it.each(['ENOSPC', 'EIO', 'EROFS', 'EACCES', 'EXDEV', 'EBUSY', 'ENOENT'])(
    '%s is a disk problem of the instance, not of the agent',
    (code) => {
      const error = new DiskError({ operation: 'rename', path: 'a', cause: errno(code) });
      expect(error.resource).toBe(false);
      expect(isAgentResourceError(error)).toBe(false);
      expect(isAgentResourceError(errno(code))).toBe(false);
    },
  );

  it('is false for hostile paths, plain errors, non-errors and cyclic causes', () => {
    expect(isAgentResourceError(new PathRejectedError('absolute', '/etc/passwd'))).toBe(false);
    expect(isAgentResourceError(new Error('boom'))).toBe(false);
    expect(isAgentResourceError(undefined)).toBe(false);
    expect(isAgentResourceError('EMFILE')).toBe(false);
    const cyclic = new Error('a') as Error & { cause?: unknown };
    cyclic.cause = cyclic;
    expect(isAgentResourceError(cyclic)).toBe(false);
  });

  it('a DiskError is judged by its own errno, not a cause it overrode', () => {
    const error = new DiskError({ operation: 'open', path: 'a', errno: 'EIO', cause: errno('EMFILE') });
    expect(isAgentResourceError(error)).toBe(false);
    expect(AGENT_RESOURCE_ERRNOS.has('EMFILE')).toBe(true);
  });

  it('names the errno in words', () => {
    const error = new DiskError({ operation: 'open directory', path: 'app', cause: errno('ENFILE') });
    expect(error.message).toBe(
      'disk error: open directory failed for "app": ENFILE (too many open files in the system)',
    );
  });
});

describe("rootDir's own failures (checkRoot)", () => {
  async function rootFailure(code: string): Promise<unknown> {
    const fs = { stat: () => Promise.reject(errno(code)) } as unknown as FsPort;
    return checkRoot(fs, '/srv/config').then(
      () => undefined,
      (error: unknown) => error,
    );
  }

  it.each(['ENOENT', 'ENOTDIR', 'ELOOP'])(
    '%s: rootDir replaced or gone, the condition that waits (not_a_directory)',
    async (code) => {
      expect(rootConditionOf(await rootFailure(code))).toBe('not_a_directory');
    },
  );

  it.each(['EACCES', 'EPERM'])(
    "%s: rootDir out of the agent's reach, the condition that waits (not_writable)",
    async (code) => {
      expect(rootConditionOf(await rootFailure(code))).toBe('not_writable');
    },
  );

  it.each(['ENAMETOOLONG', 'EINVAL'])(
    '%s: not a rootDir replaced nor refusing: judged as before, by its errno (an attempt)',
    async (code) => {
      const error = await rootFailure(code);
      expect(error).toMatchObject({ code: 'disk_error', errno: code });
      expect(rootConditionOf(error)).toBeUndefined();
    },
  );

  it.each(['EIO', 'ENXIO', 'ENODEV', 'ENOTCONN', 'ESTALE', 'ETIMEDOUT', 'EUCLEAN', 'EBADMSG'])(
    '%s: the disk failing, the device condition `failing` (never an attempt), not a rootDir replaced',
    async (code) => {
      const error = await rootFailure(code);
      expect(error).toMatchObject({ code: 'disk_error', errno: code });
      expect(rootConditionOf(error)).toBe('failing');
    },
  );
});
