// The pull's pager: lists config instances page by page, bounded in time, pages, items and bytes whatever the
// service says, shrinking pages that are too large, and re-listing when the list shifted between two pages.
import type { Clock } from '../lib/clock.js';
import { AgentError } from '../lib/errors.js';
import type { Logger } from '../lib/logger.js';
import { combineSignals } from '../lib/signals.js';
import type { ServiceClient } from './client.js';
import { ResponseTooLargeError } from './errors.js';
import { compareInstants, sameInstant } from './instant.js';
import { itemsBegunIn, peekId, peekStrings } from './json.js';
import type { ConfigInstancePage, ItemWire, KnownItems, PageItem, UnknownStatus } from './list-page.js';
import type {
  ConfigInstance,
  ConfigInstanceActivityStatus,
  ConfigInstanceFilters,
  ConfigInstanceHead,
  ErrorStatus,
} from './schemas.js';
import {
  ConfigInstanceActivityStatus as ActivityStatus,
  ErrorStatus as ErrorStatusSchema,
  LIMIT_MAX,
} from './schemas.js';

export const PAGER_DEFAULTS = {
  /** The spec's maximum: as few round trips as possible. */
  pageLimit: LIMIT_MAX,
  /** The whole pull, every page and retry included. */
  deadlineMs: 5 * 60_000,
  /**
   * Items listed per pull, over all its queries: the first sync of a device with 10,000 instances (the scale
   * the performance issue asks for) lists each one twice (`target_status=deployed` and `queued`).
   */
  maxItems: 100_000,
  /**
   * Response bytes per pull (at least twice the response cap): a guard against a service that pages without
   * end, far above a real device's listing (40 instances of 3 MiB list 120 MiB).
   */
  maxBytes: 1024 * 1024 * 1024,
  /**
   * A page aims at this share of the response cap once the size of an item is known: pages of large items stay
   * below the cap (no "too large" round trips, a bounded page in memory) and small items keep pages of 100.
   * Not less: pages overlap by one item, so a page of n large items brings only n − 1 new ones.
   */
  pageBytesShareOfCap: 0.5,
  /** A wide listing whose first page keeps less than this share of its items is given up for the queries. */
  minWideKeptRatio: 0.5,
  /** Listings of one query before a list that keeps shifting fails the pull. */
  maxListingAttempts: 3,
} as const;

/** Why a pull stopped: `code` is one of `pull_deadline`, `listing_unstable`, `listing_runaway`. */
export class PullError extends AgentError {}

/** The whole pull took longer than its deadline: the service is slow or trickling; a later pass may do. */
export class PullDeadlineError extends PullError {
  constructor(deadlineMs: number) {
    super('pull_deadline', `the pull of config instances did not finish within ${deadlineMs} ms`, {
      retryable: true,
    });
  }
}

/** The list changed under the pager in every attempt: nothing proves the listing complete. */
export class ListingUnstableError extends PullError {
  constructor(attempts: number, evidence: string) {
    super(
      'listing_unstable',
      `the config instance list shifted between pages in ${attempts} consecutive listings (last: ${evidence})`,
      { retryable: true },
    );
  }
}

/** The service pages without end or beyond what it announced: paging it further cannot succeed. */
export class ListingRunawayError extends PullError {
  constructor(problem: string) {
    super('listing_runaway', `paging config instances stopped: ${problem}`, { retryable: false });
  }
}

/** An item the agent cannot accept: named by id when readable, with what is wrong with it. */
export interface InvalidListItem {
  id?: string;
  /** When readable: an item of another device (a service bug) is not this device's to report. */
  deviceId?: string;
  activityStatus?: ConfigInstanceActivityStatus;
  errorStatus?: ErrorStatus;
  problem: string;
  /**
   * The item itself is not at fault — the listing is (an id listed twice), or the agent's own response limit
   * (an item larger than server.maxResponseBytes by itself): reported `retrying`, never `failed` (a final
   * status: the instance would stay skipped after the service lists it properly again, or the limit is raised).
   */
  listingFault?: true;
  /**
   * Its id holds the agent's API key (reconcile/pass.ts refuseKeyPaths): counted as `failed` but neither reported
   * nor recorded, since either keeps the id (the key) in stateDir's files.
   */
  idHoldsKey?: true;
}

