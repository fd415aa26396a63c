// Tells a request that met a keep-alive connection the other side had already closed from any other failure.
import type { Socket as NetSocket } from 'node:net';
import type { TLSSocket } from 'node:tls';
import type { buildConnector as Connectors, Dispatcher, Pool as PoolTypes } from 'undici';
import buildConnector from 'undici/lib/core/connect.js';
import Pool from 'undici/lib/dispatcher/pool.js';

/**
 * Set on an error that closed a connection which had served earlier responses, while a request was written on
 * it and before any byte of its response arrived: the service (or a proxy) closed the idle connection as the
 * request left, so the request never reached anything that answered.
 */
const STALE = Symbol('staleConnection');

/** Only a closed or reset connection is stale; a timeout or a parser error on a reused one is the answer's fault. */
const CLOSED_CODES = new Set(['UND_ERR_SOCKET', 'ECONNRESET', 'EPIPE']);

export function isStaleConnectionError(error: unknown): boolean {
  return typeof error === 'object' && error !== null && STALE in error;
}

/** Where a dispatcher keeps how to build another one like it, whose connections are all new. */
const FRESH = Symbol('freshDispatcher');

/** Marks `dispatcher` as one whose like `build` makes: a request sent again after a stale connection uses one. */
export function offerFresh<D extends Dispatcher>(dispatcher: D, build: () => Dispatcher): D {
  Object.defineProperty(dispatcher, FRESH, { value: build });
  return dispatcher;
}

/** How to build a dispatcher like `dispatcher` with no connection yet, when it was made with `offerFresh`. */
export function freshBuilderOf(dispatcher: Dispatcher): (() => Dispatcher) | undefined {
  const build: unknown = (dispatcher as { [FRESH]?: unknown })[FRESH];
  return typeof build === 'function' ? (build as () => Dispatcher) : undefined;
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
  const write = socket.write;
  socket.write = function (this: Socket, ...args: unknown[]) {
    if (!awaitingResponse) {
      requests += 1;
      awaitingResponse = true;
    }
    return (write as (...a: unknown[]) => boolean).apply(this, args);
  } as Socket['write'];
  const read = socket.read;
  socket.read = function (this: Socket, size?: number) {
    const chunk: unknown = read.call(this, size);
    if (chunk !== null && chunk !== undefined) awaitingResponse = false;
    return chunk;
  } as Socket['read'];
  // Registered before undici's own listener: the error is marked before undici fails the request with it.
  socket.on('error', (error: unknown) => {
    const code = (error as { code?: unknown }).code;
    if (
      requests > 1 &&
      awaitingResponse &&
      typeof code === 'string' &&
      CLOSED_CODES.has(code) &&
      typeof error === 'object' &&
      error !== null
    ) {
      Object.defineProperty(error, STALE, { value: true });
    }
  });
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
export function watchedPoolFactory(origin: string | URL, options: PoolTypes.Options): Dispatcher {
  const connect =
    typeof options.connect === 'function' ? options.connect : buildConnector({ ...options.connect });
  return new Pool(origin, { ...options, connect: watching(connect) });
}
