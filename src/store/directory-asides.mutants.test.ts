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