/** An item with a status value the agent does not know: not acted on, warned about. */
export interface SkippedListItem {
  id: string;
  deviceId: string;
  relativeFilepath: string;
  unknown: UnknownStatus;
}

export interface PullResult<I extends ConfigInstanceHead = ConfigInstance> {
  /** Valid instances, at most one per id, in listing order. */
  instances: I[];
  invalid: InvalidListItem[];
  skipped: SkippedListItem[];
  /**
   * Why the listing may have left instances out though it ended consistently (it ended before its own
   * `total_count`, or some page withheld the count it was asked for): its instances are used, but no removal
   * may conclude from it that nobody wants a path.
   */
  incomplete?: string;
}

export type PageRetry = <T>(what: string, request: () => Promise<T>, signal: AbortSignal) => Promise<T>;

export interface PagerOptions {
  client: Pick<ServiceClient, 'listConfigInstancePage'>;
  /**
   * One query that returns a superset of `queries` (the device's whole listing): listed instead of them, and
   * only the items matching some query are kept, when that costs fewer requests. When its first page shows that
   * less than `minWideKeptRatio` of it would be kept and more pages follow (a device with a long history of
   * removed instances), the wide listing is given up and the queries are listed one by one.
   */
  wide?: ConfigInstanceFilters;
  clock: Clock;
  /** The response cap the client enforces: the byte budget is at least twice it. */
  maxResponseBytes?: number;
  signal?: AbortSignal;
  /** The one retry layer for a page request (withRequestRetry); none when absent. */
  retry?: PageRetry;
  /** Items judged valid before, by the key of their exact text: their content is not checked again (list-page.ts). */
  knownItems?: KnownItems;
  logger?: Logger;
  /**
   * Whether a warning about how the service answers (`cause`) is told at its level this time: true the first time
   * `what` is said of it in this process (pull.ts: ToldItems), so a service answering so on every poll is told
   * once, then at `debug`. Absent: always told.
   */
  tellOnce?: (cause: string, what: string) => boolean;
  pageLimit?: number;
  /** Bytes a page aims at once items' sizes are known (default: half of `maxResponseBytes`). */
  pageBytes?: number;
  deadlineMs?: number;
  maxItems?: number;
  maxBytes?: number;
  maxListingAttempts?: number;
}

/** The causes of tellOnce: a count withheld (-1) on some page, has_more true past the count. */
const WITHHELD_COUNT = '(service: total_count -1)';
const PAST_THE_COUNT = '(service: has_more past total_count)';

const DUPLICATED = 'listed more than once in one listing by the service (ambiguous: no copy is used)';
const GIVEN_TWICE =
  'listed by two queries of one pull with other fields and the same updated_at (ambiguous: no copy is used)';

/** The fields of an instance (all but its content) that decide what the agent does with it. */
const HEAD_FIELDS = [
  'updated_at',
  'relative_filepath',
  'target_status',
  'activity_status',
  'error_status',
  'config_schema_id',
  'device_id',
] as const satisfies readonly (keyof ConfigInstanceHead)[];

/** `updated_at` by instant: one instant written two ways (`Z`, `+00:00`) by two queries is one head. */
function sameHead(a: ConfigInstanceHead, b: ConfigInstanceHead): boolean {
  return HEAD_FIELDS.every((field) =>
    field === 'updated_at' ? sameInstant(a.updated_at, b.updated_at) : a[field] === b[field],
  );
}

/** The list moved between two pages: the listing is thrown away and taken again. */
class Shifted {
  constructor(readonly evidence: string) {}
}

interface Budget {
  items: number;
  bytes: number;
  readonly maxItems: number;
  readonly maxBytes: number;
  /** Bytes per item of the pages seen so far in this pull (0 before the first page), to size the next pages. */
  itemBytes: number;
}

/** What a listing keeps of what it lists, and in what form. */
interface Keep<I> {
  item(item: PageItem): boolean;
  prepare(instance: ConfigInstance, wire?: ItemWire): I | Promise<I>;
  /** When set, the listing gives up after its first page if it kept less than this share and has more. */
  giveUpBelow?: number;
}

