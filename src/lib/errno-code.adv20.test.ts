// adv20: errnoCode names an errno libuv could not (Node 20's EDQUOT: `Unknown system error -122`, `UNKNOWN`).
import { constants } from 'node:os';
import { describe, expect, it } from 'vitest';
import { errnoCode } from './errors.js';

const quota = constants.errno.EDQUOT;

describe('errnoCode', () => {
  it('names EDQUOT from its number whatever code libuv gave it', () => {
    const promised = Object.assign(
      new Error(`Unknown system error -${quota}: Unknown system error -${quota}, mkdir '/x'`),
      {
        code: `Unknown system error -${quota}`,
        errno: -quota,
      },
    );
    const synchronous = Object.assign(new Error('UNKNOWN: unknown error, write'), {
      code: 'UNKNOWN',
      errno: -quota,
    });
    expect(errnoCode(promised)).toBe('EDQUOT');
    expect(errnoCode(synchronous)).toBe('EDQUOT');
    const stale = constants.errno.ESTALE;
    expect(
      errnoCode(Object.assign(new Error('x'), { code: `Unknown system error -${stale}`, errno: -stale })),
    ).toBe('ESTALE');
    // Not in Node's table at all: named on Linux, where ext4 answers it for a corrupt filesystem.
    if (process.platform === 'linux') {
      expect(
        errnoCode(Object.assign(new Error('x'), { code: 'Unknown system error -117', errno: -117 })),
      ).toBe('EUCLEAN');
    }
    expect(errnoCode(Object.assign(new Error('x'), { code: 'Unknown system error -74', errno: -74 }))).toBe(
      'EBADMSG',
    );
  });

  it('leaves named codes, codes of no known number and codes without one as they are', () => {
    expect(errnoCode(Object.assign(new Error('x'), { code: 'ENOSPC', errno: -28 }))).toBe('ENOSPC');
    expect(errnoCode(Object.assign(new Error('x'), { code: 'UNKNOWN', errno: -99_999 }))).toBe('UNKNOWN');
    expect(errnoCode(Object.assign(new Error('x'), { code: 'UNKNOWN' }))).toBe('UNKNOWN');
    expect(errnoCode(Object.assign(new Error('x'), { code: 'ERR_INVALID_ARG_TYPE' }))).toBe(
      'ERR_INVALID_ARG_TYPE',
    );
    expect(errnoCode({ code: 7 })).toBeUndefined();
    expect(errnoCode(undefined)).toBeUndefined();
  });
});
