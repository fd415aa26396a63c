// MountLanes and the gate against the mutants Stryker left alive (mut23): late mounts and their next answer, the stop's bound, closes deferred over two hangs.
import { constants } from 'node:fs';
import type { FileHandle } from 'node:fs/promises';
import { describe, expect, it } from 'vitest';
import { controlledClock, steppedClock, settleTurns as turns } from '../../test/helpers/gate-clocks.js';
import type { FsPort } from '../lib/fs-port.js';
import { gateMountsThatMayHang, MountLanes } from './mount-gate.js';

/** A call into the mount that answers only when the test says (`answer`), counted once made (`made`). */
function heldCall() {
  let finish: (() => void) | undefined;
  const held = {
    made: 0,
    done: 0,
    call: () =>
      new Promise<void>((resolve) => {
        held.made += 1;
        finish = () => {
          held.done += 1;
          resolve();
        };
      }),
    answer: () => finish?.(),
  };
  return held;
}

describe('MountLanes: which mounts are late, and their next answer', () => {
  it('names a mount while its call given up on has not come back; nextAnswer settles when it does', async () => {
    const { clock, expire } = controlledClock();
    const lanes = new MountLanes(clock, 15_000);
    const hung = heldCall();
    const late = lanes.through('/srv/nfs', hung.call).catch((error: unknown) => error);
    await lanes.through('/srv/other', async () => undefined);
    expect(lanes.lateMounts()).toEqual([]);
    expire();
    expect(await late).toMatchObject({ code: 'ETIMEDOUT', name: 'MountNotAnswering' });
    expect(lanes.lateMounts()).toEqual(['/srv/nfs']);

    let told = false;
    void lanes.nextAnswer().then(() => {
      told = true;
    });
    await turns();
    expect(told).toBe(false);
    hung.answer();
    await turns();
    expect(told).toBe(true);
    expect(lanes.lateMounts()).toEqual([]);
  });

  it('nextAnswer settles at once for an aborted signal, and when its signal aborts while waiting', async () => {
    const { clock } = controlledClock();
    const lanes = new MountLanes(clock, 15_000);
    await lanes.nextAnswer(AbortSignal.abort());
    const waiting = new AbortController();
    let told = false;
    void lanes.nextAnswer(waiting.signal).then(() => {
      told = true;
    });
    await turns();
    expect(told).toBe(false);
    waiting.abort();
    await turns();
    expect(told).toBe(true);
  });
});

describe('MountLanes after the stop', () => {
  it('a stop without a deadline leaves a call made after it its whole bound', async () => {
    const time = steppedClock();
    const stop = new AbortController();
    const lanes = new MountLanes(time.clock, 15_000, stop.signal);
    stop.abort();
    let settled: unknown;
    const hung = heldCall();
    void lanes.through('/srv/nfs', hung.call).catch((error: unknown) => {
      settled = error;
    });
    await time.advance(14_999);
    expect(settled).toBeUndefined();
    await time.advance(1);
    expect(settled).toMatchObject({ code: 'ETIMEDOUT', name: 'MountNotAnswering' });
  });

  it('a call into a mount still late when the stop came is refused as given up on at the stop', async () => {
    const { clock, expire } = controlledClock();
    const stop = new AbortController();
    const lanes = new MountLanes(clock, 15_000, stop.signal);
    const late = lanes.through('/srv/nfs', heldCall().call).catch((error: unknown) => error);
    expire();
    expect(await late).toMatchObject({ name: 'MountNotAnswering' });
    await expect(lanes.through('/srv/nfs', async () => 1)).rejects.toMatchObject({
      name: 'MountNotAnswering',
    });
    stop.abort();
    await expect(lanes.through('/srv/nfs', async () => 1)).rejects.toMatchObject({
      code: 'ETIMEDOUT',
      name: 'MountAbandonedAtStop',
    });
  });
});

