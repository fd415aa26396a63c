// A content-cache entry of another length than the one asked for is refused unread: a planted huge entry costs nothing.
import nodeFs, { mkdtemp, rm, stat, truncate } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { CACHE_DIR, ContentCache } from './content-cache.js';

const made: string[] = [];
afterEach(async () => {
  for (const dir of made.splice(0)) await rm(dir, { recursive: true, force: true });
});

async function world() {
  const state = await mkdtemp(path.join(os.tmpdir(), 'config-agent-cache-adv30-'));
  made.push(state);
  return {
    cache: new ContentCache(nodeFs, state),
    entry: (name: string) => path.join(state, CACHE_DIR, name),
  };
}

const TEXT = Buffer.from('listen 80;\n');
/** Sparse: no block of it is written, so planting it costs nothing; reading it whole would cost 64 GiB. */
const HUGE = 64 * 1024 ** 3;

describe('ContentCache.get bounded by the size the caller knows (adv30)', () => {
  it('a sparse 64 GiB file planted at an entry name: absent, deleted unread, and the next put serves again', async () => {
    const { cache, entry } = await world();
    const name = await cache.put(TEXT);
    await truncate(entry(name), HUGE);

    // Before, the whole entry was read first (here past Node's 2 GiB buffer limit: ERR_FS_FILE_TOO_LARGE).
    expect(await cache.get(name, TEXT.length)).toBeUndefined();
    await expect(stat(entry(name))).rejects.toMatchObject({ code: 'ENOENT' });

    await cache.put(TEXT);
    expect(await cache.get(name, TEXT.length)).toEqual(TEXT);
  });

  it('an entry of the right length but other bytes is still refused by its hash, and deleted', async () => {
    const { cache, entry } = await world();
    const name = await cache.put(TEXT);
    await nodeFs.writeFile(entry(name), Buffer.from('listen 81;\n'));
    expect(await cache.get(name, TEXT.length)).toBeUndefined();
    await expect(stat(entry(name))).rejects.toMatchObject({ code: 'ENOENT' });
  });

  it('an entry shorter than asked for (torn by a power cut): absent, deleted', async () => {
    const { cache, entry } = await world();
    const name = await cache.put(TEXT);
    await truncate(entry(name), 4);
    expect(await cache.get(name, TEXT.length)).toBeUndefined();
    await expect(stat(entry(name))).rejects.toMatchObject({ code: 'ENOENT' });
  });

  it('without a size (a record made before sizes were kept) the entry is read and checked as before', async () => {
    const { cache } = await world();
    const name = await cache.put(TEXT);
    expect(await cache.get(name)).toEqual(TEXT);
    expect(await cache.get(name, TEXT.length)).toEqual(TEXT);
  });
});