/** The wide listing would transfer mostly items nobody asked for: list the queries instead. */
class GaveUp {}

interface Listing<I> {
  instances: I[];
  invalid: InvalidListItem[];
  skipped: SkippedListItem[];
  incomplete?: string;
  /** Pages answered, and of them those whose `total_count` was -1 though every page asks for it. */
  pages: number;
  uncounted: number;
}

function itemId(item: PageItem | undefined): string | undefined {
  if (item === undefined) return undefined;
  if (item.kind === 'invalid') return item.id;
  return item.instance.id;
}

/**
 * Lists every instance matching each of `queries` (ordered by id:asc) and merges them by id. Each next page
 * starts on the last item of the page before (one item of overlap): when that item is not where it was, the
 * list shifted (an instance added or removed before it) and the query is listed again; `total_count` before
 * and after must agree as well. Throws a PullError (or the request's own error) when no consistent, bounded
 * listing could be had.
 */
export async function pullConfigInstances<I extends ConfigInstanceHead = ConfigInstance>(
  queries: readonly ConfigInstanceFilters[],
  options: PagerOptions & {
    /**
     * Turns each valid instance kept into what the pull holds, as its page arrives (the pass keeps the bytes of
     * its file instead of its parsed content: reconcile/pull.ts). Without it, the instance as parsed. `wire`: the
     * item's exact text when its page was compact; with `wire.known`, its content was not checked (list-page.ts
     * `judgeParsedItem`), and `prepare` must not use it for anything but the recorded file.
     */
    prepare?: (instance: ConfigInstance, wire?: ItemWire) => I | Promise<I>;
  },
): Promise<PullResult<I>> {
  const prepare = options.prepare ?? ((instance: ConfigInstance) => instance as unknown as I);
  // Known items are only for a `prepare` that takes their recorded file: as parsed, their content is unchecked.
  const { knownItems: _known, ...unknowing } = options;
  const pageOptions: PagerOptions = options.prepare === undefined ? unknowing : options;
  const deadlineMs = options.deadlineMs ?? PAGER_DEFAULTS.deadlineMs;
  // Checked on the injected clock before every page; a real timer also cuts a request or a retry wait in
  // flight (each request has its own timeout too, so the overshoot is bounded either way).
  const deadlineAt = options.clock.monotonic() + deadlineMs;
  const deadline = new AbortController();
  const timer = AbortSignal.timeout(deadlineMs);
  const onTimer = () => deadline.abort(new PullDeadlineError(deadlineMs));
  timer.addEventListener('abort', onTimer, { once: true });
  const checkDeadline = () => {
    if (options.clock.monotonic() >= deadlineAt) deadline.abort(new PullDeadlineError(deadlineMs));
  };
  const { signal, release } = combineSignals(deadline.signal, options.signal);
  const budget: Budget = {
    items: 0,
    bytes: 0,
    maxItems: options.maxItems ?? PAGER_DEFAULTS.maxItems,
    maxBytes: Math.max(options.maxBytes ?? PAGER_DEFAULTS.maxBytes, 2 * (options.maxResponseBytes ?? 0)),
    itemBytes: 0,
  };
  const byId = new Map<string, I>();
  const invalid = new Map<string, InvalidListItem>();
  const unnamed: InvalidListItem[] = [];
  const skipped = new Map<string, SkippedListItem>();
  let incomplete: string | undefined;
  const withheld = { pages: 0, uncounted: 0 };
  const merge = (listing: Listing<I>) => {
    incomplete ??= listing.incomplete;
    withheld.pages += listing.pages;
    withheld.uncounted += listing.uncounted;
    for (const instance of listing.instances) {
      const earlier = byId.get(instance.id);
      if (earlier === undefined) {
        byId.set(instance.id, instance);
        continue;
      }
      // Two queries gave one id with other fields (it changed between them, or the service is broken): the copy
      // updated last is the instance; two copies of the same time cannot be told apart, so neither is used.
      const order = compareUpdatedAt(instance.updated_at, earlier.updated_at);
      if (order > 0) byId.set(instance.id, instance);
      else if (order === 0 && !invalid.has(instance.id)) {
        const { activityStatus, errorStatus } = newerHead(headOfInstance(earlier), headOfInstance(instance));
        invalid.set(instance.id, {
          id: instance.id,
          deviceId: instance.device_id,
          ...(activityStatus === undefined ? {} : { activityStatus }),
          ...(errorStatus === undefined ? {} : { errorStatus }),
          problem: GIVEN_TWICE,
          listingFault: true,
        });
      }
    }
    for (const item of listing.invalid) {
      if (item.id === undefined) unnamed.push(item);
      else if (!invalid.has(item.id)) invalid.set(item.id, item);
    }
    for (const item of listing.skipped) if (!skipped.has(item.id)) skipped.set(item.id, item);
  };
  // An instance an earlier query already gave is dropped on arrival: a first sync lists each one twice
  // (`target_status=deployed` and `queued`), and holding both copies until the merge doubles the pull's memory.
  // Only a copy that differs from the one kept goes on to the merge, which picks one.
  const unseen = (item: PageItem) => {
    if (item.kind !== 'valid') return true;
    const earlier = byId.get(item.instance.id);
    return earlier === undefined || !sameHead(earlier, item.instance);
  };
  try {
    let listed = false;
    if (options.wide !== undefined && queries.length > 1) {
      const keep: Keep<I> = {
        item: matcherOf(queries),
        prepare,
        giveUpBelow: PAGER_DEFAULTS.minWideKeptRatio,
      };
      const listing = await listQuery(options.wide, pageOptions, budget, signal, checkDeadline, keep);
      if (!(listing instanceof GaveUp)) {
        merge(listing);
        listed = true;
      } else {
        options.logger?.info('the device listing is mostly history: listing the queries one by one');
      }
    }
    if (!listed) {
      for (const filters of queries) {
        const listing = await listQuery(filters, pageOptions, budget, signal, checkDeadline, {
          item: unseen,
          prepare,
        });
        if (!(listing instanceof GaveUp)) merge(listing);
      }
    }
  } catch (error) {
    if (deadline.signal.aborted && !options.signal?.aborted) throw deadline.signal.reason;
    throw error;
  } finally {
    timer.removeEventListener('abort', onTimer);
    release();
  }
  for (const id of [...invalid.keys(), ...skipped.keys()]) byId.delete(id);
  if (withheld.uncounted > 0) {
    // Every page asks for the count (expand[]=total_count); a page answering -1 breaks the interface, and a
    // listing it ends early is then told from a whole one by nothing: taken as complete, a retired instance still
    // listed at a path had the file of the unlisted instance that took the path over deleted. Used, but not
    // complete (as a listing ending before its count: 40ca7b5); one warning per pull, told once per process
    // while the service keeps withholding it (tellOnce), at debug after: a line every poll otherwise (adv35).
    const problem = `the service answered total_count -1 on ${withheld.uncounted} of ${withheld.pages} page(s) though asked for it (expand[]=total_count): whether the listing is whole cannot be told`;
    const level = options.tellOnce?.(WITHHELD_COUNT, 'withheld') === false ? 'debug' : 'warn';
    options.logger?.[level]({ pages: withheld.pages, uncounted: withheld.uncounted }, problem);
    incomplete ??= problem;
  }
  return {
    instances: [...byId.values()],
    invalid: [...invalid.values(), ...unnamed],
    skipped: [...skipped.values()],
    ...(incomplete === undefined ? {} : { incomplete }),
  };
}

