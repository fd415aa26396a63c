// Verified fingerprints of managed files: a file whose identity is what it was when its bytes were hashed is not read again.
import type { BigIntStats } from 'node:fs';
import * as z from 'zod';
import { ITEM_RULES_VERSION, type KnownItem, type KnownPages } from '../api/list-page.js';
import type { WallClock } from '../lib/clock.js';
import type { FsPort } from '../lib/fs-port.js';
import type { JsonWeight } from '../lib/json-weigher.js';
import type { Logger } from '../lib/logger.js';
import { writeDurableText } from './durable-writer.js';
import { sameRoot } from './same-root.js';
import {
  MAX_STATE_FILE_DEPTH,
  parseStateFile,
  readStateDirFileOrSetAside,
  type StateFileText,
  WEIGHED_INSTANCES,
} from './state.js';

export const FINGERPRINTS_FILE = 'fingerprints.json';
/**
 * Version 2 keeps each file's entry as one array, `[dev, ino, size, mtimeNs, ctimeNs, sha256, verifiedAt]`, one
 * entry a line, checked by hand; version 1 kept each as an indented object (`FingerprintEntry`): 490 KB at 1,000
 * files and items, against ~240 KB. A version-1 file is read (zod where the hand check says nothing) and rewritten
 * as version 2 by the next save; an older agent reads a version-2 file as corrupt: an empty cache, read again.
 */
const FINGERPRINTS_VERSION = 2;

/**
 * The file's bounds (state.ts `readStateDirFile`). Per instance: its file's entry as version 1 wrote it (an object
 * of seven members, its key and the comma after it: 16; version 2's array takes 9), its item's (5) and its share of
 * a page's (a text length, and a page's four of its own for a page of one: 4).
 */
const FINGERPRINTS_WEIGHT: JsonWeight = {
  maxTokens: 25 * WEIGHED_INSTANCES + 256,
  maxDepth: MAX_STATE_FILE_DEPTH,
};
const FINGERPRINTS_VERSION_1 = 1;

/**
 * A fingerprint is trusted only if the file's ctime was at least this long before its bytes were read. Any
 * later change (write, truncate, chmod, rename into place, utimes — which is how an mtime is forged) sets the
 * ctime to the kernel's clock at that moment, which is then past the recorded one by at least a timestamp
 * tick. The margin covers the coarsest common granularity (FAT's 2 s; ext4, xfs, btrfs and tmpfs stamp in
 * ns with a clock tick of a few ms) and the coarse clock's lag behind the one the agent reads.
 */
export const RACY_MARGIN_MS = 3_000;

/**
 * However unchanged a file looks, its bytes are read and hashed again this long after they last were: what
 * a fingerprint cannot see (the clock set back to the very tick of a recorded ctime, a raw write to the
 * block device, bit rot, a filesystem that does not keep ctime) is caught within this bound.
 */
export const FULL_VERIFY_INTERVAL_MS = 24 * 60 * 60 * 1000;

/** The identity of one file as the kernel reports it: any change through the filesystem changes ctime. */
export interface FileIdentity {
  dev: bigint;
  ino: bigint;
  size: bigint;
  mtimeNs: bigint;
  ctimeNs: bigint;
}

/**
 * The zod schemas of a version-1 file, built on first use: only a version-1 file (read once, then rewritten as
 * version 2) needs them, and every start built them.
 */
