// The port's calls on stateDir's entries never hold the event loop: a FIFO or a symlink leading out of stateDir goes through the pool (review38).
import { type ChildProcess, spawn, spawnSync } from 'node:child_process';
import { closeSync, constants, openSync } from 'node:fs';
import { mkdir, mkdtemp, rm, symlink, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { canMountFuse, hungFuseDir } from '../../test/helpers/hung-fuse.js';
import { PENDING, settledSoon } from '../../test/helpers/pool-hold.js';
import { hangSafeFs } from './hang-safe-fs.js';

/** hangSafeFs over `root` and `state`, every mount local (one ext4 at /). */
function localFs(root: string, state: string) {
  return hangSafeFs(
    root,
    { monotonic: () => 0 },
    {
      realpath: async (file) => file,
      mountinfo: async () => '1 1 0:1 / / rw,relatime shared:1 - ext4 src rw',
    },
    undefined,
    { stateDir: state },
  );
}

describe('hangSafeFs: stateDir entries that could hold the calling thread go through the pool (review38)', () => {
  let dir: string | undefined;
  let writer: ChildProcess | undefined;
  afterEach(async () => {
    writer?.kill('SIGKILL');
    writer = undefined;
    if (dir !== undefined) await rm(dir, { recursive: true, force: true });
    dir = undefined;
  });

  it('a FIFO in stateDir read whole (readFile) or opened for reading without O_NONBLOCK waits off the loop', async () => {
    dir = await mkdtemp(path.join(os.tmpdir(), 'config-agent-review38-'));
    const root = path.join(dir, 'root');
    const state = path.join(dir, 'state');
    await mkdir(root);
    await mkdir(state, { mode: 0o700 });
    const fifo = path.join(state, 'outbox.json');
    spawnSync('mkfifo', [fifo]);
    const fs = await localFs(root, state);
    // Writers that come after 3 s, again and again: without them, a read on the calling thread held this test for good.
    writer = spawn('sh', ['-c', 'sleep 3; while :; do exec 3>"$1"; exec 3>&-; sleep 0.1; done', 'sh', fifo], {
      stdio: 'ignore',
    });
    const reading = fs.readFile(fifo, 'utf8');
    const opening = fs.open(fifo, constants.O_RDONLY);
    // Before: readFileSync waited on the calling thread for the writer, and settled only after it came.
    expect(await settledSoon(reading)).toBe(PENDING);
    expect(await settledSoon(opening)).toBe(PENDING);
    // A writer opening and closing ends both (the pool's reads see end of file), offered again until each has ended:
    // on a busy machine a reader may reach its open after one offer (ENXIO: no reader yet).
    let ended = false;
    const both = Promise.all([reading, opening]).finally(() => {
      ended = true;
    });
    while (!ended) {
      try {
        closeSync(openSync(fifo, constants.O_WRONLY | constants.O_NONBLOCK));
      } catch {
        // ENXIO: no reader has it open yet.
      }
      await new Promise((resolve) => setTimeout(resolve, 10));
    }
    const [text, handle] = await both;
    expect(text).toBe('');
    await handle.close();
    // The FIFO is still stat-able and a regular file beside it still answered.
    expect((await fs.lstat(fifo)).isFIFO()).toBe(true);
  }, 20_000);
});

describe.runIf(canMountFuse)('a symlink in stateDir onto a hung FUSE mount (review38)', () => {
  const hung = hungFuseDir('config-agent-review38-hung-');
  afterEach(() => hung.clean());

  it('calls through it wait in the pool, the loop never held; stateDir itself still answers', async () => {
    // Hangs 4 s: before, each call below held the loop that long (then ENOTCONN) instead of staying pending.
    const { dir, mountPoint } = await hung.make(4_000);
    const root = path.join(dir, 'root');
    const state = path.join(dir, 'state');
    await mkdir(root);
    await mkdir(state, { mode: 0o700 });
    await writeFile(path.join(state, 'state.json'), '{}');
    await symlink(mountPoint, path.join(state, 'cache'));
    const fs = await localFs(root, state);
    const calls = [
      fs.stat(path.join(state, 'cache', 'entry')),
      fs.readFile(path.join(state, 'cache', 'entry')),
      fs.readdir(path.join(state, 'cache')),
      fs.open(
        path.join(state, 'cache', 'entry'),
        constants.O_RDONLY | constants.O_NOFOLLOW | constants.O_NONBLOCK,
      ),
    ].map((call) => call.catch((error: unknown) => error));
    for (const call of calls) expect(await settledSoon(call)).toBe(PENDING);
    expect(await settledSoon(fs.readFile(path.join(state, 'state.json'), 'utf8'))).toBe('{}');
    await hung.clean();
    for (const call of calls) expect(await call).toMatchObject({ code: expect.any(String) });
  }, 30_000);
});
