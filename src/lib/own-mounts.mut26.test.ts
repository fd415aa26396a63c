// ownMountPoints / selfBoundMountPoints on tables that tell each rule of the self-bind test apart (mut26's survivors).
import { describe, expect, it } from 'vitest';
import { ownMountPoints, selfBoundMountPoints } from './own-mounts.js';

/** A mountinfo line: id, parent, major:minor, root, mount point, then the rest as the kernel prints it. */
function line(id: number, parent: number, device: string, root: string, mountPoint: string): string {
  return `${id} ${parent} ${device} ${root} ${mountPoint} rw,relatime shared:1 - ext4 /dev/x rw`;
}

const sorted = (set: Set<string>) => [...set].sort();

describe('the self-bind rule, one part at a time (mut26)', () => {
  it('a self-bind stacked on a self-bind at the same mount point is one too, under a parent whose root is not /', () => {
    const table = [
      line(20, 1, '254:1', '/', '/'),
      // A subdirectory of a data disk mounted at /srv/config-agent, then bound onto itself by a sandbox.
      line(21, 20, '254:2', '/config-agent', '/srv/config-agent'),
      line(22, 21, '254:2', '/config-agent', '/srv/config-agent'),
    ].join('\n');
    expect(sorted(selfBoundMountPoints(table))).toEqual(['/srv/config-agent']);
    expect(sorted(ownMountPoints(table))).toEqual(['/', '/srv/config-agent']);
  });

  it('a self-bind stacked on a filesystem root at the same mount point is one (a tmpfs bound onto itself)', () => {
    const table = [
      line(20, 1, '254:1', '/', '/'),
      line(24, 20, '0:50', '/', '/cache'),
      line(25, 24, '0:50', '/', '/cache'),
    ].join('\n');
    expect(sorted(selfBoundMountPoints(table))).toEqual(['/cache']);
  });

  it("a directory below a parent whose root is not / is bound onto itself when its root is the parent's root joined with it", () => {
    const table = [
      line(21, 1, '254:2', '/config-agent', '/srv/config-agent'),
      line(22, 21, '254:2', '/config-agent/data', '/srv/config-agent/data'),
      // The same device, another directory of it: a mount of its own.
      line(23, 21, '254:2', '/elsewhere', '/srv/config-agent/other'),
    ].join('\n');
    expect(sorted(selfBoundMountPoints(table))).toEqual(['/srv/config-agent/data']);
    expect(sorted(ownMountPoints(table))).toEqual(['/srv/config-agent', '/srv/config-agent/other']);
  });

  it('a mount listed as its own parent (a namespace root) is a mount of its own', () => {
    expect(sorted(ownMountPoints(line(1, 1, '8:1', '/', '/')))).toEqual(['/']);
    expect(sorted(selfBoundMountPoints(line(1, 1, '8:1', '/', '/')))).toEqual([]);
  });

  it("a mount point not below its parent's (a moved mount) is judged no self-bind", () => {
    const table = [line(30, 1, '8:1', '/', '/a'), line(31, 30, '8:1', '/z', '/xyz')].join('\n');
    expect(sorted(ownMountPoints(table))).toEqual(['/a', '/xyz']);
  });

  it('a line cut short before its mount point is skipped, not thrown on', () => {
    const table = `${line(20, 1, '254:1', '/', '/')}\n36 20 98:0 /mnt1\n${line(21, 20, '254:3', '/', '/data')}`;
    expect(sorted(ownMountPoints(table))).toEqual(['/', '/data']);
  });
});