function buildFingerprintSchemas() {
  /** One file's fingerprint as version 1 stored it. */
  const FingerprintEntry = z.object({
    dev: z.string().regex(/^\d+$/),
    ino: z.string().regex(/^\d+$/),
    size: z.string().regex(/^\d+$/),
    mtimeNs: z.string().regex(/^-?\d+$/),
    ctimeNs: z.string().regex(/^-?\d+$/),
    sha256: z.string().regex(/^[0-9a-f]{64}$/),
    /** Wall-clock ms when the bytes were read. */
    verifiedAt: z.number(),
  });

  /** A version-1 file's header (a version-2 one is checked by hand in `load`). */
  const HeaderV1 = z.object({
    version: z.literal(FINGERPRINTS_VERSION_1),
    rootDir: z.string(),
    files: z.custom<Record<string, unknown>>(isObject),
    /**
     * Items known by their exact text (api/list-page.ts KnownItems), recorded under the item rules `rules`: by
     * instance id, `[key, sha256, size]`. Optional, so an older agent reads and drops it, and a newer one reading
     * an older file starts without.
     */
    items: z.unknown().optional(),
  });
  return { FingerprintEntry, HeaderV1 };
}
type FingerprintSchemas = ReturnType<typeof buildFingerprintSchemas>;
let builtFingerprintSchemas: FingerprintSchemas | undefined;
export function fingerprintSchemas(): FingerprintSchemas {
  builtFingerprintSchemas ??= buildFingerprintSchemas();
  return builtFingerprintSchemas;
}
type Entry = z.infer<FingerprintSchemas['FingerprintEntry']>;

const isObject = (value: unknown): value is Record<string, unknown> =>
  typeof value === 'object' && value !== null && !Array.isArray(value);

/**
 * The loaded state whose strings a load reuses where its values are equal: JSON.parse makes a fresh string of
 * every value, and an idle daemon would hold each sha256 three times (docs/performance.md "Idle daemon, twelfth
 * round").
 */
interface HeldState {
  files: ReadonlyMap<string, { readonly sha256: string }>;
  instances: ReadonlyMap<string, { readonly relativePath: string }>;
}

/** One item known by its text: the key of that text, and the sha256 and length of the bytes it serializes to. */
interface ItemEntry extends KnownItem {
  key: string;
}

const ITEM_KEY = /^[A-Za-z0-9+/]{43}=$/;

/** A stored `[key, sha256, size]`, or undefined when it is anything else (then the item is not known). */
function itemEntry(value: unknown): ItemEntry | undefined {
  if (!Array.isArray(value) || value.length !== 3) return undefined;
  const [key, sha256, size] = value as unknown[];
  if (typeof key !== 'string' || !ITEM_KEY.test(key)) return undefined;
  if (typeof sha256 !== 'string' || !SHA256_HEX.test(sha256)) return undefined;
  if (typeof size !== 'number' || !Number.isSafeInteger(size) || size < 0) return undefined;
  return { key, sha256, size };
}

/** The items and pages of a stored file, when recorded under this agent's item rules; none otherwise. */
function loadItems(
  stored: unknown,
  held: HeldState | undefined,
): {
  items: Map<string, ItemEntry>;
  pages: Map<string, PageEntry>;
} {
  const items = new Map<string, ItemEntry>();
  const pages = new Map<string, PageEntry>();
  if (!isObject(stored) || stored.rules !== ITEM_RULES_VERSION || !isObject(stored.byId)) {
    return { items, pages };
  }
  const { byId } = stored;
  // for-in over own keys, not Object.entries (no array per entry; the same keys, __proto__ kept): store/state.ts.
  for (const id in byId) {
    if (!Object.hasOwn(byId, id)) continue;
    const entry = itemEntry(byId[id]);
    if (entry === undefined) continue;
    const path = held?.instances.get(id)?.relativePath;
    const file = path === undefined ? undefined : held?.files.get(path);
    if (file?.sha256 === entry.sha256) entry.sha256 = file.sha256;
    items.set(id, entry);
  }
  // Optional (an agent before pages wrote none, and drops them); each `pageKey: [itemKeysKey, ...textLengths]`,
  // the lengths bound into `itemKeysKey` (api/list-page.ts `pageItemsKey`). A record an older agent wrote (a key
  // alone, or the array whose key is of the item keys only) is dropped here or refused where it is used, and made
  // again by the next full pull.
  if (isObject(stored.pages)) {
    for (const [pageKey, value] of Object.entries(stored.pages)) {
      const entry = ITEM_KEY.test(pageKey) ? pageEntry(value) : undefined;
      if (entry !== undefined) pages.set(pageKey, entry);
    }
  }
  return { items, pages };
}

