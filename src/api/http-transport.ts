// Direct requests to the service on sockets of its own parsed by node's llhttp (node:http for a fresh transport or a runtime without that parser): kept-alive connections, a connect timeout, stale connections marked.

import type { Agent as HttpAgent, request as httpRequest, IncomingMessage } from 'node:http';
import type https from 'node:https';
import type { Socket } from 'node:net';
import { isLoopbackName, loopbackLookup } from './loopback-name.js';
import { abortError, llhttpParserFrom, nodeHttpCommon, SocketLane } from './socket-lane.js';
import { markIfStale, staleTimeoutError } from './stale-connection.js';
import {
  CONNECT_TIMEOUT_MAX_MS,
  type Transport,
  type TransportRequest,
  type TransportResponse,
} from './transport.js';

/**
 * node:http's CommonJS exports, not an ES import: on Node 24 an ES module's `import` of a builtin reads every
 * export, and node:http's lazy `WebSocket`, `CloseEvent` and `MessageEvent` getters then load Node's own bundled
 * undici with node:http2, node:tls, node:zlib and the web streams (~70 modules): the idle daemon held 8 MiB more
 * (docs/performance-history.md "Idle daemon, ninth round"). Loaded at the first request that goes through it (a
 * fresh transport's, or any on a runtime whose llhttp the socket lane cannot drive), never at module load: every
 * request of `--once` and the daemon goes on the socket lane, and node:http's own modules (`_http_agent`,
 * `_http_client`, `_http_outgoing`, `_http_server`, `http`) cost each start ~0.8 ms of CPU to compile
 * (docs/performance-history.md "First sync and `--once`, fourteenth round").
 */
const nodeHttp = () => process.getBuiltinModule('node:http');

/** How long an idle connection is kept (undici's default; a shorter `Keep-Alive: timeout=` from the server wins). */
const IDLE_KEEP_MS = 4_000;

export interface HttpTransportOptions {
  timeoutMs: number;
  /** Extra trusted CA certificates (PEM), as tls.connect's `ca`. */
  ca?: string[];
  /** false: one connection per request, closed after its response (a fresh transport's). Default true. */
  keepAlive?: boolean;
  /**
   * Which requests go on sockets of the transport's own, parsed by node's llhttp (src/api/socket-lane.ts) instead
   * of through node:http's request machinery: `always` (default), every request, the pages' GETs and the status
   * reports; `patch`, the status reports only; `never`. A fresh transport (keepAlive false) uses node:http for all.
   */
  ownSockets?: 'patch' | 'always' | 'never';
  /**
   * Where node's `_http_common` (llhttp's binding, an internal) comes from; default the runtime's. When it is
   * missing or not of the shape socket-lane.ts drives, every request goes through node:http.
   */
  httpCommon?: () => unknown;
}

/** A 101 (an upgrade the agent never asks for), with or without an Upgrade header: a reset, as the lane fails it. */
const upgradeError = () =>
  Object.assign(new Error('the service answered with an upgrade'), { code: 'ECONNRESET' });

/** Where requests go, parsed once per origin (a client has one). */
interface Endpoint {
  origin: string;
  secure: boolean;
  hostname: string;
  port: number;
}

export class HttpTransport implements Transport {
  readonly #options: HttpTransportOptions;
  readonly #keepAlive: boolean;
  readonly #connectTimeoutMs: number;
  #httpAgent: HttpAgent | undefined;
  #httpsAgent: https.Agent | undefined;
  #endpoint: Endpoint | undefined;
  /** The lane, once made; null when this runtime's llhttp binding cannot drive one. */
  #lane: SocketLane | null | undefined;

  constructor(options: HttpTransportOptions) {
    this.#options = options;
    this.#keepAlive = options.keepAlive ?? true;
    this.#connectTimeoutMs = Math.min(options.timeoutMs, CONNECT_TIMEOUT_MAX_MS);
  }

