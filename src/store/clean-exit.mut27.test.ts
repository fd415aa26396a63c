// The clean-exit marker's checks one by one (mut27: the mutants clean-exit.test.ts let live): what is not a boot id,
// a stateDir by path and by identity, what is not a marker, the hour, and no descriptor left open.
import * as nodeFs from 'node:fs/promises';
import { cp, mkdir, mkdtemp, readdir, readlink, rename, rm, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import type { FsPort } from '../lib/fs-port.js';
import {
  CLEAN_EXIT_FILE,
  type CleanExitScope,
  cleanExitScope,
  leaveCleanExit,
  takeCleanExit,
} from './clean-exit.js';

const T0 = Date.UTC(2026, 10, 25, 12);
const MINUTE = 60_000;

let dir: string;
let stateDir: string;
let rootDir: string;
let now: number;
const clock = { now: () => now };
const fs: FsPort = nodeFs;

beforeEach(async () => {
  dir = await mkdtemp(path.join(os.tmpdir(), 'clean-exit-mut27-'));
  stateDir = path.join(dir, 'state');
  rootDir = path.join(dir, 'root');
  await mkdir(stateDir, { mode: 0o700 });
  await mkdir(rootDir);
  now = T0;
});

afterEach(async () => {
  await rm(dir, { recursive: true, force: true });
});

const marker = (state = stateDir) => path.join(state, CLEAN_EXIT_FILE);

async function scopeOf(state = stateDir): Promise<CleanExitScope> {
  const scope = await cleanExitScope(fs, fs, state, rootDir);
  if (scope === undefined) throw new TypeError('no scope: this test needs /proc');
  return scope;
}

/** A marker as leaveCleanExit writes it, with `change` applied and padded with spaces to `bytes`. */
async function plant(scope: CleanExitScope, change: Record<string, unknown> = {}, bytes?: number) {
  const text = `${JSON.stringify({ ...scope, sweptAt: T0, ...change })}\n`;
  await writeFile(marker(scope.stateDir), bytes === undefined ? text : text.padEnd(bytes, ' '));
}

/** What this process holds open under this test's directory (a leaked FileHandle shows here until collected). */
async function openUnderDir(): Promise<string[]> {
  const held: string[] = [];
  for (const fd of await readdir('/proc/self/fd')) {
    const target = await readlink(`/proc/self/fd/${fd}`).catch(() => '');
    if (target.startsWith(dir)) held.push(target);
  }
  return held;
}

describe('clean-exit.ts, mutants clean-exit.test.ts did not kill (mut27)', () => {
  it('a boot id that is not one (empty, a word around a hex run) gives no scope, so no marker is left', async () => {
    const bootReading = (text: string): FsPort => ({
      ...fs,
      readFile: ((file: string, options: unknown) =>
        file === '/proc/sys/kernel/random/boot_id'
          ? Promise.resolve(text)
          : nodeFs.readFile(file, options as BufferEncoding)) as FsPort['readFile'],
    });
    for (const text of ['\n', 'zz-0123456789abcdef\n', '0123456789abcdef zz\n']) {
      const scope = await cleanExitScope(bootReading(text), fs, stateDir, rootDir);
      expect(scope).toBeUndefined();
      await leaveCleanExit(fs, scope, T0);
      expect(await readdir(stateDir)).toEqual([]);
    }
    expect((await cleanExitScope(bootReading('0123456789abcdef-0123\n'), fs, stateDir, rootDir))?.boot).toBe(
      '0123456789abcdef-0123',
    );
  });

  it('a stateDir renamed (same inode, another path) or made anew at its path with the marker copied: not trusted', async () => {
    await leaveCleanExit(fs, await scopeOf(), T0);
    const moved = path.join(dir, 'moved');
    await rename(stateDir, moved);
    expect(await takeCleanExit(fs, moved, await scopeOf(moved), clock)).toBeUndefined();
    await rm(moved, { recursive: true });

    await mkdir(stateDir, { mode: 0o700 });
    await leaveCleanExit(fs, await scopeOf(), T0);
    const aside = path.join(dir, 'aside');
    await rename(stateDir, aside);
    await cp(aside, stateDir, { recursive: true });
    expect(await readdir(stateDir)).toEqual([CLEAN_EXIT_FILE]);
    expect(await takeCleanExit(fs, stateDir, await scopeOf(), clock)).toBeUndefined();
    // The same stateDir where it was: trusted (the two above were refused for their identity, not their bytes).
    await rm(marker(aside));
    await leaveCleanExit(fs, await scopeOf(aside), T0);
    expect(await takeCleanExit(fs, aside, await scopeOf(aside), clock)).toBe(T0);
  });

  it('a marker taken without a scope (no /proc this time) is removed and not trusted, without an error', async () => {
    await plant(await scopeOf());
    expect(await takeCleanExit(fs, stateDir, undefined, clock)).toBeUndefined();
    expect(await readdir(stateDir)).toEqual([]);
    await expect(leaveCleanExit(fs, undefined, T0)).resolves.toBeUndefined();
    expect(await readdir(stateDir)).toEqual([]);
  });

  it('null, a fraction of a ms, or more than 4096 bytes is not a marker; 4096 bytes is', async () => {
    const scope = await scopeOf();
    await writeFile(marker(), 'null\n');
    expect(await takeCleanExit(fs, stateDir, scope, clock)).toBeUndefined();
    await plant(scope, { sweptAt: T0 - 0.5 });
    expect(await takeCleanExit(fs, stateDir, scope, clock)).toBeUndefined();
    await plant(scope, {}, 5000);
    expect(await takeCleanExit(fs, stateDir, scope, clock)).toBeUndefined();
    await plant(scope, {}, 4096);
    expect(await takeCleanExit(fs, stateDir, scope, clock)).toBe(T0);
    expect(await readdir(stateDir)).toEqual([]);
  });

  it('is trusted 59 minutes after its sweep, not 60', async () => {
    const scope = await scopeOf();
    await plant(scope);
    now = T0 + 59 * MINUTE;
    expect(await takeCleanExit(fs, stateDir, scope, clock)).toBe(T0);
    await plant(scope);
    now = T0 + 60 * MINUTE;
    expect(await takeCleanExit(fs, stateDir, scope, clock)).toBeUndefined();
  });

  it('something at the name leaves no marker and no error; taking and leaving one leaves no descriptor open', async () => {
    await mkdir(marker());
    await expect(leaveCleanExit(fs, await scopeOf(), T0)).resolves.toBeUndefined();
    expect((await nodeFs.stat(marker())).isDirectory()).toBe(true);
    await rm(marker(), { recursive: true });

    await leaveCleanExit(fs, await scopeOf(), T0);
    expect(await takeCleanExit(fs, stateDir, await scopeOf(), clock)).toBe(T0);
    expect(await openUnderDir()).toEqual([]);
  });
});