async function listQuery<I>(
  filters: ConfigInstanceFilters,
  options: PagerOptions,
  budget: Budget,
  signal: AbortSignal,
  checkDeadline: () => void,
  keep: Keep<I>,
): Promise<Listing<I> | GaveUp> {
  const attempts = options.maxListingAttempts ?? PAGER_DEFAULTS.maxListingAttempts;
  let evidence = '';
  for (let attempt = 1; attempt <= attempts; attempt++) {
    const before = { items: budget.items, bytes: budget.bytes };
    const outcome = await listOnce(
      filters,
      options,
      budget,
      signal,
      checkDeadline,
      keep,
      attempt === attempts,
    );
    if (!(outcome instanceof Shifted)) return outcome;
    evidence = outcome.evidence;
    // A discarded listing's items are not kept, but its bytes were read: only items are given back.
    budget.items = before.items;
    options.logger?.warn({ attempt, evidence }, 'config instance list shifted between pages: listing again');
  }
  throw new ListingUnstableError(attempts, evidence);
}

async function listOnce<I>(
  filters: ConfigInstanceFilters,
  options: PagerOptions,
  budget: Budget,
  signal: AbortSignal,
  checkDeadline: () => void,
  keep: Keep<I>,
  /** The last try: a count that disagrees at the end is the count's fault now, not a shift (see below). */
  lastTry = false,
): Promise<Listing<I> | Shifted | GaveUp> {
  const pageLimit = Math.min(LIMIT_MAX, Math.max(1, options.pageLimit ?? PAGER_DEFAULTS.pageLimit));
  const pageBytes =
    options.pageBytes ??
    (options.maxResponseBytes === undefined
      ? Number.POSITIVE_INFINITY
      : options.maxResponseBytes * PAGER_DEFAULTS.pageBytesShareOfCap);
  /** The page limit the sizes seen so far suggest: at least 2, so that a page can overlap the one before. */
  const sized = () =>
    budget.itemBytes === 0
      ? pageLimit
      : Math.min(pageLimit, Math.max(2, Math.floor(pageBytes / budget.itemBytes)));
  const listing: Listing<I> = { instances: [], invalid: [], skipped: [], pages: 0, uncounted: 0 };
  const seen = new Set<string>();
  /** Ids this listing kept an item of, and ids it listed more than once (kept or not): reported, never used. */
  const keptHeads = new Map<string, ItemHead>();
  const duplicated = new Set<string>();
  let offset = 0;
  let limit = sized();
  let pages = 0;
  let kept = 0;
  /** The limit before a run of "too large" answers: back to it once the run ends on a lone oversize item. */
  let shrunkFrom: number | undefined;
  /** The id expected first on the next page (the last item of the page before), when pages overlap. */
  let anchor: string | undefined;
  let firstTotal: number | undefined;
  let lastId: string | undefined;
  /** Whether some next page could not start on the page before's last item (pages of one, unreadable ids). */
  let unanchored = false;

  const fetch = (at: number, size: number): Promise<ConfigInstancePage> => {
    const request = () =>
      options.client.listConfigInstancePage(filters, {
        offset: at,
        limit: size,
        orderBy: 'id:asc',
        expand: ['total_count'],
        signal,
        ...(options.knownItems?.pages === undefined ? {} : { knownPages: options.knownItems.pages }),
      });
    return options.retry === undefined ? request() : options.retry('list config instances', request, signal);
  };

  for (;;) {
    checkDeadline();
    signal.throwIfAborted();
    let page: ConfigInstancePage;
    try {
      page = await fetch(offset, limit);
    } catch (error) {
      if (!(error instanceof ResponseTooLargeError)) throw error;
      // More items than asked for in its first bytes: the service ignores `limit`, so asking for fewer changes
      // nothing. Halving down to one blamed each item in turn as "larger by itself than the response limit",
      // some eight requests for each (each a whole listing to the service) until the pull's deadline (adv20).
      if (error.bodyPrefix !== undefined && itemsBegunIn(error.bodyPrefix) > limit) {
        throw new ListingRunawayError(
          `asked for ${limit} item(s) at offset ${offset}, the service answered more, beyond the response limit of ${error.maxBytes} bytes (server.maxResponseBytes): it ignores limit`,
        );
      }
      shrunkFrom ??= limit;
      if (limit > 1) {
        limit = Math.floor(limit / 2);
        if (limit === 1 && anchor !== undefined) {
          // A page of one would hold only the anchor: step past it instead.
          offset += 1;
          anchor = undefined;
          unanchored = true;
        }
      } else {
        const head = error.bodyPrefix === undefined ? {} : peekHead(error.bodyPrefix);
        const { id } = head;
        const alone = `larger by itself than the response limit of ${error.maxBytes} bytes (server.maxResponseBytes)`;
        const where = lastId === undefined ? 'first in the listing' : `right after ${lastId}`;
        listing.invalid.push(
          id === undefined
            ? { problem: `the instance ${where} (offset ${offset}) is ${alone}; its id could not be read` }
            : // The agent's own limit, not the item, is at fault: `retrying`, so it is fetched again once the
              // operator raises server.maxResponseBytes (`failed`, a final status, left it skipped for good).
              // Its statuses, read like its id, keep it from being reported again on every pass.
              { ...head, id, problem: `config instance is ${alone}`, listingFault: true },
        );
        // At debug: pull.ts tells the item at error once (ToldItems), naming the limit to raise. A line of its own
        // here, with the shrinking pages' below, was 7 lines a poll for one such item, as long as it stayed (adv35).
        options.logger?.debug({ instanceId: id, offset }, 'config instance too large to fetch');
        offset += 1;
        anchor = undefined;
        unanchored = true;
        limit = shrunkFrom;
        shrunkFrom = undefined;
        if (id !== undefined) {
          seen.add(id);
          lastId = id;
        }
        continue;
      }
      options.logger?.debug({ offset, limit }, 'page too large: asking for smaller pages');
      continue;
    }
    shrunkFrom = undefined;
    const { head, items } = page;
    budget.bytes += page.bytes;
    if (items.length > 0) {
      const perItem = page.bytes / items.length;
      budget.itemBytes =
        budget.itemBytes === 0 ? perItem : Math.max(perItem, (budget.itemBytes + perItem) / 2);
    }
    pages += 1;
    if (budget.bytes > budget.maxBytes) {
      throw new ListingRunawayError(`the listing passed ${budget.maxBytes} bytes`);
    }
    if (head.offset !== offset) {
      throw new ListingRunawayError(`asked for offset ${offset}, the page says offset ${head.offset}`);
    }
    listing.pages = pages;
    if (head.total_count >= 0) {
      if (firstTotal === undefined) firstTotal = head.total_count;
      else if (head.total_count !== firstTotal) {
        return new Shifted(`total_count went from ${firstTotal} to ${head.total_count}`);
      }
    } else {
      // Asked for on every page: -1 (some pages or all) leaves the listing unproven (pullConfigInstances).
      listing.uncounted += 1;
    }
    // Items are judged one at a time, as they are taken (api/list-page.ts PageItems), and none is kept here.
    let start = 0;
    if (anchor !== undefined) {
      const first = itemId(items.at(0, options.knownItems));
      if (first !== anchor) {
        return new Shifted(
          `the page at offset ${offset} began with ${first ?? 'nothing'} instead of ${anchor}, the last item of the page before`,
        );
      }
      start = 1;
    }
    const fresh = items.length - start;
    /** The id of the page's last item, read as it is taken. */
    let last: string | undefined;
    for (let index = start; index < items.length; index += 1) {
      const item = items.at(index, options.knownItems)!;
      const id = itemId(item);
      last = id;
      budget.items += 1;
      if (budget.items > budget.maxItems) {
        throw new ListingRunawayError(`more than ${budget.maxItems} config instances`);
      }
      if (id !== undefined && seen.has(id)) {
        // Only a boundary the overlap did not check lets a shift list an id again; otherwise the service listed
        // one id twice (in one page, or out of id order), maybe with different content or path: neither copy
        // is used, the id is named (a first-one-wins would pick by page layout and could flap between passes).
        if (anchor === undefined && offset > 0) return new Shifted(`${id} was listed twice`);
        const earlier = keptHeads.get(id);
        if (earlier !== undefined || keep.item(item)) {
          duplicated.add(id);
          keptHeads.set(id, earlier === undefined ? headOf(item) : newerHead(earlier, headOf(item)));
        }
        continue;
      }
      if (id !== undefined) {
        seen.add(id);
        lastId = id;
      }
      if (keep.item(item)) {
        kept += 1;
        if (id !== undefined) keptHeads.set(id, headOf(item));
        await take(item, listing, keep);
      }
    }
    if (pages === 1 && keep.giveUpBelow !== undefined && head.has_more && kept < keep.giveUpBelow * fresh) {
      return new GaveUp();
    }
    const covered = offset + items.length;
    if (firstTotal !== undefined && covered > firstTotal) {
      throw new ListingRunawayError(`${covered} items listed, more than the total_count of ${firstTotal}`);
    }
    // An empty page right past all that total_count counts ends the listing whatever has_more says: a service
    // whose has_more is always true stopped every pass as a runaway, nothing ever synced (adv20).
    const pastTheCount =
      head.has_more && items.length === 0 && firstTotal !== undefined && covered === firstTotal;
    if (pastTheCount) {
      // Once per process while the service keeps doing so (tellOnce), then at debug: a line every poll (adv35).
      const level = options.tellOnce?.(PAST_THE_COUNT, 'past') === false ? 'debug' : 'warn';
      options.logger?.[level](
        { covered, totalCount: firstTotal },
        'has_more is true past total_count: the listing ends',
      );
    }
    if (!head.has_more || pastTheCount) {
      if (firstTotal !== undefined && covered !== firstTotal) {
        const problem = `the listing ended after ${covered} items, total_count said ${firstTotal}`;
        // Only a boundary the overlap did not check can hide a shift; otherwise the count itself is off. Every
        // try ending so (pages of one, over a count that is off) is the count's fault too: a shift the boundary
        // hid can have left an item out, never listed one twice (that is a shift of its own, above), so the
        // listing is used as incomplete. It failed every pass with listing_unstable, nothing synced (adv20).
        if (unanchored && !lastTry) return new Shifted(problem);
        // The count is off, or the service cut the listing short: the pages read are used, but the instances
        // past them may want paths, so nothing is removed on the ground that nobody does (adv20: a service that
        // ended a listing early had the file of an instance it listed `deployed` deleted).
        options.logger?.warn({ covered, totalCount: firstTotal }, problem);
        listing.incomplete = problem;
      }
      for (const id of duplicated) {
        const { activityStatus, errorStatus } = keptHeads.get(id) ?? {};
        listing.invalid.push({
          id,
          ...(activityStatus === undefined ? {} : { activityStatus }),
          ...(errorStatus === undefined ? {} : { errorStatus }),
          problem: DUPLICATED,
          listingFault: true,
        });
      }
      return listing;
    }
    if (fresh === 0) {
      // A page may hold fewer items than asked (a service capping pages by bytes): one holding the anchor alone
      // is stepped past, unanchored, as a page of one is; an empty one with has_more is a runaway.
      if (start === 0) {
        throw new ListingRunawayError(`has_more is true on a page with nothing new at offset ${offset}`);
      }
      offset = covered;
      anchor = undefined;
      unanchored = true;
      continue;
    }
    // The next page is sized by what the pages so far weighed.
    limit = sized();
    // A page of one item would next start on that item alone.
    if (limit > 1 && items.length > 1 && last !== undefined) {
      offset = covered - 1;
      anchor = last;
    } else {
      offset = covered;
      anchor = undefined;
      unanchored = true;
    }
  }
}

