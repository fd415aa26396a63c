// Durable queue of status reports: written before they are sent, sent in order, dropped once acknowledged.
import path from 'node:path';
import * as z from 'zod';
import { StatusReport } from '../api/schemas.js';
import type { WallClock } from '../lib/clock.js';
import { errnoCode } from '../lib/errors.js';
import type { FsPort } from '../lib/fs-port.js';
import { JsonRecordWalker, type RecordShape } from '../lib/json-records.js';
import type { JsonWeight } from '../lib/json-weigher.js';
import type { Logger } from '../lib/logger.js';
import { writeDurableJson } from './durable-writer.js';
import {
  MAX_STATE_FILE_DEPTH,
  readStateDirFileOrSetAside,
  renameAsideUnique,
  type StateFileWalk,
  WALKED,
  WALKED_BYTES,
  WEIGHED_INSTANCES,
} from './state.js';

export const OUTBOX_FILE = 'outbox.json';
/** A symlinked outbox's target larger than this is not read (~200 bytes a report: 300,000 reports). */
const MAX_SALVAGED_OUTBOX_BYTES = 64 * 1024 * 1024;

/**
 * The file's bounds (state.ts `readStateDirFile`): a report with every member (`{`, seven members, its report's
 * `{` and three, the comma after it: 21 tokens), two for each instance (the file keeps one an instance, the newest;
 * twice that for the instances of earlier listings whose reports wait). A real outbox of 200,000 reports holds 3.6
 * million (18 each); parsed, it peaked at ~250 MB (docs/performance-history.md, weigh27).
 */
export const OUTBOX_WEIGHT: JsonWeight = {
  maxTokens: 21 * 2 * WEIGHED_INSTANCES + 16,
  maxDepth: MAX_STATE_FILE_DEPTH,
};

/**
 * The outbox file's zod schemas, built the first time a file with queued reports is read: most starts find an
 * empty outbox, which `emptyOutboxFile` takes by hand.
 */
function buildOutboxSchemas() {
  const OutboxEntry = z.object({
    seq: z.number().int().min(0),
    instanceId: z.string().min(1),
    report: StatusReport,
    queuedAt: z.string(),
    /** Deliveries of this report that failed on their own (`skip`): its backoff grows with them. */
    attempts: z.number().int().min(0).optional(),
    /**
     * The instance's `updated_at` and version (reconcile/report.ts `listedVersion`) as last listed before the
     * report went out: a report sent before its process's first listing (left queued by an earlier run) takes
     * its echo's "before" from here. A malformed one is dropped alone, never the entry (older agents wrote none).
     */
    listedUpdatedAt: z.string().optional().catch(undefined),
    listedVersion: z.string().optional().catch(undefined),
  });
  const OutboxFile = z.object({
    version: z.literal(1),
    nextSeq: z.number().int().min(0),
    entries: z.array(OutboxEntry),
  });
  return { OutboxEntry, OutboxFile };
}
type OutboxSchemas = ReturnType<typeof buildOutboxSchemas>;
let builtOutboxSchemas: OutboxSchemas | undefined;
export function outboxSchemas(): OutboxSchemas {
  builtOutboxSchemas ??= buildOutboxSchemas();
  return builtOutboxSchemas;
}
export type OutboxEntry = z.infer<OutboxSchemas['OutboxEntry']>;
/** An instance's `updated_at` and version as listed (`OutboxEntry.listedUpdatedAt`, `listedVersion`). */
export interface ListedBefore {
  updatedAt: string;
  version?: string;
}
type OutboxFile = z.infer<OutboxSchemas['OutboxFile']>;

/**
 * An outbox file with no queued report, checked by hand: what `OutboxFile.parse` gives for it (unknown fields
 * dropped), or undefined for anything else, which zod judges. src/store/outbox.test.ts compares the two.
 */
export function emptyOutboxFile(value: unknown): OutboxFile | undefined {
  if (typeof value !== 'object' || value === null || Array.isArray(value)) return undefined;
  const { version, nextSeq, entries } = value as Record<string, unknown>;
  if (version !== 1 || !Number.isSafeInteger(nextSeq) || (nextSeq as number) < 0) return undefined;
  if (!Array.isArray(entries) || entries.length !== 0) return undefined;
  return { version, nextSeq: nextSeq as number, entries: [] };
}

/** The outbox file as zod judges it; see `emptyOutboxFile`. */
function parseOutboxFile(value: unknown): z.ZodSafeParseResult<OutboxFile> {
  const empty = emptyOutboxFile(value);
  if (empty !== undefined) return { success: true, data: empty };
  return outboxSchemas().OutboxFile.safeParse(value);
}

