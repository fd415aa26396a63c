// Reading stateDir files on a real temp dir: what readStateDirFile returns, the errors it throws (errno,
// retryable, message), the descriptors it leaves open, and the shapes of state.json that load as corrupt.
import { execFileSync } from 'node:child_process';
import * as nodeFs from 'node:fs/promises';
import { mkdir, mkdtemp, rm, writeFile } from 'node:fs/promises';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import type { FileHandle, FsPort } from '../lib/fs-port.js';
import { silentLogger } from '../lib/logger.js';
import { StateDirError } from './errors.js';
import { emptyState, loadLocalState, readStateDirFile, STATE_FILE, serializeLocalState } from './state.js';

let dir: string;

beforeEach(async () => {
  dir = await mkdtemp(path.join(os.tmpdir(), 'state-mutants-'));
});

/** Unix sockets bound at a state file's name, kept listening while the test runs (closing one unlinks it). */
const listening: net.Server[] = [];

afterEach(async () => {
  for (const server of listening.splice(0)) await new Promise((done) => server.close(done));
  await rm(dir, { recursive: true, force: true });
});

/** A unix socket at `at`, as a local user's server could leave one (open(2) answers ENXIO). */
async function bindSocket(at: string): Promise<void> {
  const server = net.createServer();
  listening.push(server);
  await new Promise<void>((done, fail) => server.once('error', fail).listen(at, done));
}

/**
 * The real fs, keeping every handle it opened until that handle is closed: `handles.size` is the number of
 * descriptors left open. `failRead` makes every handle's readFile fail with EIO.
 */
function countingFs(failRead = false): FsPort & { open: FsPort['open']; handles: Set<FileHandle> } {
  const handles = new Set<FileHandle>();
  const open = (async (...args: Parameters<typeof nodeFs.open>) => {
    const handle = await nodeFs.open(...args);
    handles.add(handle);
    const close = handle.close.bind(handle);
    handle.close = async () => {
      await close();
      handles.delete(handle);
    };
    if (failRead) {
      handle.readFile = (async () => {
        throw Object.assign(new Error('EIO: simulated'), { code: 'EIO' });
      }) as FileHandle['readFile'];
    }
    return handle;
  }) as FsPort['open'];
  return { ...nodeFs, open, handles };
}

describe('readStateDirFile', () => {
  it('returns the text of the file (a string, not bytes), undefined when there is none, and closes what it opened', async () => {
    await writeFile(path.join(dir, 'some.json'), '{"a":"é"}\n');
    const fs = countingFs();
    const text = await readStateDirFile(fs, dir, 'some.json');
    expect(text).toBe('{"a":"é"}\n');
    expect(typeof text).toBe('string');
    expect(await readStateDirFile(fs, dir, 'absent.json')).toBeUndefined();
    expect(fs.handles.size).toBe(0);
  });

  it.each([
    ['a directory', (at: string) => mkdir(at)],
    ['a FIFO', async (at: string) => void execFileSync('mkfifo', [at])],
    // open(2) refuses a socket before any fstat (ENXIO): it was retried for good as a failing disk, exit 1 (adv36).
    ['a socket', bindSocket],
  ])(
    '%s in its place: named as such, not retryable (an operator must fix it), nothing left open',
    async (kind, make) => {
      await make(path.join(dir, STATE_FILE));
      const fs = countingFs();
      const error = await loadLocalState(fs, dir, 'dvc_1', silentLogger()).catch((e: unknown) => e);
      expect(error).toBeInstanceOf(StateDirError);
      expect(error).toMatchObject({
        code: 'state_dir_unusable',
        errno: 'EISDIR',
        retryable: false,
        stateDir: dir,
        message: `stateDir ${dir} is not usable: cannot read ${STATE_FILE}: it is ${kind}, not a regular file (remove it or move it aside)`,
      });
      expect((error as StateDirError).cause).toMatchObject({ code: 'EISDIR', message: 'not a regular file' });
      expect(fs.handles.size).toBe(0);
    },
  );

  it('a failed read names stateDir, the file and the errno in words, is retryable, and leaves nothing open', async () => {
    await writeFile(path.join(dir, STATE_FILE), '{}');
    const fs = countingFs(true);
    const error = await loadLocalState(fs, dir, 'dvc_1', silentLogger()).catch((e: unknown) => e);
    expect(error).toMatchObject({
      code: 'state_dir_unusable',
      errno: 'EIO',
      retryable: true,
      message: `stateDir ${dir} is not usable: cannot read ${STATE_FILE}: input/output error (EIO)`,
    });
    expect(fs.handles.size).toBe(0);
  });

  it('ENXIO opening a regular file (its disk gone) is still a failing disk: retryable, named by its errno', async () => {
    await writeFile(path.join(dir, STATE_FILE), '{}');
    const fs = {
      ...nodeFs,
      open: (async () => {
        throw Object.assign(new Error('ENXIO: simulated'), { code: 'ENXIO' });
      }) as FsPort['open'],
    };
    const error = await loadLocalState(fs, dir, 'dvc_1', silentLogger()).catch((e: unknown) => e);
    expect(error).toMatchObject({
      code: 'state_dir_unusable',
      errno: 'ENXIO',
      retryable: true,
      stateDir: dir,
    });
  });

  it('many loads in a row leave no descriptor open', async () => {
    await writeFile(path.join(dir, STATE_FILE), JSON.stringify(serializeLocalState(emptyState('dvc_1'))));
    const fs = countingFs();
    for (let k = 0; k < 20; k += 1) {
      expect((await loadLocalState(fs, dir, 'dvc_1', silentLogger())).outcome).toBe('loaded');
    }
    expect(fs.handles.size).toBe(0);
  });
});

