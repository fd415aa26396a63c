// Bytes of every file the agent published, by sha256, for the drift watcher's local restores.
import { randomBytes } from 'node:crypto';
import { constants } from 'node:fs';
import path from 'node:path';
import { errnoCode } from '../lib/errors.js';
import type { FsPort } from '../lib/fs-port.js';
import { sha256Hex } from '../lib/hash.js';
import { TEMP_PREFIX } from './path-guard.js';

export const CACHE_DIR = 'cache';
const SHA256_HEX = /^[0-9a-f]{64}$/;
const CREATE_FLAGS = constants.O_WRONLY | constants.O_CREAT | constants.O_EXCL | constants.O_NOFOLLOW;

/**
 * Entries are written without fsync or directory fsync: every read checks the bytes against the name, so an
 * entry a power cut tore or lost is simply absent (the drift watcher then asks for a pass, which rewrites the
 * file from the service). Nothing else reads the cache, and nothing is decided on the strength of an entry
 * existing: the durable record of a managed file is `state.json`, written with the durable protocol. Each
 * entry still goes through a temp file and a rename, so a reader never meets one half-written.
 */
export class ContentCache {
  readonly #fs: FsPort;
  readonly #dir: string;
  #made: Promise<unknown> | undefined;

  constructor(fs: FsPort, stateDir: string) {
    this.#fs = fs;
    this.#dir = path.join(stateDir, CACHE_DIR);
  }

  /** Stores `data` under its sha256 (replacing whatever entry of that name was there); returns the sha256. */
  async put(data: Uint8Array): Promise<string> {
    const sha256 = sha256Hex(data);
    for (let attempt = 0; ; attempt += 1) {
      await this.#ensureDir();
      try {
        await this.#write(path.join(this.#dir, sha256), data);
        return sha256;
      } catch (error) {
        // The directory went away since it was made (removed by hand): made again, once.
        if (errnoCode(error) !== 'ENOENT' || attempt > 0) throw error;
        this.#made = undefined;
      }
    }
  }

  /** Once per cache: every put of a pass would otherwise pay a mkdir that fails with EEXIST. */
  async #ensureDir(): Promise<void> {
    this.#made ??= this.#fs.mkdir(this.#dir, { recursive: true, mode: 0o700 });
    try {
      await this.#made;
    } catch (error) {
      this.#made = undefined;
      throw error;
    }
  }

  async #write(target: string, data: Uint8Array): Promise<void> {
    const temp = path.join(this.#dir, `${TEMP_PREFIX}${randomBytes(12).toString('hex')}`);
    const handle = await this.#fs.open(temp, CREATE_FLAGS, 0o600);
    try {
      await handle.writeFile(data);
      await handle.close();
      await this.#fs.rename(temp, target);
    } catch (error) {
      await handle.close().catch(() => undefined);
      await this.#fs.unlink(temp).catch(() => undefined);
      throw error;
    }
  }

  /** The cached bytes, or undefined when absent or when they no longer hash to their name. */
  async get(sha256: string): Promise<Buffer | undefined> {
    if (!SHA256_HEX.test(sha256)) return undefined;
    try {
      const data = (await this.#fs.readFile(path.join(this.#dir, sha256))) as Buffer;
      return sha256Hex(data) === sha256 ? data : undefined;
    } catch (error) {
      if (errnoCode(error) === 'ENOENT') return undefined;
      throw error;
    }
  }

  /** Deletes every entry not in `keep`; returns how many it deleted. */
  async prune(keep: ReadonlySet<string>): Promise<number> {
    let names: string[];
    try {
      names = (await this.#fs.readdir(this.#dir)) as string[];
    } catch (error) {
      if (errnoCode(error) === 'ENOENT') return 0;
      throw error;
    }
    let deleted = 0;
    for (const name of names) {
      if (!SHA256_HEX.test(name) || keep.has(name)) continue;
      await this.#fs.unlink(path.join(this.#dir, name));
      deleted += 1;
    }
    return deleted;
  }
}