async function take<I>(item: PageItem, listing: Listing<I>, keep: Keep<I>): Promise<void> {
  switch (item.kind) {
    case 'valid':
      listing.instances.push(await keep.prepare(item.instance, item.wire));
      return;
    case 'unknown_status':
      listing.skipped.push({
        id: item.instance.id,
        deviceId: item.instance.device_id,
        relativeFilepath: item.instance.relative_filepath,
        unknown: item.unknown,
      });
      return;
    case 'invalid': {
      const { kind: _kind, targetStatus: _target, ...rest } = item;
      listing.invalid.push(rest);
      return;
    }
  }
}

/** What a listing remembers of each item it kept: enough to tell which of two copies of one id is newer. */
interface ItemHead {
  updatedAt?: string;
  activityStatus?: ConfigInstanceActivityStatus;
  errorStatus?: ErrorStatus;
}

function headOf(item: PageItem): ItemHead {
  if (item.kind === 'unknown_status') return {};
  if (item.kind === 'invalid') {
    const { activityStatus, errorStatus } = item;
    return {
      ...(activityStatus === undefined ? {} : { activityStatus }),
      ...(errorStatus === undefined ? {} : { errorStatus }),
    };
  }
  return headOfInstance(item.instance);
}

function headOfInstance(instance: ConfigInstanceHead): ItemHead {
  return {
    activityStatus: instance.activity_status,
    errorStatus: instance.error_status,
    updatedAt: instance.updated_at,
  };
}

