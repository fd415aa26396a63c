// review32: a rootDir moved off a mount that no longer answers: the former root's stat must not hold the start-up.
import { afterEach, expect, it } from 'vitest';
import { hungFormerRoots } from '../../test/helpers/hung-former-root.js';
import { canMountFuse } from '../../test/helpers/hung-fuse.js';
import { hangSafeFs } from '../cli/hang-safe-fs.js';

const worlds = hungFormerRoots();
afterEach(() => worlds.close());

// fix31's sameRoot stat'ed the rootDir each record in stateDir names (state, intents, fingerprints, root-mount):
// one on a dead NFS server's mount waited in the kernel, and the agent never started while it stayed dead.
it.runIf(canMountFuse)(
  'a pass after rootDir moved off a hung mount ends while that mount still hangs',
  async () => {
    const { world, hung, moved } = await worlds.make('review32-hung-old-root');
    const fs = await hangSafeFs(moved, { monotonic: () => 0 }, undefined, undefined, {
      stateDir: world.stateDir,
    });
    const result = await world.runOnce({ settings: { rootDir: moved }, deps: { fs } });
    // Before: the pass ended only when the mount's process exited (ENOTCONN), the test's timeout first.
    expect(hung.exitCode).toBeNull();
    expect(result.converged).toBe(true);
    expect(result.outcomes.map((outcome) => `${outcome.path} ${outcome.action}`)).toEqual([
      'cfg_a.json written',
    ]);
  },
  30_000,
);

it('mountThatMayHangAt: the mount that may hang holding a path, rootDir by its real path', async () => {
  const table = [
    '1 0 8:1 / / rw - ext4 /dev/sda1 rw',
    '2 1 0:50 / /mnt/nfs rw - nfs4 server:/export rw',
    '3 1 0:51 / /srv/data rw - ext4 /dev/sdb1 rw',
  ].join('\n');
  const port = {
    realpath: async (file: string) => (file === '/srv/link' ? '/mnt/nfs/root' : file),
    mountinfo: async () => table,
  };
  const local = await hangSafeFs('/srv/data/root', { monotonic: () => 0 }, port);
  expect(local.mountThatMayHangAt?.('/srv/data/root')).toBeUndefined();
  expect(local.mountThatMayHangAt?.('/mnt/nfs/old-root/')).toBe('/mnt/nfs');
  expect(local.mountThatMayHangAt?.('/mnt/nfsx')).toBeUndefined();
  // A rootDir configured through a symlink onto the NFS mount is that mount's: its former spelling there is stat'ed.
  const linked = await hangSafeFs('/srv/link', { monotonic: () => 0 }, port);
  expect(linked.mountThatMayHangAt?.('/srv/link')).toBe('/mnt/nfs');
  expect(linked.mountThatMayHangAt?.('/mnt/nfs/root')).toBe('/mnt/nfs');
});
