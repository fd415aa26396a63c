// The exit-code contract: the numbers scripts depend on, and the mapping of startup errors to them.
import { describe, expect, it } from 'vitest';
import { ApiKeyError, ConfigError } from '../config/errors.js';
import { AgentError } from '../lib/errors.js';
import { UsageError } from './args.js';
import { EXIT_CODE_MEANINGS, ExitCode, exitCodeForStartupError } from './exit-codes.js';

describe('ExitCode', () => {
  it('keeps the numbers of the contract', () => {
    expect(ExitCode).toEqual({ Converged: 0, NotConverged: 1, Usage: 2, Unreachable: 3, Config: 78 });
  });

  it('has a meaning for every code', () => {
    expect(
      Object.keys(EXIT_CODE_MEANINGS)
        .map(Number)
        .sort((a, b) => a - b),
    ).toEqual([0, 1, 2, 3, 78]);
  });
});

describe('exitCodeForStartupError', () => {
  it.each([
    [new UsageError('bad flag'), ExitCode.Usage],
    [new ConfigError('/etc/x.json', [{ path: 'deviceId', message: 'required' }]), ExitCode.Config],
    [new ApiKeyError('no API key found'), ExitCode.Config],
  ])('%s → %i', (error, code) => {
    expect(exitCodeForStartupError(error)).toBe(code);
  });

  it('leaves every other error to the caller', () => {
    expect(exitCodeForStartupError(new AgentError('network', 'down', { retryable: true }))).toBeUndefined();
    expect(exitCodeForStartupError(Object.assign(new Error('x'), { code: 'ENOENT' }))).toBeUndefined();
    expect(exitCodeForStartupError('usage')).toBeUndefined();
  });
});