/**
 * The head of whichever copy was updated last; when neither is known to be newer, only what both copies agree
 * on (the service's statuses of the id are then unknown where they differ).
 */
export function newerHead(a: ItemHead, b: ItemHead): ItemHead {
  const order = compareUpdatedAt(a.updatedAt, b.updatedAt);
  if (order > 0) return a;
  if (order < 0) return b;
  return {
    ...(a.updatedAt === undefined ? {} : { updatedAt: a.updatedAt }),
    ...(a.activityStatus === b.activityStatus && a.activityStatus !== undefined
      ? { activityStatus: a.activityStatus }
      : {}),
    ...(a.errorStatus === b.errorStatus && a.errorStatus !== undefined ? { errorStatus: a.errorStatus } : {}),
  };
}

/** Positive when `a` is the later instant, negative when `b` is, 0 when equal or either is unknown. */
export function compareUpdatedAt(a: string | undefined, b: string | undefined): number {
  if (a === undefined || b === undefined) return 0;
  return compareInstants(a, b) ?? 0;
}

/** The fields of an item a query filters on; unreadable fields and status values unknown to the agent are absent. */
function fieldsOf(item: PageItem): Partial<Record<keyof ConfigInstanceFilters, unknown>> {
  switch (item.kind) {
    case 'valid':
      return item.instance;
    case 'unknown_status':
      return { ...item.instance, [item.unknown.field]: undefined };
    case 'invalid':
      return {
        id: item.id,
        device_id: item.deviceId,
        target_status: item.targetStatus,
        activity_status: item.activityStatus,
        error_status: item.errorStatus,
      };
  }
}

