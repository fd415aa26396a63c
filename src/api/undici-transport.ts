// Requests through a proxy with undici (ProxyAgent, EnvHttpProxyAgent), or through an injected undici dispatcher; imported only then.
import type { Socket as NetSocket } from 'node:net';
import type { TLSSocket } from 'node:tls';
import type { buildConnector as Connectors, Dispatcher, Pool as PoolTypes } from 'undici';
import connectThrough from 'undici/lib/api/api-connect.js';
import requestThrough from 'undici/lib/api/api-request.js';
import buildConnector from 'undici/lib/core/connect.js';
// One file each, not undici's index (see undici-parts.d.ts): the client needs only these.
import Agent from 'undici/lib/dispatcher/agent.js';
import EnvHttpProxyAgent from 'undici/lib/dispatcher/env-http-proxy-agent.js';
import Pool from 'undici/lib/dispatcher/pool.js';
import ProxyAgent from 'undici/lib/dispatcher/proxy-agent.js';
import { answerScanLimit } from './answer-scan.js';
import { chooseProxy } from './proxy.js';
import { abortError } from './socket-lane.js';
import { markIfStale, staleTimeoutError } from './stale-connection.js';
import {
  CONNECT_TIMEOUT_MAX_MS,
  type RequestSignal,
  type ServiceTransportOptions,
  type Transport,
} from './transport.js';

/** An AbortSignal that aborts with `signal` (the client's own handle is not one; undici's types ask for one). */
function abortSignalOf(signal: RequestSignal): AbortSignal {
  if (signal instanceof AbortSignal) return signal;
  const controller = new AbortController();
  if (signal.aborted) controller.abort(signal.reason);
  else signal.addEventListener('abort', () => controller.abort(signal.reason), { once: true });
  return controller.signal;
}

/**
 * `sent`, or node's AbortError as soon as `signal` aborts. undici only notes an abort that comes before the request
 * is on a connection (its handler has no abort yet), so a request queued behind a connect that never ends (a proxy
 * that takes the TCP connection and never answers the CONNECT) did not settle at its deadline (adv25): the pull's
 * and the request's deadlines waited on undici's own 300 s. What `sent` settles to later is dropped.
 */
function settledByAbort<T extends { body: { destroy(): unknown } }>(
  sent: Promise<T>,
  signal: RequestSignal,
): Promise<T> {
  return new Promise<T>((resolve, reject) => {
    let done = false;
    const onAbort = () => {
      if (done) return;
      done = true;
      reject(abortError(signal.reason));
      sent.then(
        (late) => late.body.destroy(),
        () => {},
      );
    };
    if (signal.aborted) {
      onAbort();
      return;
    }
    signal.addEventListener('abort', onAbort, { once: true });
    sent.then(
      (response) => {
        signal.removeEventListener('abort', onAbort);
        if (done) response.body.destroy();
        else {
          done = true;
          resolve(response);
        }
      },
      (error: unknown) => {
        signal.removeEventListener('abort', onAbort);
        if (!done) {
          done = true;
          reject(error);
        }
      },
    );
  });
}

/** `dispatcher` as a Transport; `fresh` builds a like one with no connection yet (a stale connection's resend). */
export function undiciTransport(dispatcher: Dispatcher, fresh?: () => Transport): Transport {
  return {
    async request(request) {
      // dispatcher.request with a raw path: undici.request(url) would run the path through URL normalisation.
      const sent = requestThrough.call(dispatcher, {
        origin: request.origin,
        path: request.path,
        method: request.method as Dispatcher.HttpMethod,
        // A copy: the client's headers are frozen (one object per kind of request), and undici's proxy agent adds
        // `host` to the object it is given.
        headers: { ...request.headers },
        body: request.body,
        signal: abortSignalOf(request.signal),
      });
      const response = await settledByAbort(sent, request.signal);
      return { statusCode: response.statusCode, headers: response.headers, body: response.body };
    },
    ...(fresh === undefined ? {} : { fresh }),
    close: () => dispatcher.close(),
    destroy: () => dispatcher.destroy(),
  };
}

/** The transport createServiceTransport builds when a proxy applies; with no proxy, an undici Agent (tests compare). */
export function createUndiciTransport(options: ServiceTransportOptions): Transport {
  const fresh = () => undiciTransport(buildServiceDispatcher(options));
  return undiciTransport(buildServiceDispatcher(options), fresh);
}

/**
 * `bodyTimeout` only bounds the gap between chunks, so the client's total deadline (one timer per request) is
 * what stops a trickling server; these are the inner bounds.
 */