  fresh(): Transport {
    return new HttpTransport({ ...this.#options, keepAlive: false });
  }

  async close(): Promise<void> {
    this.#lane?.closeIdle();
    for (const agent of [this.#httpAgent, this.#httpsAgent]) {
      for (const sockets of Object.values(agent?.freeSockets ?? {})) {
        for (const socket of sockets ?? []) socket.destroy();
      }
    }
  }

  async destroy(): Promise<void> {
    this.#lane?.destroy();
    this.#httpAgent?.destroy();
    this.#httpsAgent?.destroy();
  }

  #endpointOf(origin: string): Endpoint {
    if (this.#endpoint?.origin === origin) return this.#endpoint;
    const url = new URL(origin);
    const secure = url.protocol === 'https:';
    this.#endpoint = {
      origin,
      secure,
      // An IPv6 literal comes bracketed; node:http wants it bare (and brackets it again in the Host header).
      hostname: url.hostname.replace(/^\[(.*)\]$/, '$1'),
      port: url.port === '' ? (secure ? 443 : 80) : Number(url.port),
    };
    return this.#endpoint;
  }

  /** node:https (and with it node:tls) is loaded only for an https:// service. */
  #agentFor(secure: boolean): { agent: HttpAgent; send: typeof httpRequest } {
    const agentOptions = { keepAlive: this.#keepAlive, timeout: IDLE_KEEP_MS };
    if (!secure) {
      const http = nodeHttp();
      this.#httpAgent ??= new http.Agent(agentOptions);
      return { agent: this.#httpAgent, send: http.request };
    }
    const tls = process.getBuiltinModule('node:https');
    const ca = this.#options.ca;
    this.#httpsAgent ??= new tls.Agent({ ...agentOptions, ...(ca === undefined ? {} : { ca }) });
    return { agent: this.#httpsAgent, send: tls.request };
  }

  #laneOf(): SocketLane | null {
    if (this.#lane === undefined) {
      const Parser = llhttpParserFrom(this.#options.httpCommon ?? nodeHttpCommon);
      this.#lane =
        Parser === undefined
          ? null
          : new SocketLane({
              idleMs: IDLE_KEEP_MS,
              connectTimeoutMs: this.#connectTimeoutMs,
              ca: this.#options.ca,
              Parser,
            });
    }
    return this.#lane;
  }

  request(request: TransportRequest): Promise<TransportResponse> {
    const endpoint = this.#endpointOf(request.origin);
    const own = this.#keepAlive ? (this.#options.ownSockets ?? 'always') : 'never';
    const lane = own === 'always' || (own === 'patch' && request.method === 'PATCH') ? this.#laneOf() : null;
    if (lane !== null) {
      return lane.request({
        secure: endpoint.secure,
        hostname: endpoint.hostname,
        port: endpoint.port,
        path: request.path,
        method: request.method,
        headers: request.headers,
        body: request.body,
        signal: request.signal,
      });
    }
    const { agent, send } = this.#agentFor(endpoint.secure);
    const headers: Record<string, string> = { ...request.headers };
    if (request.body !== null) headers['content-length'] = String(Buffer.byteLength(request.body));
    const { signal } = request;
    return new Promise((resolve, reject) => {
      // The signal is not handed to node:http (its `signal` option costs an end-of-stream watch of the request
      // per request): one listener destroys the request as node's would, with the same AbortError, until the
      // request closes (its response read, or failed).
      const req = send({
        hostname: endpoint.hostname,
        port: endpoint.port,
        path: request.path,
        method: request.method,
        headers,
        agent,
        ...(isLoopbackName(endpoint.hostname) ? { lookup: loopbackLookup } : {}),
      });
      const onAbort = () => req.destroy(abortError(signal.reason));
      if (signal.aborted) onAbort();
      else {
        signal.addEventListener('abort', onAbort, { once: true });
        req.once('close', () => signal.removeEventListener('abort', onAbort));
      }
      let response: IncomingMessage | undefined;
      /** A request was written on the socket and no byte of its response has been read yet. */
      let awaitingResponse = true;
      let connectTimer: NodeJS.Timeout | undefined;
      req.on('socket', (socket: Socket) => {
        const onData = () => {
          awaitingResponse = false;
          socket.off('data', onData);
        };
        socket.on('data', onData);
        req.once('close', () => socket.off('data', onData));
        if (socket.connecting) {
          connectTimer = setTimeout(() => {
            const error = new Error(`no connection within ${this.#connectTimeoutMs} ms`);
            req.destroy(Object.assign(error, { code: 'CONNECT_TIMEOUT' }));
          }, this.#connectTimeoutMs);
          connectTimer.unref();
          socket.once(endpoint.secure ? 'secureConnect' : 'connect', () => clearTimeout(connectTimer));
        }
      });
      req.on('error', (error) => {
        clearTimeout(connectTimer);
        markIfStale(error, req.reusedSocket, awaitingResponse);
        // After the head, a failure (a parser error, a reset, the abort) fails the body being read with its cause;
        // after the whole message, it is about the bytes past it (the connection is dropped, the answer stands).
        if (response === undefined) reject(error);
        else if (!response.complete && !response.destroyed) response.destroy(error);
      });
      // A 101 (an upgrade nobody asked for): node:http hands the socket to an 'upgrade' listener, and without one
      // closes the request with no error and no response, so the request would never settle and its abort would
      // find nothing to destroy (a wedge). Failed as the socket lane fails it.
      req.on('upgrade', (_res: IncomingMessage, socket: Socket) => {
        clearTimeout(connectTimer);
        socket.destroy();
        reject(upgradeError());
      });
      // Whatever else closes the request before its answer without an error: never left unsettled.
      req.once('close', () => {
        if (response === undefined) {
          clearTimeout(connectTimer);
          reject(Object.assign(new Error('socket hang up'), { code: 'ECONNRESET' }));
        }
      });
      req.on('response', (res) => {
        clearTimeout(connectTimer);
        // A 101 without an Upgrade header is no upgrade to node:http but an answer: failed as the 101 above (and
        // as the other transports fail it), never an HTTP status (small32).
        if (res.statusCode === 101) {
          res.destroy();
          reject(upgradeError());
          return;
        }
        // A 408 on a reused connection: the request was never read; failed stale, so a GET or PATCH is resent.
        const timedOut = staleTimeoutError(res.statusCode ?? 0, req.reusedSocket, request.method);
        if (timedOut !== undefined) {
          res.destroy();
          reject(timedOut);
          return;
        }
        response = res;
        // The reader attaches its own listeners; this one keeps an error nobody reads from being thrown.
        res.on('error', () => {});
        resolve({ statusCode: res.statusCode ?? 0, headers: res.headers, body: res });
      });
      req.end(request.body ?? undefined);
    });
  }
}
