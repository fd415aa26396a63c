// findPathAliases on a real temp dir: a case-sensitive one, the same seen case-insensitively, and observed identities.
import * as nodeFs from 'node:fs/promises';
import { mkdir, mkdtemp, rm, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { caseInsensitiveFs } from '../../test/helpers/aliasing-fs.js';
import type { FsPort } from '../lib/fs-port.js';
import { findPathAliases, foldKey } from './path-aliases.js';

let root: string;

beforeEach(async () => {
  root = await mkdtemp(path.join(os.tmpdir(), 'config-agent-aliases-'));
});

afterEach(async () => {
  await rm(root, { recursive: true, force: true });
});

const realFs = nodeFs as unknown as FsPort;

describe('foldKey', () => {
  it('folds case, full case folding and compatibility forms; keeps other names apart', () => {
    expect(foldKey('Etc/App.JSON')).toBe(foldKey('etc/app.json'));
    expect(foldKey('straße.json')).toBe(foldKey('STRASSE.json'));
    expect(foldKey('Émile.json')).toBe(foldKey('émile.json'));
    expect(foldKey('ﬁle.json')).toBe(foldKey('FILE.json'));
    expect(foldKey('etc./app.json..')).toBe(foldKey('etc/app.json'));
    expect(foldKey('.hidden')).toBe('.hidden');
    expect(foldKey('app.json')).not.toBe(foldKey('app.yaml'));
    expect(foldKey('a/b.json')).not.toBe(foldKey('ab.json'));
  });
});

describe('findPathAliases', () => {
  it('on a case-sensitive directory, App.json and app.json both on disk are two files', async () => {
    await writeFile(path.join(root, 'App.json'), 'a');
    await writeFile(path.join(root, 'app.json'), 'b');
    expect(await findPathAliases(realFs, root, ['App.json', 'app.json'])).toEqual(new Map());
  });

  it('on a case-insensitive directory, one entry found under two spellings, directories included', async () => {
    await mkdir(path.join(root, 'etc'));
    await writeFile(path.join(root, 'etc', 'app.json'), 'a');
    const aliases = await findPathAliases(caseInsensitiveFs(root), root, [
      'Etc/APP.json',
      'etc/app.json',
      'etc/App.json',
      'etc/other.json',
    ]);
    expect(aliases).toEqual(
      new Map([
        ['Etc/APP.json', 'Etc/APP.json'],
        ['etc/app.json', 'Etc/APP.json'],
        ['etc/App.json', 'Etc/APP.json'],
      ]),
    );
  });

  it('by the listing alone (no identities, as under exfat-fuse): a name with trailing dots is the name without', async () => {
    await writeFile(path.join(root, 'app.json'), 'a');
    const aliases = await findPathAliases(caseInsensitiveFs(root), root, [
      'app.json.',
      'App.json',
      'other.json',
    ]);
    expect(aliases).toEqual(
      new Map([
        ['App.json', 'App.json'],
        ['app.json.', 'App.json'],
      ]),
    );
  });

  it('a directory that cannot be listed (EMFILE) tells nothing: a retryable DiskError, not a guess either way', async () => {
    await writeFile(path.join(root, 'app.json'), 'a');
    const base = caseInsensitiveFs(root);
    const unlistable: FsPort = {
      ...base,
      readdir: (async () => {
        throw Object.assign(new Error('EMFILE: too many open files, scandir'), { code: 'EMFILE' });
      }) as FsPort['readdir'],
    };
    // Without identities (exfat-fuse numbers names): taken for two files, a retired App.json's unlink would
    // delete app.json's instance's file; taken for one on ext4, a record went while its file stayed.
    const found = findPathAliases(unlistable, root, ['App.json', 'app.json']);
    await expect(found).rejects.toMatchObject({ code: 'disk_error', retryable: true, errno: 'EMFILE' });
    // A missing directory lists nothing: no alias, no error.
    expect(await findPathAliases(base, root, ['gone/App.json', 'gone/app.json'])).toEqual(new Map());
  });

  it('a spelling whose lstat fails otherwise than ENOENT (EIO, EACCES) tells nothing either: a retryable DiskError', async () => {
    await writeFile(path.join(root, 'App.json'), 'a');
    const base = caseInsensitiveFs(root);
    const failing = (code: string): FsPort => ({
      ...base,
      lstat: (async (p: string) => {
        if (path.basename(String(p)) === 'app.json') {
          throw Object.assign(new Error(`${code}: lstat`), { code });
        }
        return base.lstat(p);
      }) as FsPort['lstat'],
    });
    // Taken for missing, app.json was no alias of App.json: a retired App.json's unlink would take app.json's file.
    for (const code of ['EIO', 'EACCES']) {
      const found = findPathAliases(failing(code), root, ['App.json', 'app.json']);
      await expect(found).rejects.toMatchObject({ code: 'disk_error', retryable: true, errno: code });
    }
    expect(await findPathAliases(failing('ENOENT'), root, ['App.json', 'app.json'])).toEqual(new Map());
    expect(await findPathAliases(base, root, ['App.json', 'app.json'])).toEqual(
      new Map([
        ['App.json', 'App.json'],
        ['app.json', 'App.json'],
      ]),
    );
  });

  it('no alias where the file is on disk under neither spelling (nothing tells yet)', async () => {
    expect(await findPathAliases(caseInsensitiveFs(root), root, ['App.json', 'app.json'])).toEqual(new Map());
  });

  it('one device and inode with one name is one file; with more names (hard links) each is its own', async () => {
    const one = { dev: 7n, ino: 42n, nlink: 1n };
    const linked = { dev: 7n, ino: 43n, nlink: 2n };
    const aliases = await findPathAliases(
      realFs,
      root,
      ['a/x.json', 'b/x.json', 'c.json', 'd.json'],
      new Map([
        ['a/x.json', one],
        ['b/x.json', one],
        ['c.json', linked],
        ['d.json', linked],
      ]),
    );
    expect(aliases).toEqual(
      new Map([
        ['a/x.json', 'a/x.json'],
        ['b/x.json', 'a/x.json'],
      ]),
    );
  });

  it('1,024 spellings of one name (a hostile listing) cost one lookup each, not one per pair', async () => {
    await writeFile(path.join(root, 'abcdefghij.json'), 'a');
    const spellings = Array.from({ length: 1024 }, (_, bits) =>
      [...'abcdefghij']
        .map((c, i) => ((bits >> i) & 1 ? c.toUpperCase() : c))
        .join('')
        .concat('.json'),
    );
    const port = caseInsensitiveFs(root);
    let lookups = 0;
    const counting: FsPort = {
      ...port,
      lstat: ((...args: Parameters<FsPort['lstat']>) => {
        lookups += 1;
        return port.lstat(...args);
      }) as FsPort['lstat'],
      readdir: ((...args: Parameters<FsPort['readdir']>) => {
        lookups += 1;
        return port.readdir(...args);
      }) as FsPort['readdir'],
    };

    const aliases = await findPathAliases(counting, root, spellings);

    expect(aliases.size).toBe(1024);
    expect(new Set(aliases.values())).toEqual(new Set([[...spellings].sort()[0]]));
    expect(lookups).toBeLessThanOrEqual(1024 + 1);
  });

  it('a path outside the root is never looked at', async () => {
    expect(await findPathAliases(caseInsensitiveFs(root), root, ['../X.json', '../x.json'])).toEqual(
      new Map(),
    );
  });
});
