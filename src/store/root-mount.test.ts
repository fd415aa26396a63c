// RootMountWatch on a real directory: a rootDir gone for a moment is left to the writes, one moved behind a symlink is refused.
import * as nodeFs from 'node:fs/promises';
import { mkdir, mkdtemp, rm, symlink } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { RootMountWatch } from './root-mount.js';

let dir: string;
beforeEach(async () => {
  dir = await mkdtemp(path.join(os.tmpdir(), 'config-agent-root-mount-'));
});
afterEach(async () => {
  await rm(dir, { recursive: true, force: true });
});

describe('RootMountWatch', () => {
  it('a rootDir removed after its first check is not "moved" (realpath fails: left to the writes); made again where it was, accepted', async () => {
    const root = path.join(dir, 'root');
    await mkdir(root);
    const watch = new RootMountWatch(nodeFs, root);
    expect(await watch.check()).toBeUndefined();
    await rm(root, { recursive: true });
    expect(await watch.check()).toBeUndefined();
    await mkdir(root);
    expect(await watch.check()).toBeUndefined();
  });

  it('a rootDir swapped for a symlink to another directory is refused as moved, and accepted once back', async () => {
    const root = path.join(dir, 'root');
    const elsewhere = path.join(dir, 'elsewhere');
    await mkdir(root);
    await mkdir(elsewhere);
    const watch = new RootMountWatch(nodeFs, root);
    expect(await watch.check()).toBeUndefined();
    await rm(root, { recursive: true });
    await symlink(elsewhere, root);
    const refused = await watch.check();
    expect(refused?.rootMoved).toContain(`resolves to ${elsewhere} now`);
    await rm(root);
    await mkdir(root);
    expect(await watch.check()).toBeUndefined();
  });
});
