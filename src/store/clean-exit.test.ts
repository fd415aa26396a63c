// The clean-exit marker: which ends leave it, which starts may skip rootDir's sweep on it, and which must not.

import * as nodeFs from 'node:fs/promises';
import { cp, mkdir, mkdtemp, readdir, readFile, rename, rm, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import type { FsPort } from '../lib/fs-port.js';
import { silentLogger } from '../lib/logger.js';
import { CLEAN_EXIT_FILE, CLEAN_EXIT_MAX_AGE_MS } from './clean-exit.js';
import { TEMP_PREFIX } from './path-guard.js';
import { StateDir } from './state-dir.js';

const T0 = Date.UTC(2026, 10, 25, 12);
const LEFT = `${TEMP_PREFIX}0123456789abcdef01234567`;

let dir: string;
let settings: { stateDir: string; rootDir: string; deviceId: string };
let fs: FsPort;
let now: number;
const clock = { now: () => now };

beforeEach(async () => {
  dir = await mkdtemp(path.join(os.tmpdir(), 'clean-exit-'));
  settings = { stateDir: path.join(dir, 'state'), rootDir: path.join(dir, 'root'), deviceId: 'dvc_clean' };
  await mkdir(settings.stateDir, { mode: 0o700 });
  await mkdir(path.join(settings.rootDir, 'app'), { recursive: true });
  fs = nodeFs;
  now = T0;
});

afterEach(async () => {
  await rm(dir, { recursive: true, force: true });
});

const marker = () => path.join(settings.stateDir, CLEAN_EXIT_FILE);
const plantTemp = () => writeFile(path.join(settings.rootDir, 'app', LEFT), 'half a file');
const rootTemps = async () =>
  (await readdir(path.join(settings.rootDir, 'app'))).filter((n) => n.startsWith(TEMP_PREFIX));
const hasMarker = async () => (await readdir(settings.stateDir)).includes(CLEAN_EXIT_FILE);

async function run(
  end: 'clean' | 'failed' | 'crash',
  options: { fs?: FsPort; between?: () => Promise<void> } = {},
) {
  const opened = await StateDir.open(options.fs ?? fs, settings, silentLogger(), { clock });
  const swept = opened.takeSweptTempFiles();
  const markerDuringRun = await hasMarker();
  await options.between?.();
  if (end !== 'crash') await opened.close({ clean: end === 'clean' });
  return { swept, markerDuringRun };
}

describe('the clean-exit marker', () => {
  it('a clean end leaves it; the next start takes it and skips the sweep; a crash after that is swept', async () => {
    await plantTemp();
    expect((await run('clean')).swept).toEqual([`app/${LEFT}`]);
    expect(await hasMarker()).toBe(true);
    // Nothing of the agent's can be there now: a file with a temp name put in by someone else is not looked for.
    await plantTemp();
    const skipping = await run('crash', { between: plantTemp });
    expect(skipping).toEqual({ swept: [], markerDuringRun: false });
    expect(await rootTemps()).toEqual([LEFT]);
    // That run died (its temp file left): the marker it took is gone, so the next start sweeps.
    expect((await run('clean')).swept).toEqual([`app/${LEFT}`]);
    expect(await rootTemps()).toEqual([]);
  });

  it('is not left by a run that wrote into rootDir, nor by a dry run, nor without /proc', async () => {
    await run('failed');
    expect(await hasMarker()).toBe(false);
    const dry = await StateDir.open(fs, settings, silentLogger(), { clock, readOnly: true });
    await dry.close({ clean: true });
    expect(await hasMarker()).toBe(false);
    // No boot id to bind it to (memfs, a container without /proc): never left, so never trusted.
    const noProc: FsPort = {
      ...fs,
      readFile: ((file: string, options: unknown) =>
        file.startsWith('/proc/')
          ? Promise.reject(Object.assign(new Error('ENOENT'), { code: 'ENOENT' }))
          : nodeFs.readFile(file, options as BufferEncoding)) as FsPort['readFile'],
    };
    await run('clean', { fs: noProc });
    expect(await hasMarker()).toBe(false);
  });

  it('a dry run neither takes nor trusts it', async () => {
    await run('clean');
    await plantTemp();
    const dry = await StateDir.open(fs, settings, silentLogger(), { clock, readOnly: true });
    await dry.close();
    expect(await hasMarker()).toBe(true);
    expect((await run('clean')).swept).toEqual([]);
  });

  it('from another boot, another rootDir, another stateDir, the future or garbled: removed, and the sweep runs', async () => {
    const rewrite = async (change: (m: Record<string, unknown>) => void) => {
      await run('clean');
      const m = JSON.parse(await readFile(marker(), 'utf8')) as Record<string, unknown>;
      change(m);
      await writeFile(marker(), JSON.stringify(m));
      await plantTemp();
      const { swept, markerDuringRun } = await run('failed');
      expect(markerDuringRun).toBe(false);
      return swept;
    };
    expect(await rewrite((m) => (m.boot = '00000000-0000-0000-0000-000000000000'))).toEqual([`app/${LEFT}`]);
    expect(await rewrite((m) => (m.rootDirId = '1:1'))).toEqual([`app/${LEFT}`]);
    expect(await rewrite((m) => (m.rootDir = `${settings.rootDir}/app`))).toEqual([`app/${LEFT}`]);
    expect(await rewrite((m) => (m.stateDirId = '1:1'))).toEqual([`app/${LEFT}`]);
    expect(await rewrite((m) => (m.sweptAt = now + 1))).toEqual([`app/${LEFT}`]);
    expect(await rewrite((m) => (m.sweptAt = String(now)))).toEqual([`app/${LEFT}`]);
    await run('clean');
    await writeFile(marker(), '{"boot":');
    await plantTemp();
    expect((await run('failed')).swept).toEqual([`app/${LEFT}`]);
    expect(await hasMarker()).toBe(false);
  });

  it('a rootDir made anew at the same path, or a copied stateDir, is another one', async () => {
    await run('clean');
    // Renamed aside, not removed: its inode stays taken, so the new one cannot get its number back.
    await rename(settings.rootDir, path.join(dir, 'old-root'));
    await mkdir(path.join(settings.rootDir, 'app'), { recursive: true });
    await plantTemp();
    expect((await run('clean')).swept).toEqual([`app/${LEFT}`]);
    const copy = path.join(dir, 'state-copy');
    await cp(settings.stateDir, copy, { recursive: true });
    settings = { ...settings, stateDir: copy };
    await plantTemp();
    expect((await run('clean')).swept).toEqual([`app/${LEFT}`]);
  });

  it('is trusted until an hour after the last real sweep, however many clean ends carried it', async () => {
    await run('clean');
    now = T0 + CLEAN_EXIT_MAX_AGE_MS / 2;
    await plantTemp();
    expect((await run('clean')).swept).toEqual([]);
    now = T0 + CLEAN_EXIT_MAX_AGE_MS - 1;
    expect((await run('clean')).swept).toEqual([]);
    now = T0 + CLEAN_EXIT_MAX_AGE_MS;
    expect((await run('clean')).swept).toEqual([`app/${LEFT}`]);
    // That sweep starts the hour anew.
    await plantTemp();
    now += CLEAN_EXIT_MAX_AGE_MS - 1;
    expect((await run('clean')).swept).toEqual([]);
  });
});
