// The production port's calling-thread answers (synchronousWhereLocal, readsOnly, readHandle, a failed mount check) pinned by their results, for mut28's surviving mutants.
import { constants, fstatSync, readFileSync, statSync } from 'node:fs';
import { mkdir, mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { PENDING, settledSoon, usePoolHolds } from '../../test/helpers/pool-hold.js';
import { readStateDirFile } from '../store/state.js';
import { hangSafeConfigCalls, hangSafeFs, type MountTablePort } from './hang-safe-fs.js';
import { MountLanes } from './mount-gate.js';

const ext4 = '1 1 0:1 / / rw,relatime shared:1 - ext4 src rw';

describe('hangSafeFs answering on the calling thread (mut28)', () => {
  let dir: string | undefined;
  afterEach(async () => {
    if (dir !== undefined) await rm(dir, { recursive: true, force: true });
    dir = undefined;
  });
  // Registered after the removal of dir, so that (after-hooks run last first) it is released before its FIFOs go.
  /** The pool held by a test, released after it (before dir goes) whatever became of it. */
  const pool = usePoolHolds();

  async function world(port: MountTablePort, clock: { monotonic: () => number } = { monotonic: () => 0 }) {
    dir = await mkdtemp(path.join(os.tmpdir(), 'config-agent-mut28-'));
    const root = path.join(dir, 'root');
    const state = path.join(dir, 'state');
    await mkdir(root);
    await mkdir(state, { mode: 0o700 });
    await writeFile(path.join(state, 'state.json'), '{"version":1}');
    const fs = await hangSafeFs(root, clock, port, undefined, { stateDir: state });
    return { root, state, fs };
  }

  const localTable: MountTablePort = { realpath: async (file) => file, mountinfo: async () => ext4 };

  it('open with no flags or "r" reads on the calling thread; a handle opened for writing writes', async () => {
    const { state, fs } = await world(localTable);
    const file = path.join(state, 'state.json');
    pool.hold(dir!);
    for (const flags of [undefined, 'r'] as const) {
      const opened = await settledSoon(fs.open(file, flags));
      expect(opened).not.toBe(PENDING);
      const handle = opened as Awaited<ReturnType<typeof fs.open>>;
      expect(await settledSoon(handle.readFile({ encoding: 'utf8' }))).toBe('{"version":1}');
      // Positional reads and a bigint fstat, as the state readers ask them.
      const buffer = Buffer.alloc(7);
      expect(await settledSoon(handle.read(buffer, 0, 7, 3))).toMatchObject({ bytesRead: 7 });
      expect(buffer.toString()).toBe('ersion"');
      expect(((await settledSoon(handle.stat({ bigint: true }))) as { size: bigint }).size).toBe(13n);
      await handle.close();
    }
    await pool.release();
    // Opened for writing (a string flag, as numeric ones): a handle that writes, through the pool.
    const written = await fs.open(path.join(state, 'new.json'), 'w');
    await written.writeFile('{"w":1}');
    await written.close();
    expect(await readFile(path.join(state, 'new.json'), 'utf8')).toBe('{"w":1}');
    const numeric = await fs.open(file, constants.O_WRONLY | constants.O_TRUNC);
    await numeric.writeFile('{}');
    await numeric.close();
    expect(await readFile(file, 'utf8')).toBe('{}');
    const writeOnly = await fs.open(file, constants.O_WRONLY);
    await writeOnly.write(Buffer.from('[]'), 0, 2, 0);
    await writeOnly.close();
    expect(await readFile(file, 'utf8')).toBe('[]');
    // A read handle's close closes its descriptor.
    const read = await fs.open(file, constants.O_RDONLY);
    await read.close();
    expect(() => fstatSync(read.fd)).toThrow(expect.objectContaining({ code: 'EBADF' }));
    // An open that may create a file goes through the pool, as every write.
    pool.hold(dir!);
    expect(
      await settledSoon(fs.open(path.join(state, 'made.json'), constants.O_RDONLY | constants.O_CREAT)),
    ).toBe(PENDING);
  }, 10_000);

  it('readFile with an aborted signal is refused as node refuses it; with null options it reads the bytes', async () => {
    const { state, fs } = await world(localTable);
    const file = path.join(state, 'state.json');
    await expect(
      fs.readFile(file, { encoding: 'utf8', signal: AbortSignal.abort() } as { encoding: 'utf8' }),
    ).rejects.toMatchObject({ name: 'AbortError' });
    expect(((await fs.readFile(file, null as unknown as undefined)) as Buffer).toString()).toBe(
      '{"version":1}',
    );
    expect(await fs.readFile(file, { encoding: 'utf8' })).toBe('{"version":1}');
  });

  it('access answers for a file there and refuses one that is not', async () => {
    const { state, fs } = await world(localTable);
    await expect(fs.access?.(path.join(state, 'state.json'), constants.R_OK)).resolves.toBeUndefined();
    await expect(fs.access?.(path.join(state, 'absent.json'))).rejects.toMatchObject({ code: 'ENOENT' });
  });

  it('a mount table that cannot be read: rootDir and stateDir through the pool, no synchronous lstat', async () => {
    const { root, state, fs } = await world({
      realpath: async (file) => file,
      mountinfo: () => Promise.reject(new Error('no table')),
    });
    expect(fs.lstatSync).toBeUndefined();
    pool.hold(dir!);
    expect(await settledSoon(fs.stat(root))).toBe(PENDING);
    expect(await settledSoon(readStateDirFile(fs, state, 'state.json'))).toBe(PENDING);
  }, 10_000);

  it('a recheck whose mount table cannot be read takes back what the first check allowed', async () => {
    let now = 0;
    let readable = true;
    const { root, state, fs } = await world(
      {
        realpath: async (file) => file,
        mountinfo: () => (readable ? Promise.resolve(ext4) : Promise.reject(new Error('no table'))),
      },
      { monotonic: () => now },
    );
    expect(fs.lstatSync).toBeDefined();
    readable = false;
    now = 60_000;
    // Asking starts the recheck in the background; it settles within a turn or two.
    void fs.lstatSync;
    await new Promise((resolve) => setTimeout(resolve, 10));
    expect(fs.lstatSync).toBeUndefined();
    pool.hold(dir!);
    expect(await settledSoon(fs.stat(root))).toBe(PENDING);
    expect(await settledSoon(readStateDirFile(fs, state, 'state.json'))).toBe(PENDING);
  }, 10_000);

  it('no recheck until more than RECHECK_MS have passed since the last one (10 s exactly is not more)', async () => {
    let now = 100_000;
    let readable = true;
    const { fs } = await world(
      {
        realpath: async (file) => file,
        mountinfo: () => (readable ? Promise.resolve(ext4) : Promise.reject(new Error('no table'))),
      },
      { monotonic: () => now },
    );
    readable = false;
    for (const later of [100_001, 110_000]) {
      now = later;
      void fs.lstatSync;
      await new Promise((resolve) => setTimeout(resolve, 10));
      expect(fs.lstatSync, `at ${later}`).toBeDefined();
    }
  });

  it("start-up's checks with a table given: ownPathsPort's calls answer, its table is the one read", async () => {
    dir = await mkdtemp(path.join(os.tmpdir(), 'config-agent-mut28-'));
    const file = path.join(dir, 'config.json');
    await writeFile(file, '{}');
    const table = [
      readFileSync('/proc/self/mountinfo', 'utf8'),
      '99 1 0:99 / /srv/nfs rw - nfs4 src rw',
    ].join('\n');
    const { fs, ownPathsPort } = await hangSafeConfigCalls(
      new MountLanes({ sleep: async () => undefined }),
      undefined,
      { mountinfo: async () => table },
    );
    expect((await fs.stat(file)).size).toBe(2);
    expect(await ownPathsPort.realpath(file)).toBe(file);
    await expect(ownPathsPort.readlink(file)).rejects.toMatchObject({ code: 'EINVAL' });
    expect((await ownPathsPort.stat(file)).ino).toBe(statSync(file).ino);
    expect(await ownPathsPort.mountinfo()).toBe(table);
  });
});
