// The typed service client: one method per endpoint, every response validated, every failure classified.
import { isUtf8 } from 'node:buffer';
import type { Readable } from 'node:stream';
import type { Dispatcher } from 'undici';
import type { z } from 'zod';
import { type Clock, systemClock } from '../lib/clock.js';
import { AgentError, errnoCode, errorMessage } from '../lib/errors.js';
import { formatFieldPath } from '../lib/field-path.js';
import { REDACTED } from '../lib/secrets.js';
import { AnswerScanner, answerScanLimit } from './answer-scan.js';
import {
  HttpStatusError,
  InvalidArgumentError,
  InvalidResponseError,
  MalformedResponseError,
  NetworkError,
  type RequestTarget,
  ResponseTooLargeError,
  TimeoutError,
} from './errors.js';
import {
  cutListBody,
  cutListBytes,
  isUsableInstanceId,
  JsonTextError,
  NATIVE_SPLIT_MAX_CHARS,
  parseCompactListBody,
  parseJson,
  peekId,
  peekStrings,
} from './json.js';
import { withoutBom } from './json-bytes.js';
import {
  ACTIVITY_STATUSES,
  type ConfigInstancePage,
  ERROR_STATUSES,
  isTimestamp,
  type KnownPages,
  knownPageTexts,
  ListHead,
  PageItems,
  STREAMED_ITEM_BYTES,
} from './list-page.js';
import type { ProxySettings } from './proxy.js';
import {
  type ConfigInstance,
  type ConfigInstanceFilters,
  ConfigInstanceList,
  type ConfigInstanceListExpand,
  Deployment,
  type DeploymentExpand,
  DeployResponse,
  Device,
  type DeviceFilters,
  DeviceList,
  ErrorBody,
  INSTANCE_PLACE_FIELDS,
  type ListEnvelope,
  type ListExpand,
  type Release,
  type ReleaseFilters,
  ReleaseList,
  STATUS_MESSAGE_MAX,
  StatusReport,
} from './schemas.js';
import { isStaleConnectionError } from './stale-connection.js';
import {
  createServiceTransport,
  dispatcherTransport,
  type RequestSignal,
  type Transport,
  type TransportResponse,
} from './transport.js';

export type RequestOutcome =
  | 'ok'
  | 'http_error'
  | 'network_error'
  | 'timeout'
  | 'invalid_response'
  | 'malformed_response'
  | 'response_too_large';

export interface RequestEvent {
  method: string;
  route: string;
  outcome: RequestOutcome;
  status?: number;
  durationMs: number;
}

export interface ClientOptions {
  baseUrl: string;
  /** Default 'v1'. */
  apiVersion?: string;
  apiKey: string;
  /**
   * Injected transport (transport.ts); when absent (and no `dispatcher`) the client builds one: node:http for a
   * direct connection, undici through a proxy (createServiceTransport).
   */
  transport?: Transport;
  /** Injected undici dispatcher, used through dispatcherTransport (undici imported at the first request). */
  dispatcher?: Dispatcher;
  /** server.proxy and the environment (HTTPS_PROXY, NO_PROXY), for the transport the client builds. */
  proxy?: ProxySettings;
  /** Extra trusted CAs (PEM) for the transport the client builds; production uses NODE_EXTRA_CA_CERTS. */
  dispatcherCa?: string[];
  /** Total deadline of one request, from sending to the last body byte. */
  timeoutMs: number;
  maxResponseBytes: number;
  /** For Retry-After HTTP-dates and request durations; default systemClock. */
  clock?: Clock;
  /** Called once per request that reached a verdict (not for requests the caller's signal aborted). */
  onRequest?: (event: RequestEvent) => void;
}

export interface PageOptions<E extends string = string> {
  offset?: number;
  limit?: number;
  orderBy?: string;
  expand?: readonly E[];
  signal?: AbortSignal;
  /**
   * Config instance pages recorded before (list-page.ts KnownPages, full pulls only): a compact body that is one of
   * them has its items cut out by their recorded lengths instead of printed back (json.ts KnownPageTexts).
   */
  knownPages?: KnownPages;
}

export interface ServiceClient {
  getDeployment(
    id: string,
    opts?: { expand?: readonly DeploymentExpand[]; signal?: AbortSignal },
  ): Promise<Deployment>;
  deployConfigInstance(
    id: string,
    opts?: { dryRun?: boolean; signal?: AbortSignal },
  ): Promise<DeployResponse>;
  listConfigInstances(
    filters?: ConfigInstanceFilters,
    page?: PageOptions<ConfigInstanceListExpand>,
  ): Promise<ListEnvelope<ConfigInstance>>;
  iterateConfigInstances(
    filters?: ConfigInstanceFilters,
    page?: PageOptions<ConfigInstanceListExpand>,
  ): AsyncIterableIterator<ConfigInstance>;
  /**
   * One page with its envelope validated and its items judged one by one (list-page.ts): what the pager
   * builds a pull from. Fails as a whole only when the envelope or the body's structure is broken.
   */
  listConfigInstancePage(
    filters?: ConfigInstanceFilters,
    page?: PageOptions<ConfigInstanceListExpand>,
  ): Promise<ConfigInstancePage>;
  listReleases(filters?: ReleaseFilters, page?: PageOptions<ListExpand>): Promise<ListEnvelope<Release>>;
  iterateReleases(filters?: ReleaseFilters, page?: PageOptions<ListExpand>): AsyncIterableIterator<Release>;
  getDevice(id: string, opts?: { signal?: AbortSignal }): Promise<Device>;
  listDevices(filters?: DeviceFilters, page?: PageOptions<ListExpand>): Promise<ListEnvelope<Device>>;
  iterateDevices(filters?: DeviceFilters, page?: PageOptions<ListExpand>): AsyncIterableIterator<Device>;
  /**
   * Any 2xx means the service recorded the report (the PATCH is our extension: a 204 or a short body is a
   * service's right). Resolves with the updated instance's head (ReportAnswer) when the body holds a valid
   * one, else undefined.
   */
  reportConfigInstanceStatus(
    id: string,
    report: StatusReport,
    opts?: { signal?: AbortSignal },
  ): Promise<ReportAnswer | undefined>;
}

