// observeDisk on a real temp dir: one observation per distinct path, each kind of what can be at a path.

import { createHash } from 'node:crypto';
import * as nodeFs from 'node:fs/promises';
import { chmod, mkdir, mkdtemp, rm, stat, symlink, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { observeDisk, observePath } from './observe.js';

let dir: string;
let root: string;

beforeEach(async () => {
  dir = await mkdtemp(path.join(os.tmpdir(), 'config-agent-observe-'));
  root = path.join(dir, 'root');
  await mkdir(root);
});

afterEach(async () => {
  await rm(dir, { recursive: true, force: true });
});

const at = (...paths: string[]) => paths.map((relative_filepath) => ({ relative_filepath }));

describe('observeDisk', () => {
  it('a regular file: its sha256, mode and group', async () => {
    await writeFile(path.join(root, 'a.json'), '{"a":1}\n');
    await chmod(path.join(root, 'a.json'), 0o640);
    const { gid } = await stat(path.join(root, 'a.json'));

    const observed = await observeDisk(nodeFs, root, at('a.json'));

    expect(observed).toEqual(
      new Map([
        [
          'a.json',
          {
            kind: 'file',
            sha256: createHash('sha256').update('{"a":1}\n').digest('hex'),
            mode: 0o640,
            gid,
          },
        ],
      ]),
    );
  });

  it('each distinct path once, whatever the number of instances naming it', async () => {
    await writeFile(path.join(root, 'a.json'), 'a');
    const many = Array.from({ length: 40 }, (_, index) => `p${index}.json`);

    const observed = await observeDisk(nodeFs, root, at('a.json', ...many, 'a.json', 'p0.json'));

    expect([...observed.keys()]).toEqual(['a.json', ...many]);
    expect(observed.get('a.json')?.kind).toBe('file');
    expect(many.every((relative) => observed.get(relative)?.kind === 'absent')).toBe(true);
  });

  it('nothing to observe: an empty map', async () => {
    expect(await observeDisk(nodeFs, root, [])).toEqual(new Map());
  });

  it('a path through a symlink is rejected with the reason', async () => {
    await mkdir(path.join(dir, 'elsewhere'));
    await writeFile(path.join(dir, 'elsewhere', 'a.json'), 'a');
    await symlink(path.join(dir, 'elsewhere'), path.join(root, 'link'));

    const observed = await observeDisk(nodeFs, root, at('link/a.json'));

    expect(observed.get('link/a.json')).toMatchObject({
      kind: 'rejected',
      reason: expect.stringContaining('link'),
    });
  });

  it('a root that does not exist yet holds no file', async () => {
    expect(await observePath(nodeFs, path.join(dir, 'missing'), 'a.json')).toEqual({ kind: 'absent' });
  });

  it('a path that cannot be read is unreadable, with the reason, never thrown', async () => {
    await writeFile(path.join(root, 'a.json'), 'a');
    const failing = {
      ...nodeFs,
      open: async () => {
        throw Object.assign(new Error('EIO: simulated failure'), { code: 'EIO' });
      },
    } as unknown as typeof nodeFs;

    const observation = await observePath(failing, root, 'a.json');

    expect(observation).toMatchObject({ kind: 'unreadable', reason: expect.stringContaining('EIO') });
  });

  it('an aborted pass observes nothing more', async () => {
    await expect(observeDisk(nodeFs, root, at('a.json'), { signal: AbortSignal.abort() })).rejects.toThrow();
  });
});
