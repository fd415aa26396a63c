// readStateDirFile's failed open (2f41b61's ENXIO branch): what is there is looked at on ENXIO only, and a look finding nothing leaves the errno (mut28's mutants).
import * as nodeFs from 'node:fs/promises';
import { mkdir, mkdtemp, rm } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import type { FsPort } from '../lib/fs-port.js';
import { StateDirError } from './errors.js';
import { readStateDirFile, STATE_FILE } from './state.js';

let dir: string;
beforeEach(async () => {
  dir = await mkdtemp(path.join(os.tmpdir(), 'state-enxio-mut28-'));
});
afterEach(async () => {
  await rm(dir, { recursive: true, force: true });
});

/** node's fs whose open fails with `code`, whatever is at the name (a disk going away). */
function openFailing(code: string): FsPort {
  return {
    ...(nodeFs as unknown as FsPort),
    open: (async () => {
      throw Object.assign(new Error(`${code}: simulated`), { code });
    }) as FsPort['open'],
  };
}

describe('readStateDirFile when its open fails (mut28)', () => {
  it('EIO with a directory at the name: a failing disk (retryable, named by its errno), not "it is a directory"', async () => {
    await mkdir(path.join(dir, STATE_FILE));
    const error = await readStateDirFile(openFailing('EIO'), dir, STATE_FILE).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(StateDirError);
    expect(error).toMatchObject({ code: 'state_dir_unusable', errno: 'EIO', retryable: true, stateDir: dir });
    expect((error as Error).message).toMatch(
      new RegExp(`^stateDir ${dir} is not usable: cannot read ${STATE_FILE}: `),
    );
    expect((error as Error).message).not.toContain('directory');
  });

  it('ENXIO with nothing left at the name: the errno, retryable, naming the file', async () => {
    const error = await readStateDirFile(openFailing('ENXIO'), dir, STATE_FILE).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(StateDirError);
    expect(error).toMatchObject({
      code: 'state_dir_unusable',
      errno: 'ENXIO',
      retryable: true,
      stateDir: dir,
    });
    expect((error as Error).message).toMatch(
      new RegExp(`^stateDir ${dir} is not usable: cannot read ${STATE_FILE}: `),
    );
  });
});
