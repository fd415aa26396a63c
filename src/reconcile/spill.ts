// Where a pass keeps the bytes of the files it pulled: in memory up to a budget, then in the content cache.
import type { ConfigInstance } from '../api/schemas.js';
import type { Logger } from '../lib/logger.js';
import type { ContentCache } from '../store/content-cache.js';
import { type PlanInstance, withFile } from './plan.js';

/**
 * File bytes a pass holds in memory before it sets the next ones aside: a first sync of a few large files
 * (40 of 3 MiB) then holds one page and one batch at a time instead of every file, and 10,000 small files
 * (~10 MiB) are all held, as before, without a read more.
 */
export const IN_MEMORY_FILE_BYTES = 16 * 1024 * 1024;

/**
 * Turns each instance pulled into the bytes of its file (plan.ts `withFile`) as its page arrives. Past the
 * budget the bytes go into the content cache (its one entry per sha256, which the publish would write anyway)
 * and only their sha256 stays; apply.ts reads them back, hashes them against that name and writes them. An
 * entry that cannot be written keeps its bytes in memory: never worse than holding them all.
 */
export class FileSpill {
  readonly #cache: ContentCache;
  readonly #logger: Logger;
  readonly #budget: number;
  #held = 0;

  constructor(cache: ContentCache, logger: Logger, budget = IN_MEMORY_FILE_BYTES) {
    this.#cache = cache;
    this.#logger = logger;
    this.#budget = budget;
  }

  readonly prepare = async (instance: ConfigInstance): Promise<PlanInstance> => {
    const held = withFile(instance);
    if (!('file' in held)) return held;
    const { data, sha256 } = held.file;
    if (this.#held + data.length <= this.#budget) {
      this.#held += data.length;
      return held;
    }
    try {
      // A full pass meets the same large files every time: an entry of the right size is not read back and
      // rewritten; apply checks the bytes against their sha256 anyway, and a bad entry is deleted there.
      if (!(await this.#cache.holds(sha256, data.length))) await this.#cache.put(data);
    } catch (error) {
      this.#logger.warn(
        { err: error, instanceId: instance.id },
        'could not set file bytes aside in the content cache: held in memory',
      );
      this.#held += data.length;
      return held;
    }
    return { ...held, file: { sha256, size: data.length } };
  };
}
