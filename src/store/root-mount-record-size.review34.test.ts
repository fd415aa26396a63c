// root-mount.json never grows past what its reader takes, however many long mount points lie below rootDir (review34).
import * as nodeFs from 'node:fs/promises';
import { mkdir, mkdtemp, rm, stat } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { ROOT_MOUNT_FILE, RootMountWatch } from './root-mount.js';

let dir: string;
let root: string;
let stateDir: string;
let mounted: boolean;
/** 256 mount points below rootDir, ~1 KiB each (the table's own limit is PATH_MAX). */
const below = new Set(
  Array.from(
    { length: 256 },
    (_, n) => `${'d'.repeat(500)}/${'e'.repeat(500)}/${String(n).padStart(3, '0')}`,
  ),
);
const fs = {
  ...nodeFs,
  stat: (async (target: string, options?: unknown) => {
    const stats = await nodeFs.stat(target, options as never);
    if (mounted && target === root) Object.assign(stats, { dev: Number(stats.dev) + 1 });
    return stats;
  }) as typeof nodeFs.stat,
  mountsBelow: (of: string) => (of === root && mounted ? below : new Set<string>()),
};

beforeEach(async () => {
  dir = await mkdtemp(path.join(os.tmpdir(), 'config-agent-record-size-'));
  root = path.join(dir, 'root');
  stateDir = path.join(dir, 'state');
  await mkdir(root);
  await mkdir(stateDir);
});
afterEach(async () => {
  await rm(dir, { recursive: true, force: true });
});

describe('root-mount.json with many long mount points below rootDir (review34)', () => {
  it('stays within the 64 KiB its reader takes, so rootDir is still known as a mount point after a restart', async () => {
    mounted = true;
    expect(await new RootMountWatch(fs, root, { stateDir, readOnly: false }).check()).toBeUndefined();
    expect((await stat(path.join(stateDir, ROOT_MOUNT_FILE))).size).toBeLessThanOrEqual(64 * 1024);

    // Before: ~260 KiB written, then refused as no record: a restart with rootDir's mount gone wrote into the bare
    // directory.
    mounted = false;
    expect((await new RootMountWatch(fs, root, { stateDir, readOnly: false }).check())?.mountGone).toContain(
      'was one when the agent last saw it',
    );
  });
});