/**
 * outbox.json read a report at a time (`JsonRecordWalker`): each entry parsed alone and judged by zod's
 * `OutboxEntry` as `OutboxFile` judges it, only its output kept; the file's other members judged as before once
 * it ended. `parsed` is what `parseOutboxFile(JSON.parse(text))` gives; an entry refused (or anything the walk
 * does not take) gives the walk up, and the text is read and judged as before. Parsed whole, an outbox of
 * 200,000 reports peaked at ~230 MB (the text, its tree and the entries together); walked, ~130 MB (stream28).
 */
export function outboxFileWalk(
  fromBytes = WALKED_BYTES,
): StateFileWalk & { parsed(): OutboxFile | undefined } {
  let entries: OutboxEntry[] = [];
  let parsed: OutboxFile | undefined;
  const leaf: RecordShape = { kind: 'leaf' };
  const walker = new JsonRecordWalker({
    kind: 'object',
    members: new Map<string, RecordShape>([
      ['version', leaf],
      ['nextSeq', leaf],
      [
        'entries',
        {
          kind: 'items',
          item: (value) => {
            const entry = outboxSchemas().OutboxEntry.safeParse(value);
            if (!entry.success) return false;
            entries.push(entry.data);
            return true;
          },
        },
      ],
    ]),
  });
  return {
    fromBytes,
    walker,
    release: () => {
      entries = [];
      parsed = undefined;
    },
    parsed: () => parsed,
    accept() {
      const top = walker.top;
      if (top.get('entries') !== true) return false;
      const file = parseOutboxFile({ version: top.get('version'), nextSeq: top.get('nextSeq'), entries: [] });
      if (!file.success) return false;
      parsed = { ...file.data, entries };
      return true;
    },
  };
}

/** How a failed delivery is judged; see `StatusOutbox.flush`. */
export type DeliveryVerdict = 'stop' | 'skip' | 'drop';

export interface FlushResult {
  delivered: OutboxEntry[];
  rejected: { entry: OutboxEntry; error: unknown }[];
  /** Reports that failed on their own and stay queued. */
  skipped: { entry: OutboxEntry; error: unknown }[];
  /** Set when delivery stopped early because the service could not take reports; the rest stay queued. */
  deferredBy: unknown;
  /** Set when the outbox file could not be rewritten after delivery. */
  persistError?: unknown;
  /** Reports not sent because their backoff after a failure of their own has not elapsed; they stay queued. */
  backingOff: number;
  /** Set when nothing was sent because an earlier stop's Retry-After has not elapsed (`deferredBy` is that stop). */
  heldUntil?: number;
}

/**
 * When a report that failed on its own (`skip`) may be sent again. `now` is monotonic; `delayMs` is given the
 * report's failed deliveries so far (1 after the first) and the error of the last one.
 */
export interface DeliveryBackoff {
  now: () => number;
  delayMs: (attempts: number, error: unknown) => number;
  /**
   * How long a `stop` asks every report to wait (the service's Retry-After, capped), or undefined: no flush
   * with this backoff sends anything before that has passed.
   */
  holdMs?: (error: unknown) => number | undefined;
  /** Refused reports remembered for their backoff at most (default MAX_REFUSED_REMEMBERED). */
  maxRemembered?: number;
}

/**
 * What flushes side by side share (a pass's deliveries): a bound on their sends in flight together, and the
 * stop — a `stop` verdict in any of them sets `stopped`, and none sends anything more.
 */
export class SharedSends {
  stopped = false;
  readonly #limit: number;
  #sending = 0;
  #waiting: Array<() => void> = [];

  constructor(limit: number) {
    this.#limit = Math.max(1, Math.floor(limit));
  }

