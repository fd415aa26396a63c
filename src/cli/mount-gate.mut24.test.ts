// mut24: a temp file's removal that went late (mount-gate's unlink `onLate`), which no test reached: once it answers,
// a removal refused meanwhile is made only if the late one failed, so a file put at the name since is never removed.
import { constants } from 'node:fs';
import type { FileHandle } from 'node:fs/promises';
import { describe, expect, it } from 'vitest';
import { controlledClock, settleTurns as turns } from '../../test/helpers/gate-clocks.js';
import type { FsPort } from '../lib/fs-port.js';
import { gateMountsThatMayHang, MountLanes } from './mount-gate.js';

const TEMP = '/srv/root/share/.tmp-a.json';

/** Files by path on a stand-in mount: opens answer at once, the first unlink waits until the test answers it. */
function lateUnlink() {
  const files = new Set<string>();
  let answer: ((outcome: 'removed, then put back' | 'failed') => void) | undefined;
  let unlinks = 0;
  const fs = {
    open: async (file: string, flags: number) => {
      if ((flags & constants.O_CREAT) !== 0) files.add(file);
      return {
        fd: 7,
        stat: async () => ({ dev: 1, ino: 9 }),
        close: async () => undefined,
      } as unknown as FileHandle;
    },
    unlink: (file: string) => {
      unlinks += 1;
      if (unlinks > 1) {
        files.delete(file);
        return Promise.resolve();
      }
      return new Promise<void>((resolve, reject) => {
        answer = (outcome) => {
          if (outcome === 'failed')
            return reject(Object.assign(new Error('EIO: i/o error, unlink'), { code: 'EIO' }));
          // It removed the temp file; someone put a file of theirs at the name before the answer came back.
          files.delete(file);
          files.add(file);
          resolve();
        };
      });
    },
  } as unknown as FsPort;
  return { fs, files, answer: (outcome: 'removed, then put back' | 'failed') => answer?.(outcome) };
}

async function tempRemovalGoneLate(outcome: 'removed, then put back' | 'failed') {
  const { clock, expire } = controlledClock();
  const world = lateUnlink();
  const gated = gateMountsThatMayHang(world.fs, '/srv/root', () => new Set(['share']), clock, 15_000);
  const handle = await gated.open(TEMP, constants.O_WRONLY | constants.O_CREAT | constants.O_EXCL, 0o600);
  await handle.close();
  const late = gated.unlink(TEMP).catch((error: unknown) => error);
  await turns();
  expire();
  expect(await late).toMatchObject({ code: 'ETIMEDOUT' });
  // The writer's clean-up asks again while the mount is late: refused at once, to be made once it answers.
  expect(await gated.unlink(TEMP).catch((error: unknown) => error)).toMatchObject({ code: 'ETIMEDOUT' });
  world.answer(outcome);
  await turns();
  return [...world.files];
}

describe('a temp file whose removal went late (mut24)', () => {
  it('removed by the late call: the removal asked for meanwhile is not made, and the file put there since stays', async () => {
    expect(await tempRemovalGoneLate('removed, then put back')).toEqual([TEMP]);
  });

  it('the late call failed: the removal asked for meanwhile is made once the mount answers', async () => {
    expect(await tempRemovalGoneLate('failed')).toEqual([]);
  });
});

describe('MountLanes: one call at a time into a mount (mut24)', () => {
  it('a second call into the mount is made only once the first has answered; a call into another mount at once', async () => {
    const { clock } = controlledClock();
    const lanes = new MountLanes(clock, 15_000);
    const inFlight = { now: 0, most: 0 };
    const answers: (() => void)[] = [];
    const call = () =>
      new Promise<string>((resolve) => {
        inFlight.now += 1;
        inFlight.most = Math.max(inFlight.most, inFlight.now);
        answers.push(() => {
          inFlight.now -= 1;
          resolve('answered');
        });
      });
    const first = lanes.through('/srv/nfs', call);
    const second = lanes.through('/srv/nfs', call);
    const elsewhere = lanes.through('/srv/other', async () => 'elsewhere');
    await turns();
    expect(await elsewhere).toBe('elsewhere');
    expect(answers).toHaveLength(1);
    answers.shift()?.();
    expect(await first).toBe('answered');
    await turns();
    expect(answers).toHaveLength(1);
    answers.shift()?.();
    expect(await second).toBe('answered');
    expect(inFlight.most).toBe(1);
  });
});