/** A stored page record, or undefined when it is anything else (then the page is not known). */
function pageEntry(value: unknown): PageEntry | undefined {
  if (!Array.isArray(value) || value.length < 2) return undefined;
  const [itemKeysKey] = value as unknown[];
  if (typeof itemKeysKey !== 'string' || !ITEM_KEY.test(itemKeysKey)) return undefined;
  const textLengths: number[] = [];
  for (let index = 1; index < value.length; index += 1) {
    const length: unknown = value[index];
    // The shortest item text is `{}`.
    if (typeof length !== 'number' || !Number.isSafeInteger(length) || length < 2) return undefined;
    textLengths.push(length);
  }
  return { itemKeysKey, textLengths };
}

/** What a page is recorded with: the key of its item keys and text lengths, and those lengths. */
interface PageEntry {
  itemKeysKey: string;
  textLengths: readonly number[];
}

function sameLengths(a: readonly number[], b: readonly number[]): boolean {
  return a.length === b.length && a.every((length, index) => length === b[index]);
}

/** Pages kept beyond one per item recorded: a page holds at least one item, so this bounds them. */
const SPARE_PAGES = 64;

const DIGITS = /^\d+$/;
const SIGNED_DIGITS = /^-?\d+$/;
const SHA256_HEX = /^[0-9a-f]{64}$/;

/**
 * The everyday entry checked by hand: what `FingerprintEntry.parse` returns (same fields, same order), or undefined for
 * zod to judge (zod costs most of loading 1,000 entries). src/store/fingerprints.test.ts compares the two.
 */
export function quickEntry(value: unknown): Entry | undefined {
  if (typeof value !== 'object' || value === null || Array.isArray(value)) return undefined;
  const { dev, ino, size, mtimeNs, ctimeNs, sha256, verifiedAt } = value as Record<string, unknown>;
  return checkedEntry(dev, ino, size, mtimeNs, ctimeNs, sha256, verifiedAt);
}

/** A version-2 entry, `[dev, ino, size, mtimeNs, ctimeNs, sha256, verifiedAt]`: the same checks as `quickEntry`. */
export function arrayEntry(value: unknown): Entry | undefined {
  if (!Array.isArray(value) || value.length !== 7) return undefined;
  const [dev, ino, size, mtimeNs, ctimeNs, sha256, verifiedAt] = value as unknown[];
  return checkedEntry(dev, ino, size, mtimeNs, ctimeNs, sha256, verifiedAt);
}

function checkedEntry(
  dev: unknown,
  ino: unknown,
  size: unknown,
  mtimeNs: unknown,
  ctimeNs: unknown,
  sha256: unknown,
  verifiedAt: unknown,
): Entry | undefined {
  if (
    typeof dev !== 'string' ||
    !DIGITS.test(dev) ||
    typeof ino !== 'string' ||
    !DIGITS.test(ino) ||
    typeof size !== 'string' ||
    !DIGITS.test(size) ||
    typeof mtimeNs !== 'string' ||
    !SIGNED_DIGITS.test(mtimeNs) ||
    typeof ctimeNs !== 'string' ||
    !SIGNED_DIGITS.test(ctimeNs) ||
    typeof sha256 !== 'string' ||
    !SHA256_HEX.test(sha256) ||
    typeof verifiedAt !== 'number' ||
    !Number.isFinite(verifiedAt)
  ) {
    return undefined;
  }
  return { dev, ino, size, mtimeNs, ctimeNs, sha256, verifiedAt };
}

export function identityOf(
  stats: Pick<BigIntStats, 'dev' | 'ino' | 'size' | 'mtimeNs' | 'ctimeNs'>,
): FileIdentity {
  return {
    dev: stats.dev,
    ino: stats.ino,
    size: stats.size,
    mtimeNs: stats.mtimeNs,
    ctimeNs: stats.ctimeNs,
  };
}

export function sameIdentity(a: FileIdentity, b: FileIdentity): boolean {
  return (
    a.dev === b.dev &&
    a.ino === b.ino &&
    a.size === b.size &&
    a.mtimeNs === b.mtimeNs &&
    a.ctimeNs === b.ctimeNs
  );
}

function entryIdentity(entry: Entry): FileIdentity {
  return {
    dev: BigInt(entry.dev),
    ino: BigInt(entry.ino),
    size: BigInt(entry.size),
    mtimeNs: BigInt(entry.mtimeNs),
    ctimeNs: BigInt(entry.ctimeNs),
  };
}

