// Bytes of every file the agent published, by sha256, so a failed swap can restore what it removed.
import path from 'node:path';
import { errnoCode } from '../lib/errors.js';
import type { FsPort } from '../lib/fs-port.js';
import { sha256Hex } from '../lib/hash.js';
import { publishFile } from './durable-writer.js';

export const CACHE_DIR = 'cache';
const SHA256_HEX = /^[0-9a-f]{64}$/;

export class ContentCache {
  readonly #fs: FsPort;
  readonly #dir: string;

  constructor(fs: FsPort, stateDir: string) {
    this.#fs = fs;
    this.#dir = path.join(stateDir, CACHE_DIR);
  }

  async put(data: Uint8Array): Promise<string> {
    const sha256 = sha256Hex(data);
    await this.#fs.mkdir(this.#dir, { recursive: true, mode: 0o700 });
    await publishFile(this.#fs, {
      rootDir: this.#dir,
      relativePath: sha256,
      data,
      mode: 0o600,
      dirMode: 0o700,
      // A copy left by a write that never reached its fsync must not pass for one that can be restored from.
      ensureDurable: true,
    });
    return sha256;
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
