// Every mount point below rootDir, from the mount table the fs port already reads (mount26).
import { describe, expect, it } from 'vitest';
import { mountPointsBelow } from './hang-safe-fs.js';

/** One line of /proc/self/mountinfo, as the kernel writes it. */
const line = (id: number, mountPoint: string, type: string) =>
  `${id} 1 0:${id} / ${mountPoint} rw,relatime shared:${id} - ${type} src rw`;

describe('mountPointsBelow', () => {
  it('lists every mount strictly below rootDir, relative to it, whatever its type', () => {
    const table = [
      line(1, '/', 'ext4'),
      line(2, '/srv/root', 'ext4'),
      line(3, '/srv/root/data', 'tmpfs'),
      line(4, '/srv/root/a/my\\040card', 'vfat'),
      line(5, '/srv/root/share', 'nfs4'),
      line(6, '/srv/rootx/other', 'ext4'),
    ].join('\n');
    expect(mountPointsBelow(table, '/srv/root')).toEqual(new Set(['data', 'a/my card', 'share']));
    expect(mountPointsBelow(table, '/srv/root/data')).toEqual(new Set());
    expect(mountPointsBelow('', '/srv/root')).toEqual(new Set());
  });
});
