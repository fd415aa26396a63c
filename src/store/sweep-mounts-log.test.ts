// The start-up sweep's log of the mounts below rootDir it does not enter: said to be on purpose, apart from real skips.
import * as nodeFs from 'node:fs/promises';
import { mkdir, mkdtemp, readdir, rm, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { Writable } from 'node:stream';
import { pino } from 'pino';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import type { FsPort } from '../lib/fs-port.js';
import { TEMP_PREFIX } from './path-guard.js';
import { StateDir } from './state-dir.js';

let dir: string;
let settings: { stateDir: string; rootDir: string; deviceId: string };

beforeEach(async () => {
  dir = await mkdtemp(path.join(os.tmpdir(), 'sweep-mounts-log-'));
  settings = { stateDir: path.join(dir, 'state'), rootDir: path.join(dir, 'root'), deviceId: 'dvc_mounts' };
  await mkdir(settings.stateDir, { mode: 0o700 });
  await mkdir(path.join(settings.rootDir, 'share'), { recursive: true });
  await mkdir(path.join(settings.rootDir, 'app'));
});

afterEach(async () => {
  await rm(dir, { recursive: true, force: true });
});

/** Opens the state directory with `share` below rootDir taken for a mount that may hang; returns the log lines. */
async function openWithMount(base: FsPort = nodeFs): Promise<Array<Record<string, unknown>>> {
  const lines: Array<Record<string, unknown>> = [];
  const logger = pino(
    { level: 'debug' },
    new Writable({
      write(chunk, _encoding, done) {
        for (const line of String(chunk).split('\n')) if (line !== '') lines.push(JSON.parse(line));
        done();
      },
    }),
  );
  const fs: FsPort = {
    ...base,
    mountsThatMayHangBelow: (at) => (at === settings.rootDir ? new Set(['share']) : new Set()),
  };
  await (await StateDir.open(fs, settings, logger, { clock: { now: () => 0 } })).close();
  return lines.filter((line) => typeof line.msg === 'string' && /sweep/.test(line.msg as string));
}

describe('the start-up sweep and a mount below rootDir it skips on purpose', () => {
  it('logs it as skipped on purpose, with why, and not as an entry it could not read or remove', async () => {
    await writeFile(path.join(settings.rootDir, 'share', `${TEMP_PREFIX}left`), 'x');
    await writeFile(path.join(settings.rootDir, 'app', `${TEMP_PREFIX}left`), 'x');
    const lines = await openWithMount();
    expect(lines.map((line) => [line.level, line.msg, line.mounts])).toEqual([
      [
        30,
        'the start-up sweep did not enter these mounts below rootDir, on purpose: a network or FUSE filesystem ' +
          'may hang, and a hung one would stop the agent from starting; a temp file a crash left inside one stays ' +
          '(it costs only its bytes)',
        ['share'],
      ],
    ]);
    // Not entered, so its leftover stays; the one beside it is swept as before.
    expect(await readdir(path.join(settings.rootDir, 'share'))).toEqual([`${TEMP_PREFIX}left`]);
    expect(await readdir(path.join(settings.rootDir, 'app'))).toEqual([]);
  });

  it('an entry it could not remove beside it is still a warning of its own, naming only that entry', async () => {
    await writeFile(path.join(settings.rootDir, 'app', `${TEMP_PREFIX}stuck`), 'x');
    const lines = await openWithMount({
      ...nodeFs,
      unlink: (async (file: string) => {
        if (String(file).endsWith('stuck')) throw Object.assign(new Error('EPERM'), { code: 'EPERM' });
        return nodeFs.unlink(file);
      }) as FsPort['unlink'],
    });
    expect(lines.map((line) => [line.level, line.mounts ?? line.skipped])).toEqual([
      [30, ['share']],
      [
        40,
        [
          {
            path: `app/${TEMP_PREFIX}stuck`,
            operation: 'unlink temp file',
            errno: 'EPERM',
            under: 'rootDir',
          },
        ],
      ],
    ]);
    expect(lines[1]?.msg).toBe(
      'the start-up sweep of temp files could not read or remove some entries: left as they are, started anyway',
    );
  });
});