/**
 * What a report's answer tells: the head of the instance as the service now holds it, all a delivery reads. An
 * answer is read only for these fields (answerHead), one over the cap from its first bytes or its skeleton.
 */
export type ReportAnswer = Pick<ConfigInstance, 'id' | 'activity_status' | 'error_status' | 'updated_at'> & {
  /**
   * The answer's own fields as it gave them (the parsed object, or the strings read from a large answer's bytes),
   * unchecked: reconcile/report.ts compares the instance's place with the one reported, and judges them as a
   * listing's only where they differ.
   */
  fields?: Readonly<Record<string, unknown>>;
};

/**
 * The id, statuses and `updated_at` of the instance a report's answer over the cap holds, read from its first
 * bytes as the pager reads a lone oversize item's (json.ts `peekStrings`: the object's own keys, each given once);
 * undefined unless all four are there and valid. Without them the report still settles (the status got through),
 * but its new `updated_at` went unrecorded: the agent's own report then counted as an operator's update, and two
 * instances at one path took turns winning it.
 */
function reportAnswerHead(prefix: Buffer): ReportAnswer | undefined {
  const text = prefix.toString('utf8');
  const fields = peekStrings(text, 1, [
    'activity_status',
    'error_status',
    'updated_at',
    // Its place besides its head, compared with the version reported.
    ...INSTANCE_PLACE_FIELDS,
  ]);
  return answerHead(peekId(text, 1), fields.activity_status, fields.error_status, fields.updated_at, fields);
}

/**
 * What a delivery reads of a report's answer (ReportAnswer), judged by the wire schema's rules for those four
 * fields (ConfigInstance's own id, statuses and Timestamp, as list-page.ts quickInstance checks them by hand);
 * undefined unless all four are there and valid. The rest of the instance is passed on unchecked (`fields`),
 * for the one comparison a delivery makes with it.
 */
function answerHead(
  id: unknown,
  activity: unknown,
  error: unknown,
  updatedAt: unknown,
  fields: Readonly<Record<string, unknown>>,
): ReportAnswer | undefined {
  if (
    !isUsableInstanceId(id) ||
    !ACTIVITY_STATUSES.has(activity) ||
    !ERROR_STATUSES.has(error) ||
    !isTimestamp(updatedAt)
  ) {
    return undefined;
  }
  return {
    id,
    activity_status: activity as ReportAnswer['activity_status'],
    error_status: error as ReportAnswer['error_status'],
    updated_at: updatedAt,
    fields,
  };
}

/**
 * A status report as StatusReport takes it, judged by hand: both statuses, a message within its bound or none,
 * nothing else. Undefined for anything else, which StatusReport (zod) then judges and names: its strict object
 * cost ~5 µs a report, cold, ~1,000 reports a first sync. The report as zod gives it back: a new object, its keys
 * in the schema's order.
 */
function plainStatusReport(report: unknown): StatusReport | undefined {
  if (typeof report !== 'object' || report === null || Array.isArray(report)) return undefined;
  const { activity_status, error_status, message } = report as Record<string, unknown>;
  if (
    !ACTIVITY_STATUSES.has(activity_status) ||
    !ERROR_STATUSES.has(error_status) ||
    !Object.hasOwn(report, 'activity_status') ||
    !Object.hasOwn(report, 'error_status') ||
    Object.keys(report).length !== (Object.hasOwn(report, 'message') ? 3 : 2)
  ) {
    return undefined;
  }
  const activity = activity_status as StatusReport['activity_status'];
  const error = error_status as StatusReport['error_status'];
  if (message === undefined) return { activity_status: activity, error_status: error };
  if (typeof message !== 'string' || message.length > STATUS_MESSAGE_MAX) return undefined;
  return { activity_status: activity, error_status: error, message };
}

/** Page size of the iterators: the spec's maximum, so a pull costs as few round trips as possible. */
const ITERATOR_PAGE_LIMIT = 100;
/** Items one iteration may yield before the listing is judged runaway. */
const ITERATOR_MAX_ITEMS = 100_000;
/** Error bodies are only read for their code and message; a huge one is not worth the memory. */
const ERROR_BODY_MAX_BYTES = 64 * 1024;
/** How much of a body over the cap is kept: enough to read the id of the one item of a page of one. */
const TOO_LARGE_PREFIX_BYTES = 64 * 1024;

/** Retry-After as milliseconds from `nowMs`: delta-seconds or an HTTP-date (RFC 9110 §10.2.3), never negative. */
export function parseRetryAfter(
  value: string | string[] | undefined,
  nowMs: number,
  responseDate?: string | string[],
): number | undefined {
  const raw = (Array.isArray(value) ? value[0] : value)?.trim();
  if (raw === undefined || raw === '') return undefined;
  if (/^\d+$/.test(raw)) {
    const seconds = Number(raw);
    return Number.isSafeInteger(seconds * 1000) ? seconds * 1000 : undefined;
  }
  const at = parseHttpDate(raw);
  if (at === undefined) return undefined;
  // The date is on the service's clock: measured against its own Date header, a device whose clock is wrong
  // (booted in 1970, or hours ahead) still waits what the service asked, not up to the cap or not at all.
  const serverNow = parseHttpDate((Array.isArray(responseDate) ? responseDate[0] : responseDate)?.trim());
  return Math.max(0, at - (serverNow ?? nowMs));
}

