// The clean-exit marker: a run that left no temp file in rootDir lets the next start skip rootDir's sweep.
import { constants } from 'node:fs';
import path from 'node:path';
import type { WallClock } from '../lib/clock.js';
import type { FsPort } from '../lib/fs-port.js';

export const CLEAN_EXIT_FILE = 'clean-exit.json';

/**
 * A real sweep at least this often, whatever the markers say: a temp file that another stateDir's agent on the
 * same rootDir left by a crash (its sweep, not this one's, is the one that owes it) stays at most this long.
 */
export const CLEAN_EXIT_MAX_AGE_MS = 60 * 60 * 1000;

/** A marker is a few hundred bytes; anything larger is not one. */
const MAX_MARKER_BYTES = 4096;

const BOOT_ID_FILE = '/proc/sys/kernel/random/boot_id';
const DIR_FLAGS = constants.O_RDONLY | constants.O_DIRECTORY;

/** Where this marker holds: one boot, one stateDir, one rootDir (by path and by identity). */
export interface CleanExitScope {
  boot: string;
  stateDir: string;
  stateDirId: string;
  rootDir: string;
  rootDirId: string;
}

interface Marker extends CleanExitScope {
  /** Wall-clock ms of the last sweep of rootDir that really ran (carried over by every skip). */
  sweptAt: number;
}

/**
 * This run's scope, or undefined when any part of it cannot be read (no /proc, memfs, a rootDir that does not
 * answer): then no marker is trusted nor written, and every start sweeps as before.
 */
export async function cleanExitScope(
  fs: FsPort,
  rootFs: FsPort,
  stateDir: string,
  rootDir: string,
): Promise<CleanExitScope | undefined> {
  try {
    const boot = String(await fs.readFile(BOOT_ID_FILE, 'latin1')).trim();
    if (!/^[0-9a-f-]{8,64}$/.test(boot)) return undefined;
    const state = await fs.stat(stateDir);
    const root = await rootFs.stat(rootDir);
    return {
      boot,
      stateDir,
      stateDirId: `${state.dev}:${state.ino}`,
      rootDir,
      rootDirId: `${root.dev}:${root.ino}`,
    };
  } catch {
    return undefined;
  }
}

/**
 * Takes the marker a clean end left (the state lock held, before anything is written): removed whatever it says,
 * durably (stateDir fsynced: a power cut of stateDir's disk alone, the boot going on, as a removable disk or LazyFS
 * in the tests, must not bring back a marker this run took while its writes may leave temp files), and returns
 * when rootDir's last real sweep ran if that sweep may be skipped now. It may only when the marker was written in
 * this boot (a power cut or a crash of the machine draws a new boot id, so no page cache, lost or not, is trusted
 * across one), for this stateDir and this rootDir (paths and device:inode: a copied stateDir, a remounted or
 * recreated rootDir are other ones), and within CLEAN_EXIT_MAX_AGE_MS of that sweep by the wall clock (never from
 * the future). Any failure reads as "sweep".
 */
export async function takeCleanExit(
  fs: FsPort,
  stateDir: string,
  scope: CleanExitScope | undefined,
  clock: WallClock,
): Promise<number | undefined> {
  const file = path.join(stateDir, CLEAN_EXIT_FILE);
  let text: string;
  try {
    text = await readSmall(fs, file);
    await fs.unlink(file);
    await syncDirectory(fs, stateDir);
  } catch {
    return undefined;
  }
  if (scope === undefined) return undefined;
  const marker = parseMarker(text);
  if (marker === undefined || !sameScope(marker, scope)) return undefined;
  const age = clock.now() - marker.sweptAt;
  if (!(age >= 0 && age < CLEAN_EXIT_MAX_AGE_MS)) return undefined;
  return marker.sweptAt;
}

/**
 * Leaves the marker at a clean end, the state lock still held: only when rootDir held no temp file of this agent
 * at start (swept with nothing left over, or skipped on a marker) and this process made none since (the caller
 * says so). Not fsynced: it is trusted in this boot only, where the page cache is what every reader sees; lost, or
 * torn by a cut, it reads as "sweep". Made O_EXCL, as every file the agent creates in stateDir: anything at the
 * name (the start could not remove it) leaves none. A failure to write it costs the next start its sweep, nothing else.
 */
export async function leaveCleanExit(
  fs: FsPort,
  scope: CleanExitScope | undefined,
  sweptAt: number,
): Promise<void> {
  if (scope === undefined) return;
  const marker: Marker = { ...scope, sweptAt };
  const file = path.join(scope.stateDir, CLEAN_EXIT_FILE);
  let handle: Awaited<ReturnType<FsPort['open']>> | undefined;
  try {
    handle = await fs.open(
      file,
      constants.O_WRONLY | constants.O_CREAT | constants.O_EXCL | constants.O_NOFOLLOW,
      0o600,
    );
    await handle.writeFile(`${JSON.stringify(marker)}\n`);
  } catch {
    // Best effort: the next start sweeps.
  } finally {
    await handle?.close().catch(() => undefined);
  }
}

function parseMarker(text: string): Marker | undefined {
  if (text.length > MAX_MARKER_BYTES) return undefined;
  let value: unknown;
  try {
    value = JSON.parse(text);
  } catch {
    return undefined;
  }
  if (typeof value !== 'object' || value === null) return undefined;
  const record = value as Record<string, unknown>;
  const { boot, stateDir, stateDirId, rootDir, rootDirId, sweptAt } = record;
  if (
    typeof boot !== 'string' ||
    typeof stateDir !== 'string' ||
    typeof stateDirId !== 'string' ||
    typeof rootDir !== 'string' ||
    typeof rootDirId !== 'string' ||
    typeof sweptAt !== 'number' ||
    !Number.isSafeInteger(sweptAt)
  )
    return undefined;
  return { boot, stateDir, stateDirId, rootDir, rootDirId, sweptAt };
}

function sameScope(marker: Marker, scope: CleanExitScope): boolean {
  return (
    marker.boot === scope.boot &&
    marker.stateDir === scope.stateDir &&
    marker.stateDirId === scope.stateDirId &&
    marker.rootDir === scope.rootDir &&
    marker.rootDirId === scope.rootDirId
  );
}

/** The file's first MAX_MARKER_BYTES + 1 bytes, never through a symlink, never blocking on a FIFO. */
async function readSmall(fs: FsPort, file: string): Promise<string> {
  const handle = await fs.open(file, constants.O_RDONLY | constants.O_NOFOLLOW | constants.O_NONBLOCK);
  try {
    const buffer = Buffer.alloc(MAX_MARKER_BYTES + 1);
    const { bytesRead } = await handle.read(buffer, 0, buffer.length, 0);
    return buffer.toString('utf8', 0, bytesRead);
  } finally {
    await handle.close().catch(() => undefined);
  }
}

async function syncDirectory(fs: FsPort, directory: string): Promise<void> {
  const handle = await fs.open(directory, DIR_FLAGS);
  try {
    await handle.sync();
  } finally {
    await handle.close().catch(() => undefined);
  }
}
