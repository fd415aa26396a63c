// adv26: a managed file's open answering "try again" (EAGAIN: a lease another process holds) is no attempt of the instance.
import { constants } from 'node:fs';
import * as nodeFs from 'node:fs/promises';
import path from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { createPassWorld, type PassWorld } from '../../test/helpers/pass-world.js';
import type { FsPort } from '../lib/fs-port.js';

let world: PassWorld;
/** The file whose opens for reading answer EAGAIN while set: what a write lease (F_SETLEASE) held on it does. */
let leased: string | undefined;

/**
 * Linux answers an O_NONBLOCK open (the agent opens every file it reads so: a FIFO must not hang it) of a file
 * another process holds a write lease on with EWOULDBLOCK (EAGAIN) until the lease is given up: Samba's kernel
 * oplocks, nfsd's delegations, or the owner of a file in a sticky directory under rootDir.
 */
const leasingFs = (): FsPort =>
  ({
    ...nodeFs,
    open: async (file: string, flags?: number | string, mode?: number) => {
      const reading = typeof flags === 'number' && (flags & (constants.O_WRONLY | constants.O_RDWR)) === 0;
      if (reading && leased !== undefined && path.resolve(String(file)) === leased) {
        throw Object.assign(new Error(`EAGAIN: resource temporarily unavailable, open '${file}'`), {
          code: 'EAGAIN',
          errno: -11,
          syscall: 'open',
          path: String(file),
        });
      }
      return nodeFs.open(file, flags, mode);
    },
  }) as unknown as FsPort;

beforeEach(async () => {
  leased = undefined;
  world = await createPassWorld({
    name: 'pass-try-again',
    open: false,
    deps: { fs: leasingFs() },
    settings: { retry: { maxAttempts: 1, baseDelaySeconds: 10, maxDelaySeconds: 60 } },
  });
  await world.open();
});

afterEach(() => world.close());

describe('runPass: a managed file whose open answers EAGAIN (a lease held on it)', () => {
  it('is retried, never failed for good, and the new version written once the lease is gone', async () => {
    world.put({ id: 'cfg_a', relative_filepath: 'app/a.json', config_schema_id: 'sch_a', content: { v: 1 } });
    expect((await world.pass()).converged).toBe(true);
    // A new version of the same size: the pass must read the file on disk to tell whether it holds it.
    world.put({ id: 'cfg_b', relative_filepath: 'app/a.json', config_schema_id: 'sch_a', content: { v: 2 } });
    world.put({
      id: 'cfg_a',
      relative_filepath: 'app/a.json',
      config_schema_id: 'sch_a',
      content: { v: 1 },
      target_status: 'removed',
      activity_status: 'deployed',
    });
    leased = path.join(world.rootDir, 'app/a.json');
    // More passes than retry.maxAttempts (1), the clock standing still (no cooldown runs out).
    for (let round = 0; round < 3; round += 1) await world.pass();
    // EAGAIN says "try again": a lease is given up when its holder closes the file. Counted as the instance's
    // attempt, it made cfg_b `failed` (final at the service, never tried again) at the first pass.
    expect(world.reports()).toEqual(['cfg_a deployed/none', 'cfg_b queued/retrying']);
    expect(world.reconciler.state.instances.get('cfg_b')?.attempts ?? 0).toBe(0);
    expect(world.reconciler.state.instances.get('cfg_b')?.message).toContain("answered 'try again'");

    leased = undefined;
    // A device condition waits out its hold-off; a full pass after it (the fixed clock's sleeps return at once).
    world.reconciler.state.cooldowns.clear();
    const healed = await world.pass();
    expect(healed.converged).toBe(true);
    expect(JSON.parse(await world.fileAt('app/a.json'))).toEqual({ v: 2 });
    expect(world.reports()).toContain('cfg_b deployed/none');
  });
});