function buildServiceDispatcher(options: ServiceTransportOptions): Dispatcher {
  const timeout = Math.min(options.timeoutMs, CONNECT_TIMEOUT_MAX_MS);
  const tls = options.ca === undefined ? {} : { ca: options.ca };
  const common = {
    headersTimeout: options.timeoutMs,
    bodyTimeout: options.timeoutMs,
    connect: { timeout, ...tls },
    // A backstop only: every body is cut at the cap by the client itself, but a report's answer over it is
    // scanned on for its head (answer-scan.ts).
    maxResponseSize: answerScanLimit(options.maxResponseBytes),
    // Every connection watched, so that a request meeting one the service had closed can be sent again (call()).
    factory: watchedPoolFactory,
  };
  const choice = chooseProxy(options.baseUrl, options.proxy);
  // ProxyAgent opens its tunnels with `connect()` on its pool to the proxy, a method undici's index installs on
  // every dispatcher; without the index (undici-parts.d.ts) the pool gets it here, and only this pool.
  // Its CONNECT's answer bounded by the request's deadline: left at undici's 300 s default, each request meeting a
  // proxy that never answers one held a connection to it for 5 minutes (adv25).
  const clientFactory = (origin: URL, opts: object): Dispatcher =>
    Object.assign(new Pool(origin, { ...opts, headersTimeout: options.timeoutMs }), {
      connect: connectThrough,
    });
  switch (choice.kind) {
    case 'direct':
      return new Agent(common);
    case 'configured':
      // requestTls: the TLS session to the service inside the CONNECT tunnel.
      return new ProxyAgent({ ...common, clientFactory, uri: choice.url, requestTls: { timeout, ...tls } });
    case 'environment':
      return new EnvHttpProxyAgent({
        ...common,
        clientFactory,
        requestTls: { timeout, ...tls },
        // Each given, '' when unset: without one undici reads process.env itself, where a value chooseProxy takes
        // for unset (blank but for spaces) was taken for a proxy URL and failed every request. These are the truth.
        httpsProxy: choice.httpsProxy ?? '',
        httpProxy: choice.httpProxy ?? '',
        noProxy: choice.noProxy ?? '',
      });
  }
}

type Socket = NetSocket | TLSSocket;

/**
 * Watches one socket through what undici itself does with it (HTTP/1.1, one request at a time): a write after
 * response bytes, or the first write, starts a request; a read that returns bytes is its response arriving.
 * Reads and writes are the decrypted ones on TLS, so a TLS close_notify is not mistaken for a response byte.
 */
function watch(socket: Socket): void {
  let requests = 0;
  /** A request was written and no byte of its response has been read yet. */
  let awaitingResponse = false;
  /** The method of the request on the socket (its head's first word). */
  let method = '';
  const write = socket.write;
  socket.write = function (this: Socket, ...args: unknown[]) {
    if (!awaitingResponse) {
      requests += 1;
      awaitingResponse = true;
      method = methodOf(args[0]);
    }
    return (write as (...a: unknown[]) => boolean).apply(this, args);
  } as Socket['write'];
  const read = socket.read;
  socket.read = function (this: Socket, size?: number) {
    const chunk: unknown = read.call(this, size);
    if (chunk === null || chunk === undefined) return chunk;
    // The first bytes of the answer: a 408 on a reused connection fails the request stale (stale-connection.ts),
    // the socket destroyed before undici parses it, so a GET or PATCH is sent again on a new connection.
    const timedOut = awaitingResponse ? staleTimeoutError(statusOf(chunk), requests > 1, method) : undefined;
    awaitingResponse = false;
    if (timedOut === undefined) return chunk;
    this.destroy(timedOut);
    return null;
  } as Socket['read'];
  // Registered before undici's own listener: the error is marked before undici fails the request with it.
  socket.on('error', (error: unknown) => markIfStale(error, requests > 1, awaitingResponse));
}

/** The first `length` characters of a chunk written or read on a socket ('' when it is neither text nor bytes). */
function headOf(chunk: unknown, length: number): string {
  if (typeof chunk === 'string') return chunk.slice(0, length);
  return Buffer.isBuffer(chunk) ? chunk.toString('latin1', 0, length) : '';
}

/** The method a request's first written chunk starts with ('' when it is not text). */
function methodOf(chunk: unknown): string {
  return headOf(chunk, 8).split(' ', 1)[0] ?? '';
}

/** The status code an answer's first bytes carry (`HTTP/1.1 408 …`), 0 when they do not hold one whole. */
function statusOf(chunk: unknown): number {
  const match = /^HTTP\/1\.[01] (\d{3}) /.exec(headOf(chunk, 13));
  return match === null ? 0 : Number(match[1]);
}

function watching(connect: Connectors.connector): Connectors.connector {
  return (options, callback) =>
    connect(options, (...result: [null, Socket] | [Error, null]) => {
      if (result[0] === null) watch(result[1]);
      callback(...result);
    });
}

/**
 * The per-origin pool undici's Agent and ProxyAgent build by default (`factory`), with every connection it
 * opens watched: the direct one, the TLS session inside a proxy tunnel and the connection to a plain-HTTP proxy.
 */
function watchedPoolFactory(origin: string | URL, options: PoolTypes.Options): Dispatcher {
  const connect =
    typeof options.connect === 'function' ? options.connect : buildConnector({ ...options.connect });
  return new Pool(origin, { ...options, connect: watching(connect) });
}
