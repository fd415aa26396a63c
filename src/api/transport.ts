// How the client's requests reach the service: node:http for direct connections, undici (loaded as the client is built) through a proxy.
import type { Readable } from 'node:stream';
import type { Dispatcher } from 'undici';
import { HttpTransport } from './http-transport.js';
import { chooseProxy, type ProxySettings } from './proxy.js';

export interface TransportRequest {
  /** scheme://host[:port] */
  origin: string;
  /** Sent as it is: no URL normalisation (dot segments, percent-encoding) on the way. */
  path: string;
  method: string;
  headers: Record<string, string>;
  body: string | null;
  /** Aborts the request, and its body while it is read: the body then fails with an error. */
  signal: RequestSignal;
}

/**
 * What aborts a request: an AbortSignal, or anything with the part of its surface a transport uses (the client's
 * own per-request handle, client.ts RequestAbort: an AbortController and its EventTarget cost ~10 µs of CPU a
 * request, cold, and a first sync sends ~1,000 reports). A listener is called at most once, as with `once`.
 */
export interface RequestSignal {
  readonly aborted: boolean;
  readonly reason: unknown;
  addEventListener(type: 'abort', listener: () => void, options?: { once?: boolean }): void;
  removeEventListener(type: 'abort', listener: () => void): void;
}

export interface TransportResponse {
  statusCode: number;
  /** Lowercase names. */
  headers: Record<string, string | string[] | undefined>;
  /** Must be read to its end or destroyed: either frees the connection (unless `whole` is there). */
  body: Readable;
  /**
   * The whole body, when the transport had all of it before answering (the socket lane, for an answer that came
   * with its head): its connection is free already, and `body`, made only if asked for, gives the same bytes.
   */
  whole?: Buffer;
}

/**
 * One way to send requests, with its own kept-alive connections. Every failure is an error carrying the network
 * stack's `code` (errno, HPE_*, UND_ERR_*, CONNECT_TIMEOUT); a request that met a kept-alive connection the other
 * side had closed before any response byte is marked (stale-connection.ts).
 */
export interface Transport {
  request(request: TransportRequest): Promise<TransportResponse>;
  /**
   * A transport like this one with no connection yet, for a request sent again after a stale connection; closed
   * once its response is read. Absent on a transport that cannot make one (an injected undici dispatcher).
   */
  fresh?(): Transport;
  /** Ends the idle connections; those in use end when their response is read. */
  close(): Promise<void>;
  /** Ends every connection now. */
  destroy(): Promise<void>;
}

/** Connect timeout's cap: a connection that takes longer is given up before the request's whole deadline. */
export const CONNECT_TIMEOUT_MAX_MS = 10_000;

export interface ServiceTransportOptions {
  timeoutMs: number;
  maxResponseBytes: number;
  /** The service: decides with `proxy` whether requests go direct (api/proxy.ts); an http:// one always does. */
  baseUrl: string;
  proxy?: ProxySettings;
  /** Extra trusted CA certificates (PEM), replacing the default ones as tls.connect's `ca`; production uses NODE_EXTRA_CA_CERTS. */
  ca?: string[];
}

/**
 * The transport the client builds when none is injected. Direct: node:http(s), already part of Node. Through a
 * proxy: undici's ProxyAgent or EnvHttpProxyAgent, whose module (~0.5 MB, ~25 ms of CPU to load) is loaded only
 * then, but at once, as the client is built (undici-transport.ts): a first request minutes later could meet an
 * upgrade that replaced the bundle's chunks under the running agent, and fail until a restart.
 */
export function createServiceTransport(options: ServiceTransportOptions): Transport {
  if (chooseProxy(options.baseUrl, options.proxy).kind === 'direct') return new HttpTransport(options);
  return deferredTransport(
    async () => (await import('./undici-transport.js')).createUndiciTransport(options),
    { freshable: true, eager: true },
  );
}

/** An undici dispatcher (a test's, or a caller's own) as a Transport; undici is imported at its first request. */
export function dispatcherTransport(dispatcher: Dispatcher): Transport {
  return deferredTransport(async () => (await import('./undici-transport.js')).undiciTransport(dispatcher), {
    freshable: false,
    eager: false,
  });
}

/**
 * A transport built by `build` (at once when `eager`, else at its first use, so that building a client never
 * waits and never loads what it will not use). A build that failed is tried again by the next request, never
 * kept: one failed load would otherwise fail every request of the process.
 */
export function deferredTransport(
  build: () => Promise<Transport>,
  options: { freshable: boolean; eager: boolean },
): Transport {
  let built: Promise<Transport> | undefined;
  const transport = () => {
    if (built === undefined) {
      const building = build();
      built = building;
      building.catch(() => {
        if (built === building) built = undefined;
      });
    }
    return built;
  };
  if (options.eager) transport().catch(() => {});
  const freshable = options.freshable;
  const fresh = () =>
    deferredTransport(
      async () => {
        const built = await transport();
        if (built.fresh === undefined) throw new Error('this transport cannot make a fresh one');
        return built.fresh();
      },
      { freshable: false, eager: false },
    );
  return {
    request: async (request) => (await transport()).request(request),
    ...(freshable ? { fresh } : {}),
    // A build that failed has no connections to end.
    close: async () =>
      built?.then(
        (done) => done.close(),
        () => undefined,
      ),
    destroy: async () =>
      built?.then(
        (done) => done.destroy(),
        () => undefined,
      ),
  };
}
