// Requests on kept-alive sockets of the transport's own, each answer parsed by node's llhttp: a sixth of node:http's CPU a request.

import type { Socket } from 'node:net';
import { Readable } from 'node:stream';
import { isLoopbackName, loopbackLookup } from './loopback-name.js';
import { markIfStale, staleTimeoutError } from './stale-connection.js';
import type { RequestSignal } from './transport.js';

/** node:http's own parser binding (llhttp), as node:http drives it; internal, present on Node 20 and 24. */
interface LlhttpParser {
  initialize(type: number, resource: object, maxHeaderSize?: number): void;
  execute(data: Buffer): number | Error;
  finish(): number | Error | undefined;
  close(): void;
  [key: number]: unknown;
}
export interface LlhttpParserClass {
  new (): LlhttpParser;
  RESPONSE: number;
  kOnHeaders: number;
  kOnHeadersComplete: number;
  kOnBody: number;
  kOnMessageComplete: number;
  kOnExecute: number;
  /** Called as a message's first byte is parsed (Node 20 and 24; not in the shape check: used when there). */
  kOnMessageBegin?: number;
}

const PARSER_CALLBACKS = ['kOnHeaders', 'kOnHeadersComplete', 'kOnBody', 'kOnMessageComplete'] as const;
const PARSER_METHODS = ['initialize', 'execute', 'finish', 'close'] as const;

/**
 * node's llhttp binding from a module as `_http_common` exports it, or undefined when it is not there or not of the
 * shape this lane drives (an internal: a Node release may move or reshape it; HttpTransport then sends every
 * request through node:http).
 */
export function llhttpParserOf(httpCommon: unknown): LlhttpParserClass | undefined {
  const Parser = (httpCommon as { HTTPParser?: unknown } | null | undefined)?.HTTPParser;
  if (typeof Parser !== 'function') return undefined;
  const statics = Parser as unknown as Record<string, unknown>;
  if (typeof statics.RESPONSE !== 'number') return undefined;
  if (PARSER_CALLBACKS.some((name) => typeof statics[name] !== 'number')) return undefined;
  const prototype = (Parser as { prototype?: Record<string, unknown> }).prototype;
  if (prototype === undefined || PARSER_METHODS.some((name) => typeof prototype[name] !== 'function')) {
    return undefined;
  }
  return Parser as unknown as LlhttpParserClass;
}

/** `_http_common` as this runtime has it (getBuiltinModule throws for a name it does not know). */
export function nodeHttpCommon(): unknown {
  return process.getBuiltinModule('_http_common');
}

/** The llhttp binding from where `source` gets `_http_common`, or undefined when it cannot be had (never throws). */
export function llhttpParserFrom(source: () => unknown): LlhttpParserClass | undefined {
  try {
    return llhttpParserOf(source());
  } catch {
    return undefined;
  }
}

/** One request as the lane sends it: the endpoint, the request line's path, headers and body. */
export interface SocketLaneRequest {
  secure: boolean;
  hostname: string;
  port: number;
  path: string;
  method: string;
  headers: Record<string, string>;
  body: string | null;
  signal: RequestSignal;
}

export interface SocketLaneResponse {
  statusCode: number;
  headers: Record<string, string | string[] | undefined>;
  body: Readable;
  /** The whole body, when the answer was whole by the end of the read its head came in (see TransportResponse). */
  whole?: Buffer;
}

/** An answer's status and headers, once its head is parsed. */
interface AnswerHead {
  statusCode: number;
  headers: Record<string, string | string[] | undefined>;
}

/** An answer that was whole before it was handed on: its body a stream of those bytes, made only when asked for. */
function wholeResponse(
  statusCode: number,
  headers: Record<string, string | string[] | undefined>,
  whole: Buffer,
): SocketLaneResponse {
  let body: Readable | undefined;
  return {
    statusCode,
    headers,
    whole,
    get body() {
      if (body === undefined) {
        body = new Readable({ read() {} });
        if (whole.length > 0) body.push(whole);
        body.push(null);
      }
      return body;
    },
  };
}

