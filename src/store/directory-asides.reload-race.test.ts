// A reload's new record of renewal asides and the old one's background retry never act on one record at once.
import * as nodeFs from 'node:fs/promises';
import { chmod, mkdir, mkdtemp, readdir, readFile, rm, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { Writable } from 'node:stream';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import type { FsPort } from '../lib/fs-port.js';
import { createLogger, type Logger } from '../lib/logger.js';
import { createSecretRegistry } from '../lib/secrets.js';
import { ASIDES_FILE, type DirectoryAsides } from './directory-asides.js';
import { DirectorySyncLedger } from './directory-syncs.js';
import { publishFile } from './durable-writer.js';
import { TEMP_PREFIX } from './path-guard.js';
import { StateDir, type StateDirSettings } from './state-dir.js';

const EUID = process.geteuid?.() ?? -1;
const CLOCK = { now: () => 0 };
const APP_ASIDE = `${TEMP_PREFIX}${'a1'.repeat(12)}`;
const WEB_ASIDE = `${TEMP_PREFIX}${'b2'.repeat(12)}`;

let dir: string;
let root: string;
let settings: StateDirSettings;
let app: { rootDir: string; dir: string; name: string; aside: string };
let web: { rootDir: string; dir: string; name: string; aside: string };

beforeEach(async () => {
  dir = await mkdtemp(path.join(os.tmpdir(), 'asides-race-'));
  root = path.join(dir, 'root');
  settings = { stateDir: path.join(dir, 'state'), rootDir: root, deviceId: 'dev-1' };
  app = { rootDir: root, dir: 'top', name: 'app', aside: APP_ASIDE };
  web = { rootDir: root, dir: 'top', name: 'web', aside: WEB_ASIDE };
  // What a run killed between renewals' two renames leaves: top/app and top/web aside, and their records.
  for (const [aside, file] of [
    [APP_ASIDE, 'a.json'],
    [WEB_ASIDE, 'w.json'],
  ] as const) {
    await mkdir(path.join(root, 'top', aside), { recursive: true, mode: 0o755 });
    await writeFile(path.join(root, 'top', aside, file), 'deployed\n');
  }
  await chmod(root, 0o755);
  await chmod(path.join(root, 'top'), 0o755);
  await mkdir(settings.stateDir, { mode: 0o700 });
  await writeFile(
    path.join(settings.stateDir, ASIDES_FILE),
    JSON.stringify({ version: 1, asides: [app, web] }),
  );
});

afterEach(async () => {
  await rm(dir, { recursive: true, force: true });
});

/** A call the test holds until `release`; `reached` resolves once it is made. */
interface Hold {
  reached: Promise<void>;
  release: () => void;
}

function hold(): Hold & { arrive: () => Promise<void> } {
  let arrived = () => {};
  let release = () => {};
  const reached = new Promise<void>((resolve) => {
    arrived = resolve;
  });
  const released = new Promise<void>((resolve) => {
    release = resolve;
  });
  return {
    reached,
    release,
    arrive: () => {
      arrived();
      return released;
    },
  };
}

/**
 * The real fs with a ledger of its own: renames of an aside fail (EIO) while `world.failing`; the next rename of
 * `world.holdRename.from` and the next open of `world.holdOpen.path` wait for their hold.
 */
function heldFs(world: {
  failing: boolean;
  holdRename?: { from: string; hold: ReturnType<typeof hold> } | undefined;
  holdOpen?: { path: string; hold: ReturnType<typeof hold> } | undefined;
}): FsPort {
  const base = nodeFs as unknown as FsPort;
  return {
    ...base,
    directorySyncs: new DirectorySyncLedger(),
    rename: (async (from: string, to: string) => {
      if (world.failing && path.basename(String(from)).startsWith(TEMP_PREFIX))
        throw Object.assign(new Error('EIO'), { code: 'EIO' });
      const held = world.holdRename;
      if (held !== undefined && String(from) === held.from) {
        world.holdRename = undefined;
        await held.hold.arrive();
      }
      return nodeFs.rename(from, to);
    }) as FsPort['rename'],
    open: (async (...args: Parameters<FsPort['open']>) => {
      const held = world.holdOpen;
      if (held !== undefined && String(args[0]) === held.path) {
        world.holdOpen = undefined;
        await held.hold.arrive();
      }
      return base.open(...args);
    }) as FsPort['open'],
  };
}

/** A logger whose lines at warn and above land in `lines`. */
function warnings(lines: Array<{ msg: string; name?: string }>): Logger {
  const destination = new Writable({
    write(chunk: Buffer, _encoding, done) {
      for (const line of chunk.toString('utf8').split('\n').filter(Boolean))
        lines.push(JSON.parse(line) as { msg: string; name?: string });
      done();
    },
  });
  return createLogger({ level: 'warn', secrets: createSecretRegistry(), destination });
}

async function recordsIn(stateDir: string): Promise<unknown[]> {
  const text = await readFile(path.join(stateDir, ASIDES_FILE), 'utf8').catch(() => undefined);
  return text === undefined ? [] : (JSON.parse(text) as { asides: unknown[] }).asides;
}

const write = (fs: FsPort, relativePath: string) =>
  publishFile(fs, { rootDir: root, relativePath, data: Buffer.from('new\n'), mode: 0o644, dirMode: 0o755 });

describe("a reload while the running record's background retry is putting a directory back (gaps20)", () => {
  it('another device id on the same stateDir: one try of the record, and the old record writes nothing back', async () => {
    const world: Parameters<typeof heldFs>[0] = { failing: true };
    const fs = heldFs(world);
    const lines: Array<{ msg: string; name?: string }> = [];
    const logger = warnings(lines);
    // The start could not put either back (EIO): both kept, retried in the background.
    const running = await StateDir.open(fs, settings, logger, { euid: EUID, clock: CLOCK });
    const old = fs.directorySyncs?.asides as DirectoryAsides;
    expect(old.pending).toBe(2);
    lines.length = 0;
    world.failing = false;
    // The background retry's rename of top/app back is under way (held) when SIGHUP comes.
    const renaming = hold();
    world.holdRename = { from: path.join(root, 'top', APP_ASIDE), hold: renaming };
    const retrying = old.retry();
    await renaming.reached;
    // The reload (another device id: the reconciler and its stateDir reopened), held once past its record's
    // open, before it hands over: the old retry's try ends meanwhile.
    const loading = hold();
    world.holdOpen = { path: path.join(settings.stateDir, 'state.json'), hold: loading };
    const reopening = StateDir.open(fs, { ...settings, deviceId: 'dev-2' }, logger, {
      euid: EUID,
      clock: CLOCK,
    });
    await loading.reached;
    renaming.release();
    await retrying;
    loading.release();
    const next = await reopening;
    await running.close();
    try {
      const asides = fs.directorySyncs?.asides as DirectoryAsides;
      expect(asides).not.toBe(old);
      expect(await asides.retry()).toBe(0);
      // Before: the new record renamed top/app back under the old one's rename (which failed: ENOENT, warned,
      // the record kept), and the old one then wrote its records with top/app's in after the new one dropped it.
      expect(await recordsIn(settings.stateDir)).toEqual([]);
      expect(lines.filter((line) => line.msg.startsWith('could not put back'))).toEqual([]);
      // Each put back once, and told once.
      const back = lines.filter((line) => line.msg.startsWith('put back a directory'));
      expect(back.map((line) => line.name).sort()).toEqual(['app', 'web']);
      expect((await readdir(path.join(root, 'top'))).sort()).toEqual(['app', 'web']);
      expect(await readdir(path.join(root, 'top/app'))).toEqual(['a.json']);
      await write(fs, 'top/app/b.json');
      expect((await readdir(path.join(root, 'top/app'))).sort()).toEqual(['a.json', 'b.json']);
    } finally {
      await next.close();
    }
  });

  it('another stateDir: the record still in its try is carried and held, then dropped by the answer of that try', async () => {
    const world: Parameters<typeof heldFs>[0] = { failing: true };
    const fs = heldFs(world);
    const lines: Array<{ msg: string; name?: string }> = [];
    const logger = warnings(lines);
    const running = await StateDir.open(fs, settings, logger, { euid: EUID, clock: CLOCK });
    const old = fs.directorySyncs?.asides as DirectoryAsides;
    lines.length = 0;
    world.failing = false;
    const renaming = hold();
    world.holdRename = { from: path.join(root, 'top', APP_ASIDE), hold: renaming };
    const retrying = old.retry();
    await renaming.reached;
    const moved = { ...settings, stateDir: path.join(dir, 'state-new') };
    await mkdir(moved.stateDir, { mode: 0o700 });
    // The reload is not held by the try in progress: it opens while top/app's rename still waits.
    const next = await StateDir.open(fs, moved, logger, { euid: EUID, clock: CLOCK });
    await running.close();
    try {
      const asides = fs.directorySyncs?.asides as DirectoryAsides;
      // top/app may still be aside: carried durably and held, nothing made at its name meanwhile.
      expect(await recordsIn(moved.stateDir)).toEqual([app]);
      expect(await recordsIn(settings.stateDir)).toEqual([]);
      expect(asides.pending).toBe(1);
      expect(asides.holds(path.join(root, 'top'), 'app')).toBe(true);
      renaming.release();
      await retrying;
      expect(await asides.retry()).toBe(0);
      expect(await recordsIn(moved.stateDir)).toEqual([]);
      expect(asides.holds(path.join(root, 'top'), 'app')).toBe(false);
      // Before: the new record's own rename won, the old one's failed (ENOENT) and was warned about.
      expect(lines.filter((line) => line.msg.startsWith('could not put back'))).toEqual([]);
      expect((await readdir(path.join(root, 'top'))).sort()).toEqual(['app', 'web']);
      await write(fs, 'top/app/b.json');
      expect((await readdir(path.join(root, 'top/app'))).sort()).toEqual(['a.json', 'b.json']);
    } finally {
      await next.close();
    }
  });
});