/**
 * Whether the service would list `item` for `filters` (equality on every field the filters name). A field the
 * agent cannot read, or holding a status value it does not know, counts as matching: the service may have
 * filtered on it, and an item kept is named (invalid) or protects its path (skipped) where one dropped would
 * leave its file looking unowned.
 */
export function matches(item: PageItem, filters: ConfigInstanceFilters): boolean {
  return matcherOf([filters])(item);
}

type FilterEntries = [keyof ConfigInstanceFilters, unknown][];

/**
 * Whether some of `queries` would list an item (`matches`), with each query's fields listed once, not once per
 * item: the wide listing asks it of every item it lists (~2 ms of an idle pass at 1,000 went to those listings).
 */
function matcherOf(queries: readonly ConfigInstanceFilters[]): (item: PageItem) => boolean {
  const wanted = queries.map((filters) =>
    (Object.entries(filters) as FilterEntries).filter(([, value]) => value !== undefined),
  );
  return (item) => {
    const fields = fieldsOf(item);
    return wanted.some((entries) => {
      for (const [key, value] of entries) {
        const field = fields[key];
        if (field !== undefined && field !== value) return false;
      }
      return true;
    });
  };
}

/**
 * What can be read of the one item of a page over the cap from the body's first bytes: its id and, when they
 * come before its content, its device and statuses (the service's field order decides).
 */
function peekHead(
  bodyPrefix: string,
): Pick<InvalidListItem, 'id' | 'deviceId' | 'activityStatus' | 'errorStatus'> {
  const id = peekId(bodyPrefix, 3);
  const fields = peekStrings(bodyPrefix, 3, ['device_id', 'activity_status', 'error_status']);
  const activity = ActivityStatus.safeParse(fields.activity_status);
  const error = ErrorStatusSchema.safeParse(fields.error_status);
  return {
    ...(id === undefined ? {} : { id }),
    ...(fields.device_id === undefined ? {} : { deviceId: fields.device_id }),
    ...(activity.success ? { activityStatus: activity.data } : {}),
    ...(error.success ? { errorStatus: error.data } : {}),
  };
}
