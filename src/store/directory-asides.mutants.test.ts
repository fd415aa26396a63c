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
