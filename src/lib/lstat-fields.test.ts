// lstat's fields read from node's binding answer as node:fs's lstatSync does: fields, absence and errors.
import { lstatSync, mkdirSync, mkdtempSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type LstatFields, lstatFieldsSync } from './lstat-fields.js';

const FIELDS = ['dev', 'ino', 'mode', 'nlink', 'gid', 'size', 'mtimeNs', 'ctimeNs'] as const;

let dir: string;
beforeAll(() => {
  dir = mkdtempSync(path.join(os.tmpdir(), 'lstat-fields-'));
  writeFileSync(path.join(dir, 'file.json'), '{"a":1}\n');
  mkdirSync(path.join(dir, 'sub'));
  symlinkSync('file.json', path.join(dir, 'link'));
});
afterAll(() => rmSync(dir, { recursive: true, force: true }));

/** What node:fs says of `file`: its fields and kinds, or the error's code. */
function expected(file: string): unknown {
  try {
    const stats = lstatSync(file, { bigint: true, throwIfNoEntry: false });
    return stats === undefined ? undefined : view(stats);
  } catch (error) {
    return { code: (error as NodeJS.ErrnoException).code };
  }
}

function view(stats: LstatFields): Record<string, unknown> {
  const fields: Record<string, unknown> = { isFile: stats.isFile(), isDirectory: stats.isDirectory() };
  for (const field of FIELDS) fields[field] = stats[field];
  return fields;
}

function answered(lstat: (file: string) => LstatFields | undefined, file: string): unknown {
  try {
    const stats = lstat(file);
    return stats === undefined ? undefined : view(stats);
  } catch (error) {
    return { code: (error as NodeJS.ErrnoException).code };
  }
}

describe.each([
  ['probed on an existing path (the binding where node has it)', () => '/'],
  ['probed on a missing path (node:fs throughout)', () => path.join(dir, 'missing')],
])('lstatFieldsSync %s', (_name, probe) => {
  it.each([
    ['a regular file', 'file.json'],
    ['a directory', 'sub'],
    ['a symlink, not followed', 'link'],
    ['nothing there: undefined', 'absent.json'],
    ['under a file: ENOTDIR', 'file.json/x'],
    ['a name too long: ENAMETOOLONG', 'x'.repeat(300)],
    ['a NUL in the path: refused as node:fs refuses it', 'file.json\0/x'],
  ])('%s: as node:fs lstatSync answers', (_what, relative) => {
    const file = path.join(dir, relative);
    const lstat = lstatFieldsSync(probe());
    expect(answered(lstat, file)).toEqual(expected(file));
  });

  it('a file changed between two lstats: each answer is its own (the binding reuses one array)', () => {
    const lstat = lstatFieldsSync(probe());
    const file = path.join(dir, 'changing.json');
    writeFileSync(file, 'a');
    const first = lstat(file);
    const other = lstat(path.join(dir, 'sub'));
    writeFileSync(file, 'abc');
    const second = lstat(file);
    expect(first?.size).toBe(1n);
    expect(other?.isDirectory()).toBe(true);
    expect(second?.size).toBe(3n);
    expect(first?.isFile()).toBe(true);
  });
});