/**
 * Relative path → the identity a file had when its bytes were read, and their sha256. Kept in
 * stateDir/fingerprints.json, a cache: missing, corrupt or of another root, it is empty and every file is read.
 * A stale entry is harmless: it speaks only of an identity, and a changed file no longer has it.
 */
export class FileFingerprints implements KnownPages {
  readonly #entries: Map<string, Entry>;
  readonly #items: Map<string, ItemEntry>;
  /** Compact list pages known by their items' text (api/list-page.ts KnownPages): page key → its record. */
  readonly #pages: Map<string, PageEntry>;
  /** The pages looked up or recorded since the last `retainSeenPages`. */
  readonly #pagesSeen = new Set<string>();
  readonly #rootDir: string;
  #changed = false;
  /**
   * The devices (`st_dev`, decimal) the fingerprinted files lay on when this was loaded, before this process read
   * any: root-mount.ts tells by them an older agent's record of rootDir's self-bind from a data disk missing (mount27).
   */
  readonly loadedDevices: ReadonlySet<string>;

  private constructor(
    rootDir: string,
    entries: Map<string, Entry>,
    items = new Map<string, ItemEntry>(),
    pages = new Map<string, PageEntry>(),
  ) {
    this.#rootDir = rootDir;
    this.#entries = entries;
    const devices = new Set<string>();
    for (const entry of entries.values()) devices.add(entry.dev);
    this.loadedDevices = devices;
    this.#items = items;
    this.#pages = pages;
  }

  static empty(rootDir: string): FileFingerprints {
    return new FileFingerprints(rootDir, new Map());
  }

  static async load(
    fs: FsPort,
    stateDir: string,
    rootDir: string,
    logger: Logger,
    options: { clock: WallClock; setAside?: boolean; sharingWith?: HeldState },
  ): Promise<FileFingerprints> {
    let raw: StateFileText | undefined;
    try {
      // Not a regular file: moved aside (unless a dry run), or every save of every pass failed with a warning.
      raw = await readStateDirFileOrSetAside(fs, stateDir, FINGERPRINTS_FILE, logger, {
        ...options,
        weight: FINGERPRINTS_WEIGHT,
      });
    } catch (error) {
      // Debug: a dry run by a user who cannot read stateDir meets this, and loses nothing but speed.
      logger.debug({ err: error }, 'cannot read the file fingerprints: every managed file is read');
      return FileFingerprints.empty(rootDir);
    }
    if (raw === undefined) return FileFingerprints.empty(rootDir);
    const entries = new Map<string, Entry>();
    let items: ReturnType<typeof loadItems>;
    let migrated = false;
    try {
      const parsed = parseStateFile(raw);
      const version = isObject(parsed) ? parsed.version : undefined;
      let files: Record<string, unknown>;
      let storedItems: unknown;
      if (version === FINGERPRINTS_VERSION_1) {
        const header = fingerprintSchemas().HeaderV1.parse(parsed);
        if (!(await sameRoot(fs, header.rootDir, rootDir))) return FileFingerprints.empty(rootDir);
        ({ files, items: storedItems } = header);
        migrated = true;
      } else {
        if (
          version !== FINGERPRINTS_VERSION ||
          !isObject(parsed) ||
          typeof parsed.rootDir !== 'string' ||
          !isObject(parsed.files)
        ) {
          throw new TypeError(`not a version ${FINGERPRINTS_VERSION} header`);
        }
        if (!(await sameRoot(fs, parsed.rootDir, rootDir))) return FileFingerprints.empty(rootDir);
        files = parsed.files;
        storedItems = parsed.items;
      }
      // Checked in place, not rebuilt: for-in over JSON.parse's own keys keeps a path named __proto__ (an own
      // property, read as such), without Object.entries' array per entry (store/state.ts quickKeyedBy).
      for (const path in files) {
        if (!Object.hasOwn(files, path)) continue;
        const value = files[path];
        if (!migrated) {
          const entry = arrayEntry(value);
          if (entry === undefined) continue;
          const file = options.sharingWith?.files.get(path);
          if (file?.sha256 === entry.sha256) entry.sha256 = file.sha256;
          entries.set(path, entry);
          continue;
        }
        const quick = quickEntry(value);
        if (quick !== undefined) {
          entries.set(path, quick);
          continue;
        }
        const entry = fingerprintSchemas().FingerprintEntry.safeParse(value);
        if (entry.success) entries.set(path, entry.data);
      }
      items = loadItems(storedItems, options.sharingWith);
    } catch (error) {
      logger.warn({ err: error }, 'the file fingerprints are corrupt: every managed file is read');
      return FileFingerprints.empty(rootDir);
    }
    const fingerprints = new FileFingerprints(rootDir, entries, items.items, items.pages);
    // Rewritten in this version by the next save, so that the next start reads the lighter file.
    if (migrated) fingerprints.#changed = true;
    return fingerprints;
  }

