// A managed file whose bytes cannot be read back (EIO: a bad block of that file) is replaced, not kept for good.
import { constants } from 'node:fs';
import { createFsFromVolume, Volume } from 'memfs';
import { describe, expect, it } from 'vitest';
import type { FsPort } from '../lib/fs-port.js';
import { publishFile, publishText } from './durable-writer.js';

const ROOT = '/srv/root';

/** memfs where every read of `name` opened read-only fails with EIO, as a file on a bad block does for good. */
function unreadable(files: Record<string, string>, name: string) {
  const vol = Volume.fromJSON({ [`${ROOT}/.keep`]: '', ...files });
  const base = createFsFromVolume(vol).promises as unknown as FsPort;
  let failedReads = 0;
  const fs: FsPort = {
    ...base,
    open: (async (file: string, flags: number, mode?: number) => {
      const handle = await base.open(file, flags, mode);
      if (!String(file).endsWith(`/${name}`) || (flags & (constants.O_WRONLY | constants.O_RDWR)) !== 0) {
        return handle;
      }
      const fail = async () => {
        failedReads += 1;
        throw Object.assign(new Error('EIO: i/o error, read'), { code: 'EIO' });
      };
      return Object.assign(handle, { read: fail, readFile: fail });
    }) as FsPort['open'],
  };
  return { fs, vol, failedReads: () => failedReads };
}

describe('a file in place that cannot be read', () => {
  it.each([
    ['other bytes of the same size', 'abce'],
    ['the same bytes', 'abcd'],
  ])('publishFile replaces it when the new file holds %s (it threw EIO, every pass)', async (_what, text) => {
    const { fs, vol, failedReads } = unreadable({ [`${ROOT}/app.conf`]: 'abcd' }, 'app.conf');
    const before = vol.statSync(`${ROOT}/app.conf`).ino;
    const result = await publishFile(fs, {
      rootDir: ROOT,
      relativePath: 'app.conf',
      data: Buffer.from(text),
      mode: 0o644,
      dirMode: 0o755,
    });
    expect(result.outcome).toBe('written');
    expect(vol.readFileSync(`${ROOT}/app.conf`, 'utf8')).toBe(text);
    expect(vol.statSync(`${ROOT}/app.conf`).ino).not.toBe(before);
    expect(failedReads()).toBe(1);
  });

  it('publishText replaces it too (the state files compared a chunk at a time)', async () => {
    const { fs, vol, failedReads } = unreadable({ [`${ROOT}/state.json`]: '{"a":1}' }, 'state.json');
    const result = await publishText(fs, {
      rootDir: ROOT,
      relativePath: 'state.json',
      pieces: () => ['{"a":', '1}'],
      mode: 0o600,
      dirMode: 0o700,
    });
    expect(result.outcome).toBe('written');
    expect(vol.readFileSync(`${ROOT}/state.json`, 'utf8')).toBe('{"a":1}');
    expect(failedReads()).toBe(1);
  });
});
