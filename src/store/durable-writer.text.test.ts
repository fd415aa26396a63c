// publishText / writeDurableText: a text given in pieces, published with publishFile's protocol and answers.
import path from 'node:path';
import { createFsFromVolume, Volume } from 'memfs';
import { describe, expect, it } from 'vitest';
import { PowerCutFs } from '../../test/helpers/power-cut-fs.js';
import type { FileHandle, FsPort } from '../lib/fs-port.js';
import { sha256Hex } from '../lib/hash.js';
import { publishFile, publishText, writeDurableText } from './durable-writer.js';
import { TEMP_PREFIX } from './path-guard.js';

const ROOT = '/srv/root';

function memfs(files: Record<string, string> = {}) {
  const vol = Volume.fromJSON({ [`${ROOT}/.keep`]: '', ...files });
  return { vol, fs: createFsFromVolume(vol).promises as unknown as FsPort };
}

/** `fs` whose handles on temp files fail `sync` with EIO. */
function failingTempFsync(base: FsPort): FsPort {
  return {
    ...base,
    open: (async (file: string, flags: number, mode?: number) => {
      const handle = await base.open(file, flags, mode);
      if (!path.basename(String(file)).startsWith(TEMP_PREFIX)) return handle;
      return new Proxy(handle, {
        get(target, property, receiver) {
          const value = Reflect.get(target, property, receiver) as unknown;
          if (property === 'sync') {
            return () => Promise.reject(Object.assign(new Error('EIO: injected'), { code: 'EIO' }));
          }
          return typeof value === 'function' ? (value as () => unknown).bind(target) : value;
        },
      }) as FileHandle;
    }) as FsPort['open'],
  };
}

/** Pieces of `text`: cut at the given lengths (one more where that would split a surrogate pair), then the rest. */
function cut(text: string, lengths: number[]): () => Iterable<string> {
  return () => {
    const pieces: string[] = [];
    let at = 0;
    for (const wanted of lengths) {
      const code = text.charCodeAt(at + wanted - 1);
      const length = code >= 0xd800 && code <= 0xdbff ? wanted + 1 : wanted;
      pieces.push(text.slice(at, at + length));
      at += length;
    }
    pieces.push(text.slice(at));
    return pieces;
  };
}

function request(relativePath: string, text: string, lengths: number[] = [], mode = 0o600) {
  return { rootDir: ROOT, relativePath, pieces: cut(text, lengths), mode, dirMode: 0o755 };
}

/** A text of `bytes` bytes, several chunks of 64 KiB long when large, with multi-byte characters in it. */
function largeText(bytes: number, seed: string): string {
  const line = `${seed} é ✓ 𝄞 `;
  return line.repeat(Math.ceil(bytes / Buffer.byteLength(line))).slice(0, bytes);
}

describe('publishText', () => {
  it('the file holds the pieces joined, whatever their sizes and the 64 KiB chunks', async () => {
    const texts = ['', 'short', largeText(200_000, 'a'), largeText(64 * 1024 * 3 + 1, 'b')];
    for (const [index, text] of texts.entries()) {
      const { fs, vol } = memfs();
      // One piece, pieces of one character, pieces across the chunk boundary, one piece larger than a chunk.
      const splits = [[], Array.from({ length: 50 }, () => 1), [65_535, 2, 70_000], [100_000]];
      for (const [at, lengths] of splits.entries()) {
        const name = `t${index}-${at}.txt`;
        const result = await publishText(fs, request(name, text, lengths));
        expect(vol.readFileSync(`${ROOT}/${name}`, 'utf8')).toBe(text);
        expect(result).toMatchObject({ outcome: 'written', bytes: Buffer.byteLength(text) });
        expect(result.sha256).toBe(sha256Hex(Buffer.from(text)));
      }
    }
  });

  it('the same bytes are not rewritten (inode kept), whichever way they are cut; any other bytes are', async () => {
    const text = largeText(150_000, 'same');
    const { fs, vol } = memfs({ [`${ROOT}/state.json`]: text });
    vol.chmodSync(`${ROOT}/state.json`, 0o600);
    const inode = vol.statSync(`${ROOT}/state.json`).ino;
    for (const lengths of [[], [1, 2, 3], [65_536, 65_536]]) {
      const result = await publishText(fs, request('state.json', text, lengths));
      expect(result).toMatchObject({
        outcome: 'unchanged',
        bytes: Buffer.byteLength(text),
        sha256: sha256Hex(Buffer.from(text)),
      });
      expect(vol.statSync(`${ROOT}/state.json`).ino).toBe(inode);
    }
    // Longer, shorter, one byte changed in the last chunk, in the first.
    const others = [`${text}x`, text.slice(0, -1), `${text.slice(0, -1)}!`, `!${text.slice(1)}`];
    for (const other of others) {
      const before = vol.statSync(`${ROOT}/state.json`).ino;
      expect((await publishText(fs, request('state.json', other, [70_000]))).outcome).toBe('written');
      expect(vol.readFileSync(`${ROOT}/state.json`, 'utf8')).toBe(other);
      expect(vol.statSync(`${ROOT}/state.json`).ino).not.toBe(before);
    }
  });

  it('the same bytes under another mode: only the mode changes, in place', async () => {
    const { fs, vol } = memfs({ [`${ROOT}/state.json`]: 'text' });
    vol.chmodSync(`${ROOT}/state.json`, 0o644);
    const inode = vol.statSync(`${ROOT}/state.json`).ino;
    expect((await publishText(fs, request('state.json', 'text', [2]))).outcome).toBe('metadata');
    expect(vol.statSync(`${ROOT}/state.json`).mode & 0o7777).toBe(0o600);
    expect(vol.statSync(`${ROOT}/state.json`).ino).toBe(inode);
  });

  it('after a power cut the path holds the old text or the new one whole: new once published, old if its fsync failed', async () => {
    const old = largeText(100_000, 'old');
    const next = largeText(180_000, 'new');
    const { fs } = memfs({ [`${ROOT}/state.json`]: old });
    const model = await PowerCutFs.over(fs, ROOT);
    await expect(
      publishText(failingTempFsync(model.fs), request('state.json', next, [65_000])),
    ).rejects.toThrow();
    expect(model.afterPowerCut()['state.json']).toBe(`666 ${old}`);
    expect(Object.keys(model.afterPowerCut())).toEqual(['.keep', 'state.json']);

    await publishText(model.fs, request('state.json', next, [65_000]));
    expect(model.afterPowerCut()['state.json']).toBe(`600 ${next}`);
  });

  it('answers as publishFile does for the same bytes', async () => {
    const text = largeText(70_000, 'x');
    const { fs } = memfs();
    const data = Buffer.from(text);
    const asBytes = await publishFile(fs, { ...request('a/b/f', text), data });
    const { fs: other } = memfs();
    const asText = await publishText(other, request('a/b/f', text, [10]));
    expect(asText).toEqual(asBytes);
  });
});

describe('writeDurableText', () => {
  it('writes the file owner-only and durably into the state directory', async () => {
    const { fs, vol } = memfs();
    vol.mkdirSync(`${ROOT}/state`, { mode: 0o700 });
    const model = await PowerCutFs.over(fs, ROOT);
    await writeDurableText(model.fs, `${ROOT}/state`, 'state.json', cut('{"a":1}\n', [3]));
    expect(model.afterPowerCut()).toEqual({
      '.keep': '666 ',
      state: 'dir',
      'state/state.json': '600 {"a":1}\n',
    });
  });
});