  /**
   * What was recorded of the item `id` whose exact text has `key` (api/list-page.ts KnownItems); undefined for any
   * other text. Only ever recorded after that text passed every check and was serialized (reconcile/spill.ts).
   */
  lookupItem(id: string, key: string): KnownItem | undefined {
    const item = this.#items.get(id);
    return item !== undefined && item.key === key ? { sha256: item.sha256, size: item.size } : undefined;
  }

  /** Records that the item `id` whose exact text has `key` serializes to `file`. */
  recordItem(id: string, key: string, file: KnownItem): void {
    const known = this.#items.get(id);
    if (known?.key === key && known.sha256 === file.sha256 && known.size === file.size) return;
    this.#items.set(id, { key, sha256: file.sha256, size: file.size });
    this.#changed = true;
  }

  /** The key recorded for the item `id`'s text (api/list-page.ts KnownPages). */
  itemKeyOf(id: string): string | undefined {
    return this.#items.get(id)?.key;
  }

  /** What was recorded for the page whose items' text has `pageKey` (api/list-page.ts KnownPages). */
  lookupPage(pageKey: string): string | undefined {
    const entry = this.#pages.get(pageKey);
    if (entry !== undefined) this.#pagesSeen.add(pageKey);
    return entry?.itemKeysKey;
  }

  /** The item text lengths recorded with the page `pageKey` (api/list-page.ts KnownPages). */
  pageTextLengths(pageKey: string): readonly number[] | undefined {
    return this.#pages.get(pageKey)?.textLengths;
  }

