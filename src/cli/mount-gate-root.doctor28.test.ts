// The mount gate with `/` held (an NFS root: start-up's, doctor's and init's checks hold every mount that may hang):
// a call anywhere is bounded by the root's lane, a deeper held mount keeping its own.
import { expect, it } from 'vitest';
import { steppedClock } from '../../test/helpers/gate-clocks.js';
import type { FsPort } from '../lib/fs-port.js';
import { gateMountsThatMayHang } from './mount-gate.js';

/** A port whose `stat` never answers, counting its calls by path. */
function neverAnswering() {
  const made: string[] = [];
  const fs = {
    stat: (file: string) => {
      made.push(file);
      return new Promise(() => undefined);
    },
  } as unknown as FsPort;
  return { fs, made };
}

// Before: `/` held no path (`inside` takes `/x` for outside `/`), so /etc's stat on a dead NFS root went unbounded.
it("a call under `/` held goes into the root's lane: bounded, and refused at once while it is late", async () => {
  const time = steppedClock();
  const { fs, made } = neverAnswering();
  const held = [
    { dir: '/', mountPoint: '/' },
    { dir: '/mnt/fuse', mountPoint: '/mnt/fuse' },
  ];
  const gated = gateMountsThatMayHang(fs, '/', () => new Set(), time.clock, 50, { held: () => held });
  const first = gated.stat('/etc/config-agent/config.json');
  const failed = expect(first).rejects.toMatchObject({ name: 'MountNotAnswering', mountPoint: '/' });
  await time.advance(50);
  await failed;
  await expect(gated.stat('/etc/passwd')).rejects.toMatchObject({ mountPoint: '/' });
  expect(made).toEqual(['/etc/config-agent/config.json']);
  // A deeper held mount keeps its own lane: not refused for the root's.
  void gated.stat('/mnt/fuse/x');
  await time.advance(0);
  expect(made).toEqual(['/etc/config-agent/config.json', '/mnt/fuse/x']);
});
