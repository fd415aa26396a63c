// Holds every thread of libuv's pool in an open of a FIFO for reading, and frees them even where a reader had not reached its open yet.
import { spawnSync } from 'node:child_process';
import { closeSync, constants, openSync } from 'node:fs';
import * as nodeFs from 'node:fs/promises';
import path from 'node:path';
import { afterEach } from 'vitest';

/** The pool held: `release` ends every reader (bounded), whatever became of the test. */
export interface HeldPool {
  release(): Promise<void>;
}

/** How long `release` keeps offering writers to readers that have not opened yet (a pool busy with other work). */
const RELEASE_BOUND_MS = 20_000;

/**
 * One FIFO per pool thread under `dir`, each read by node:fs/promises's readFile: its open waits for a writer, so the
 * pool answers nothing else until `release`. A writer opened with O_NONBLOCK before its reader reached the open finds
 * none (ENXIO) and the reader would then wait for good: `release` offers one again until every reader has ended.
 */
export function holdPool(dir: string, size = Number(process.env.UV_THREADPOOL_SIZE ?? 4)): HeldPool {
  const held = Array.from({ length: size }, (_, i) => {
    const fifo = path.join(dir, `pool-hold-${i}`);
    spawnSync('mkfifo', [fifo]);
    const reader = { fifo, done: false, ended: Promise.resolve() };
    reader.ended = nodeFs.readFile(fifo).then(
      () => {
        reader.done = true;
      },
      () => {
        reader.done = true;
      },
    );
    return reader;
  });
  let released: Promise<void> | undefined;
  return {
    release: () => {
      released ??= (async () => {
        const deadline = Date.now() + RELEASE_BOUND_MS;
        for (const reader of held) {
          while (!reader.done) {
            if (Date.now() > deadline) throw new Error(`a reader of ${reader.fifo} never ended`);
            try {
              closeSync(openSync(reader.fifo, constants.O_WRONLY | constants.O_NONBLOCK));
            } catch {
              // ENXIO: its reader has not reached the open yet.
            }
            await Promise.race([reader.ended, new Promise((resolve) => setTimeout(resolve, 10))]);
          }
        }
      })();
      return released;
    },
  };
}

/** A test's held pool: `hold` in the test, released by afterEach whatever became of it (and by `release`). */
export function usePoolHolds(): { hold(dir: string): void; release(): Promise<void> } {
  let held: HeldPool | undefined;
  const release = async () => {
    const now = held;
    held = undefined;
    await now?.release();
  };
  afterEach(release);
  return {
    hold: (dir) => {
      held = holdPool(dir);
    },
    release,
  };
}

/** What a call not yet settled reads as (settledSoon). */
export const PENDING = Symbol('pending');

/** What `call` settled to (its value, or its error) within a few turns of the event loop and a 50 ms timer, or PENDING. */
export async function settledSoon<T>(call: Promise<T>): Promise<T | typeof PENDING> {
  const outcome = call.then(
    (value) => value,
    (error: unknown) => error as T,
  );
  return Promise.race([outcome, new Promise<typeof PENDING>((resolve) => setTimeout(resolve, 50, PENDING))]);
}
