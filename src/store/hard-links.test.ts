// A managed file with another name (a hard link planted where fs.protected_hardlinks=0): a mode or group change
// publishes a fresh file, so the other name's inode keeps its mode and group (real tmp dir).

import * as nodeFs from 'node:fs/promises';
import { link, mkdir, mkdtemp, readFile, rm, stat, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { publishFile, publishText } from './durable-writer.js';

let dir: string;
let root: string;
let planted: string;

beforeEach(async () => {
  dir = await mkdtemp(path.join(os.tmpdir(), 'config-agent-links-'));
  root = path.join(dir, 'root');
  planted = path.join(dir, 'elsewhere');
  await mkdir(path.join(root, 'app'), { recursive: true });
  await writeFile(planted, 'abcd', { mode: 0o600 });
  // The other user's file, linked into the managed path: same inode, same bytes as the deployed ones.
  await link(planted, path.join(root, 'app/conf'));
});

afterEach(async () => {
  await rm(dir, { recursive: true, force: true });
});

const target = () => ({ rootDir: root, relativePath: 'app/conf', dirMode: 0o755 });

describe('a mode change on a file with other hard links', () => {
  it('publishFile replaces the name instead of chmod-ing the shared inode', async () => {
    const before = await stat(planted);
    const result = await publishFile(nodeFs, {
      ...target(),
      data: Buffer.from('abcd'),
      mode: 0o644,
    });
    expect(result.outcome).toBe('written');
    const managed = await stat(path.join(root, 'app/conf'));
    expect({ mode: managed.mode & 0o7777, nlink: managed.nlink }).toEqual({ mode: 0o644, nlink: 1 });
    expect(await readFile(path.join(root, 'app/conf'), 'utf8')).toBe('abcd');
    const after = await stat(planted);
    expect({ mode: after.mode & 0o7777, ino: after.ino, nlink: after.nlink }).toEqual({
      mode: 0o600,
      ino: before.ino,
      nlink: 1,
    });
    // From then on the file is the agent's alone: the same wanted mode is 'unchanged'.
    expect((await publishFile(nodeFs, { ...target(), data: Buffer.from('abcd'), mode: 0o644 })).outcome).toBe(
      'unchanged',
    );
  });

  it('publishText (the state files) does the same', async () => {
    const result = await publishText(nodeFs, {
      ...target(),
      pieces: () => ['ab', 'cd'],
      mode: 0o640,
    });
    expect(result.outcome).toBe('written');
    expect((await stat(path.join(root, 'app/conf'))).mode & 0o7777).toBe(0o640);
    expect((await stat(planted)).mode & 0o7777).toBe(0o600);
  });

  it('identical bytes and metadata stay untouched whatever the link count', async () => {
    const before = await stat(planted);
    const result = await publishFile(nodeFs, {
      ...target(),
      data: Buffer.from('abcd'),
      mode: 0o600,
    });
    expect(result.outcome).toBe('unchanged');
    expect((await stat(path.join(root, 'app/conf'))).ino).toBe(before.ino);
  });
});
