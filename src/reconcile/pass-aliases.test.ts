// runPass on exFAT-like roots: two paths naming one file (case-insensitive, a directory mounted twice), no modes.

import * as fsPromises from 'node:fs/promises';
import { link, lstat, mkdir, readdir, readFile, stat, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { bindMountFs, caseInsensitiveFs, modelessFs } from '../../test/helpers/aliasing-fs.js';
import { createPassWorld, type PassWorld } from '../../test/helpers/pass-world.js';
import type { FsPort } from '../lib/fs-port.js';
import { sha256Hex } from '../lib/hash.js';
import type { ConfigInstanceRecord } from '../mock-server/state.js';

const T0 = '2026-01-01T00:00:00.000Z';
const T1 = '2026-01-02T00:00:00.000Z';

let world: PassWorld;

beforeEach(async () => {
  world = await createPassWorld({ name: 'alias', open: false });
});

afterEach(() => world.close());

function update(id: string, fields: Partial<ConfigInstanceRecord>): void {
  world.put({ ...world.server.state.instance(id), ...fields, id });
}

function status(id: string): string {
  const instance = world.server.state.instance(id);
  return `${instance.activity_status}/${instance.error_status}`;
}

function reportCount(): number {
  return world.server.state.reports.length;
}

function json(content: unknown): string {
  return `${JSON.stringify(content, null, 2)}\n`;
}

/** The names in a real directory (what the filesystem holds, whatever spelling the agent asked for). */
async function namesIn(relativeDir: string): Promise<string[]> {
  return (await readdir(path.join(world.rootDir, relativeDir)))
    .filter((name) => !name.startsWith('.'))
    .sort();
}

async function realBytes(relative: string): Promise<string> {
  return readFile(path.join(world.rootDir, relative), 'utf8');
}

describe('a case-insensitive root (exFAT, vfat)', () => {
  beforeEach(async () => {
    await world.open({ deps: { fs: caseInsensitiveFs(world.rootDir) } });
  });

  it('an instance moved from etc/app.json to etc/App.json keeps its file: deployed, and still there after more passes', async () => {
    world.put({ id: 'cfg_a', relative_filepath: 'etc/app.json', content: { port: 1 } });
    await world.pass();
    expect(status('cfg_a')).toBe('deployed/none');

    update('cfg_a', { relative_filepath: 'etc/App.json', updated_at: T1 });
    // After every pass: the file recorded at the path it left is the file it is deployed at now.
    for (let n = 0; n < 4; n += 1) {
      await world.pass();
      const names = await namesIn('etc');
      expect(names).toHaveLength(1);
      expect(await realBytes(`etc/${names[0]}`)).toBe(json({ port: 1 }));
      expect(status('cfg_a')).toBe('deployed/none');
    }
    const settled = reportCount();
    await world.pass();
    expect(reportCount()).toBe(settled);
  });

  it('two instances at App.json and app.json: the one updated later is written and deployed, the other retrying with a message naming both paths; nothing changes in later passes', async () => {
    world.put({ id: 'cfg_old', relative_filepath: 'etc/app.json', content: { who: 'old' }, updated_at: T0 });
    world.put({ id: 'cfg_new', relative_filepath: 'etc/App.json', content: { who: 'new' }, updated_at: T1 });

    await world.pass();

    const names = await namesIn('etc');
    expect(names).toHaveLength(1);
    expect(await realBytes(`etc/${names[0]}`)).toBe(json({ who: 'new' }));
    expect(status('cfg_new')).toBe('deployed/none');
    expect(status('cfg_old')).toBe('queued/retrying');
    const refusal = world.server.state.reports.findLast((r) => r.config_instance_id === 'cfg_old');
    expect(refusal?.message).toContain('relative_filepath "etc/app.json"');
    expect(refusal?.message).toContain('"etc/App.json"');
    expect(refusal?.message).toContain('cfg_new');

    const { ino } = await lstat(path.join(world.rootDir, 'etc', names[0]!));
    const settled = reportCount();
    for (let n = 0; n < 3; n += 1) await world.pass();
    expect(reportCount()).toBe(settled);
    expect((await lstat(path.join(world.rootDir, 'etc', names[0]!))).ino).toBe(ino);
    expect(status('cfg_new')).toBe('deployed/none');
    expect(status('cfg_old')).toBe('queued/retrying');
  });

  it('a second instance at another case of a deployed file, updated later, takes the file; the first is refused, its record dropped', async () => {
    world.put({ id: 'cfg_first', relative_filepath: 'app.json', content: { who: 'first' }, updated_at: T0 });
    await world.pass();
    world.put({
      id: 'cfg_second',
      relative_filepath: 'APP.json',
      content: { who: 'second' },
      updated_at: T1,
    });

    for (let n = 0; n < 3; n += 1) await world.pass();

    const names = await namesIn('');
    expect(names).toHaveLength(1);
    expect(await realBytes(names[0]!)).toBe(json({ who: 'second' }));
    expect(status('cfg_second')).toBe('deployed/none');
    expect(status('cfg_first')).toBe('deployed/retrying');

    // Retired now: its old record is gone, so nothing of it is unlinked (the file is cfg_second's).
    update('cfg_first', { target_status: 'removed', updated_at: T1 });
    await world.pass();
    expect(await realBytes(names[0]!)).toBe(json({ who: 'second' }));
    expect(status('cfg_first').startsWith('removed/')).toBe(true);
    expect(status('cfg_second')).toBe('deployed/none');
  });

  it('the retired instance at app.json, with the same bytes as the one at App.json, never deletes that file', async () => {
    world.put({ id: 'cfg_x', relative_filepath: 'app.json', content: { same: true }, updated_at: T0 });
    await world.pass();
    world.put({ id: 'cfg_y', relative_filepath: 'App.json', content: { same: true }, updated_at: T1 });
    await world.pass();
    update('cfg_x', { target_status: 'removed', updated_at: T1 });

    for (let n = 0; n < 3; n += 1) {
      await world.pass();
      const names = await namesIn('');
      expect(names).toHaveLength(1);
      expect(await realBytes(names[0]!)).toBe(json({ same: true }));
      expect(status('cfg_y')).toBe('deployed/none');
    }
    expect(status('cfg_x')).toBe('removed/none');
  });
});

describe('a case-insensitive root after a crash (intent.json)', () => {
  it('two declared writes of equal bytes at app.json and App.json adopt one file: the retired one never deletes it', async () => {
    const bytes = json({ same: true });
    await writeFile(path.join(world.rootDir, 'app.json'), bytes, { mode: 0o640 });
    // A run killed after declaring both writes (one batch each) and renaming the first: both prove the file.
    const intents = [
      { path: 'app.json', instanceId: 'cfg_x', sha256: sha256Hex(Buffer.from(bytes)) },
      { path: 'App.json', instanceId: 'cfg_y', sha256: sha256Hex(Buffer.from(bytes)) },
    ];
    await writeFile(
      path.join(world.dir, 'state', 'intent.json'),
      JSON.stringify({ version: 1, rootDir: world.rootDir, intents }),
    );
    world.put({
      id: 'cfg_x',
      relative_filepath: 'app.json',
      content: { same: true },
      target_status: 'removed',
    });
    world.put({ id: 'cfg_y', relative_filepath: 'App.json', content: { same: true }, updated_at: T1 });
    await world.open({ deps: { fs: caseInsensitiveFs(world.rootDir) } });

    for (let n = 0; n < 3; n += 1) {
      await world.pass();
      expect(await namesIn('')).toHaveLength(1);
      expect(await realBytes((await namesIn(''))[0]!)).toBe(bytes);
    }
    expect(status('cfg_y')).toBe('deployed/none');
    expect(status('cfg_x')).toBe('removed/none');
  });
});

describe('a root that drops trailing dots (the kernel vfat and exfat)', () => {
  it('app.json and app.json. are one file: the later one deployed, the other retrying', async () => {
    await world.open({ deps: { fs: caseInsensitiveFs(world.rootDir) } });
    world.put({ id: 'cfg_plain', relative_filepath: 'app.json', content: { who: 'plain' }, updated_at: T0 });
    await world.pass();
    world.put({ id: 'cfg_dot', relative_filepath: 'app.json.', content: { who: 'dot' }, updated_at: T1 });

    await world.pass();
    await world.pass();

    expect(await namesIn('')).toEqual(['app.json']);
    expect(await realBytes('app.json')).toBe(json({ who: 'dot' }));
    expect(status('cfg_dot')).toBe('deployed/none');
    expect(status('cfg_plain')).toBe('deployed/retrying');
  });
});

describe('a case-insensitive root, polled', () => {
  it('a newcomer at App.json beside a deployed app.json, seen by a poll: the owner of app.json is judged too', async () => {
    await world.open({ deps: { fs: caseInsensitiveFs(world.rootDir) } });
    world.put({ id: 'cfg_old', relative_filepath: 'app.json', content: { who: 'old' }, updated_at: T0 });
    await world.pass();
    world.put({ id: 'cfg_new', relative_filepath: 'App.json', content: { who: 'new' }, updated_at: T1 });

    await world.reconciler.runPass({ mode: 'incremental' });

    expect(await realBytes((await namesIn(''))[0]!)).toBe(json({ who: 'new' }));
    expect(status('cfg_new')).toBe('deployed/none');
    // Not left `deployed` with the newcomer's bytes in its file.
    expect(status('cfg_old')).toBe('deployed/retrying');
    expect(world.reconciler.state.files.has('app.json')).toBe(false);
  });

  it('an instance moved to another case, seen by a poll: its record at the old spelling goes at once', async () => {
    await world.open({ deps: { fs: caseInsensitiveFs(world.rootDir) } });
    world.put({ id: 'cfg_a', relative_filepath: 'etc/app.json', content: { port: 1 } });
    await world.pass();
    update('cfg_a', {
      relative_filepath: 'etc/App.json',
      content: { port: 2 },
      activity_status: 'queued',
      updated_at: T1,
    });

    await world.reconciler.runPass({ mode: 'incremental' });

    expect([...world.reconciler.state.files.keys()]).toEqual(['etc/App.json']);
    expect(await realBytes(`etc/${(await namesIn('etc'))[0]}`)).toBe(json({ port: 2 }));
    expect(status('cfg_a')).toBe('deployed/none');
  });
});

describe('a directory of the root mounted again in the root', () => {
  it('two instances at a/x.json and b/x.json, b a bind mount of a: one file, the later one deployed, the other retrying, stable', async () => {
    await mkdir(path.join(world.rootDir, 'a'));
    await mkdir(path.join(world.rootDir, 'b'));
    await world.open({
      deps: { fs: bindMountFs(path.join(world.rootDir, 'a'), path.join(world.rootDir, 'b')) },
    });
    world.put({ id: 'cfg_a', relative_filepath: 'a/x.json', content: { who: 'a' }, updated_at: T0 });
    await world.pass();
    world.put({ id: 'cfg_b', relative_filepath: 'b/x.json', content: { who: 'b' }, updated_at: T1 });

    for (let n = 0; n < 3; n += 1) await world.pass();

    expect(await realBytes('a/x.json')).toBe(json({ who: 'b' }));
    expect(status('cfg_b')).toBe('deployed/none');
    expect(status('cfg_a')).toBe('deployed/retrying');
    const settled = reportCount();
    await world.pass();
    expect(reportCount()).toBe(settled);
    expect(await realBytes('a/x.json')).toBe(json({ who: 'b' }));
  });
});

describe('a case-sensitive root', () => {
  it('App.json and app.json are two files: both written and deployed', async () => {
    await world.open({ deps: { fs: (await import('node:fs/promises')) as unknown as FsPort } });
    world.put({ id: 'cfg_lower', relative_filepath: 'app.json', content: { who: 'lower' } });
    world.put({ id: 'cfg_upper', relative_filepath: 'App.json', content: { who: 'upper' }, updated_at: T1 });

    await world.pass();
    await world.pass();

    expect(await namesIn('')).toEqual(['App.json', 'app.json']);
    expect(await realBytes('app.json')).toBe(json({ who: 'lower' }));
    expect(await realBytes('App.json')).toBe(json({ who: 'upper' }));
    expect(status('cfg_lower')).toBe('deployed/none');
    expect(status('cfg_upper')).toBe('deployed/none');
  });
});

describe('a case-sensitive root, paths a hostile service folds together', () => {
  // An NFD spelling is refused by the path guard ("not in Unicode normalisation form NFC"), as before this session.
  it('compatibility forms, case (ASCII and not) and trailing dots are each a file of its own: all written and deployed, stable', async () => {
    await world.open({ deps: { fs: fsPromises as unknown as FsPort } });
    const paths = [
      'file.json',
      '\ufb01le.json',
      'FILE.json',
      '\u00e9.json',
      '\u00c9.json',
      'app.json',
      'app.json.',
    ];
    paths.forEach((relative, n) => {
      world.put({
        id: `cfg_${n}`,
        relative_filepath: relative,
        content: { n },
        updated_at: n % 2 === 0 ? T0 : T1,
      });
    });

    await world.pass();
    await world.pass();

    expect(await namesIn('')).toEqual([...paths].sort());
    for (const [n, relative] of paths.entries()) {
      expect(await realBytes(relative)).toBe(json({ n }));
      expect(status(`cfg_${n}`)).toBe('deployed/none');
    }
    const settled = reportCount();
    await world.pass();
    expect(reportCount()).toBe(settled);
  });
});

describe('a root that keeps no permission bits (exFAT, vfat)', () => {
  it('a file whose mode the filesystem does not take is left alone after one try: no change counted, state.json not rewritten', async () => {
    await world.open({ deps: { fs: modelessFs(caseInsensitiveFs(world.rootDir), world.rootDir) } });
    world.put({ id: 'cfg_a', relative_filepath: 'etc/a.json', content: { a: 1 } });
    await world.pass();
    await world.pass();
    const { ino, mtimeMs } = await lstat(path.join(world.rootDir, 'etc', 'a.json'));
    const statePath = path.join(world.dir, 'state', 'state.json');
    const persisted = (await stat(statePath)).mtimeMs;

    const later = [await world.pass(), await world.pass()];

    for (const result of later) {
      expect(result.outcomes.map((o) => `${o.instanceId} ${o.action}`)).toEqual(['cfg_a unchanged']);
    }
    expect((await stat(statePath)).mtimeMs).toBe(persisted);
    const now = await lstat(path.join(world.rootDir, 'etc', 'a.json'));
    expect([now.ino, now.mtimeMs]).toEqual([ino, mtimeMs]);
    expect(await realBytes('etc/a.json')).toBe(json({ a: 1 }));
    expect(status('cfg_a')).toBe('deployed/none');
  });
});

describe('hard links are separate names, not one file', () => {
  it('two instances at hard-linked paths with the same bytes are both deployed; retiring one leaves the other', async () => {
    await world.open({ deps: { fs: (await import('node:fs/promises')) as unknown as FsPort } });
    const content = { same: 1 };
    await writeFile(path.join(world.rootDir, 'a.json'), json(content), { mode: 0o640 });
    await link(path.join(world.rootDir, 'a.json'), path.join(world.rootDir, 'b.json'));
    world.put({ id: 'cfg_a', relative_filepath: 'a.json', content });
    world.put({ id: 'cfg_b', relative_filepath: 'b.json', content });

    await world.pass();
    expect(status('cfg_a')).toBe('deployed/none');
    expect(status('cfg_b')).toBe('deployed/none');

    update('cfg_b', { target_status: 'removed', updated_at: T1 });
    await world.pass();
    expect(await realBytes('a.json')).toBe(json(content));
    expect(status('cfg_a')).toBe('deployed/none');
    expect(status('cfg_b')).toBe('removed/none');
  });
});

describe('a root whose directory cannot be listed for a pass (EMFILE)', () => {
  /** `base` (node:fs/promises) whose readdir fails with EMFILE while `failing.on`. */
  function flakyReaddirFs(failing: { on: boolean }, base = fsPromises as unknown as FsPort): FsPort {
    return new Proxy(base, {
      get(target, key, receiver) {
        if (key === 'readdir' && failing.on) {
          return async () => {
            throw Object.assign(new Error('EMFILE: too many open files, scandir'), { code: 'EMFILE' });
          };
        }
        return Reflect.get(target, key, receiver);
      },
    });
  }

  it('app.json retired beside App.json: not reported removed while its file stays; removed once the listing reads again', async () => {
    const failing = { on: false };
    await world.open({ deps: { fs: flakyReaddirFs(failing) } });
    world.put({ id: 'cfg_lower', relative_filepath: 'app.json', content: { who: 'lower' } });
    world.put({ id: 'cfg_upper', relative_filepath: 'App.json', content: { who: 'upper' }, updated_at: T1 });
    await world.pass();
    expect(await namesIn('')).toEqual(['App.json', 'app.json']);

    update('cfg_lower', { target_status: 'removed', updated_at: T1 });
    failing.on = true;
    await world.pass();
    // Two files on this filesystem: "removed" with app.json still there would be a lie, and its record gone
    // would leave the file there for good.
    expect(await namesIn('')).toEqual(['App.json', 'app.json']);
    expect(status('cfg_lower').startsWith('removed/')).toBe(false);

    failing.on = false;
    await world.pass();
    expect(await namesIn('')).toEqual(['App.json']);
    expect(status('cfg_lower')).toBe('removed/none');
    expect(status('cfg_upper')).toBe('deployed/none');
    expect(await realBytes('App.json')).toBe(json({ who: 'upper' }));
  });

  it('App.json updated later beside a deployed app.json: app.json is never refused nor forgotten', async () => {
    const failing = { on: false };
    await world.open({ deps: { fs: flakyReaddirFs(failing) } });
    world.put({ id: 'cfg_lower', relative_filepath: 'app.json', content: { who: 'lower' } });
    world.put({ id: 'cfg_upper', relative_filepath: 'App.json', content: { who: 'upper' } });
    await world.pass();
    update('cfg_upper', { content: { who: 'upper', v: 2 }, updated_at: T1 });
    failing.on = true;
    await world.pass();
    expect(status('cfg_lower')).toBe('deployed/none');
    failing.on = false;
    await world.pass();
    expect(status('cfg_lower')).toBe('deployed/none');
    expect(status('cfg_upper')).toBe('deployed/none');
    expect(await realBytes('App.json')).toBe(json({ who: 'upper', v: 2 }));

    // Retired now: its file goes (the record was never dropped).
    update('cfg_lower', { target_status: 'removed', updated_at: T1 });
    await world.pass();
    expect(await namesIn('')).toEqual(['App.json']);
    expect(status('cfg_lower')).toBe('removed/none');
  });

  it('case-insensitive, first sync: a write whose alias check cannot list its directory is not made (never over the winner, never reported deployed)', async () => {
    const base = caseInsensitiveFs(world.rootDir);
    // etc/ does not exist when the pass plans; once the winner's write made it, it cannot be listed.
    const etcUnlistable: FsPort = {
      ...base,
      readdir: ((p: Parameters<FsPort['readdir']>[0], ...rest: unknown[]) => {
        if (String(p) === path.join(world.rootDir, 'etc')) {
          return Promise.reject(
            Object.assign(new Error('EMFILE: too many open files, scandir'), { code: 'EMFILE' }),
          );
        }
        return (base.readdir as (...args: unknown[]) => Promise<unknown>)(p, ...rest);
      }) as FsPort['readdir'],
    };
    await world.open({ deps: { fs: etcUnlistable } });
    world.put({ id: 'cfg_a', relative_filepath: 'etc/app.json', content: { who: 'a' }, updated_at: T0 });
    world.put({ id: 'cfg_z', relative_filepath: 'etc/APP.json', content: { who: 'z' }, updated_at: T1 });

    await world.pass();

    const names = await namesIn('etc');
    expect(names).toHaveLength(1);
    expect(await realBytes(`etc/${names[0]}`)).toBe(json({ who: 'z' }));
    expect(status('cfg_z')).toBe('deployed/none');
    const told = world.server.state.reports.filter((r) => r.config_instance_id === 'cfg_a');
    expect(told.map((r) => r.activity_status)).not.toContain('deployed');
  });

  it('case-insensitive: the retired app.json, with the same bytes as App.json, never deletes that file while unlisted', async () => {
    const failing = { on: false };
    await world.open({ deps: { fs: flakyReaddirFs(failing, caseInsensitiveFs(world.rootDir)) } });
    world.put({ id: 'cfg_x', relative_filepath: 'app.json', content: { same: true }, updated_at: T0 });
    await world.pass();
    world.put({ id: 'cfg_y', relative_filepath: 'App.json', content: { same: true }, updated_at: T1 });
    await world.pass();
    update('cfg_x', { target_status: 'removed', updated_at: T1 });

    failing.on = true;
    await world.pass();
    expect(await namesIn('')).toHaveLength(1);
    failing.on = false;
    for (let n = 0; n < 2; n += 1) {
      await world.pass();
      const names = await namesIn('');
      expect(names).toHaveLength(1);
      expect(await realBytes(names[0]!)).toBe(json({ same: true }));
    }
    expect(status('cfg_y')).toBe('deployed/none');
    expect(status('cfg_x')).toBe('removed/none');
  });
});

describe('a case-insensitive root, first sync of two spellings', () => {
  it('the instance updated later is written first and holds the file after one pass, whatever the listing order; the other never reported deployed', async () => {
    await world.open({ deps: { fs: caseInsensitiveFs(world.rootDir) } });
    // Listed first (ids in order), updated first: the loser.
    world.put({ id: 'cfg_a', relative_filepath: 'etc/app.json', content: { who: 'a' }, updated_at: T0 });
    world.put({ id: 'cfg_z', relative_filepath: 'etc/APP.json', content: { who: 'z' }, updated_at: T1 });

    await world.pass();

    const names = await namesIn('etc');
    expect(names).toHaveLength(1);
    expect(await realBytes(`etc/${names[0]}`)).toBe(json({ who: 'z' }));
    expect(status('cfg_z')).toBe('deployed/none');
    expect(status('cfg_a')).toBe('queued/retrying');
    const told = world.server.state.reports.filter((r) => r.config_instance_id === 'cfg_a');
    expect(told.map((r) => r.activity_status)).not.toContain('deployed');
  });
});

describe('a first sync of many pairs of spellings in one directory', () => {
  // Cost is the property under test: the listings of etc/ are counted through the fs port.
  const PAIRS = 40;

  /** `base` counting its readdir calls by directory. */
  function countingListings(base: FsPort, listings: Map<string, number>): FsPort {
    return {
      ...base,
      readdir: ((p: Parameters<FsPort['readdir']>[0], ...rest: unknown[]) => {
        listings.set(String(p), (listings.get(String(p)) ?? 0) + 1);
        return (base.readdir as (...args: unknown[]) => Promise<unknown>)(p, ...rest);
      }) as FsPort['readdir'],
    };
  }

  function putPairs(): void {
    for (let n = 0; n < PAIRS; n += 1) {
      world.put({
        id: `cfg_l${n}`,
        relative_filepath: `etc/f${n}.json`,
        content: { n, who: 'l' },
        updated_at: T0,
      });
      world.put({
        id: `cfg_u${n}`,
        relative_filepath: `etc/F${n}.json`,
        content: { n, who: 'u' },
        updated_at: T1,
      });
    }
  }

  it(`case-insensitive: ${PAIRS} pairs, etc/ listed a bounded number of times (by directories, not pairs); every winner written, no loser over it`, async () => {
    const listings = new Map<string, number>();
    await world.open({ deps: { fs: countingListings(caseInsensitiveFs(world.rootDir), listings) } });
    putPairs();
    await world.pass();
    expect(listings.get(path.join(world.rootDir, 'etc')) ?? 0).toBeLessThanOrEqual(2);
    const names = await namesIn('etc');
    expect(names).toHaveLength(PAIRS);
    for (const name of names) {
      const n = Number(/\d+/.exec(name)?.[0]);
      expect(await realBytes(`etc/${name}`)).toBe(json({ n, who: 'u' }));
    }
    for (let n = 0; n < PAIRS; n += 1) {
      expect(status(`cfg_u${n}`)).toBe('deployed/none');
      expect(status(`cfg_l${n}`)).toBe('queued/retrying');
    }
  });

  it(`case-sensitive: ${PAIRS} pairs, etc/ listed a bounded number of times; all ${2 * PAIRS} files written and deployed`, async () => {
    const listings = new Map<string, number>();
    await world.open({ deps: { fs: countingListings(fsPromises as unknown as FsPort, listings) } });
    putPairs();
    await world.pass();
    expect(listings.get(path.join(world.rootDir, 'etc')) ?? 0).toBeLessThanOrEqual(2);
    expect(await namesIn('etc')).toHaveLength(2 * PAIRS);
    for (let n = 0; n < PAIRS; n += 1) {
      expect(await realBytes(`etc/f${n}.json`)).toBe(json({ n, who: 'l' }));
      expect(await realBytes(`etc/F${n}.json`)).toBe(json({ n, who: 'u' }));
      expect(status(`cfg_l${n}`)).toBe('deployed/none');
      expect(status(`cfg_u${n}`)).toBe('deployed/none');
    }
  });
});
