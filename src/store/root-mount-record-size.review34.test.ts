// root-mount.json never grows past what its reader takes, however many long mount points lie below rootDir (review34).
import { stat } from 'node:fs/promises';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { mountTableEachTest } from '../../test/helpers/mount-table-fs.js';
import { ROOT_MOUNT_FILE } from './root-mount.js';

/** 256 mount points below rootDir, ~1 KiB each (the table's own limit is PATH_MAX). */
const below = new Set(
  Array.from(
    { length: 256 },
    (_, n) => `${'d'.repeat(500)}/${'e'.repeat(500)}/${String(n).padStart(3, '0')}`,
  ),
);
const m = mountTableEachTest('config-agent-record-size-', below);

describe('root-mount.json with many long mount points below rootDir (review34)', () => {
  it('stays within the 64 KiB its reader takes, so rootDir is still known as a mount point after a restart', async () => {
    m.mounted = true;
    expect(await m.watch().check()).toBeUndefined();
    expect((await stat(path.join(m.stateDir, ROOT_MOUNT_FILE))).size).toBeLessThanOrEqual(64 * 1024);

    // Before: ~260 KiB written, then refused as no record: a restart with rootDir's mount gone wrote into the bare
    // directory.
    m.mounted = false;
    expect((await m.watch().check())?.mountGone).toContain('was one when the agent last saw it');
  });
});