  /** Records a page whose every item was judged valid; at most one page per item recorded, and a few more. */
  recordPage(pageKey: string, itemKeysKey: string, textLengths: readonly number[]): void {
    const known = this.#pages.get(pageKey);
    if (known === undefined && this.#pages.size >= this.#items.size + SPARE_PAGES) return;
    this.#pagesSeen.add(pageKey);
    if (known?.itemKeysKey === itemKeysKey && sameLengths(known.textLengths, textLengths)) return;
    this.#pages.set(pageKey, { itemKeysKey, textLengths: [...textLengths] });
    this.#changed = true;
  }

  /** Keeps only the pages looked up or recorded since the last call (after a full pull: what the listing is now). */
  retainSeenPages(): void {
    for (const pageKey of this.#pages.keys()) {
      if (!this.#pagesSeen.has(pageKey)) {
        this.#pages.delete(pageKey);
        this.#changed = true;
      }
    }
    this.#pagesSeen.clear();
  }

  /** Keeps only the items of `ids` (the instances recorded in state). */
  retainItems(ids: ReadonlySet<string> | ReadonlyMap<string, unknown>): void {
    for (const id of this.#items.keys()) {
      if (!ids.has(id)) {
        this.#items.delete(id);
        this.#changed = true;
      }
    }
  }

  get size(): number {
    return this.#entries.size;
  }

  /**
   * The sha256 recorded for `path` when the file there has exactly `identity` and its bytes were read less
   * than FULL_VERIFY_INTERVAL_MS ago (by `now`, wall-clock ms); otherwise undefined: read the file.
   */
  lookup(path: string, identity: FileIdentity, now: number): string | undefined {
    const entry = this.#entries.get(path);
    if (entry === undefined) return undefined;
    // A clock set back makes the age negative: read again rather than trust for longer.
    const age = now - entry.verifiedAt;
    if (age < 0 || age >= FULL_VERIFY_INTERVAL_MS) return undefined;
    // Recorded while its ctime lay ahead of the clock (see `record`): trusted only until the clock comes within
    // the margin of that ctime, where a change could be stamped with the very same one.
    const ctimeMs = Number(BigInt(entry.ctimeNs) / 1_000_000n);
    if (ctimeMs > entry.verifiedAt && now > ctimeMs - RACY_MARGIN_MS) return undefined;
    return sameIdentity(entryIdentity(entry), identity) ? entry.sha256 : undefined;
  }

  /**
   * Records that the file at `path` with `identity` held bytes hashing to `sha256`, read after `readFrom`
   * (wall-clock ms, taken before `identity` was). Ignored when the ctime is within RACY_MARGIN_MS of
   * `readFrom`: a change in the same timestamp tick would leave the identity as it is. A ctime further ahead
   * of the clock (the clock was set back since the file last changed) is kept: any change now is stamped with
   * the clock's time, before that ctime, until the clock comes near it (`lookup` stops trusting it there).
   * It was ignored, so after the clock went back by hours every managed file was read on every pass until
   * the clock caught up with their ctimes.
   */
  record(path: string, identity: FileIdentity, sha256: string, readFrom: number): void {
    const ctimeMs = Number(identity.ctimeNs / 1_000_000n);
    if (Math.abs(readFrom - ctimeMs) < RACY_MARGIN_MS) {
      this.forget(path);
      return;
    }
    this.#entries.set(path, {
      dev: identity.dev.toString(),
      ino: identity.ino.toString(),
      size: identity.size.toString(),
      mtimeNs: identity.mtimeNs.toString(),
      ctimeNs: identity.ctimeNs.toString(),
      sha256,
      verifiedAt: readFrom,
    });
    this.#changed = true;
  }

  forget(path: string): void {
    if (this.#entries.delete(path)) this.#changed = true;
  }

  /** Keeps only the fingerprints of `paths` (the managed files). */
  retain(paths: ReadonlySet<string> | ReadonlyMap<string, unknown>): void {
    for (const path of this.#entries.keys()) if (!paths.has(path)) this.forget(path);
  }

  /** Writes the file when something changed since it was loaded or last saved; otherwise writes nothing. */
  async save(fs: FsPort, stateDir: string): Promise<boolean> {
    if (!this.#changed) return false;
    const entries = [...this.#entries].sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0));
    const items = this.#items;
    const pages = this.#pages;
    const rootDir = this.#rootDir;
    // One entry a line; JSON.stringify of a path writes `__proto__` like any other key.
    await writeDurableText(fs, stateDir, FINGERPRINTS_FILE, function* () {
      yield `{"version":${FINGERPRINTS_VERSION},"rootDir":${JSON.stringify(rootDir)},"files":{`;
      let separator = '\n';
      for (const [path, e] of entries) {
        const fields = [e.dev, e.ino, e.size, e.mtimeNs, e.ctimeNs, e.sha256, e.verifiedAt];
        yield `${separator}${JSON.stringify(path)}:${JSON.stringify(fields)}`;
        separator = ',\n';
      }
      yield '\n}';
      if (items.size > 0) {
        yield `,"items":{"rules":${ITEM_RULES_VERSION},"byId":{`;
        separator = '\n';
        for (const [id, item] of items) {
          yield `${separator}${JSON.stringify(id)}:${JSON.stringify([item.key, item.sha256, item.size])}`;
          separator = ',\n';
        }
        yield '\n}';
        if (pages.size > 0) {
          yield ',"pages":{';
          separator = '\n';
          for (const [pageKey, { itemKeysKey, textLengths }] of pages) {
            yield `${separator}${JSON.stringify(pageKey)}:${JSON.stringify([itemKeysKey, ...textLengths])}`;
            separator = ',\n';
          }
          yield '\n}';
        }
        yield '}';
      }
      yield '}\n';
    });
    this.#changed = false;
    return true;
  }
}
