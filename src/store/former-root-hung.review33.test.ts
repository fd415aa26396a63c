// review33: the former root's files are read through its mount's bounded lane: a dead old root must not hold a pass.
import path from 'node:path';
import { afterEach, expect, it } from 'vitest';
import { hungFormerRoots } from '../../test/helpers/hung-former-root.js';
import { canMountFuse } from '../../test/helpers/hung-fuse.js';
import { hangSafeFs } from '../cli/hang-safe-fs.js';

const worlds = hungFormerRoots();
afterEach(() => worlds.close());

// review32 bounded sameRoot's stat of a former rootDir on a mount that may hang, but state24's formerRootLeftovers
// stat'ed and hashed files there with nothing bounding them: a root moved off a dead NFS server (the operator's way
// out) and an instance retired since held the pass in the kernel for as long as the server stayed dead.
it.runIf(canMountFuse)(
  'a retired instance whose file is in a former root that hangs: the pass ends, retrying, naming the file',
  async () => {
    const { world, hung, moved } = await worlds.make('review33-hung-former');
    world.put({ id: 'cfg_a', target_status: 'removed', activity_status: 'deployed' });
    // A bound that passes at once: the lane's call into the hung mount is given up on, never answered.
    const clock = { monotonic: () => 0, sleep: () => Promise.resolve() };
    const fs = await hangSafeFs(moved, clock, undefined, undefined, { stateDir: world.stateDir });
    const result = await world.runOnce({ settings: { rootDir: moved }, deps: { fs } });
    // Before: the pass ended only when the mount's process exited (ENOTCONN), the test's timeout first.
    expect(hung.exitCode).toBeNull();
    expect(result.converged).toBe(false);
    // Bytes that cannot be looked for are never said to be gone.
    const report = world.server.state.reports.filter((r) => r.config_instance_id === 'cfg_a').at(-1);
    expect(`${report?.activity_status}/${report?.error_status} ${report?.message}`).toBe(
      `deployed/retrying file left in place outside rootDir: ${path.join(world.rootDir, 'cfg_a.json')} (written there before rootDir moved; the agent deletes nothing outside rootDir): remove it by hand`,
    );
  },
  20_000,
);