/** Headers a repeat of which node:http drops (IncomingMessage's `_addHeaderLine`); `set-cookie` becomes a list. */
const SINGLE_HEADERS = new Set([
  'content-type',
  'content-length',
  'user-agent',
  'referer',
  'host',
  'authorization',
  'proxy-authorization',
  'if-modified-since',
  'if-unmodified-since',
  'from',
  'location',
  'max-forwards',
  'retry-after',
  'etag',
  'last-modified',
  'server',
  'age',
  'expires',
]);

/** The headers as node:http's IncomingMessage gives them, from llhttp's flat [name, value, …] list. */
function headersOf(raw: readonly string[]): Record<string, string | string[] | undefined> {
  const headers: Record<string, string | string[] | undefined> = {};
  for (let i = 0; i + 1 < raw.length; i += 2) {
    const name = raw[i]!.toLowerCase();
    const value = raw[i + 1]!;
    const existing = headers[name];
    if (existing === undefined) headers[name] = name === 'set-cookie' ? [value] : value;
    else if (name === 'set-cookie') (existing as string[]).push(value);
    else if (!SINGLE_HEADERS.has(name)) headers[name] = `${existing as string}, ${value}`;
  }
  return headers;
}

/** A header value node:http would refuse to send (ERR_INVALID_CHAR): no CR, LF or NUL may reach the wire. */
const INVALID_HEADER_CHAR = /[^\t\x20-\x7e\x80-\xff]/;
const HEADER_NAME = /^[!#$%&'*+\-.^_`|~0-9A-Za-z]+$/;
/** A request path node:http would refuse (ERR_UNESCAPED_CHARACTERS): a space, CR or LF would split the request line. */
const INVALID_PATH_CHAR = /[^\u0021-\u00ff]/;

function requestError(message: string, code: string): Error {
  return Object.assign(new Error(message), { code });
}

/** A request's handlers of its socket's events, while it is on the socket. */
interface SocketEvents {
  onData(chunk: Buffer): void;
  onEnd(): void;
  onError(error: Error & { code?: string }): void;
  onClose(): void;
}

/**
 * Where a socket's listeners, attached once for its life, send its events: to the request on it, or (idle, or
 * between an answer's end and its return to the idle ones) to the drop. Attaching and removing a request's four
 * listeners and an idle socket's five, and a timer callback, on every request cost more than the request's own work.
 */
interface Wire {
  current: SocketEvents | undefined;
}

interface Connection {
  socket: Socket;
  /** The socket's parser, initialized again for each request on it (as node:http's pool reuses its parsers). */
  parser: LlhttpParser;
  wire: Wire;
  /** It served an answer before this request. */
  reused: boolean;
}

/** An idle socket. */
interface IdleConnection {
  socket: Socket;
  parser: LlhttpParser;
  wire: Wire;
}

/**
 * Sends requests on sockets it keeps itself (one request at a time on each, kept alive for `idleMs` or the
 * server's shorter `Keep-Alive: timeout=`), the answers parsed by the llhttp node:http uses: the same strict
 * parsing, header limit and chunked bodies, without node:http's per-request machinery. What the client sees is
 * what HttpTransport gives it: a status, headers as IncomingMessage's, a Readable body (and the body's bytes as
 * `whole` when the answer was whole by the end of the read its head came in: most small answers); an abort fails the
 * request (or its body) with node's AbortError; a kept-alive socket the server closed before any byte of the
 * answer fails it as stale (see stale-connection.ts); a connect that takes over `connectTimeoutMs` fails with
 * CONNECT_TIMEOUT.
 */
export class SocketLane {
  readonly #idle: IdleConnection[] = [];
  readonly #live = new Set<Socket>();
  readonly #idleMs: number;
  readonly #connectTimeoutMs: number;
  readonly #ca: string[] | undefined;
  readonly #Parser: LlhttpParserClass;
  readonly #open: (request: SocketLaneRequest) => Socket;
  /** The request lines of each frozen headers object sent (#headerLines). */
  readonly #checkedHeaders = new WeakMap<object, string>();

  constructor(options: {
    idleMs: number;
    connectTimeoutMs: number;
    ca?: string[] | undefined;
    Parser: LlhttpParserClass;
    /** Opens a socket to the request's endpoint (tests); default net.connect, or tls.connect with `ca`. */
    open?: (request: SocketLaneRequest) => Socket;
  }) {
    this.#idleMs = options.idleMs;
    this.#connectTimeoutMs = options.connectTimeoutMs;
    this.#ca = options.ca;
    this.#Parser = options.Parser;
    this.#open = options.open ?? ((request) => this.#openSocket(request));
  }

  /** Ends the idle sockets (those in use end with their answer). */
  closeIdle(): void {
    for (const { socket } of this.#idle.splice(0)) socket.destroy();
  }

  /** Ends every socket now. */
  destroy(): void {
    this.closeIdle();
    for (const socket of this.#live) socket.destroy();
    this.#live.clear();
  }

  #connect(request: SocketLaneRequest): Connection {
    for (let idle = this.#idle.pop(); idle !== undefined; idle = this.#idle.pop()) {
      const { socket, parser, wire } = idle;
      socket.setTimeout(0);
      if (socket.destroyed || !socket.writable) continue;
      return { socket, parser, wire, reused: true };
    }
    const socket = this.#open(request);
    const wire: Wire = { current: undefined };
    // For the socket's whole life, so an 'error' is always heard (one nobody hears is thrown, ending the process).
    // Bytes, an end, an error or a close with no request on the socket: it is not fit for another request.
    socket.on('data', (chunk: Buffer) => {
      if (wire.current === undefined) this.#drop(socket);
      else wire.current.onData(chunk);
    });
    socket.on('end', () => {
      if (wire.current === undefined) this.#drop(socket);
      else wire.current.onEnd();
    });
    socket.on('error', (error: Error & { code?: string }) => {
      if (wire.current === undefined) this.#drop(socket);
      else wire.current.onError(error);
    });
    socket.on('close', () => {
      if (wire.current === undefined) this.#drop(socket);
      else wire.current.onClose();
    });
    // Armed only while idle (#keep); disarmed when a request takes the socket.
    socket.on('timeout', () => {
      if (wire.current === undefined) this.#drop(socket);
    });
    // One parser for the socket's life: its memory is native and outlives its object unless closed (~2 KiB). The
    // socket's 'close' comes in a turn of its own, never inside the parser's callbacks.
    const parser = new this.#Parser();
    socket.once('close', () => parser.close());
    socket.setNoDelay(true);
    const timer = setTimeout(() => {
      socket.destroy(requestError(`no connection within ${this.#connectTimeoutMs} ms`, 'CONNECT_TIMEOUT'));
    }, this.#connectTimeoutMs);
    timer.unref();
    socket.once(request.secure ? 'secureConnect' : 'connect', () => clearTimeout(timer));
    socket.once('close', () => clearTimeout(timer));
    return { socket, parser, wire, reused: false };
  }

  /** Drops a socket with no request on it (idle or being handed back): out of the idle ones, destroyed. */
  #drop(socket: Socket): void {
    const at = this.#idle.findIndex((idle) => idle.socket === socket);
    if (at !== -1) this.#idle.splice(at, 1);
    socket.destroy();
  }

  #openSocket(request: SocketLaneRequest): Socket {
    const { hostname: host, port } = request;
    const lookup = isLoopbackName(host) ? { lookup: loopbackLookup } : {};
    if (!request.secure) return process.getBuiltinModule('node:net').connect({ host, port, ...lookup });
    const tls = process.getBuiltinModule('node:tls');
    const servername = process.getBuiltinModule('node:net').isIP(host) === 0 ? host : undefined;
    return tls.connect({
      host,
      port,
      ...lookup,
      ...(servername === undefined ? {} : { servername }),
      ...(this.#ca === undefined ? {} : { ca: this.#ca }),
    });
  }

  #keep(socket: Socket, parser: LlhttpParser, wire: Wire, keepMs: number): void {
    this.#live.delete(socket);
    if (socket.destroyed || keepMs <= 0) {
      socket.destroy();
      return;
    }
    // Idle: anything on it drops it (the wire's listeners, wire.current being undefined), as does this timeout.
    socket.setTimeout(keepMs);
    socket.unref();
    // Paused by a reader slower than the answer (its last bytes pushed over the stream's mark): flowing again.
    socket.resume();
    this.#idle.push({ socket, parser, wire });
  }

  /**
   * `headers` as request lines (each ending in CRLF), or the error of a name or value node:http would refuse. A
   * frozen object's lines are kept (the client sends one per kind of request): checked once, not per request.
   */
  #headerLines(headers: Record<string, string>): string | Error {
    const frozen = Object.isFrozen(headers);
    const known = frozen ? this.#checkedHeaders.get(headers) : undefined;
    if (known !== undefined) return known;
    let lines = '';
    for (const [name, value] of Object.entries(headers)) {
      if (INVALID_HEADER_CHAR.test(value) || !HEADER_NAME.test(name)) {
        return requestError(`Invalid character in header content ["${name}"]`, 'ERR_INVALID_CHAR');
      }
      lines += `${name}: ${value}\r\n`;
    }
    if (frozen) this.#checkedHeaders.set(headers, lines);
    return lines;
  }

  request(request: SocketLaneRequest): Promise<SocketLaneResponse> {
    const { signal } = request;
    if (INVALID_PATH_CHAR.test(request.path)) {
      return Promise.reject(
        requestError('Request path contains unescaped characters', 'ERR_UNESCAPED_CHARACTERS'),
      );
    }
    const lines = this.#headerLines(request.headers);
    if (typeof lines !== 'string') return Promise.reject(lines);
    const length = request.body === null ? '' : `content-length: ${Buffer.byteLength(request.body)}\r\n`;
    const head =
      `${request.method} ${request.path} HTTP/1.1\r\nHost: ${hostHeader(request)}\r\n${lines}${length}` +
      `Connection: keep-alive\r\n\r\n${request.body ?? ''}`;
    return new Promise((resolve, reject) => {
      if (signal.aborted) {
        reject(abortError(signal.reason));
        return;
      }
      const { socket, parser, wire, reused } = this.#connect(request);
      this.#live.add(socket);
      socket.ref();
      parser.initialize(this.#Parser.RESPONSE, {}, 0);
      let rawHeaders: string[] = [];
      let body: Readable | undefined;
      /** The answer's status and headers once its head is parsed, and its body's chunks until it is handed on. */
      let answerHead: AnswerHead | undefined;
      let held: Buffer[] = [];
      let handedOn = false;
      let anyByte = false;
      let settled = false;
      let keepMs = this.#idleMs;

      const cleanup = () => {
        settled = true;
        signal.removeEventListener('abort', onAbort);
        if (wire.current === events) wire.current = undefined;
      };
      const fail = (error: Error) => {
        if (settled) return;
        cleanup();
        this.#live.delete(socket);
        socket.destroy();
        if (body === undefined) reject(error);
        else if (!body.destroyed) body.destroy(error);
      };
      const onAbort = () => fail(abortError(signal.reason));
      const onData = (chunk: Buffer) => {
        anyByte = true;
        const result = parser.execute(chunk);
        // Bytes past the whole answer the parser refused: the socket is not fit for another request.
        if (result instanceof Error && settled) keepMs = 0;
        if (result instanceof Error) fail(result);
        // The head came and the answer is not whole by the end of this read: handed on as a stream.
        else if (answerHead !== undefined && !handedOn && !settled) stream(answerHead);
      };
      const onEnd = () => {
        const result = parser.finish();
        if (result instanceof Error) fail(result);
        else fail(closedError(reused, anyByte));
      };
      const onError = (error: Error & { code?: string }) => {
        markIfStale(error, reused, !anyByte);
        fail(error);
      };
      const onClose = () => fail(closedError(reused, anyByte));

      // The start of another message past the answer (a head cut short, in the answer's read): not fit for reuse.
      if (this.#Parser.kOnMessageBegin !== undefined) {
        parser[this.#Parser.kOnMessageBegin] = () => {
          if (settled) keepMs = 0;
          return 0;
        };
      }
      parser[this.#Parser.kOnHeaders] = (headers: string[]) => {
        rawHeaders.push(...headers);
      };
      parser[this.#Parser.kOnHeadersComplete] = (
        _major: number,
        _minor: number,
        headers: string[] | undefined,
        _method: unknown,
        _url: unknown,
        statusCode: number,
        _statusMessage: unknown,
        upgrade: boolean,
        shouldKeepAlive: boolean,
      ): number => {
        const all = headers === undefined ? rawHeaders : [...rawHeaders, ...headers];
        rawHeaders = [];
        // A second answer to one request (bytes past the first): the socket is not fit for another request.
        if (answerHead !== undefined || settled) {
          keepMs = 0;
          return 1;
        }
        // An interim answer (100 Continue, 103 Early Hints): skipped, as node:http does, for the one after it.
        if (statusCode >= 100 && statusCode < 200 && statusCode !== 101) return 1;
        if (upgrade || statusCode === 101) {
          queueMicrotask(() => fail(requestError('the service answered with an upgrade', 'ECONNRESET')));
          return 1;
        }
        // A 408 on a reused connection (cit24): the request was never read; failed stale, so a GET or PATCH is resent.
        const timedOut = staleTimeoutError(statusCode, reused, request.method);
        if (timedOut !== undefined) {
          // At once: the bytes after it in this read (its body, past `Connection: close`) fail the parse.
          fail(timedOut);
          return 1;
        }
        const answered = headersOf(all);
        if (!shouldKeepAlive) keepMs = 0;
        else keepMs = Math.min(keepMs, serverKeepMs(answered['keep-alive']));
        // Handed on at the end of this read: whole if its last byte came in it too, else as a stream.
        answerHead = { statusCode, headers: answered };
        return 0;
      };
      const stream = (answer: AnswerHead) => {
        handedOn = true;
        const readable = new Readable({
          read: () => socket.resume(),
          destroy: (error, callback) => {
            // The reader stopped before the end: the rest of the answer is not read, and the socket is not reused.
            if (!settled) {
              cleanup();
              this.#live.delete(socket);
              socket.destroy();
            }
            callback(error);
          },
        });
        // The reader attaches its own listeners; this one keeps an error nobody reads from being thrown.
        readable.on('error', () => {});
        body = readable;
        for (const chunk of held) readable.push(chunk);
        held = [];
        resolve({ statusCode: answer.statusCode, headers: answer.headers, body: readable });
      };
      // The chunk is the binding's own copy of the bytes (Buffer::Copy on Node 20 and 24), as node:http pushes it.
      parser[this.#Parser.kOnBody] = (chunk: Buffer) => {
        if (!handedOn) held.push(chunk);
        else if (body !== undefined && !body.destroyed && !body.push(chunk)) socket.pause();
      };
      parser[this.#Parser.kOnMessageComplete] = () => {
        if (answerHead === undefined || settled) return;
        cleanup();
        // The socket goes back once this turn's parse is over (bytes past the answer drop it there).
        queueMicrotask(() => this.#keep(socket, parser, wire, keepMs));
        if (handedOn) {
          body?.push(null);
          return;
        }
        handedOn = true;
        const whole = held.length === 1 ? held[0]! : Buffer.concat(held);
        held = [];
        resolve(wholeResponse(answerHead.statusCode, answerHead.headers, whole));
      };

      const events: SocketEvents = { onData, onEnd, onError, onClose };
      signal.addEventListener('abort', onAbort, { once: true });
      wire.current = events;
      socket.write(head);
    });
  }
}

/** The closing of a socket before its answer was whole, as node:http names it ("socket hang up"), stale when it is. */
function closedError(reused: boolean, anyByte: boolean): Error {
  const error = requestError('socket hang up', 'ECONNRESET');
  markIfStale(error, reused, !anyByte);
  return error;
}

/** The server's `Keep-Alive: timeout=<s>` less a second, as node:http's agent takes it; unbounded without one. */
function serverKeepMs(value: string | string[] | undefined): number {
  const hint = typeof value === 'string' ? /^timeout=(\d+)/.exec(value) : null;
  return hint === null ? Number.POSITIVE_INFINITY : Number.parseInt(hint[1]!, 10) * 1000 - 1000;
}

function hostHeader(request: SocketLaneRequest): string {
  const host = request.hostname.includes(':') ? `[${request.hostname}]` : request.hostname;
  const defaultPort = request.secure ? 443 : 80;
  return request.port === defaultPort ? host : `${host}:${request.port}`;
}

/** The error node:http destroys a request with when its `signal` aborts (AbortError, ABORT_ERR, the reason as cause). */
export function abortError(reason: unknown): Error {
  const error = new Error('The operation was aborted', { cause: reason });
  error.name = 'AbortError';
  return Object.assign(error, { code: 'ABORT_ERR' });
}
