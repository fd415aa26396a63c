// The exit-code contract: the numbers scripts depend on, and the mapping of startup errors to them.
import { describe, expect, it } from 'vitest';
import { ApiKeyError, ConfigError } from '../config/errors.js';
import { AgentError, UsageError } from '../lib/errors.js';
import type { PassError, PassResult } from '../reconcile/pass-runner.js';
import { DiskError } from '../store/errors.js';
import { StateDirError } from '../store/lock.js';

function errno(code: string): Error {
  return Object.assign(new Error(code), { code });
}

import {
  EXIT_CODE_MEANINGS,
  ExitCode,
  exitCodeForPass,
  exitCodeForStartupError,
  waitsOutAtStart,
} from './exit-codes.js';

describe('ExitCode', () => {
  it('keeps the numbers of the contract', () => {
    expect(ExitCode).toEqual({
      Converged: 0,
      NotConverged: 1,
      Usage: 2,
      Unreachable: 3,
      OutputFailed: 74,
      Config: 78,
      HungUp: 129,
      Interrupted: 130,
      Terminated: 143,
    });
  });

  it('has a meaning for every code', () => {
    expect(
      Object.keys(EXIT_CODE_MEANINGS)
        .map(Number)
        .sort((a, b) => a - b),
    ).toEqual([0, 1, 2, 3, 74, 78, 129, 130, 143]);
  });
});

describe('exitCodeForStartupError', () => {
  it.each([
    [new UsageError('bad flag'), ExitCode.Usage],
    [new ConfigError('/etc/x.json', [{ path: 'deviceId', message: 'required' }]), ExitCode.Config],
    [new ApiKeyError('no API key found'), ExitCode.Config],
    [new StateDirError('/var/lib/a', 'cannot create agent.lock', errno('EROFS')), ExitCode.Config],
    [new StateDirError('/var/lib/a', 'cannot create agent.lock', errno('EACCES')), ExitCode.Config],
  ])('%s → %i', (error, code) => {
    expect(exitCodeForStartupError(error)).toBe(code);
  });

  it('leaves every other error to the caller', () => {
    expect(
      exitCodeForStartupError(new AgentError('network_error', 'down', { retryable: true })),
    ).toBeUndefined();
    expect(exitCodeForStartupError(Object.assign(new Error('x'), { code: 'ENOENT' }))).toBeUndefined();
    expect(exitCodeForStartupError('usage')).toBeUndefined();
    // A full disk under stateDir may clear up: exit 1, and systemd restarts the agent.
    expect(
      exitCodeForStartupError(new StateDirError('/var/lib/a', 'cannot create agent.lock', errno('ENOSPC'))),
    ).toBeUndefined();
    // So may a full or failing disk where rootDir or stateDir is created (it was 78, as a configuration error).
    for (const code of ['ENOSPC', 'EIO', 'EDQUOT']) {
      const cause = errno(code);
      expect(
        exitCodeForStartupError(
          new ConfigError('directories', [{ path: 'rootDir', message: 'x' }], { cause }),
        ),
      ).toBeUndefined();
    }
    expect(
      exitCodeForStartupError(
        new ConfigError('directories', [{ path: 'rootDir', message: 'x' }], { cause: errno('EACCES') }),
      ),
    ).toBe(ExitCode.Config);
  });
});

describe('exitCodeForPass', () => {
  const base = {
    mode: 'full' as const,
    dryRun: false,
    startedAt: '2026-01-01T00:00:00.000Z',
    durationMs: 1,
    steps: [],
    outcomes: [],
    reports: { delivered: 0, rejected: 0, pending: 0 },
    sweptTempFiles: [],
  };
  const pullFailed = (error: Partial<PassError>): PassResult => ({
    ...base,
    reachable: false,
    converged: false,
    error: { message: 'x', retryable: true, code: 'http_status', ...error },
  });

  it.each<[Partial<PassError>, number]>([
    [{ code: 'network_error' }, 3],
    [{ code: 'timeout' }, 3],
    [{ code: 'malformed_response' }, 3],
    [{ code: 'pull_deadline' }, 3],
    [{ code: 'listing_unstable' }, 1],
    [{ code: 'listing_runaway' }, 1],
    [{ status: 401 }, 3],
    [{ status: 403 }, 3],
    [{ status: 429 }, 3],
    [{ status: 503 }, 3],
    [{ status: 408 }, 3],
    [{ status: 500 }, 3],
    [{ status: 501 }, 3],
    [{ status: 404 }, 1],
    [{ status: 400 }, 1],
    [{ status: 405 }, 1],
    [{ status: 302 }, 3],
    [{ status: 304 }, 3],
    [{ status: 418 }, 3],
    [{ status: 451 }, 3],
    [{ status: 422 }, 1],
    [{ code: 'http_status' }, 1],
    [{ code: 'disk_error' }, 1],
    [{ code: 'internal' }, 1],
    [{ code: 'invalid_response' }, 1],
    [{ code: 'response_too_large' }, 1],
  ])('a pull that failed with %o exits %i', (error, code) => {
    expect(exitCodeForPass(pullFailed(error))).toBe(code);
  });

  it('a reached service exits 0 when converged, 1 otherwise; a dry run 0', () => {
    expect(exitCodeForPass({ ...base, reachable: true, converged: true })).toBe(0);
    expect(exitCodeForPass({ ...base, reachable: true, converged: false })).toBe(1);
    expect(exitCodeForPass({ ...base, dryRun: true, reachable: true, converged: false })).toBe(0);
  });
});

describe('waitsOutAtStart: what the daemon waits out instead of exiting', () => {
  it.each([
    [new StateDirError('/s', 'cannot create agent.lock', errno('ENOSPC')), true],
    [new StateDirError('/s', 'cannot read state.json', errno('EIO')), true],
    [new StateDirError('/s', 'cannot create agent.lock', errno('EDQUOT')), true],
    [new DiskError({ operation: 'sweep', path: '', cause: errno('EMFILE') }), true],
    [new ConfigError('directories', [{ path: 'rootDir', message: 'x' }], { cause: errno('ENOSPC') }), true],
    [new StateDirError('/s', 'cannot create agent.lock', errno('EROFS')), false],
    [new StateDirError('/s', 'cannot create agent.lock', errno('EACCES')), false],
    [new ConfigError('directories', [{ path: 'rootDir', message: 'x' }], { cause: errno('EACCES') }), false],
    [new ConfigError('/etc/config.json', [{ path: 'x', message: 'x' }], { cause: errno('EIO') }), false],
    [new DiskError({ operation: 'sweep', path: '', cause: errno('EACCES') }), false],
    [errno('ENOSPC'), false],
  ])('%s → %s', (error, expected) => {
    expect(waitsOutAtStart(error)).toBe(expected);
  });
});
