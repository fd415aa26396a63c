// A write(2) that takes no bytes (a FUSE filesystem answering 0 written) is an I/O error for the writer, never
// a loop: real fs, the port's handles answer 0 bytes written.
import * as nodeFs from 'node:fs/promises';
import { mkdir, mkdtemp, readdir, rm } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import type { FsPort } from '../lib/fs-port.js';
import { publishFile } from './durable-writer.js';
import { DiskError } from './errors.js';
import { VerifiedDirectories } from './path-guard.js';

let dir: string;
let root: string;

beforeEach(async () => {
  dir = await mkdtemp(path.join(os.tmpdir(), 'config-agent-zero-write-'));
  root = path.join(dir, 'root');
  await mkdir(root);
});

afterEach(async () => {
  await rm(dir, { recursive: true, force: true });
});

/** Real fs whose file handles write nothing and say so (0 bytes); past 1,000 such calls they throw ESPUN. */
function writesNothing(): { fs: FsPort; calls: () => number } {
  let calls = 0;
  const fs = {
    ...nodeFs,
    open: (async (...args: Parameters<typeof nodeFs.open>) => {
      const handle = await nodeFs.open(...args);
      return Object.assign(handle, {
        write: async (buffer: Uint8Array) => {
          calls++;
          if (calls > 1_000) throw Object.assign(new Error('spun on 0-byte writes'), { code: 'ESPUN' });
          return { bytesWritten: 0, buffer };
        },
      });
    }) as typeof nodeFs.open,
  } as FsPort;
  return { fs, calls: () => calls };
}

describe('a write that takes no bytes', () => {
  it('fails the publish as an I/O error (EIO) at once, leaving no temp file and no file', async () => {
    const { fs, calls } = writesNothing();
    const error = await publishFile(fs, {
      rootDir: root,
      relativePath: 'app.json',
      data: Buffer.from('{"v":1}\n'),
      mode: 0o644,
      dirMode: 0o755,
      verified: new VerifiedDirectories(process.geteuid?.() ?? 0),
    }).then(
      () => undefined,
      (caught: unknown) => caught,
    );
    expect(error).toBeInstanceOf(DiskError);
    expect(error).toMatchObject({ errno: 'EIO' });
    expect(calls()).toBe(1);
    expect(await readdir(root)).toEqual([]);
  });
});
