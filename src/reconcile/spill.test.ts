// FileSpill on memfs: bytes held in memory up to the budget, then set aside in the content cache, or held when
// the cache cannot take them.
import { createFsFromVolume, Volume } from 'memfs';
import { describe, expect, it } from 'vitest';
import { instanceFactory } from '../../test/helpers/instances.js';
import type { FsPort } from '../lib/fs-port.js';
import { sha256Hex } from '../lib/hash.js';
import { silentLogger } from '../lib/logger.js';
import { CACHE_DIR, ContentCache } from '../store/content-cache.js';
import type { PlanInstance } from './plan.js';
import { FileSpill } from './spill.js';

const STATE = '/var/lib/config-agent';
const makeInstance = instanceFactory({ relative_filepath: 'app/config.json' });
/** `{ "n": 1 }` as the agent writes it: 13 bytes. */
const bytesOf = (n: number) => Buffer.from(`${JSON.stringify({ n }, null, 2)}\n`);

function world(options: { cacheWritable?: boolean } = {}) {
  const vol = Volume.fromJSON({});
  vol.mkdirSync(STATE, { recursive: true });
  // A file where the cache directory goes: every put fails (ENOTDIR / EEXIST), as a broken state dir would.
  if (options.cacheWritable === false) vol.writeFileSync(`${STATE}/${CACHE_DIR}`, 'not a directory');
  const fs = createFsFromVolume(vol).promises as unknown as FsPort;
  return { vol, cache: new ContentCache(fs, STATE) };
}

function fileOfHeld(held: PlanInstance) {
  if (!('file' in held)) throw new Error('expected the bytes of the file, not the content');
  expect('content' in held).toBe(false);
  return held.file;
}

describe('FileSpill', () => {
  it('holds bytes up to the budget, then sets each next file aside under its sha256', async () => {
    const { vol, cache } = world();
    // Room for two files of 13 bytes, not three.
    const spill = new FileSpill(cache, silentLogger(), 26);

    const held = await Promise.all(
      [1, 2, 3].map((n) => spill.prepare(makeInstance({ id: `cfg_${n}`, content: { n } }))),
    );

    const files = held.map(fileOfHeld);
    expect(files.map((file) => file.sha256)).toEqual([1, 2, 3].map((n) => sha256Hex(bytesOf(n))));
    expect(files.map((file) => file.data)).toEqual([bytesOf(1), bytesOf(2), undefined]);
    // The size of bytes set aside goes with them: apply bounds what it reads back at once.
    expect(files.map((file) => file.size)).toEqual([undefined, undefined, bytesOf(3).length]);
    expect(vol.readdirSync(`${STATE}/${CACHE_DIR}`)).toEqual([sha256Hex(bytesOf(3))]);
    expect(await cache.get(sha256Hex(bytesOf(3)))).toEqual(bytesOf(3));
  });

  it('an entry of the right size already there is not read back or rewritten (apply checks its bytes)', async () => {
    const { vol, cache } = world();
    const spill = new FileSpill(cache, silentLogger(), 0);
    const name = sha256Hex(bytesOf(1));
    // Same size as the real bytes, other bytes: what a full pass would rewrite if it compared them.
    const planted = Buffer.from(bytesOf(1).toString().replace('1', '9'));
    vol.mkdirSync(`${STATE}/${CACHE_DIR}`, { recursive: true });
    vol.writeFileSync(`${STATE}/${CACHE_DIR}/${name}`, planted);

    const held = fileOfHeld(await spill.prepare(makeInstance({ id: 'cfg_1', content: { n: 1 } })));

    expect(held).toEqual({ sha256: name, size: bytesOf(1).length });
    expect(vol.readFileSync(`${STATE}/${CACHE_DIR}/${name}`)).toEqual(planted);
  });

  it('an entry of another size at the name is replaced by the bytes', async () => {
    const { vol, cache } = world();
    const spill = new FileSpill(cache, silentLogger(), 0);
    const name = sha256Hex(bytesOf(1));
    vol.mkdirSync(`${STATE}/${CACHE_DIR}`, { recursive: true });
    vol.writeFileSync(`${STATE}/${CACHE_DIR}/${name}`, 'torn');

    const held = fileOfHeld(await spill.prepare(makeInstance({ id: 'cfg_1', content: { n: 1 } })));

    expect(held).toEqual({ sha256: name, size: bytesOf(1).length });
    expect(vol.readFileSync(`${STATE}/${CACHE_DIR}/${name}`)).toEqual(bytesOf(1));
  });

  it('a cache that cannot take the bytes: they stay in memory, and nothing is lost', async () => {
    const { cache } = world({ cacheWritable: false });
    const spill = new FileSpill(cache, silentLogger(), 0);

    const held = fileOfHeld(await spill.prepare(makeInstance({ id: 'cfg_1', content: { n: 1 } })));

    expect(held).toEqual({ data: bytesOf(1), sha256: sha256Hex(bytesOf(1)) });
  });
});
