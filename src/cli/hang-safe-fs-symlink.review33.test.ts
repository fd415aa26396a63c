// review33: mountThatMayHangAt follows the symlinks on a path's way: a former root spelled through one into NFS is NFS's.
import { mkdir, mkdtemp, rm, symlink } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { afterEach, expect, it } from 'vitest';
import { hangSafeFs } from './hang-safe-fs.js';

let dir: string | undefined;

afterEach(async () => {
  if (dir !== undefined) await rm(dir, { recursive: true, force: true });
  dir = undefined;
});

// review32's sameRoot (and review33's former-root reads) do not stat a recorded rootDir on a mount that may hang,
// judged as written: a rootDir configured as a local symlink into a dead NFS mount (`/srv/config -> /mnt/nfs/config`)
// and moved since was judged local, and its stat followed the link into the mount and waited there for good.
it('a path through a local symlink into a mount that may hang is that mount’s', async () => {
  dir = await mkdtemp(path.join(os.tmpdir(), 'config-agent-review33-mount-way-'));
  // The "NFS" mount is this tmpdir's `nfs` as the mount table says: anything looked up inside it would be a failure.
  const nfs = path.join(dir, 'nfs');
  await mkdir(path.join(dir, 'srv', 'nested'), { recursive: true });
  await symlink(path.join(nfs, 'config'), path.join(dir, 'srv', 'config'));
  await symlink('../nfs/other', path.join(dir, 'srv', 'relative'));
  await symlink('config', path.join(dir, 'srv', 'chained'));
  await symlink('loop', path.join(dir, 'srv', 'loop'));
  const table = ['1 0 8:1 / / rw - ext4 /dev/sda1 rw', `2 1 0:50 / ${nfs} rw - nfs4 server:/export rw`].join(
    '\n',
  );
  const port = { realpath: async (file: string) => file, mountinfo: async () => table };
  const fs = await hangSafeFs(path.join(dir, 'root'), { monotonic: () => 0 }, port);
  const at = (relative: string) => fs.mountThatMayHangAt?.(path.join(dir ?? '', relative));

  // Before: undefined for the first four (judged as written, local).
  expect(at('srv/config')).toBe(nfs);
  expect(at('srv/config/deeper/file.json')).toBe(nfs);
  expect(at('srv/relative')).toBe(nfs);
  expect(at('srv/chained')).toBe(nfs);
  // As before: local paths, a path that is not there, a mount point and what is inside it as written.
  expect(at('srv/nested')).toBeUndefined();
  expect(at('srv/gone/file.json')).toBeUndefined();
  expect(at('nfs')).toBe(nfs);
  expect(at('nfs/config/x')).toBe(nfs);
  // A symlink loop ends (ELOOP's bound): local.
  expect(at('srv/loop')).toBeUndefined();
});