function parseHttpDate(raw: string | undefined): number | undefined {
  // Every HTTP-date form starts with a day name; this keeps Date.parse from reading "1.5" as a year.
  if (raw === undefined || !/^[A-Za-z]{3}/.test(raw)) return undefined;
  const at = Date.parse(raw);
  return Number.isNaN(at) ? undefined : at;
}
/**
 * An HTML page where the service's JSON should be: declared `text/html`, or starting with `<` (no JSON text
 * does). Empty bodies are not pages. Only the first non-blank byte is looked at.
 */
function isHtmlPage(contentType: string | string[] | undefined, body: Buffer): boolean {
  let first = 0;
  while (
    first < body.length &&
    (body[first] === 0x20 || body[first] === 0x0a || body[first] === 0x0d || body[first] === 0x09)
  )
    first++;
  if (first === body.length) return false;
  if (body[first] === 0x3c) return true;
  const type = (Array.isArray(contentType) ? contentType[0] : contentType) ?? '';
  return /^\s*(text\/html|application\/xhtml\+xml)\s*(;|$)/i.test(type);
}

/** An id as one URL path segment: percent-encoded, a dot segment spelt so no normaliser collapses it. */
export function encodeId(kind: string, id: string): string {
  if (typeof id !== 'string' || id === '')
    throw new InvalidArgumentError(`${kind} id must be a non-empty string`);
  // Dot segments would be collapsed by any URL normaliser on the way and reach a different route.
  if (id === '.' || id === '..') return id.replaceAll('.', '%2E');
  if (!isUsableInstanceId(id))
    throw new InvalidArgumentError(`${kind} id holds a lone surrogate: no URL can carry it`);
  return encodeURIComponent(id);
}

function validateOptions(options: ClientOptions): { origin: string; prefix: string; apiVersion: string } {
  let url: URL;
  try {
    url = new URL(options.baseUrl);
  } catch {
    throw new InvalidArgumentError('baseUrl is not a valid URL');
  }
  if (url.protocol !== 'http:' && url.protocol !== 'https:') {
    throw new InvalidArgumentError('baseUrl must use http or https');
  }
  if (url.username !== '' || url.password !== '' || url.search !== '' || url.hash !== '') {
    throw new InvalidArgumentError('baseUrl must not carry credentials, a query or a fragment');
  }
  const apiVersion = options.apiVersion ?? 'v1';
  if (!/^[A-Za-z0-9_-][A-Za-z0-9._-]*$/.test(apiVersion)) {
    throw new InvalidArgumentError('apiVersion must be a single path segment such as v1');
  }
  // Header values must be visible ASCII; the message deliberately does not echo the key.
  if (typeof options.apiKey !== 'string' || !/^[\x21-\x7e]+$/.test(options.apiKey)) {
    throw new InvalidArgumentError('apiKey must be a non-empty string of visible ASCII characters');
  }
  if (!Number.isInteger(options.timeoutMs) || options.timeoutMs <= 0) {
    throw new InvalidArgumentError('timeoutMs must be a positive integer');
  }
  if (!Number.isInteger(options.maxResponseBytes) || options.maxResponseBytes <= 0) {
    throw new InvalidArgumentError('maxResponseBytes must be a positive integer');
  }
  return { origin: url.origin, prefix: url.pathname.replace(/\/+$/, ''), apiVersion };
}

type Query = [name: string, value: string][];

function buildQuery(query: Query): string {
  if (query.length === 0) return '';
  // `expand[]` stays literal: the brackets are the parameter's name, not data.
  return `?${query.map(([name, value]) => `${name}=${encodeURIComponent(value)}`).join('&')}`;
}

function listQuery(filters: object | undefined, page: PageOptions | undefined): Query {
  const query: Query = [];
  for (const [name, value] of Object.entries(filters ?? {})) {
    if (value !== undefined) query.push([encodeURIComponent(name), String(value)]);
  }
  if (page?.offset !== undefined) query.push(['offset', String(page.offset)]);
  if (page?.limit !== undefined) query.push(['limit', String(page.limit)]);
  if (page?.orderBy !== undefined) query.push(['order_by', page.orderBy]);
  for (const expand of page?.expand ?? []) query.push(['expand[]', expand]);
  return query;
}

/** A failure found while reading the body, classified before the generic transport classification runs. */
class TooLarge extends Error {
  readonly prefix: Buffer;
  constructor(prefix: Buffer) {
    super('response too large');
    this.prefix = prefix;
  }
}

/** Destroying an unread body may emit an abort error; nobody is left to hear it, so it is swallowed here. */
function discard(body: Readable): void {
  body.on('error', () => {});
  body.destroy();
}

/**
 * Hands `body`'s chunks to `take` as they come, until it ends or `take` returns true (the body is then destroyed,
 * as a `for await` that breaks destroys it). Rejects with the stream's error, with ERR_STREAM_PREMATURE_CLOSE when
 * it closes before its end, or with what `take` threw (the body destroyed). Listeners instead of `for await`:
 * its async iterator and end-of-stream watch cost ~10 µs of CPU per response, ~1,000 report answers a first sync.
 */
