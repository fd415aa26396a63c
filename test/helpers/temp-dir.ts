// A temp dir for each test of a file, made before the test and removed after, with the subdirectories it asks for.
import { mkdir, mkdtemp, rm } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { afterEach, beforeEach } from 'vitest';

export interface TempDir {
  /** The test's temp dir (a test only: outside one, it throws). */
  readonly dir: string;
  /** `parts` joined below the temp dir. */
  at(...parts: string[]): string;
}

/**
 * A fresh dir under the OS temp dir, its name starting with `prefix`, for each test of the file that calls it;
 * `subdirs` (name: mode, undefined for the default) are made in it first.
 */
export function tempDirEachTest(prefix: string, subdirs: Record<string, number | undefined> = {}): TempDir {
  let dir: string | undefined;
  const now = (): string => {
    if (dir === undefined) throw new TypeError('a temp dir is there during a test only');
    return dir;
  };
  beforeEach(async () => {
    dir = await mkdtemp(path.join(os.tmpdir(), prefix));
    for (const [name, mode] of Object.entries(subdirs))
      await mkdir(path.join(dir, name), mode === undefined ? {} : { mode });
  });
  afterEach(async () => {
    if (dir !== undefined) await rm(dir, { recursive: true, force: true });
    dir = undefined;
  });
  return {
    get dir() {
      return now();
    },
    at: (...parts) => path.join(now(), ...parts),
  };
}
