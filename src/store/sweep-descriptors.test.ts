// The start-up sweep's walk by descriptor holds one per level: a tree deep enough to use them all up (a low
// RLIMIT_NOFILE) is skipped below that depth, never a failed start; real fs, descriptors counted by a port.
import { execFileSync } from 'node:child_process';
import * as nodeFs from 'node:fs/promises';
import { mkdir, mkdtemp, readdir, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import type { FsPort } from '../lib/fs-port.js';
import { type SweepSkip, sweepTempFiles } from './durable-writer.js';
import { DiskError } from './errors.js';
import { TEMP_PREFIX } from './path-guard.js';

let dir: string;
let root: string;

beforeEach(async () => {
  dir = await mkdtemp(path.join(os.tmpdir(), 'config-agent-sweep-fds-'));
  root = path.join(dir, 'root');
  await mkdir(root);
});

afterEach(() => {
  execFileSync('rm', ['-rf', dir]);
});

/** Real fs whose `open` fails EMFILE while `limit` of the handles it gave are open, as a process at RLIMIT_NOFILE. */
function withDescriptorLimit(limit: number): FsPort {
  let open = 0;
  return {
    ...nodeFs,
    open: (async (...args: Parameters<typeof nodeFs.open>) => {
      if (open >= limit) {
        throw Object.assign(new Error(`EMFILE: too many open files, open '${args[0]}'`), {
          code: 'EMFILE',
          errno: -24,
        });
      }
      const handle = await nodeFs.open(...args);
      open++;
      const close = handle.close.bind(handle);
      handle.close = async () => {
        open--;
        return close();
      };
      return handle;
    }) as typeof nodeFs.open,
  } as FsPort;
}

/** `depth` nested directories `d` under the root, a temp file at each level in `at`; the relative paths. */
async function deepTree(depth: number, at: number[]): Promise<string[]> {
  const temps: string[] = [];
  let relative = '';
  for (let level = 0; level <= depth; level++) {
    if (level > 0) {
      relative = relative === '' ? 'd' : `${relative}/d`;
      await mkdir(path.join(root, relative));
    }
    if (at.includes(level)) {
      const file = relative === '' ? `${TEMP_PREFIX}${level}` : `${relative}/${TEMP_PREFIX}${level}`;
      await writeFile(path.join(root, file), 't');
      temps.push(file);
    }
  }
  return temps;
}

describe('the start-up sweep in a tree deeper than the descriptors it may hold', () => {
  it('sweeps what it reaches and skips the rest (EMFILE named) instead of failing the start', async () => {
    const [top, shallow, deep] = await deepTree(150, [0, 20, 140]);
    const skipped: SweepSkip[] = [];
    const removed = await sweepTempFiles(withDescriptorLimit(100), root, (skip) => skipped.push(skip));
    expect(removed).toEqual([shallow, top].sort());
    expect(skipped).toHaveLength(1);
    expect(skipped[0]).toMatchObject({ operation: 'read directory', errno: 'EMFILE' });
    // The deep leftover costs its bytes only; nothing above it is left.
    expect(await readdir(path.dirname(path.join(root, deep!)))).toContain(path.basename(deep!));
    expect(await readdir(root)).toEqual(['d']);
  });

  it('still fails on running out of descriptors near the root: that is the agent, not the tree', async () => {
    await deepTree(10, [0, 5]);
    const error = await sweepTempFiles(withDescriptorLimit(3), root).then(
      () => undefined,
      (caught: unknown) => caught,
    );
    expect(error).toBeInstanceOf(DiskError);
    expect(error).toMatchObject({ errno: 'EMFILE', operation: 'read directory' });
  });
});
