// The renewal record where mutation testing found it untested: malformed records and another root's are never
// pending nor tried, and the records a reload carries in are written once each, malformed ones left out.
import * as nodeFs from 'node:fs/promises';
import { chmod, mkdir, mkdtemp, readdir, readFile, rm, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import type { FsPort } from '../lib/fs-port.js';
import { silentLogger } from '../lib/logger.js';
import { ASIDES_FILE, type AsideEntry, DirectoryAsides } from './directory-asides.js';
import { DirectorySyncLedger } from './directory-syncs.js';
import { publishFile } from './durable-writer.js';
import { TEMP_PREFIX } from './path-guard.js';

const EUID = process.geteuid?.() ?? -1;
const fs = nodeFs as unknown as FsPort;

let dir: string;
let root: string;
let stateDir: string;

beforeEach(async () => {
  dir = await mkdtemp(path.join(os.tmpdir(), 'asides-mutants-'));
  root = path.join(dir, 'root');
  stateDir = path.join(dir, 'state');
  await mkdir(root, { mode: 0o755 });
  await chmod(root, 0o755);
  await mkdir(stateDir, { mode: 0o700 });
});

afterEach(async () => {
  await rm(dir, { recursive: true, force: true });
});

const asideName = (hex: string) => `${TEMP_PREFIX}${hex.repeat(24 / hex.length)}`;

async function open(records: unknown[], carried?: AsideEntry[]): Promise<DirectoryAsides> {
  if (records.length > 0) {
    await writeFile(path.join(stateDir, ASIDES_FILE), JSON.stringify({ version: 1, asides: records }));
  }
  return DirectoryAsides.open(fs, stateDir, root, undefined, silentLogger(), {
    euid: EUID,
    clock: { now: () => 0 },
    ...(carried === undefined ? {} : { carried }),
  });
}

async function recordFile(): Promise<unknown[]> {
  const text = await readFile(path.join(stateDir, ASIDES_FILE), 'utf8');
  return (JSON.parse(text) as { asides: unknown[] }).asides;
}

describe('records that are not the agent’s renewals', () => {
  it('are neither tried nor pending: a directory at a name that is no temp name stays where it is', async () => {
    // A directory of the operator's, named by a record as if it were an aside; and records whose path escapes.
    await mkdir(path.join(root, 'victim'));
    await writeFile(path.join(root, 'victim/keep.conf'), 'mine\n');
    await mkdir(path.join(dir, asideName('ab')));
    const asides = await open([
      { rootDir: root, dir: '', name: 'app', aside: 'victim' },
      { rootDir: 'relative/root', dir: '', name: 'app', aside: asideName('cd') },
      { rootDir: root, dir: '..', name: 'escaped', aside: asideName('ab') },
      { rootDir: root, dir: '', name: '..', aside: asideName('ef') },
    ]);
    expect(asides.pending).toBe(0);
    expect(await asides.retry()).toBe(0);
    expect((await readdir(root)).sort()).toEqual(['victim']);
    expect(await readFile(path.join(root, 'victim/keep.conf'), 'utf8')).toBe('mine\n');
    expect((await readdir(dir)).sort()).toEqual([asideName('ab'), 'root', 'state'].sort());
  });

  it("another root directory's record is kept for it but not pending here", async () => {
    const other = path.join(dir, 'other');
    await mkdir(path.join(other, asideName('12')), { recursive: true });
    const record = { rootDir: other, dir: '', name: 'app', aside: asideName('12') };
    const asides = await open([record]);
    expect(asides.pending).toBe(0);
    expect(await asides.retry()).toBe(0);
    expect(await readdir(other)).toEqual([asideName('12')]);
    expect(asides.records()).toEqual([record]);
  });
});

describe('the records a reload carries in', () => {
  it('are written once each, with those already recorded here and none malformed', async () => {
    const other = path.join(dir, 'other');
    const here = { rootDir: other, dir: '', name: 'app', aside: asideName('12') };
    const carried = { rootDir: other, dir: 'etc', name: 'conf', aside: asideName('34') };
    const malformed = { rootDir: other, dir: '', name: 'x', aside: 'not-a-temp-name' };
    const asides = await open([here], [here, malformed, carried]);
    expect(await recordFile()).toEqual([here, carried]);
    expect(asides.records()).toEqual([here, carried]);
  });
});

describe('a record inside a directory aside whose name is taken by another directory', () => {
  it('is kept though its own name is found there, and put back inside its directory once that one is', async () => {
    // top/app renamed aside holding its own aside inner; a new top/app made since, with an inner of its own.
    const outer = { rootDir: root, dir: 'top', name: 'app', aside: asideName('a1') };
    const inner = { rootDir: root, dir: 'top/app', name: 'inner', aside: asideName('b2') };
    await mkdir(path.join(root, 'top', outer.aside, inner.aside), { recursive: true, mode: 0o755 });
    await writeFile(path.join(root, 'top', outer.aside, inner.aside, 'old.conf'), 'old\n');
    await mkdir(path.join(root, 'top/app/inner'), { recursive: true, mode: 0o755 });
    await writeFile(path.join(root, 'top/app/inner/new.conf'), 'new\n');
    for (const at of ['top', 'top/app', 'top/app/inner', `top/${outer.aside}`])
      await chmod(path.join(root, at), 0o755);
    const asides = await open([outer, inner]);
    expect(asides.pending).toBe(2);
    expect(asides.records()).toEqual([outer, inner]);
    // The operator moves the new one away: a retry puts back both, the inner one inside the outer.
    await rm(path.join(root, 'top/app'), { recursive: true });
    expect(await asides.retry()).toBe(0);
    expect((await readdir(path.join(root, 'top'))).sort()).toEqual(['app']);
    expect(await readdir(path.join(root, 'top/app'))).toEqual(['inner']);
    expect(await readFile(path.join(root, 'top/app/inner/old.conf'), 'utf8')).toBe('old\n');
  });
});

describe('a record whose aside is gone with a directory at its name', () => {
  it('is dropped as back, whatever other records are kept', async () => {
    await mkdir(path.join(root, 'app'));
    const back = { rootDir: root, dir: '', name: 'app', aside: asideName('c3') };
    const other = { rootDir: path.join(dir, 'other'), dir: '', name: 'app', aside: asideName('d4') };
    const asides = await open([back, other]);
    expect(asides.pending).toBe(0);
    expect(asides.records()).toEqual([other]);
    expect(await readdir(root)).toEqual(['app']);
  });
});

describe('two records held in one directory', () => {
  it('a write below one of them tries that one, not the other', async () => {
    // top/app and top/web both left aside; app's rename back keeps failing, web's fails only at the start.
    const app = { rootDir: root, dir: 'top', name: 'app', aside: asideName('e5') };
    const web = { rootDir: root, dir: 'top', name: 'web', aside: asideName('f6') };
    for (const entry of [app, web]) {
      await mkdir(path.join(root, 'top', entry.aside), { recursive: true, mode: 0o755 });
      await writeFile(path.join(root, 'top', entry.aside, 'old.conf'), `${entry.name}\n`);
    }
    await chmod(path.join(root, 'top'), 0o755);
    await writeFile(path.join(stateDir, ASIDES_FILE), JSON.stringify({ version: 1, asides: [app, web] }));
    let webFailures = 1;
    const ledger = new DirectorySyncLedger();
    const failing: FsPort = {
      ...fs,
      directorySyncs: ledger,
      rename: (async (from: string, to: string) => {
        const eio = Object.assign(new Error('EIO'), { code: 'EIO' });
        if (String(from) === path.join(root, 'top', app.aside)) throw eio;
        if (String(from) === path.join(root, 'top', web.aside) && webFailures > 0) {
          webFailures -= 1;
          throw eio;
        }
        return nodeFs.rename(from, to);
      }) as FsPort['rename'],
    };
    ledger.keepAsidesIn(
      await DirectoryAsides.open(failing, stateDir, root, ledger, silentLogger(), {
        euid: EUID,
        clock: { now: () => 0 },
      }),
    );
    const write = { data: Buffer.from('new\n'), mode: 0o644, dirMode: 0o755, rootDir: root };
    await publishFile(failing, { ...write, relativePath: 'top/web/new.conf' });
    await expect(publishFile(failing, { ...write, relativePath: 'top/app/new.conf' })).rejects.toMatchObject({
      code: 'disk_error',
    });
    expect((await readdir(path.join(root, 'top'))).sort()).toEqual([app.aside, 'web'].sort());
    expect((await readdir(path.join(root, 'top/web'))).sort()).toEqual(['new.conf', 'old.conf']);
  });
});

/**
 * The real fs: a rename of an aside named in `world.failing` fails (EIO), checked when the call is let go; the
 * next rename of `world.hold.from` waits for `world.hold.release` (`reached` once it is made).
 */
function heldRenames(world: {
  failing: Set<string>;
  hold?: { from: string; reached: () => void; released: Promise<void> } | undefined;
}): FsPort {
  return {
    ...fs,
    rename: (async (from: string, to: string) => {
      const held = world.hold;
      if (held !== undefined && String(from) === held.from) {
        world.hold = undefined;
        held.reached();
        await held.released;
      }
      if (world.failing.has(path.basename(String(from))))
        throw Object.assign(new Error('EIO'), { code: 'EIO' });
      return nodeFs.rename(from, to);
    }) as FsPort['rename'],
  };
}

function holdRename(world: Parameters<typeof heldRenames>[0], from: string) {
  let reached = () => {};
  let release = () => {};
  const arrived = new Promise<void>((resolve) => {
    reached = resolve;
  });
  const released = new Promise<void>((resolve) => {
    release = resolve;
  });
  world.hold = { from, reached, released };
  return { arrived, release };
}

describe('a reload that takes the records over (open with `from`)', () => {
  const options = { euid: EUID, clock: { now: () => 0 } };
  const left = (name: string, hex: string) => ({ rootDir: root, dir: '', name, aside: asideName(hex) });

  it('the old record’s retry in progress tries no other record and rewrites nothing', async () => {
    const [web, app, cfg] = [left('web', 'a1'), left('app', 'b2'), left('cfg', 'c3')];
    for (const entry of [web, app, cfg]) await mkdir(path.join(root, entry.aside));
    await writeFile(
      path.join(stateDir, ASIDES_FILE),
      JSON.stringify({ version: 1, asides: [web, app, cfg] }),
    );
    const world: Parameters<typeof heldRenames>[0] = {
      failing: new Set([web.aside, app.aside, cfg.aside]),
    };
    const heldFs = heldRenames(world);
    const old = await DirectoryAsides.open(heldFs, stateDir, root, undefined, silentLogger(), options);
    expect(old.pending).toBe(3);
    // Its background retry: web still fails, app's rename back is under way when the reload opens.
    world.failing = new Set([web.aside]);
    const renaming = holdRename(world, path.join(root, app.aside));
    const retrying = old.retry();
    await renaming.arrived;
    world.failing = new Set();
    const next = await DirectoryAsides.open(heldFs, stateDir, root, undefined, silentLogger(), {
      ...options,
      from: old,
    });
    // The new one put web and cfg back and records app, whose try is the old one's.
    expect(await recordFile()).toEqual([app]);
    world.failing = new Set([app.aside]);
    renaming.release();
    await retrying;
    // With the old one not lent, it went on to cfg (found back) and wrote its records: web's in again.
    expect(await recordFile()).toEqual([app]);
    expect(next.pending).toBe(1);
    expect(next.holds(root, 'app')).toBe(true);
    expect((await readdir(root)).sort()).toEqual([app.aside, 'cfg', 'web'].sort());
  });

  it('carries this run’s renewal still aside to another stateDir, where it is put back', async () => {
    const old = await DirectoryAsides.open(fs, stateDir, root, undefined, silentLogger(), options);
    // A renewal of this run whose rename back failed: app at its aside name, its record in state `aside`.
    const renewal = await old.record(root, '', 'app', asideName('f6'));
    await mkdir(path.join(root, asideName('f6')));
    renewal.state = 'aside';
    const moved = path.join(dir, 'state-new');
    await mkdir(moved, { mode: 0o700 });
    await DirectoryAsides.open(fs, moved, root, undefined, silentLogger(), { ...options, from: old });
    // records() giving none of this run's renewals: the new one never heard of it, app left aside.
    expect(await readdir(root)).toEqual(['app']);
  });

  it('a reload on the same stateDir: the hand-over leaves the record file as the new record has it', async () => {
    const app = left('app', '7a');
    await mkdir(path.join(root, app.aside));
    await writeFile(path.join(stateDir, ASIDES_FILE), JSON.stringify({ version: 1, asides: [app] }));
    const world: Parameters<typeof heldRenames>[0] = { failing: new Set([app.aside]) };
    const heldFs = heldRenames(world);
    const old = await DirectoryAsides.open(heldFs, stateDir, root, undefined, silentLogger(), options);
    const next = await DirectoryAsides.open(heldFs, stateDir, root, undefined, silentLogger(), {
      ...options,
      from: old,
    });
    await old.handOver(stateDir);
    // Emptied as if another stateDir had been left behind, the file lost the record the new one still holds.
    expect(await recordFile()).toEqual([app]);
    expect(next.pending).toBe(1);
  });

  it('an open that fails gives them back: the old record’s next retry puts the directory back', async () => {
    const app = left('app', 'd4');
    await mkdir(path.join(root, app.aside));
    await writeFile(path.join(stateDir, ASIDES_FILE), JSON.stringify({ version: 1, asides: [app] }));
    const world: Parameters<typeof heldRenames>[0] = { failing: new Set([app.aside]) };
    const heldFs = heldRenames(world);
    const old = await DirectoryAsides.open(heldFs, stateDir, root, undefined, silentLogger(), options);
    // A reload to a state directory that is a file: its record cannot be read nor written, the open fails.
    await writeFile(path.join(dir, 'not-a-dir'), '');
    await expect(
      DirectoryAsides.open(heldFs, path.join(dir, 'not-a-dir'), root, undefined, silentLogger(), {
        ...options,
        from: old,
      }),
    ).rejects.toThrow();
    world.failing = new Set();
    // Without takeBack the old one stayed lent: it tried nothing again, app aside for good.
    expect(await old.retry()).toBe(0);
    expect(await readdir(root)).toEqual(['app']);
    expect(await readFile(path.join(stateDir, ASIDES_FILE), 'utf8').catch(() => 'none')).toBe('none');
  });
});

describe('a record whose aside is gone and whose name cannot be read', () => {
  it('counts as something at its name (dropped), not as out of sight', async () => {
    const app = { rootDir: root, dir: '', name: 'app', aside: asideName('e5') };
    await mkdir(path.join(root, 'app'));
    await writeFile(path.join(stateDir, ASIDES_FILE), JSON.stringify({ version: 1, asides: [app] }));
    // The try's walk reads the name once; the look at the name after it (the aside is gone) fails.
    let reads = 0;
    const eio: FsPort = {
      ...fs,
      lstat: (async (...args: Parameters<FsPort['lstat']>) => {
        if (String(args[0]) === path.join(root, 'app') && ++reads > 1)
          throw Object.assign(new Error('EIO'), { code: 'EIO' });
        return fs.lstat(...args);
      }) as FsPort['lstat'],
    };
    const asides = await DirectoryAsides.open(eio, stateDir, root, undefined, silentLogger(), {
      euid: EUID,
      clock: { now: () => 0 },
    });
    // Read as "not there" (the error callback answering undefined), it was kept as out of sight.
    expect(asides.pending).toBe(0);
    expect(await readFile(path.join(stateDir, ASIDES_FILE), 'utf8').catch(() => 'none')).toBe('none');
  });
});

describe('which names a record holds, as its tries answer', () => {
  const options = { euid: EUID, clock: { now: () => 0 } };

  it('one out of sight at start is held once a retry finds it and cannot put it back, and not once it is back', async () => {
    const app = { rootDir: root, dir: '', name: 'app', aside: asideName('8b') };
    await writeFile(path.join(stateDir, ASIDES_FILE), JSON.stringify({ version: 1, asides: [app] }));
    const world: Parameters<typeof heldRenames>[0] = { failing: new Set([app.aside]) };
    const heldFs = heldRenames(world);
    // Neither aside nor at its name (its file system not mounted yet): kept, holding nothing.
    const asides = await DirectoryAsides.open(heldFs, stateDir, root, undefined, silentLogger(), options);
    expect(asides.pending).toBe(1);
    expect(asides.holds(root, 'app')).toBe(false);
    // Mounted since, but its rename back fails: held (a write must not make a new app beside it), twice over.
    await mkdir(path.join(root, app.aside));
    expect(await asides.retry()).toBe(1);
    expect(asides.holds(root, 'app')).toBe(true);
    expect(await asides.retry()).toBe(1);
    expect(asides.holds(root, 'app')).toBe(true);
    // Once it is put back, no longer held (held twice over, one hold stayed after the first was taken off).
    world.failing = new Set();
    expect(await asides.retry()).toBe(0);
    expect(asides.holds(root, 'app')).toBe(false);
    expect(await readdir(root)).toEqual(['app']);
  });

  it('a record found neither aside nor at its name takes no other record’s hold off', async () => {
    const app = { rootDir: root, dir: '', name: 'app', aside: asideName('9c') };
    const gone = { rootDir: root, dir: '', name: 'gone', aside: asideName('0d') };
    await mkdir(path.join(root, app.aside));
    await writeFile(path.join(stateDir, ASIDES_FILE), JSON.stringify({ version: 1, asides: [app, gone] }));
    const heldFs = heldRenames({ failing: new Set([app.aside]) });
    const asides = await DirectoryAsides.open(heldFs, stateDir, root, undefined, silentLogger(), options);
    expect(asides.holds(root, 'app')).toBe(true);
    expect(await asides.retry()).toBe(2);
    // With the hold taken off whatever the record's was not, `gone`'s answer took app's (splice at -1).
    expect(asides.holds(root, 'app')).toBe(true);
    expect(asides.holds(root, 'gone')).toBe(false);
  });
});

describe('records beside one another', () => {
  const options = { euid: EUID, clock: { now: () => 0 } };

  it('two renewals recorded one after the other are both in the file while neither has renamed yet', async () => {
    const asides = await DirectoryAsides.open(fs, stateDir, root, undefined, silentLogger(), options);
    await asides.record(root, '', 'app', asideName('1e'));
    await asides.record(root, 'etc', 'web', asideName('2f'));
    // Before the second record, the first (still `renaming`) was dropped: a crash now left it unrecorded.
    expect(await recordFile()).toEqual([
      { rootDir: root, dir: '', name: 'app', aside: asideName('1e') },
      { rootDir: root, dir: 'etc', name: 'web', aside: asideName('2f') },
    ]);
  });

  it('making a directory tries the record of that name, not another one out of sight', async () => {
    const app = { rootDir: root, dir: '', name: 'app', aside: asideName('3a') };
    const web = { rootDir: root, dir: '', name: 'web', aside: asideName('4b') };
    await writeFile(path.join(stateDir, ASIDES_FILE), JSON.stringify({ version: 1, asides: [app, web] }));
    // Both out of sight at start (not mounted), both there since.
    const asides = await DirectoryAsides.open(fs, stateDir, root, undefined, silentLogger(), options);
    expect(asides.pending).toBe(2);
    await mkdir(path.join(root, app.aside));
    await mkdir(path.join(root, web.aside));
    await asides.beforeMaking(root, 'web');
    expect((await readdir(root)).sort()).toEqual([app.aside, 'web'].sort());
    expect(asides.pending).toBe(1);
  });

  it('another root’s record does not keep one of this root found back at its name', async () => {
    const other = path.join(dir, 'other');
    const outer = { rootDir: other, dir: '', name: 'top', aside: asideName('5c') };
    const inner = { rootDir: root, dir: 'top', name: 'app', aside: asideName('6d') };
    await mkdir(path.join(root, 'top/app'), { recursive: true });
    await mkdir(path.join(other, outer.aside), { recursive: true });
    const asides = await open([outer, inner]);
    // Taken as inside the other root's directory still aside, it was kept as out of sight.
    expect(asides.pending).toBe(0);
    expect(await recordFile()).toEqual([outer]);
  });
});
