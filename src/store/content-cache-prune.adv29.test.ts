// The content cache's prune goes on past an entry it cannot delete: one stuck name no longer keeps every later one.
import { createFsFromVolume, Volume } from 'memfs';
import { describe, expect, it } from 'vitest';
import type { FsPort } from '../lib/fs-port.js';
import { CACHE_DIR, ContentCache } from './content-cache.js';

const STATE = '/var/lib/config-agent';
const CACHE = `${STATE}/${CACHE_DIR}`;
/** A name of an entry's shape that sorts before every sha256 of real bytes (readdir's order on memfs). */
const FIRST = '0'.repeat(64);

/** memfs, with an unlink that fails as told for the names in `failing` (EIO: a bad block on a worn card). */
function world(failing: ReadonlyMap<string, string> = new Map()) {
  const vol = Volume.fromJSON({});
  vol.mkdirSync(CACHE, { recursive: true, mode: 0o700 });
  const base = createFsFromVolume(vol).promises as unknown as FsPort;
  const fs = new Proxy(base, {
    get(target, key, receiver) {
      if (key !== 'unlink') return Reflect.get(target, key, receiver);
      return async (file: string) => {
        const code = failing.get(file.slice(CACHE.length + 1));
        if (code !== undefined) throw Object.assign(new Error(`${code}: simulated unlink`), { code });
        return target.unlink(file);
      };
    },
  });
  return { vol, cache: new ContentCache(fs, STATE) };
}

describe('ContentCache.prune past an entry it cannot delete (adv29)', () => {
  it('a directory at an entry name: every other stale entry is still deleted, and the prune says it failed', async () => {
    const { vol, cache } = world();
    const kept = await cache.put(Buffer.from('kept'));
    const stale = [];
    for (let n = 0; n < 5; n += 1) stale.push(await cache.put(Buffer.from(`old version ${n}`)));
    // Not the agent's making (a hand's mkdir, a damaged file system): unlink answers EISDIR (Linux) or EPERM (memfs).
    vol.mkdirSync(`${CACHE}/${FIRST}`);
    await expect(cache.prune(new Set([kept]))).rejects.toMatchObject({
      code: expect.stringMatching(/^(EISDIR|EPERM)$/),
    });
    expect(vol.readdirSync(CACHE)).toEqual([FIRST, kept].sort());
  });

  it('an entry whose unlink fails (EIO) costs only itself; one gone meanwhile (ENOENT) is no failure', async () => {
    const { vol, cache } = world(new Map([[FIRST, 'EIO']]));
    const kept = await cache.put(Buffer.from('kept'));
    const stale = [];
    for (let n = 0; n < 5; n += 1) stale.push(await cache.put(Buffer.from(`old version ${n}`)));
    vol.writeFileSync(`${CACHE}/${FIRST}`, 'an entry on a bad block');
    await expect(cache.prune(new Set([kept]))).rejects.toMatchObject({ code: 'EIO' });
    expect(vol.readdirSync(CACHE)).toEqual([FIRST, kept].sort());

    // Removed by other hands between the listing and the unlink: nothing to do, nothing failed.
    const gone = world(new Map([[FIRST, 'ENOENT']]));
    const keptToo = await gone.cache.put(Buffer.from('kept'));
    await gone.cache.put(Buffer.from('old'));
    gone.vol.writeFileSync(`${CACHE}/${FIRST}`, 'stale');
    expect(await gone.cache.prune(new Set([keptToo]))).toBe(1);
    expect(gone.vol.readdirSync(CACHE)).toEqual([FIRST, keptToo].sort());
  });
});
