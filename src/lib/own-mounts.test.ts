// ownMountPoints on described mountinfo tables: a directory bound onto itself (a unit's sandbox) is no mount of its own.
import { describe, expect, it } from 'vitest';
import { ownMountPoints } from './own-mounts.js';

/** A mountinfo line: id, parent, major:minor, root, mount point, then the rest as the kernel prints it. */
function line(
  id: number,
  parent: number,
  device: string,
  root: string,
  mountPoint: string,
  type = 'ext4',
): string {
  return `${id} ${parent} ${device} ${root} ${mountPoint} rw,relatime shared:1 - ${type} /dev/x rw`;
}

describe('ownMountPoints', () => {
  it("leaves out a directory bound onto itself: systemd's ReadWritePaths= in the unit's namespace", () => {
    const table = [
      line(20, 1, '254:1', '/', '/'),
      // ReadWritePaths=/srv/config-agent under ProtectSystem=strict: /srv/config-agent bound onto itself.
      line(31, 20, '254:1', '/srv/config-agent', '/srv/config-agent'),
      line(32, 20, '254:1', '/var/lib/config-agent', '/var/lib/config-agent'),
    ].join('\n');
    expect([...ownMountPoints(table)]).toEqual(['/']);
  });

  it('keeps a filesystem of its own, a bind mount of another directory, and a data disk under a self-bind', () => {
    const table = [
      line(20, 1, '254:1', '/', '/'),
      // A data disk on /srv, its config-agent directory bound onto itself by a sandbox.
      line(21, 20, '254:2', '/', '/srv'),
      line(22, 21, '254:2', '/config-agent', '/srv/config-agent'),
      // A directory of the root filesystem bound elsewhere: a mount of its own (gone, the bare directory is left).
      line(23, 20, '254:1', '/data/app', '/etc/app'),
      // A tmpfs below rootDir, and the sandbox's bind of it onto itself on top.
      line(24, 20, '0:50', '/', '/etc/app/cache', 'tmpfs'),
      line(25, 24, '0:50', '/', '/etc/app/cache', 'tmpfs'),
      // Names with a space, escaped as the kernel prints them.
      line(26, 20, '254:1', '/a\\040b', '/mnt/a\\040c'),
      line(27, 20, '254:1', '/mnt/d\\040e', '/mnt/d\\040e'),
    ].join('\n');
    expect([...ownMountPoints(table)].sort()).toEqual([
      '/',
      '/etc/app',
      '/etc/app/cache',
      '/mnt/a c',
      '/srv',
    ]);
  });

  it('keeps a mount whose parent is not in the table, and skips short lines', () => {
    expect([...ownMountPoints(`${line(40, 3, '8:1', '/', '/chroot')}\n\n12 13\n`)]).toEqual(['/chroot']);
  });
});