function eachChunk(body: Readable, take: (chunk: Buffer) => boolean): Promise<void> {
  return new Promise((resolve, reject) => {
    let settled = false;
    const settle = (error: unknown, stop: boolean) => {
      if (settled) return;
      settled = true;
      body.off('data', onData);
      body.off('end', onEnd);
      body.off('close', onClose);
      if (stop) body.destroy();
      if (error === undefined) resolve();
      else reject(error);
    };
    const onData = (chunk: Buffer) => {
      let stop: boolean;
      try {
        stop = take(chunk);
      } catch (error) {
        settle(error, true);
        return;
      }
      if (stop) settle(undefined, true);
    };
    const onEnd = () => settle(undefined, false);
    // Stays attached: an error after the read settled has nobody else to hear it.
    const onError = (error: unknown) => settle(error, false);
    const onClose = () => {
      if (!body.readableEnded) {
        settle(prematureClose(), false);
      }
    };
    if (body.readableEnded) {
      resolve();
      return;
    }
    if (body.destroyed) {
      reject(body.errored ?? prematureClose());
      return;
    }
    body.on('error', onError);
    body.on('end', onEnd);
    body.on('close', onClose);
    body.on('data', onData);
  });
}

/** What a `for await` over a stream throws when it closes before its end without an error. */
function prematureClose(): Error {
  return Object.assign(new Error('Premature close'), { code: 'ERR_STREAM_PREMATURE_CLOSE' });
}

/**
 * The body, or TooLarge carrying its first bytes once it passes `maxBytes` (also when undici's own
 * maxResponseSize stops it first): a too-large page of one item is named by the id in those bytes. With the
 * length the response declared, the bytes go straight into one buffer of that size: a large page is never held
 * twice (its chunks and their join) while it is read.
 */
async function readCapped(
  body: Readable,
  maxBytes: number,
  declared?: number,
  /** A report's answer: over the cap it is not cut there but scanned on (see AnswerScan). */
  scan?: AnswerScan,
): Promise<Buffer> {
  let whole =
    declared !== undefined && Number.isSafeInteger(declared) && declared >= 0 && declared <= maxBytes
      ? Buffer.allocUnsafe(declared)
      : undefined;
  const chunks: Buffer[] = [];
  let total = 0;
  let scanning = false;
  const prefix = () => Buffer.concat(chunks, total).subarray(0, TOO_LARGE_PREFIX_BYTES);
  try {
    // Each chunk as it comes; true stops the read (the body is then destroyed).
    await eachChunk(body, (chunk) => {
      if (scanning && scan !== undefined) {
        total += chunk.length;
        return scanOn(scan, chunk, total - chunk.length);
      }
      if (whole !== undefined && total + chunk.length > whole.length) {
        // More than declared: the HTTP parser refuses that itself; until it does, the bytes are gathered as they come.
        chunks.push(whole.subarray(0, total));
        whole = undefined;
      }
      if (whole !== undefined) {
        chunk.copy(whole, total);
        total += chunk.length;
        return false;
      }
      if (total + chunk.length > maxBytes) {
        if (scan !== undefined) {
          scanning = true;
          for (const seen of chunks) scan.scanner.feed(seen);
          chunks.length = 0;
          total += chunk.length;
          return scanOn(scan, chunk, total - chunk.length);
        }
        chunks.push(chunk.subarray(0, Math.max(0, TOO_LARGE_PREFIX_BYTES - total)));
        total += Math.min(chunk.length, Math.max(0, TOO_LARGE_PREFIX_BYTES - total));
        discard(body);
        throw new TooLarge(prefix());
      }
      total += chunk.length;
      chunks.push(chunk);
      return false;
    });
  } catch (error) {
    // The status (a 2xx) settled the report: a scan cut short (the deadline, the connection) reads what it saw.
    if (scanning && scan !== undefined) throw new TooLarge(scan.scanner.skeleton());
    if (errnoCode(error) === 'UND_ERR_RES_EXCEEDED_MAX_SIZE') {
      if (scan !== undefined) {
        for (const seen of whole === undefined ? chunks : [whole.subarray(0, total)]) scan.scanner.feed(seen);
        throw new TooLarge(scan.scanner.skeleton());
      }
      throw new TooLarge(
        whole === undefined ? prefix() : whole.subarray(0, Math.min(total, TOO_LARGE_PREFIX_BYTES)),
      );
    }
    throw error;
  }
  if (scanning && scan !== undefined) {
    discard(body);
    throw new TooLarge(scan.scanner.skeleton());
  }
  if (whole !== undefined) return total === whole.length ? whole : whole.subarray(0, total);
  return Buffer.concat(chunks, total);
}

/**
 * What a report's answer over the cap is scanned with (answer-scan.ts), and how many of its bytes at most: the
 * bytes read so far and those after them go through the scanner and are dropped; TooLarge then carries the
 * skeleton it kept instead of a prefix.
 */
interface AnswerScan {
  scanner: AnswerScanner;
  limit: number;
}

/**
 * Feeds the scanner `chunk`, the body's bytes from offset `at`, as far as the scan's limit (a chunk may cross it:
 * node:http hands on what the socket read); true once the scan is done, its head found or its limit reached.
 */
function scanOn(scan: AnswerScan, chunk: Buffer, at: number): boolean {
  const end = at + chunk.length;
  scan.scanner.feed(end > scan.limit ? chunk.subarray(0, Math.max(0, scan.limit - at)) : chunk);
  return scan.scanner.finished || end > scan.limit;
}

/** The skeleton of a body already known to be over the cap (its content-length said so): see AnswerScan. */
async function scanPrefix(body: Readable, scan: AnswerScan): Promise<Buffer> {
  let total = 0;
  try {
    for await (const chunk of body as AsyncIterable<Buffer>) {
      total += chunk.length;
      if (scanOn(scan, chunk, total - chunk.length)) break;
    }
  } catch {
    // What arrived is all there is to read the head from.
  }
  discard(body);
  return scan.scanner.skeleton();
}

/** The first bytes of a body already known to be over the cap (its content-length said so). */
async function readPrefix(body: Readable): Promise<Buffer> {
  const chunks: Buffer[] = [];
  let total = 0;
  try {
    for await (const chunk of body as AsyncIterable<Buffer>) {
      chunks.push(chunk);
      total += chunk.length;
      if (total >= TOO_LARGE_PREFIX_BYTES) break;
    }
  } catch {
    // What arrived is all there is to read an id from.
  }
  discard(body);
  return Buffer.concat(chunks, total).subarray(0, TOO_LARGE_PREFIX_BYTES);
}

