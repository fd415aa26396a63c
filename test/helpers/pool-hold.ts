// Holds every thread of libuv's pool in an open of a FIFO for reading, and frees them even where a reader had not reached its open yet.
import { spawnSync } from 'node:child_process';
import { closeSync, constants, openSync } from 'node:fs';
import * as nodeFs from 'node:fs/promises';
import path from 'node:path';

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