describe('MountLanes: closes deferred while a mount is late, over a second hang', () => {
  it('a deferred close that hangs again is not made again (it ends by itself); the ones behind it wait; one that failed otherwise is not', async () => {
    const { clock, expire } = controlledClock();
    const lanes = new MountLanes(clock, 15_000);
    const first = heldCall();
    const late = lanes.through('/srv/nfs', first.call).catch((error: unknown) => error);
    expire();
    await late;
    // Asked for while late: each answers at once, to be made once the mount answers.
    const closeA = heldCall();
    let closeB = 0;
    let closeC = 0;
    await lanes.closing('/srv/nfs', closeA.call);
    await lanes.closing('/srv/nfs', async () => {
      closeC += 1;
      throw Object.assign(new Error('EBADF: bad file descriptor'), { code: 'EBADF' });
    });
    await lanes.closing('/srv/nfs', async () => {
      closeB += 1;
    });

    // The mount answers: close A goes in, and hangs past its bound (late again).
    first.answer();
    await turns();
    expect(closeA.made).toBe(1);
    expire();
    await turns();
    expect(lanes.lateMounts()).toEqual(['/srv/nfs']);
    // Nothing more goes into the mount while it is late.
    expect({ closeB, closeC }).toEqual({ closeB: 0, closeC: 0 });

    // Close A answers: the rest go in, in order; A, made and given up on, is not made again (a descriptor closed
    // twice: the second closed whatever had its number by then; review32); C, failed with EBADF, is not.
    closeA.answer();
    await turns();
    expect(lanes.lateMounts()).toEqual([]);
    expect({ closeB, closeC }).toEqual({ closeB: 1, closeC: 1 });
    expect(closeA.made).toBe(1);
    expect(closeA.done).toBe(1);
    // Another episode: nothing deferred is left to make.
    const again = lanes.through('/srv/nfs', heldCall().call).catch((error: unknown) => error);
    expire();
    await again;
    expect({ closeB, closeC, closeA: closeA.made }).toEqual({ closeB: 1, closeC: 1, closeA: 1 });
  });
});

describe('gateMountsThatMayHang: a descriptor opened in stateDir on a mount that may hang (rootDir elsewhere)', () => {
  it("the handle's calls are bounded as the open was: its sync past the bound fails ETIMEDOUT naming the mount", async () => {
    const { clock, expire } = controlledClock();
    const syncs = heldCall();
    const handle = { fd: 42, sync: syncs.call, close: async () => undefined } as unknown as FileHandle;
    const fs = { open: async () => handle } as unknown as FsPort;
    const gated = gateMountsThatMayHang(fs, '/srv/root', () => new Set(), clock, 15_000, {
      held: () => [{ dir: '/var/lib/agent', mountPoint: '/var' }],
    });
    const opened = await gated.open('/var/lib/agent/state.json', 0);
    const sync = opened.sync().catch((error: unknown) => error);
    await turns();
    expect(syncs.made).toBe(1);
    expire();
    expect(await sync).toMatchObject({ code: 'ETIMEDOUT', mountPoint: '/var' });
  });
});

describe('gateMountsThatMayHang: an open (a FileHandle) into a mount that may hang answering after its caller gave up', () => {
  /** Files by path on a stand-in mount; each open waits until the test answers it. */
  function lateOpens() {
    const files = new Set<string>(['/srv/root/share/kept.json']);
    const closed: string[] = [];
    const held: (() => void)[] = [];
    const fs = {
      open: (file: string, flags: number) =>
        new Promise<FileHandle>((resolve) => {
          held.push(() => {
            if ((flags & constants.O_CREAT) !== 0) files.add(file);
            resolve({
              fd: 7,
              stat: async () => ({ dev: 1, ino: file.length }),
              close: async () => {
                closed.push(file);
              },
            } as unknown as FileHandle);
          });
        }),
      lstat: async (file: string) => ({ dev: 1, ino: file.length }),
      unlink: async (file: string) => {
        files.delete(file);
      },
    } as unknown as FsPort;
    return { fs, files, closed, answer: () => held.shift()?.() };
  }

  it('the file it made is removed and its handle closed; a file it only opened is kept, its handle closed', async () => {
    const { clock, expire } = controlledClock();
    const world = lateOpens();
    const gated = gateMountsThatMayHang(world.fs, '/srv/root', () => new Set(['share']), clock, 15_000);
    const made = gated
      .open('/srv/root/share/.tmp-a.json', constants.O_WRONLY | constants.O_CREAT | constants.O_EXCL, 0o600)
      .catch((error: unknown) => error);
    expire();
    expect(await made).toMatchObject({ code: 'ETIMEDOUT' });
    world.answer();
    await turns();
    expect([...world.files]).toEqual(['/srv/root/share/kept.json']);
    expect(world.closed).toEqual(['/srv/root/share/.tmp-a.json']);

    const opened = gated
      .open('/srv/root/share/kept.json', constants.O_RDONLY)
      .catch((error: unknown) => error);
    expire();
    expect(await opened).toMatchObject({ code: 'ETIMEDOUT' });
    world.answer();
    await turns();
    expect([...world.files]).toEqual(['/srv/root/share/kept.json']);
    expect(world.closed).toEqual(['/srv/root/share/.tmp-a.json', '/srv/root/share/kept.json']);
  });
});