/**
 * One request's abort, by its deadline or by the caller's signal, as the transport sees it (transport.ts
 * RequestSignal): a flag, a reason and the transport's listener, without an AbortController's EventTarget.
 */
class RequestAbort implements RequestSignal {
  aborted = false;
  reason: unknown = undefined;
  /** The deadline passed (also when the caller's signal aborted first: the caller is told of the time). */
  timedOut = false;
  #listeners: (() => void)[] | undefined;

  addEventListener(_type: 'abort', listener: () => void): void {
    // As an AbortSignal: a listener added once it aborted is never called.
    if (this.aborted) return;
    if (this.#listeners === undefined) this.#listeners = [listener];
    else this.#listeners.push(listener);
  }

  removeEventListener(_type: 'abort', listener: () => void): void {
    const at = this.#listeners?.indexOf(listener) ?? -1;
    if (at !== -1) this.#listeners!.splice(at, 1);
  }

  /** Aborts once: each listener is called once, in the order added; the first one that threw is thrown after. */
  abort(reason: unknown): void {
    if (this.aborted) return;
    this.aborted = true;
    this.reason = reason;
    const listeners = this.#listeners;
    this.#listeners = undefined;
    let failed: { error: unknown } | undefined;
    for (const listener of listeners ?? []) {
      try {
        listener();
      } catch (error) {
        failed ??= { error };
      }
    }
    if (failed !== undefined) throw failed.error;
  }
}

/** The requests following one caller's signal, and its one listener on it (createClient `follow`). */
interface Followers {
  signal: AbortSignal;
  requests: Set<RequestAbort>;
  onAbort: () => void;
}

/** A request's deadline: setTimeout's callback, its arguments given (no closure per request). */
function expire(abort: RequestAbort, timeoutMs: number): void {
  abort.timedOut = true;
  abort.abort(new DOMException(`no complete response within ${timeoutMs} ms`, 'TimeoutError'));
}

interface CallSpec<T> {
  method: 'GET' | 'POST' | 'PATCH';
  route: string;
  path: string;
  query?: Query;
  json?: unknown;
  /**
   * Whether sending the request twice has the effect of sending it once (RFC 9110 §9.2.2): then a request
   * that met a stale keep-alive connection is sent again at once (see call()).
   */
  idempotent: boolean;
  /** Turns the body's bytes into the result; throws InvalidResponseError or JsonTextError. */
  read: (body: Buffer, target: RequestTarget) => T;
  /**
   * The result of a 2xx whose body is over the cap, when the status alone means success (a report): without it
   * such an answer fails with ResponseTooLargeError, as a body the caller needs does.
   */
  whenTooLarge?: (prefix: Buffer) => T;
  signal: AbortSignal | undefined;
}

export function createClient(options: ClientOptions): ServiceClient {
  const { origin, prefix, apiVersion } = validateOptions(options);
  const { apiKey, timeoutMs, maxResponseBytes, onRequest } = options;
  const clock = options.clock ?? systemClock;
  const transport =
    options.transport ??
    (options.dispatcher === undefined
      ? createServiceTransport({
          timeoutMs,
          maxResponseBytes,
          baseUrl: options.baseUrl,
          ...(options.proxy === undefined ? {} : { proxy: options.proxy }),
          ...(options.dispatcherCa === undefined ? {} : { ca: options.dispatcherCa }),
        })
      : dispatcherTransport(options.dispatcher));
  const root = `${prefix}/${apiVersion}`;
  // One headers object per kind of request, frozen: the socket lane checks a frozen one's lines once.
  const plainHeaders: Readonly<Record<string, string>> = Object.freeze({
    'x-api-key': apiKey,
    accept: 'application/json',
  });
  const jsonHeaders: Readonly<Record<string, string>> = Object.freeze({
    ...plainHeaders,
    'content-type': 'application/json',
  });
  /**
   * A report's answer that is read through the stream is scanned for its head once it passes the cap, wherever
   * it does (answer-scan.ts); made only for such a read (most answers come whole, within the cap).
   */
  const answerScan = (spec: CallSpec<unknown>): AnswerScan | undefined =>
    spec.whenTooLarge === undefined
      ? undefined
      : { scanner: new AnswerScanner(), limit: answerScanLimit(maxResponseBytes) };
  /**
   * The requests in flight under each caller's signal (a pass's): one listener on the signal aborts them all,
   * added when the first one starts and removed when the last one ends (reports go 8 at a time, so a delivery adds
   * it about once), where one added and removed per request cost an EventTarget's work each time. A signal with
   * no request in flight has no listener of the client's: a long-lived one gathers none.
   */
  const followers = new Map<AbortSignal, Followers>();
  /** Aborts `abort` with `signal`, now if it already has; what to leave (`unfollow`) once the request is over. */
  function follow(signal: AbortSignal, abort: RequestAbort): Followers | undefined {
    if (signal.aborted) {
      abort.abort(signal.reason);
      return undefined;
    }
    let following = followers.get(signal);
    if (following === undefined) {
      const requests = new Set<RequestAbort>();
      // Each request aborted whatever another's abort threw (a transport's listener). Nothing is thrown: this is a
      // listener of the caller's AbortSignal, where a throw is an uncaught exception (the daemon's fatal exit at a
      // stop, its state not flushed), and RequestAbort.abort has run every listener of the request that threw.
      const onAbort = () => {
        followers.delete(signal);
        for (const request of requests) {
          try {
            request.abort(signal.reason);
          } catch {
            // Its own listeners all ran; the request ends with the caller's reason like the others.
          }
        }
        requests.clear();
      };
      following = { signal, requests, onAbort };
      followers.set(signal, following);
      signal.addEventListener('abort', onAbort, { once: true });
    }
    following.requests.add(abort);
    return following;
  }
  function unfollow(following: Followers, abort: RequestAbort): void {
    const { signal, requests, onAbort } = following;
    requests.delete(abort);
    if (requests.size > 0 || followers.get(signal) !== following) return;
    followers.delete(signal);
    signal.removeEventListener('abort', onAbort);
  }

  /** The key can only reach a message through text the server or the network stack produced; cut it out. */
  const scrub = (text: string): string => (text.includes(apiKey) ? text.split(apiKey).join(REDACTED) : text);
  const scrubDeep = (value: unknown): unknown => {
    if (typeof value === 'string') return scrub(value);
    if (Array.isArray(value)) return value.map(scrubDeep);
    if (typeof value === 'object' && value !== null) {
      return Object.fromEntries(Object.entries(value).map(([k, v]) => [scrub(k), scrubDeep(v)]));
    }
    return value;
  };

  function emit(target: RequestTarget, started: number, outcome: RequestOutcome, status?: number): void {
    if (onRequest === undefined) return;
    const event: RequestEvent = { ...target, outcome, durationMs: clock.monotonic() - started };
    if (status !== undefined) event.status = status;
    try {
      onRequest(event);
    } catch {
      // A failing metrics hook must not turn a good response into a failed request.
    }
  }

  function transportError(
    error: unknown,
    target: RequestTarget,
    timedOut: boolean,
    callerSignal: AbortSignal | undefined,
  ): unknown {
    if (error instanceof AgentError) return error;
    if (error instanceof TooLarge) {
      return new ResponseTooLargeError(target, maxResponseBytes, undefined, error.prefix.toString('utf8'));
    }
    // The deadline is checked first: when both fired, the caller is told the truth about the elapsed time.
    if (timedOut) return new TimeoutError(target, `no complete response within ${timeoutMs} ms`);
    if (callerSignal?.aborted) return callerSignal.reason;
    const code = errnoCode(error);
    const detail = scrub(code === undefined ? errorMessage(error) : `${code}: ${errorMessage(error)}`);
    switch (code) {
      case 'CONNECT_TIMEOUT':
      case 'UND_ERR_CONNECT_TIMEOUT':
      case 'UND_ERR_HEADERS_TIMEOUT':
      case 'UND_ERR_BODY_TIMEOUT':
        return new TimeoutError(target, detail, error);
      case 'UND_ERR_RES_EXCEEDED_MAX_SIZE':
        return new ResponseTooLargeError(target, maxResponseBytes, error);
      case 'UND_ERR_INVALID_ARG':
        return new InvalidArgumentError(`${target.method} ${target.route}: ${detail}`);
      default:
        return new NetworkError(target, detail, error);
    }
  }

  function outcomeOf(error: unknown): RequestOutcome | undefined {
    if (error instanceof HttpStatusError) return 'http_error';
    if (error instanceof TimeoutError) return 'timeout';
    if (error instanceof ResponseTooLargeError) return 'response_too_large';
    if (error instanceof MalformedResponseError) return 'malformed_response';
    if (error instanceof InvalidResponseError) return 'invalid_response';
    if (error instanceof NetworkError) return 'network_error';
    return undefined;
  }

  /** The service's error body when it has that shape; `htmlPage` when the answer is an HTML page instead. */
  async function readErrorBody(
    response: TransportResponse,
  ): Promise<{ body: ErrorBody | undefined; htmlPage: boolean }> {
    let bytes: Buffer;
    try {
      bytes = await readCapped(response.body, Math.min(ERROR_BODY_MAX_BYTES, maxResponseBytes));
    } catch {
      // The status alone classifies the failure; an unreadable error body only loses the detail.
      discard(response.body);
      return { body: undefined, htmlPage: false };
    }
    const htmlPage = isHtmlPage(response.headers['content-type'], bytes);
    try {
      const parsed = ErrorBody.safeParse(JSON.parse(withoutBom(bytes).toString('utf8')));
      return { body: parsed.success ? (scrubDeep(parsed.data) as ErrorBody) : undefined, htmlPage };
    } catch {
      return { body: undefined, htmlPage };
    }
  }

  /** The usual reader: the whole body as JSON (numbers kept as sent), then the wire schema. */
  function readWith<T>(schema: z.ZodType<T>) {
    return (body: Buffer, target: RequestTarget): T => {
      if (!isUtf8(body)) throw new JsonTextError('the body is not valid UTF-8', 0);
      return checked(schema, body.toString('utf8'), target);
    };
  }

  function checked<T>(schema: z.ZodType<T>, text: string, target: RequestTarget): T {
    const parsed = schema.safeParse(parseJson(text));
    if (!parsed.success) {
      throw new InvalidResponseError(
        target,
        parsed.error.issues.map((issue) => ({
          path: formatFieldPath(issue.path),
          problem: scrub(issue.message),
        })),
      );
    }
    return parsed.data;
  }

  /**
   * A list page: the envelope checked on its own, then each item judged on its own as the pager takes it
   * (list-page.ts PageItems). A small body of valid UTF-8 in the compact form is parsed natively once and its
   * items judged on their values (json.ts parseCompactListBody), any other is cut into texts; a large one, or one that is not UTF-8, stays bytes and is cut on them, each item decoded
   * only when judged: a page of large items never exists as one text, and broken UTF-8 inside one item costs
   * only that item (inside the envelope, the page).
   */
  function readPage(body: Buffer, target: RequestTarget, knownPages?: KnownPages): ConfigInstancePage {
    let envelope: string;
    let items: PageItems;
    if (body.length <= NATIVE_SPLIT_MAX_CHARS && isUtf8(body)) {
      const text = body.toString('utf8');
      const compact = parseCompactListBody(text, knownPages && knownPageTexts(knownPages));
      if (compact !== undefined) {
        envelope = compact.envelopeText;
        items = PageItems.ofValues(compact.values, compact.texts, compact.pageKey);
      } else {
        const parts = cutListBody(text);
        envelope = parts.envelopeText;
        items = PageItems.ofTexts(parts.items);
      }
    } else {
      const parts = cutListBytes(body);
      if (!isUtf8(parts.envelope)) throw new JsonTextError('the body is not valid UTF-8', 0);
      envelope = parts.envelope.toString('utf8');
      items = PageItems.ofBytes(body, parts.items);
    }
    const head = checked(ListHead, envelope, target);
    if (items.length > head.limit) {
      throw new InvalidResponseError(target, [
        { path: 'data', problem: `${items.length} items on a page whose limit is ${head.limit}` },
      ]);
    }
    const { data: _data, ...rest } = head;
    return { head: rest, items, bytes: body.length };
  }

  /**
   * A report's answer: any 2xx settles it, and its head (answerHead) is what a delivery reads: the id, the
   * statuses and `updated_at` of the instance the service answers with, from one native parse (a small answer)
   * or from its bytes without a tree (a large one, as one over the cap). The whole instance was parsed, printed
   * back and judged field by field, its content too, ~15 µs a report, for four fields.
   */
  function readReportAnswer(body: Buffer): ReportAnswer | undefined {
    if (body.length >= STREAMED_ITEM_BYTES) return reportAnswerHead(body);
    let value: unknown;
    try {
      value = JSON.parse(body.toString('utf8'));
    } catch {
      return undefined;
    }
    if (typeof value !== 'object' || value === null || Array.isArray(value)) return undefined;
    const answer = value as Record<string, unknown>;
    return answerHead(answer.id, answer.activity_status, answer.error_status, answer.updated_at, answer);
  }

  async function call<T>(spec: CallSpec<T>): Promise<T> {
    const target: RequestTarget = { method: spec.method, route: `/${apiVersion}${spec.route}` };
    const started = clock.monotonic();
    // One handle for the deadline and the caller's signal (RequestAbort): an AbortController with its listeners
    // cost ~10 µs of CPU a request, cold, against ~1.
    const abort = new RequestAbort();
    const timer = setTimeout(expire, timeoutMs, abort, timeoutMs);
    timer.unref();
    const following = spec.signal === undefined ? undefined : follow(spec.signal, abort);
    const headers = spec.json === undefined ? plainHeaders : jsonHeaders;
    let status: number | undefined;
    try {
      const send = (through: Transport) =>
        through.request({
          origin,
          path: `${root}${spec.path}${buildQuery(spec.query ?? [])}`,
          method: spec.method,
          headers,
          body: spec.json === undefined ? null : JSON.stringify(spec.json),
          signal: abort,
        });
      let response: TransportResponse;
      try {
        response = await send(transport);
      } catch (error) {
        // A kept-alive connection the service (or a proxy) closed as this request left it: nothing answered.
        // An idempotent request is sent once more, at once and within the same deadline, on a new connection
        // (the pool's other idle ones may be just as dead). Not an attempt of the retry policy: the service
        // never saw the first one fail.
        if (
          !spec.idempotent ||
          transport.fresh === undefined ||
          !isStaleConnectionError(error) ||
          abort.aborted
        ) {
          throw error;
        }
        const once = transport.fresh();
        try {
          response = await send(once);
        } finally {
          // Closing waits for the response being read, then ends its connection.
          once.close().catch(() => {});
        }
      }
      status = response.statusCode;
      if (status < 200 || status > 299) {
        const { body: errorBody, htmlPage } = await readErrorBody(response);
        throw new HttpStatusError(
          target,
          status,
          errorBody,
          parseRetryAfter(response.headers['retry-after'], clock.now(), response.headers.date),
          htmlPage,
        );
      }
      const declared = Number(response.headers['content-length']);
      if (Number.isFinite(declared) && declared > maxResponseBytes) {
        const scan = answerScan(spec);
        throw new TooLarge(
          scan === undefined ? await readPrefix(response.body) : await scanPrefix(response.body, scan),
        );
      }
      // An answer the transport had whole before answering (most reports' answers on the socket lane) is taken as
      // it is, without a stream to read it through; one over the cap still goes through the stream's checks.
      const { whole } = response;
      const bytes = withoutBom(
        whole !== undefined && whole.length <= maxResponseBytes
          ? whole
          : await readCapped(
              response.body,
              maxResponseBytes,
              Number.isFinite(declared) ? declared : undefined,
              answerScan(spec),
            ),
      );
      if (isHtmlPage(response.headers['content-type'], bytes)) {
        // Not the service: a 2xx that settles a report must never come from a captive portal or a proxy's page.
        throw new MalformedResponseError(
          target,
          status,
          'an HTML page, not the service (a captive portal or a proxy?)',
          true,
        );
      }
      let result: T;
      try {
        result = spec.read(bytes, target);
      } catch (error) {
        if (!(error instanceof JsonTextError)) throw error;
        throw new MalformedResponseError(target, status, scrub(`${bytes.length} bytes: ${error.message}`));
      }
      emit(target, started, 'ok', status);
      return result;
    } catch (error) {
      if (error instanceof TooLarge && spec.whenTooLarge !== undefined && status !== undefined) {
        emit(target, started, 'ok', status);
        return spec.whenTooLarge(error.prefix);
      }
      const classified = transportError(error, target, abort.timedOut, spec.signal);
      const outcome = outcomeOf(classified);
      if (outcome !== undefined) emit(target, started, outcome, status);
      throw classified;
    } finally {
      clearTimeout(timer);
      if (following !== undefined) unfollow(following, abort);
    }
  }

  function list<T>(route: string, schema: z.ZodType<ListEnvelope<T>>) {
    return (filters: object | undefined, page: PageOptions | undefined) =>
      call({
        method: 'GET',
        route,
        path: route,
        query: listQuery(filters, page),
        idempotent: true,
        read: readWith(schema),
        signal: page?.signal,
      });
  }

  function iterate<T extends { id: string }>(route: string, fetchPage: ReturnType<typeof list<T>>) {
    return async function* (filters: object | undefined, page: PageOptions | undefined): AsyncGenerator<T> {
      const limit = page?.limit ?? ITERATOR_PAGE_LIMIT;
      let offset = Math.max(0, page?.offset ?? 0);
      const target = { method: 'GET', route: `/${apiVersion}${route}` };
      // Without these guards a server that keeps saying has_more would be paged forever (the pull has its own
      // pager, api/pager.ts; these bound every other listing).
      const seen = new Set<string>();
      for (;;) {
        const envelope = await fetchPage(filters, { ...page, offset, limit });
        if (envelope.data.length > 0 && envelope.data.every((item) => seen.has(item.id))) {
          throw new InvalidResponseError(target, [
            { path: 'data', problem: `the page at offset ${offset} repeats items already listed` },
          ]);
        }
        for (const item of envelope.data) seen.add(item.id);
        if (seen.size > ITERATOR_MAX_ITEMS) {
          throw new InvalidResponseError(target, [
            { path: 'has_more', problem: `more than ${ITERATOR_MAX_ITEMS} items` },
          ]);
        }
        yield* envelope.data;
        if (!envelope.has_more) return;
        if (envelope.data.length === 0) {
          throw new InvalidResponseError(target, [
            { path: 'has_more', problem: `true on an empty page at offset ${offset}` },
          ]);
        }
        // The next page starts after the items this one held: as many as the clamped limit (the interface's
        // offset + limit), or fewer where the service cut the page shorter (its data holds at most `limit` items;
        // one capping pages by bytes does, as the pull's pager allows, api/pager.ts). Stepping by `limit` skipped
        // the items between, silently.
        offset += envelope.data.length;
      }
    };
  }

  const listConfigInstances = list(
    '/config_instances',
    ConfigInstanceList as z.ZodType<ListEnvelope<ConfigInstance>>,
  );
  const listReleases = list('/releases', ReleaseList as z.ZodType<ListEnvelope<Release>>);
  const listDevices = list('/devices', DeviceList as z.ZodType<ListEnvelope<Device>>);
  const iterateConfigInstances = iterate('/config_instances', listConfigInstances);
  const iterateReleases = iterate('/releases', listReleases);
  const iterateDevices = iterate('/devices', listDevices);

  return {
    async getDeployment(id, opts) {
      return call({
        method: 'GET',
        route: '/deployments/{id}',
        path: `/deployments/${encodeId('deployment', id)}`,
        query: (opts?.expand ?? []).map((e): [string, string] => ['expand[]', e]),
        idempotent: true,
        read: readWith(Deployment),
        signal: opts?.signal,
      });
    },
    async deployConfigInstance(id, opts) {
      return call({
        method: 'POST',
        route: '/config_instances/{id}/deploy',
        path: `/config_instances/${encodeId('config instance', id)}/deploy`,
        query: opts?.dryRun === true ? [['dry_run', 'true']] : [],
        // Deploying queues a deployment and may remove conflicting instances: sent once, never replayed.
        idempotent: false,
        read: readWith(DeployResponse),
        signal: opts?.signal,
      });
    },
    listConfigInstances: (filters, page) => listConfigInstances(filters, page),
    listConfigInstancePage: (filters, page) =>
      call({
        method: 'GET',
        route: '/config_instances',
        path: '/config_instances',
        query: listQuery(filters, page),
        idempotent: true,
        read: (body, target) => readPage(body, target, page?.knownPages),
        signal: page?.signal,
      }),
    iterateConfigInstances: (filters, page) => iterateConfigInstances(filters, page),
    listReleases: (filters, page) => listReleases(filters, page),
    iterateReleases: (filters, page) => iterateReleases(filters, page),
    async getDevice(id, opts) {
      return call({
        method: 'GET',
        route: '/devices/{id}',
        path: `/devices/${encodeId('device', id)}`,
        idempotent: true,
        read: readWith(Device),
        signal: opts?.signal,
      });
    },
    listDevices: (filters, page) => listDevices(filters, page),
    iterateDevices: (filters, page) => iterateDevices(filters, page),
    async reportConfigInstanceStatus(id, report, opts) {
      const path = `/config_instances/${encodeId('config instance', id)}`;
      const plain = plainStatusReport(report);
      const checked =
        plain === undefined ? StatusReport.safeParse(report) : { success: true as const, data: plain };
      if (!checked.success) {
        const issue = checked.error.issues[0];
        const field = issue === undefined ? '(report)' : formatFieldPath(issue.path) || '(report)';
        throw new InvalidArgumentError(
          `status report is invalid at ${field}: ${issue?.message ?? 'invalid'}`,
        );
      }
      return call({
        method: 'PATCH',
        route: '/config_instances/{id}',
        path,
        json: checked.data,
        // A report states the instance's whole status (activity, error, message), not a change to it: the
        // same report twice leaves the service as once (docs/spec-gaps.md; the outbox resends them too).
        idempotent: true,
        read: readReportAnswer,
        // The service recorded the report; of its echo (the instance as updated) only the head is read.
        whenTooLarge: reportAnswerHead,
        signal: opts?.signal,
      });
    },
  };
}
