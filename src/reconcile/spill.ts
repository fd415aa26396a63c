// Where a pass keeps the bytes of the files it pulled: in memory up to a budget, then in the content cache.
import type { ItemWire, KnownItem } from '../api/list-page.js';
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
  readonly #items: ItemFiles | undefined;
  #held = 0;

  constructor(cache: ContentCache, logger: Logger, budget = IN_MEMORY_FILE_BYTES, items?: ItemFiles) {
    this.#cache = cache;
    this.#logger = logger;
    this.#budget = budget;
    this.#items = items;
  }

  /**
   * Whether a known item's text (`length` characters, held instead of its file's bytes: plan.ts InstanceFile
   * `wire`) fits in what is left of the budget; counted when it does. Past the budget an item is not taken as
   * known: it is judged in full and its bytes set aside as any other's, so a listing of large items known by
   * their text is never held whole.
   */
  readonly admitKnown = (length: number): boolean => {
    if (this.#held + length > this.#budget) return false;
    this.#held += length;
    return true;
  };

  readonly prepare = async (instance: ConfigInstance, wire?: ItemWire): Promise<PlanInstance> => {
    // Known by its exact text: its file's sha256 and size were recorded, its bytes are made only for a write.
    if (wire?.known !== undefined) return withKnownFile(instance, wire.known, wire.text);
    const held = withFile(instance);
    if (!('file' in held)) return held;
    const { data, sha256 } = held.file;
    if (wire !== undefined) this.#items?.recordItem(instance.id, wire.key, { sha256, size: data.length });
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

/** Where the items a pass serialized are recorded by the key of their text (store/fingerprints.ts). */
export interface ItemFiles {
  recordItem(id: string, key: string, file: KnownItem): void;
}

/** The instance without its content (unchecked: never used), with the file recorded for its text. */
function withKnownFile(instance: ConfigInstance, known: KnownItem, wire: string): PlanInstance {
  const { content: _content, ...head } = instance;
  return Object.assign(head, { file: { sha256: known.sha256, size: known.size, wire } });
}