describe('loadLocalState: files and instances must be JSON objects', () => {
  const valid = serializeLocalState(emptyState('dvc_1'));
  it.each([
    ['files as a number', { ...valid, files: 5 }],
    ['files as an empty string', { ...valid, files: '' }],
    ['files as an empty array', { ...valid, files: [] }],
    ['files as false', { ...valid, files: false }],
    ['instances as a number', { ...valid, instances: 0 }],
    ['instances as an empty string', { ...valid, instances: '' }],
    ['instances as an empty array', { ...valid, instances: [] }],
  ])('%s loads as corrupt and empty', async (_name, content) => {
    await writeFile(path.join(dir, STATE_FILE), JSON.stringify(content));
    const { state, outcome } = await loadLocalState(nodeFs, dir, 'dvc_1', silentLogger());
    expect(outcome).toBe('corrupt');
    expect(state).toEqual(emptyState('dvc_1'));
  });

  it('an instance keeps its report echo through a round trip; an echo missing a field is corrupt', async () => {
    const state = emptyState('dvc_1');
    const reportEcho = {
      updatedAt: '2026-03-01T12:00:00.000Z',
      operatorUpdatedAt: '2026-02-01T00:00:00.000Z',
      awaiting: 'deployed/none',
      version: `${'v'.repeat(43)}=`,
    };
    state.instances.set('cfg_a', {
      relativePath: 'a.json',
      activity: 'deployed',
      error: 'none',
      attempts: 0,
      reportEcho,
    });
    const file = serializeLocalState(state);
    await writeFile(path.join(dir, STATE_FILE), JSON.stringify(file));
    const loaded = await loadLocalState(nodeFs, dir, 'dvc_1', silentLogger());
    expect(loaded.state.instances.get('cfg_a')?.reportEcho).toEqual(reportEcho);

    const partial = {
      ...file,
      instances: { cfg_a: { ...file.instances.cfg_a, reportEcho: { updatedAt: 'x' } } },
    };
    await writeFile(path.join(dir, STATE_FILE), JSON.stringify(partial));
    expect((await loadLocalState(nodeFs, dir, 'dvc_1', silentLogger())).outcome).toBe('corrupt');
  });

  it('empty objects load as an empty state', async () => {
    await writeFile(path.join(dir, STATE_FILE), JSON.stringify(valid));
    expect((await loadLocalState(nodeFs, dir, 'dvc_1', silentLogger())).outcome).toBe('loaded');
  });
});
