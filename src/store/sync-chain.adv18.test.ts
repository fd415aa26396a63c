// syncDirectories under a directory another user can write: a deep new chain is walked once, not once per level.
import * as nodeFs from 'node:fs/promises';
import { chmod, mkdir, mkdtemp, rename, rm, symlink } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import type { FsPort } from '../lib/fs-port.js';
import { syncDirectories } from './durable-writer.js';
import { VerifiedDirectories } from './path-guard.js';

let dir: string;
let root: string;

beforeEach(async () => {
  dir = await mkdtemp(path.join(os.tmpdir(), 'config-agent-sync-chain-'));
  root = path.join(dir, 'root');
  await mkdir(path.join(root, 'shared'), { recursive: true });
  await chmod(root, 0o755);
  await chmod(path.join(root, 'shared'), 0o1777);
});

afterEach(async () => {
  await rm(dir, { recursive: true, force: true });
});

/** The fs port, counting the directories opened (each walk opens one per level). */
function countingFs(): { fs: FsPort; opens: () => number } {
  let opens = 0;
  const fs: FsPort = {
    ...nodeFs,
    open: ((...args: Parameters<typeof nodeFs.open>) => {
      opens += 1;
      return nodeFs.open(...args);
    }) as FsPort['open'],
  };
  return { fs, opens: () => opens };
}

describe('syncDirectories: a new chain of directories under a directory others can write', () => {
  // Each directory was fsynced through a walk of its own from the root: a chain d levels deep opened d²/2
  // directories (2,000 levels from the service: over 80 s of CPU for one --once, 11 s of it in the kernel).
  it('opens each directory of a 150-level chain about once and fsyncs every one', async () => {
    const levels = Array.from({ length: 150 }, (_, i) => ['shared', ...Array(i + 1).fill('d')].join('/'));
    await mkdir(path.join(root, levels.at(-1)!), { recursive: true });
    const { fs, opens } = countingFs();
    const verified = new VerifiedDirectories(process.geteuid?.() ?? 0);

    const failures = await syncDirectories(fs, root, [...levels].reverse(), { verified });

    expect(failures.size).toBe(0);
    expect(opens()).toBeLessThan(2 * levels.length);
  });

  it('a directory of the chain swapped for a symlink fails it and every one below, never those above', async () => {
    const levels = Array.from({ length: 6 }, (_, i) => ['shared', ...Array(i + 1).fill('d')].join('/'));
    await mkdir(path.join(root, levels.at(-1)!), { recursive: true });
    const outside = path.join(dir, 'outside');
    await mkdir(path.join(outside, 'd', 'd', 'd'), { recursive: true });
    const swapped = path.join(root, levels[2]!);
    await rename(swapped, `${swapped}-real`);
    await symlink(outside, swapped);
    const verified = new VerifiedDirectories(process.geteuid?.() ?? 0);

    const failures = await syncDirectories(nodeFs, root, levels, { verified });

    expect([...failures.keys()].sort()).toEqual(levels.slice(2).sort());
    for (const error of failures.values()) expect(String(error)).toMatch(/path_rejected/);
  });
});