  /** Takes a place for one send when one is free, synchronously (no other send can slip in between). */
  tryTake(): boolean {
    if (this.#sending >= this.#limit) return false;
    this.#sending++;
    return true;
  }

  /** Resolves once some send has given its place back. */
  freed(): Promise<void> {
    return new Promise((resolve) => this.#waiting.push(resolve));
  }

  giveBack(): void {
    this.#sending--;
    const waiting = this.#waiting;
    this.#waiting = [];
    for (const wake of waiting) wake();
  }
}

/**
 * Refused reports remembered for their backoff (`StatusOutbox` #refused), the least recently refused forgotten
 * first: a forgotten one derived again goes at once, one PATCH more. As many as a pull takes instances
 * (api/pager.ts PAGER_DEFAULTS.maxItems): at 1,000, a device of more instances whose every report the service
 * refused forgot most of them each pass and sent them again on every poll (9,000 PATCHes a poll at 10,000). What
 * keeps the map small is `retainRefused`: instances the agent no longer knows (the service deleted them) go.
 */
export const MAX_REFUSED_REMEMBERED = 100_000;

export class StatusOutbox {
  readonly #fs: FsPort;
  readonly #stateDir: string;
  readonly #logger: Logger;
  #entries: OutboxEntry[] = [];
  /**
   * Instances whose queued report a newer one replaced since `#entries` was last compacted (`#live`): their older
   * entries are dropped at the next read, in one pass. Filtered out at each replacement, n replacements (a device
   * whose reports the service refuses while its instances change status) cost n² (20,000: 38 s of CPU; adv23).
   */
  readonly #replacedIds = new Set<string>();
  /** The first queued entry of each instance: a first sync queues one per file, and a scan each was O(n²). */
  #byInstance = new Map<string, OutboxEntry>();
  #nextSeq = 0;
  #ephemeral = false;
  /**
   * The monotonic time before which a report that failed on its own is not sent again, by seq. In memory only:
   * a restart (an operator who fixed something, a `--once` run) tries every report at once.
   */
  #notBefore = new Map<number, number>();
  /** A stop with a Retry-After: no report goes before this monotonic time (in memory only, as `#notBefore`). */
  #held: { until: number; by: unknown } | undefined;
  /**
   * The last report of each instance the service refused for good (`drop`), how often in a row, and when the
   * same report queued again (a later pass derives it again while the service still shows the instance as
   * before) may go: the backoff of a report failing on its own. In memory only: a restart sends it at once.
   */
  #refused = new Map<string, { report: StatusReport; refusals: number; notBefore: number }>();
  /**
   * The send in flight for each instance, whichever flush started it: flushes may run side by side (a pass
   * delivers while it writes), and an instance's later report waits for its earlier one to settle.
   */
  readonly #inFlight = new Map<string, Promise<unknown>>();

  /**
   * Forgets the refused reports of instances `known` does not hold (a full pass's state, record.ts
   * forgetUnseen): an instance the service deleted is never reported again, so its entry would stay for good.
   */
  retainRefused(known: { has(instanceId: string): boolean }): void {
    for (const instanceId of this.#refused.keys())
      if (!known.has(instanceId)) this.#refused.delete(instanceId);
  }

  /**
   * The service answered `report` 2xx and recorded nothing (reconcile/report.ts `UnrecordedReports`): the same
   * report queued again waits until `notBefore` (monotonic), as a refused one does; queued, never dropped.
   */
  holdBack(instanceId: string, report: StatusReport, times: number, notBefore: number): void {
    this.#refused.delete(instanceId);
    this.#refused.set(instanceId, { report, refusals: times, notBefore });
    if (this.#refused.size > MAX_REFUSED_REMEMBERED) {
      const oldest = this.#refused.keys().next().value;
      if (oldest !== undefined) this.#refused.delete(oldest);
    }
  }

  private constructor(fs: FsPort, stateDir: string, logger: Logger) {
    this.#fs = fs;
    this.#stateDir = stateDir;
    this.#logger = logger;
  }

  /**
   * `euid`: the agent's user. An outbox.json that is not a regular file is moved aside (its reports would
   * otherwise stop start-up for good); when it is a symlink to a regular file of that user's that nobody else
   * can write, the reports in it are kept. `clock` stamps the name it is moved aside to.
   */
  static async open(
    fs: FsPort,
    stateDir: string,
    logger: Logger,
    clock: WallClock,
    euid: number | undefined = process.geteuid?.(),
  ): Promise<StatusOutbox> {
    const outbox = new StatusOutbox(fs, stateDir, logger);
    await outbox.#load(clock, euid);
    return outbox;
  }

  /** An in-memory outbox for dry runs: it is never persisted. */
  static ephemeral(fs: FsPort, stateDir: string, logger: Logger): StatusOutbox {
    const outbox = new StatusOutbox(fs, stateDir, logger);
    outbox.#ephemeral = true;
    return outbox;
  }

  get size(): number {
    return this.#live().length;
  }

  pending(): readonly OutboxEntry[] {
    return this.#live();
  }

  pendingFor(instanceId: string): OutboxEntry | undefined {
    return this.#byInstance.get(instanceId);
  }

  /** The monotonic time before which no report is sent (a stop's Retry-After), while one is in force at `now`. */
  heldUntil(now: number): number | undefined {
    return this.#held !== undefined && this.#held.until > now && this.#live().length > 0
      ? this.#held.until
      : undefined;
  }

  /** Reports queued since the outbox was opened or made, replaced ones included: grows with every `enqueue`. */
  get queuedEver(): number {
    return this.#nextSeq;
  }

  /**
   * Queues a report in memory; `persist()` makes it durable. A newer report for the same instance replaces
   * an undelivered older one: only the latest status matters, and it keeps the outbox bounded by the
   * number of instances however long the device is offline.
   */
  enqueue(instanceId: string, report: StatusReport, now: Date, listedUpdatedAt?: string): void {
    const replaced = this.#byInstance.get(instanceId);
    if (replaced !== undefined) {
      this.#replacedIds.add(instanceId);
      this.#notBefore.delete(replaced.seq);
    }
    const entry: OutboxEntry = { seq: this.#nextSeq++, instanceId, report, queuedAt: now.toISOString() };
    if (listedUpdatedAt !== undefined) entry.listedUpdatedAt = listedUpdatedAt;
    this.#entries.push(entry);
    this.#byInstance.set(instanceId, entry);
  }

  /**
   * Gives each queued report its instance as listed now (`listed(instanceId)`, when it knows it); true when any
   * changed, so the file must be rewritten for a later process to see them (`OutboxEntry.listedUpdatedAt`).
   */
  relist(listed: (instanceId: string) => ListedBefore | undefined): boolean {
    let changed = false;
    for (const entry of this.#live()) {
      const now = listed(entry.instanceId);
      if (now === undefined) continue;
      if (entry.listedUpdatedAt === now.updatedAt && entry.listedVersion === now.version) continue;
      entry.listedUpdatedAt = now.updatedAt;
      if (now.version === undefined) delete entry.listedVersion;
      else entry.listedVersion = now.version;
      changed = true;
    }
    return changed;
  }

  /** `ensureDurable`: fsync the file even when its bytes are unchanged (see `PublishRequest.ensureDurable`). */
  async persist(options: { ensureDurable?: boolean } = {}): Promise<void> {
    if (this.#ephemeral) return;
    await writeDurableJson(
      this.#fs,
      this.#stateDir,
      OUTBOX_FILE,
      { version: 1, nextSeq: this.#nextSeq, entries: this.#live() },
      0o600,
      options,
    );
  }

  /**
   * Sends the queued reports in queue order, up to `concurrency` at a time (default 1). `classify` judges a
   * failure: `stop` (the service cannot take any report now: send nothing more, keep this and the rest for
   * the next flush; sends already in flight still settle), `skip` (this report failed on its own: keep it,
   * go on — there is one report per instance, so order across instances protects nothing and concurrent
   * sends never reorder one instance's reports), `drop` (the service will never accept it, e.g. the instance
   * is gone: one poisoned report never blocks the others). The file is rewritten once, at the end, unless
   * `persist` is false (the caller rewrites it before its next flush). `select`: only the queued reports it
   * picks are sent. Reports may be queued while a flush runs: they wait for the next one, and a report
   * replaced by a newer one before its turn is not sent (the newer one goes next time, so an instance's reports
   * are never reordered). `backoff`: a skipped report counts an attempt (persisted) and is not sent again before
   * its delay has passed — it is never dropped for failing on its own, only replaced by a newer report of its
   * instance, which goes at once. Flushes may run side by side: a report whose instance has a report in flight
   * in another flush is sent only once that one has settled (two reports of one instance are never in flight
   * together, and the later never overtakes the earlier). `shared`: flushes side by side keep to its bound on
   * sends in flight together (and `concurrency` each), and a `stop` in any of them ends them all.
   */
  async flush(
    send: (entry: OutboxEntry) => Promise<void>,
    classify: (error: unknown) => DeliveryVerdict,
    options: {
      concurrency?: number;
      select?: (entry: OutboxEntry) => boolean;
      persist?: boolean;
      backoff?: DeliveryBackoff;
      shared?: SharedSends;
    } = {},
  ): Promise<FlushResult> {
    const concurrency = Math.max(1, Math.floor(options.concurrency ?? 1));
    const result: FlushResult = {
      delivered: [],
      rejected: [],
      skipped: [],
      deferredBy: undefined,
      backingOff: 0,
    };
    const settled = new Set<number>();
    const { backoff } = options;
    const startedAt = backoff?.now();
    // The service asked for a wait (a 503 or 429 with Retry-After): nothing goes sooner, a new report neither.
    if (startedAt !== undefined && this.#held !== undefined && this.#held.until > startedAt) {
      result.deferredBy = this.#held.by;
      result.heldUntil = this.#held.until;
      return result;
    }
    const due = (entry: OutboxEntry) => {
      const refused = this.#refused.get(entry.instanceId);
      if (
        startedAt !== undefined &&
        refused !== undefined &&
        refused.notBefore > startedAt &&
        sameStatusReport(refused.report, entry.report)
      ) {
        result.backingOff++;
        return false;
      }
      const notBefore = this.#notBefore.get(entry.seq);
      if (startedAt === undefined || notBefore === undefined || notBefore <= startedAt) return true;
      result.backingOff++;
      return false;
    };
    const live = this.#live();
    const picked = options.select === undefined ? live : live.filter(options.select);
    const queue = picked.filter(due);
    let next = 0;
    const shared = options.shared ?? new SharedSends(concurrency);
    const deliverNext = async (): Promise<void> => {
      while (!shared.stopped && next < queue.length) {
        const entry = queue[next++]!;
        // An earlier report of the instance in flight (another flush) settles first; then a place among the sends.
        for (;;) {
          const earlier = this.#inFlight.get(entry.instanceId);
          if (earlier !== undefined) await earlier;
          else if (shared.tryTake()) break;
          else await shared.freed();
        }
        let inFlight: Promise<unknown> | undefined;
        try {
          // Not sent, still queued: the next flush takes it.
          if (shared.stopped) break;
          if (this.#replaced(entry)) continue;
          const sending = send(entry);
          inFlight = sending.catch(() => undefined);
          this.#inFlight.set(entry.instanceId, inFlight);
          await sending;
          result.delivered.push(entry);
          settled.add(entry.seq);
          this.#refused.delete(entry.instanceId);
        } catch (error) {
          const verdict = classify(error);
          if (verdict === 'stop') {
            if (result.deferredBy === undefined) result.deferredBy = error;
            shared.stopped = true;
            const holdMs = backoff?.holdMs?.(error);
            if (backoff !== undefined && holdMs !== undefined && holdMs > 0) {
              const until = backoff.now() + holdMs;
              if (this.#held === undefined || until > this.#held.until) this.#held = { until, by: error };
            }
          } else if (verdict === 'skip') {
            result.skipped.push({ entry, error });
            entry.attempts = (entry.attempts ?? 0) + 1;
            if (backoff !== undefined)
              this.#notBefore.set(entry.seq, backoff.now() + backoff.delayMs(entry.attempts, error));
          } else {
            this.#logger.error(
              { err: error, instanceId: entry.instanceId },
              'status report rejected by the service: dropped',
            );
            result.rejected.push({ entry, error });
            settled.add(entry.seq);
            if (backoff !== undefined) {
              const before = this.#refused.get(entry.instanceId);
              const refusals =
                before !== undefined && sameStatusReport(before.report, entry.report)
                  ? before.refusals + 1
                  : 1;
              const notBefore = backoff.now() + backoff.delayMs(refusals, error);
              // Kept in order of the last refusal; an instance the service deleted is never reported again,
              // so without a bound a daemon running for weeks kept one entry per such instance for good.
              this.#refused.delete(entry.instanceId);
              this.#refused.set(entry.instanceId, { report: entry.report, refusals, notBefore });
              if (this.#refused.size > (backoff.maxRemembered ?? MAX_REFUSED_REMEMBERED)) {
                const oldest = this.#refused.keys().next().value;
                if (oldest !== undefined) this.#refused.delete(oldest);
              }
            }
          }
        } finally {
          if (inFlight !== undefined && this.#inFlight.get(entry.instanceId) === inFlight)
            this.#inFlight.delete(entry.instanceId);
          shared.giveBack();
        }
      }
    };
    await Promise.all(Array.from({ length: Math.min(concurrency, queue.length) }, deliverNext));
    // A skipped report's attempts are persisted too: they are what its backoff and its warning go by.
    if (settled.size > 0 || result.skipped.length > 0) {
      if (settled.size > 0) {
        // Not compacted here: `#index()` does it, with the index it replaces.
        this.#entries = this.#entries.filter((entry) => !settled.has(entry.seq));
        for (const seq of settled) this.#notBefore.delete(seq);
        this.#index();
      }
      if (options.persist === false) return result;
      try {
        await this.persist();
      } catch (error) {
        // Memory is right; the file still lists delivered reports, which are resent harmlessly after a crash.
        result.persistError = error;
      }
    }
    return result;
  }

  /** A newer report for the instance was queued after this one (while a flush ran). */
  #replaced(entry: OutboxEntry): boolean {
    return (this.#byInstance.get(entry.instanceId)?.seq ?? -1) > entry.seq;
  }

  /**
   * The queued entries, the ones a newer report of their instance replaced dropped first: what `enqueue`'s
   * filter at each replacement left (every entry of a replaced instance but its newest).
   */
  #live(): OutboxEntry[] {
    if (this.#replacedIds.size === 0) return this.#entries;
    const replaced = this.#replacedIds;
    this.#entries = this.#entries.filter(
      (entry) => !replaced.has(entry.instanceId) || this.#byInstance.get(entry.instanceId) === entry,
    );
    replaced.clear();
    return this.#entries;
  }

  /**
   * Rebuilds the index from the queue, compacted first: `#live()` keeps a replaced instance's entry only when
   * the index names it, so an index emptied before it would drop the newest reports too (whatever the caller).
   */
  #index(): void {
    const live = this.#live();
    this.#byInstance = new Map();
    for (const entry of live) {
      if (!this.#byInstance.has(entry.instanceId)) this.#byInstance.set(entry.instanceId, entry);
    }
  }

  async #load(clock: WallClock, euid: number | undefined): Promise<void> {
    const walk = outboxFileWalk();
    const raw = await readStateDirFileOrSetAside(this.#fs, this.#stateDir, OUTBOX_FILE, this.#logger, {
      clock,
      salvageSymlink: { euid, maxBytes: MAX_SALVAGED_OUTBOX_BYTES },
      weight: OUTBOX_WEIGHT,
      walk,
    });
    if (raw === undefined) return;
    const walked = raw === WALKED ? walk.parsed() : undefined;
    if (raw !== WALKED && typeof raw !== 'string') {
      await this.#setAsideOverweight(raw, clock);
      return;
    }
    const parsed: z.ZodSafeParseResult<OutboxFile> =
      walked !== undefined
        ? { success: true, data: walked }
        : parseOutboxFile(typeof raw === 'string' ? safeJsonParse(raw) : undefined);
    if (!parsed.success) {
      // Losing queued reports is recoverable: the next full pass re-derives every status from disk and server.
      this.#logger.error({ file: OUTBOX_FILE }, 'status outbox is corrupt: starting empty');
      return;
    }
    this.#entries = parsed.data.entries;
    this.#index();
    // A loop, not Math.max(...spread): 200,000 queued reports as arguments overflow the call stack.
    let nextSeq = parsed.data.nextSeq;
    for (const entry of this.#entries) if (entry.seq >= nextSeq) nextSeq = entry.seq + 1;
    this.#nextSeq = nextSeq;
  }

  /**
   * An outbox heavier than any the agent writes (more reports than it queues, or nested deeper): never parsed,
   * which could cost more memory than the device has at every start. Its reports are not sent: the file is kept
   * aside as `outbox.json.overweight-<ms>` for an operator (never read again), and the agent starts with an empty
   * queue, as with a corrupt one. The next full pass reports every instance the service lists again from disk and
   * server; reports of instances it no longer lists are lost (docs/operations.md).
   */
  async #setAsideOverweight(refusal: unknown, clock: WallClock): Promise<void> {
    const file = path.join(this.#stateDir, OUTBOX_FILE);
    let aside: string | undefined;
    let setAsideError: unknown;
    try {
      aside = await renameAsideUnique(this.#fs, file, `${file}.overweight-${clock.now()}`);
    } catch (error) {
      // ENOENT: a symlink's target was weighed; the symlink is moved aside already, its target left where it is.
      if (errnoCode(error) !== 'ENOENT') setAsideError = error;
    }
    this.#logger.error(
      { err: refusal, file: OUTBOX_FILE, aside, ...(setAsideError === undefined ? {} : { setAsideError }) },
      'status outbox is heavier than any the agent writes: its reports are not sent (kept aside when named), starting empty; the next full pass reports every listed instance again, reports of instances no longer listed are lost',
    );
  }
}

function sameStatusReport(a: StatusReport, b: StatusReport): boolean {
  return (
    a.activity_status === b.activity_status && a.error_status === b.error_status && a.message === b.message
  );
}

function safeJsonParse(text: string): unknown {
  try {
    return JSON.parse(text);
  } catch {
    return undefined;
  }
}
