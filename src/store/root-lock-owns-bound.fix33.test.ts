// fix33: the holder's named paths (its state.json, the rootDir recorded there) answer in time or trust nothing.
import { describe, expect, it } from 'vitest';
import { type EvidenceBound, ownsRecordedFile, type RecordedFs, withinBound } from './lock.js';

const never = <T>(): Promise<T> => new Promise<T>(() => undefined);

/** A sleep that lets its time pass at once, counting what it was asked: the injected clock's, faked. */
function fakeBound(): EvidenceBound & { slept: number[] } {
  const slept: number[] = [];
  return {
    slept,
    ms: 2_000,
    sleep: async (ms) => {
      slept.push(ms);
    },
  };
}

/** A filesystem on a dead mount: nothing it is asked ever answers. */
const deadFs: RecordedFs = {
  open: () => never(),
  realpath: (() => never()) as unknown as RecordedFs['realpath'],
  lstat: (() => never()) as unknown as RecordedFs['lstat'],
};

describe("the holder's evidence within a bound (fix33)", () => {
  it('a state.json that never opens is no evidence: false once the bound has passed', async () => {
    const bound = fakeBound();
    // Before: the open was awaited for good, so the agent's start waited on the holder's mount (this test timed out).
    const owns = await ownsRecordedFile(
      0,
      '/holder/state',
      '/root',
      'k',
      async () => undefined,
      bound,
      deadFs,
    );
    expect(owns).toBe(false);
    expect(bound.slept).toEqual([2_000]);
  });

  it('a recorded rootDir whose stat never answers is no evidence either', async () => {
    const bound = fakeBound();
    const state = JSON.stringify({ rootDir: '/dead/root', files: { 'a.json': {} } });
    const readable: RecordedFs = {
      ...deadFs,
      open: (async () => ({
        stat: async () => ({ isFile: () => true, size: state.length }),
        readFile: async () => state,
        close: async () => undefined,
      })) as unknown as RecordedFs['open'],
    };
    const owns = await ownsRecordedFile(0, '/holder/state', '/root', 'k', () => never(), bound, readable);
    expect(owns).toBe(false);
    expect(bound.slept).toEqual([2_000]);
  });

  it('an answer before the bound is the answer', async () => {
    const aborted: boolean[] = [];
    const bound: EvidenceBound = {
      ms: 2_000,
      sleep: (_ms, signal) =>
        new Promise((_resolve, reject) => {
          signal?.addEventListener('abort', () => {
            aborted.push(true);
            reject(signal.reason);
          });
        }),
    };
    expect(await withinBound(Promise.resolve('answered'), bound, 'late')).toBe('answered');
    // Its timer is let go of once the answer came.
    expect(aborted).toEqual([true]);
  });
});
