// The local API for applications: health, status and "sync now" over a unix socket (mode 0660).
import { randomBytes } from 'node:crypto';
import { link, lstat, unlink } from 'node:fs/promises';
import type { IncomingMessage, Server, ServerResponse } from 'node:http';
import { createRequire } from 'node:module';
import { createConnection, type Socket } from 'node:net';
import path from 'node:path';
import { type Clock, laterTurn } from '../lib/clock.js';
import { AgentError, errnoCode, errorMessage } from '../lib/errors.js';
import type { Logger } from '../lib/logger.js';

// node:http through require, not import: on Node 24 an ESM import of node:http reads every export, and its lazy
// WebSocket and MessageEvent getters load Node's own copy of undici, zlib and perf_hooks (+12 MiB RSS, ~60 modules)
// that the daemon never uses (docs/performance-history.md "Idle daemon").
const { createServer } = createRequire(import.meta.url)('node:http') as typeof import('node:http');

export const SOCKET_MODE = 0o660;

export interface HealthReport {
  healthy: boolean;
  /** Why it is unhealthy, when it is. */
  reason?: string;
  /** Healthy but not fully working (a hook process left behind, named with its pid), while it lasts. */
  degraded?: string[];
  lastLoopAt: string | null;
}

export interface LocalApiHandlers {
  health(): HealthReport;
  status(): unknown;
  /** Runs a pass now and answers when it ends (after a `102 Processing` sent as the request is taken). */
  sync(): Promise<{ converged: boolean; exitCode: number; result: unknown }>;
  /**
   * Every answer's text passes through this before it is sent: ids, paths and messages come from the service,
   * which may echo the API key, and every member of the socket's group can read the answers.
   */
  scrub?: (text: string) => string;
}

/**
 * What one local user may hold of the agent's resources through the socket. Every member of the socket's
 * group can connect: without these bounds, a few hundred idle connections used up the agent's file
 * descriptors and its file writes failed with EMFILE.
 */
export interface LocalApiLimits {
  /** Connections held at once; further ones are closed at once (the kernel backlog is not ours to bound). */
  maxConnections: number;
  /** A request's head (line and headers) must arrive within this of the connection or the previous request. */
  headersTimeoutMs: number;
  /** The whole request must arrive within this; a client trickling bytes is cut off (408). */
  requestTimeoutMs: number;
  /** An idle keep-alive connection is closed after this. */
  keepAliveTimeoutMs: number;
  /** How often the server looks for connections past the two timeouts above. */
  checkIntervalMs: number;
  /** Bytes of request line and headers. */
  maxHeaderBytes: number;
  /**
   * An answer must be taken by the client within this of its sending: the connection of a client that does
   * not read is closed, and the answer it held in the agent's memory freed (a status is megabytes with
   * thousands of managed files; Node buffers all of it past what the socket takes).
   */
  sendTimeoutMs: number;
  /**
   * A `sync` pass starts at least this long after the previous one ended; requests arriving meanwhile wait
   * and share one pass. A local user looping `config-agent sync` cannot turn the agent into a load on the
   * service beyond one pass per interval.
   */
  minSyncIntervalMs: number;
  /**
   * A status answer is built at least this long after the previous one was; requests arriving meanwhile wait and
   * share it (each answer is still built after its request arrived). Bounds what a loop of `status` requests on
   * every connection costs the agent; a single request after a quiet moment is answered at once.
   */
  minStatusIntervalMs: number;
}

const DEFAULT_LOCAL_API_LIMITS: LocalApiLimits = {
  maxConnections: 32,
  headersTimeoutMs: 10_000,
  requestTimeoutMs: 15_000,
  keepAliveTimeoutMs: 5_000,
  checkIntervalMs: 1_000,
  maxHeaderBytes: 8 * 1024,
  sendTimeoutMs: 10_000,
  minSyncIntervalMs: 5_000,
  minStatusIntervalMs: 200,
};

/**
 * socketPath holds what the local API may not replace: another program's file, a live agent's socket, or one it
 * cannot remove. `retryable` when another program took the path while this one started (a reload may win it).
 */
export class SocketPathTakenError extends AgentError {
  constructor(message: string, options: { retryable: boolean; cause?: unknown }) {
    super('socket_path_taken', message, options);
  }
}

/** No route takes a body: anything announcing one is refused before it is read. */
const MAX_BODY_BYTES = 0;

export class LocalApiServer {
  readonly #socketPath: string;
  readonly #handlers: LocalApiHandlers;
  readonly #logger: Logger;
  readonly #limits: LocalApiLimits;
  readonly #clock: Pick<Clock, 'monotonic' | 'sleep' | 'defer'>;
  #server: Server | undefined;
  /** The sync waiting to start (its answer, encoded once), shared by every request that arrives before it starts. */
  #pendingSync: Promise<Buffer> | undefined;
  #runningSync: Promise<unknown> = Promise.resolve();
  #lastSyncEndedAt = Number.NEGATIVE_INFINITY;
  #dropped = 0;
  /** Status requests waiting for the answer being built this turn of the event loop (#answerStatus). */
  #statusWaiters: ServerResponse[] | undefined;
  #lastStatusAt = Number.NEGATIVE_INFINITY;
  /** Each connection held: requests in progress on it, and since when it has had none. */
  readonly #connections = new Map<Socket, { inProgress: number; idleSince: number }>();
  /** Each connection's answers not yet taken (their send timeouts' ends), under one 'close' listener of its own. */
  readonly #unsent = new WeakMap<Socket, Set<() => void>>();
  /** The socket file bind() made: device, inode and change time (a file made after ours may get its inode). */
  #socketIdentity: string | undefined;

  constructor(
    socketPath: string,
    handlers: LocalApiHandlers,
    logger: Logger,
    limits: Partial<LocalApiLimits>,
    clock: Pick<Clock, 'monotonic' | 'sleep' | 'defer'>,
  ) {
    this.#socketPath = socketPath;
    this.#handlers = handlers;
    this.#logger = logger;
    this.#limits = { ...DEFAULT_LOCAL_API_LIMITS, ...limits };
    this.#clock = clock;
  }

  /**
   * At the cap a new connection takes the place of the one idle longest (no request in progress: never sent a
   * whole head, or between keep-alive requests): a member of the socket's group holding every slot idle no
   * longer shuts the others out; it must keep requests in progress, each bounded by the send timeout and the
   * sync interval. When every connection has a request in progress the new one is closed at once.
   */
  #admit(socket: Socket): void {
    const limits = this.#limits;
    if (this.#connections.size >= limits.maxConnections) {
      let oldest: { socket: Socket; idleSince: number } | undefined;
      for (const [held, state] of this.#connections) {
        if (state.inProgress === 0 && (oldest === undefined || state.idleSince < oldest.idleSince)) {
          oldest = { socket: held, idleSince: state.idleSince };
        }
      }
      if (oldest === undefined) {
        socket.destroy();
        this.#dropped += 1;
        // 1st, 10th, 100th, ...: a flood of connections must not become a flood of log lines.
        if (Number.isInteger(Math.log10(this.#dropped))) {
          this.#logger.warn(
            { maxConnections: limits.maxConnections, dropped: this.#dropped },
            'local API connection refused: every connection has a request in progress',
          );
        }
        return;
      }
      this.#connections.delete(oldest.socket);
      oldest.socket.destroy();
    }
    this.#connections.set(socket, { inProgress: 0, idleSince: this.#clock.monotonic() });
    socket.once('close', () => this.#connections.delete(socket));
  }

  /** A request in progress on its connection from its head until its answer is sent or abandoned. */
  #track(request: IncomingMessage, response: ServerResponse): void {
    const state = this.#connections.get(request.socket as Socket);
    if (state === undefined) return;
    state.inProgress += 1;
    response.once('close', () => {
      state.inProgress -= 1;
      state.idleSince = this.#clock.monotonic();
    });
  }

  /** Requests whose answers are not yet sent (nor abandoned), over every connection. */
  requestsInProgress(): number {
    let count = 0;
    for (const state of this.#connections.values()) count += state.inProgress;
    return count;
  }

  /** Connections the server holds now. */
  connectionCount(): Promise<number> {
    const server = this.#server;
    if (server === undefined) return Promise.resolve(0);
    return new Promise((resolve, reject) =>
      server.getConnections((error, count) => (error ? reject(error) : resolve(count))),
    );
  }

  async start(): Promise<void> {
    await removeStaleSocket(this.#socketPath);
    const limits = this.#limits;
    const server = createServer(
      {
        headersTimeout: limits.headersTimeoutMs,
        requestTimeout: Math.max(limits.requestTimeoutMs, limits.headersTimeoutMs),
        keepAliveTimeout: limits.keepAliveTimeoutMs,
        connectionsCheckingInterval: limits.checkIntervalMs,
        maxHeaderSize: limits.maxHeaderBytes,
      },
      (request, response) => {
        this.#track(request, response);
        if (announcesBody(request)) {
          response.shouldKeepAlive = false;
          sendError(response, 413, 'body_too_large', 'requests to the local API carry no body');
          return;
        }
        this.#handle(request, response).catch((error: unknown) => {
          this.#logger.error({ err: error }, 'local API request failed');
          sendError(response, 500, 'internal', 'internal error');
        });
      },
    );
    // A client that half-closes after its request (`nc -N -U`, a script's shutdown(SHUT_WR)) still gets its answer:
    // node's HTTP server otherwise aborts the request at the client's FIN, and a sync, answered once its pass
    // ended, got nothing. Node's own switch (http.Server's httpAllowHalfOpen, in node since 0.x, not typed).
    (server as typeof server & { httpAllowHalfOpen: boolean }).httpAllowHalfOpen = true;
    server.on('connection', (socket: Socket) => this.#admit(socket));
    // Bound under a name of its own, then linked at socketPath: libuv's close of a listening pipe unlinks the
    // path it was bound to by name, whatever file is there by then, so bound at socketPath the agent's close (a
    // reload, a stop) removed a socket another program had put there after ours was removed. The link fails
    // when the path is taken (as bind did); the bound name goes at once.
    const bindPath = asideSocketPath(this.#socketPath);
    await new Promise<void>((resolve, reject) => {
      server.once('error', reject);
      // The socket gets its mode from bind(), which listen() makes synchronously here, under a umask that
      // leaves SOCKET_MODE: a chmod of the path afterwards follows a symlink that another user who can write
      // the directory swapped in meanwhile, and changed the mode of its target (any file, as root).
      const umask = process.umask(0o777 & ~SOCKET_MODE);
      try {
        server.listen(bindPath, () => {
          server.off('error', reject);
          resolve();
        });
      } finally {
        process.umask(umask);
      }
    });
    if (bindPath !== this.#socketPath) {
      try {
        await link(bindPath, this.#socketPath);
      } catch (error) {
        await new Promise<void>((resolve) => server.close(() => resolve()));
        throw errnoCode(error) === 'EEXIST'
          ? new SocketPathTakenError(`${this.#socketPath} was taken while the local API started`, {
              retryable: true,
            })
          : error;
      } finally {
        await unlink(bindPath).catch(() => undefined);
      }
    }
    // After listen, an 'error' without a listener would end the process: the API is not worth the agent.
    server.on('error', (error) => this.#logger.warn({ err: error }, 'local API server error'));
    this.#server = server;
    this.#socketIdentity = await socketIdentity(this.#socketPath);
  }

  /**
   * Whether the socket file this server made is still at its path: removed (`rm`, a clean-up of /run) or
   * replaced, nobody can reach the agent there any more, though it still listens on the unlinked socket.
   */
  async reachable(): Promise<boolean> {
    return this.#server !== undefined && (await this.#stillOurs());
  }

  async close(): Promise<void> {
    const server = this.#server;
    if (server === undefined) return;
    this.#server = undefined;
    await new Promise<void>((resolve) => {
      server.close(() => resolve());
      server.closeAllConnections();
    });
    // libuv's close of a listening pipe unlinks its path by name already (whatever file is there by then: so a
    // reload closes the old server before it starts the new one); this one only when it is still ours.
    if (await this.#stillOurs()) await unlink(this.#socketPath).catch(() => undefined);
  }

  async #stillOurs(): Promise<boolean> {
    const identity = this.#socketIdentity;
    return identity !== undefined && (await socketIdentity(this.#socketPath)) === identity;
  }

  /**
   * Runs a pass that starts after this request arrived (never answers with an older pass), at most one per
   * minSyncIntervalMs: requests arriving while one waits to start share it.
   */
  #sync(): Promise<Buffer> {
    if (this.#pendingSync !== undefined) return this.#pendingSync;
    const pending = (async () => {
      await this.#runningSync;
      const wait = this.#lastSyncEndedAt + this.#limits.minSyncIntervalMs - this.#clock.monotonic();
      if (wait > 0) await this.#clock.sleep(wait);
      // Started: requests from now on need a pass of their own.
      this.#pendingSync = undefined;
      const run = (async () => {
        try {
          return await this.#handlers.sync();
        } finally {
          this.#lastSyncEndedAt = this.#clock.monotonic();
        }
      })();
      this.#runningSync = run.then(
        () => undefined,
        () => undefined,
      );
      // Serialised, scrubbed and encoded once for every request sharing the pass: a full pass's answer is
      // megabytes, and a member of the socket's group pipelining a thousand syncs had a copy made for each.
      const outcome = await run;
      const scrub = this.#handlers.scrub ?? ((text: string) => text);
      return Buffer.from(scrub(JSON.stringify(outcome)), 'utf8');
    })();
    this.#pendingSync = pending;
    return pending;
  }

  /** Sends a JSON answer the client must take within sendTimeoutMs, else its connection is closed. */
  #send(response: ServerResponse, status: number, body: unknown): void {
    const scrub = this.#handlers.scrub ?? ((text: string) => text);
    this.#sendText(response, status, scrub(JSON.stringify(body)));
  }

  /** #send of an answer already serialized and scrubbed. */
  #sendText(response: ServerResponse, status: number, text: string | Buffer): void {
    sendJsonText(response, status, text);
    if (response.writableFinished) return;
    // On the injected clock (a test moves it instead of waiting). Ended by its connection's close too (close()
    // destroys every connection): an answer queued behind another on a pipelining connection never emits 'close'
    // when the connection goes, and its sleep (a timer the process waits for) outlived a stop or a reload.
    const taken = new AbortController();
    this.#clock.sleep(this.#limits.sendTimeoutMs, taken.signal).then(
      () => response.destroy(),
      () => undefined,
    );
    // One 'close' listener a connection, not one an answer: a client pipelining requests it never reads left
    // dozens stuck on one socket, and Node printed a MaxListenersExceededWarning past ten.
    const socket = response.req.socket;
    let unsent = this.#unsent.get(socket);
    if (unsent === undefined) {
      const answers = new Set<() => void>();
      unsent = answers;
      this.#unsent.set(socket, answers);
      socket.once('close', () => {
        for (const end of [...answers]) end();
      });
    }
    const stuck = unsent;
    const clear = () => {
      taken.abort();
      stuck.delete(clear);
    };
    stuck.add(clear);
    response.once('finish', clear);
    response.once('close', clear);
  }

  /**
   * Status requests that arrived in one turn of the event loop, or while the previous answer's minStatusIntervalMs
   * runs, share one answer built after all of them arrived (never one built before a request: a status read right
   * after a sync or a reload shows it). Building,
   * serialising and scrubbing the status is ~4 ms of CPU at 10,000 managed files; a member of the socket's group
   * asking in a loop on every connection had it built once per request, keeping a core busy.
   */
  #answerStatus(response: ServerResponse): void {
    if (this.#statusWaiters !== undefined) {
      this.#statusWaiters.push(response);
      return;
    }
    const waiters = [response];
    this.#statusWaiters = waiters;
    const wait = this.#lastStatusAt + this.#limits.minStatusIntervalMs - this.#clock.monotonic();
    const due =
      wait > 0 ? this.#clock.sleep(wait) : new Promise<void>((resolve) => laterTurn(this.#clock)(resolve));
    void due.then(() => {
      this.#statusWaiters = undefined;
      this.#lastStatusAt = this.#clock.monotonic();
      const open = waiters.filter((waiter) => !waiter.destroyed);
      if (open.length === 0) return;
      let text: Buffer;
      try {
        const scrub = this.#handlers.scrub ?? ((raw: string) => raw);
        // Encoded once for every waiter (the UTF-8 encoding of a megabyte answer per response was most of its cost).
        text = Buffer.from(scrub(JSON.stringify(this.#handlers.status())), 'utf8');
      } catch (error) {
        this.#logger.error({ err: error }, 'local API request failed');
        for (const waiter of open) sendError(waiter, 500, 'internal', 'internal error');
        return;
      }
      for (const waiter of open) this.#sendText(waiter, 200, text);
    });
  }

  async #handle(request: IncomingMessage, response: ServerResponse): Promise<void> {
    const route = `${request.method ?? 'GET'} ${(request.url ?? '/').split('?')[0]}`;
    request.resume();
    switch (route) {
      case 'GET /v1/health': {
        const health = this.#handlers.health();
        this.#send(response, health.healthy ? 200 : 503, health);
        return;
      }
      case 'GET /v1/status':
        this.#answerStatus(response);
        return;
      case 'POST /v1/sync': {
        // Taken: said at once (102 Processing), the answer follows when the pass ends. A client cannot tell an agent
        // running a long pass from one stopped (SIGSTOP) or wedged, whose connections the kernel accepts all the
        // same: `config-agent sync` waited its whole 15 min for one (adv36); it now gives up after 10 s without it.
        // Not to an HTTP/1.0 client, which cannot read an interim answer (RFC 9110 15.2).
        if (request.httpVersionMajor === 1 && request.httpVersionMinor >= 1) response.writeProcessing();
        this.#sendText(response, 200, await this.#sync());
        return;
      }
      default:
        if (['/v1/health', '/v1/status', '/v1/sync'].includes((request.url ?? '').split('?')[0] ?? '')) {
          sendError(response, 405, 'method_not_allowed', `${request.method} is not allowed here`);
        } else {
          sendError(response, 404, 'not_found', `no route ${route}`);
        }
    }
  }
}

/** The socket file at `socketPath` as `dev:ino:ctime` (nanoseconds); undefined when there is no socket. */
async function socketIdentity(socketPath: string): Promise<string | undefined> {
  const stats = await lstat(socketPath, { bigint: true }).catch(() => undefined);
  return stats?.isSocket() === true ? `${stats.dev}:${stats.ino}:${stats.ctimeNs}` : undefined;
}

function announcesBody(request: IncomingMessage): boolean {
  if (request.headers['transfer-encoding'] !== undefined) return true;
  const length = request.headers['content-length'];
  return length !== undefined && Number(length) > MAX_BODY_BYTES;
}

function sendJson(
  response: ServerResponse,
  status: number,
  body: unknown,
  scrub: (text: string) => string = (text) => text,
): void {
  sendJsonText(response, status, scrub(JSON.stringify(body)));
}

function sendJsonText(response: ServerResponse, status: number, text: string | Buffer): void {
  response.writeHead(status, {
    'content-type': 'application/json',
    'content-length': Buffer.byteLength(text),
  });
  response.end(text);
}

function sendError(response: ServerResponse, status: number, code: string, message: string): void {
  if (response.headersSent) {
    response.destroy();
    return;
  }
  sendJson(response, status, { error: { code, message } });
}

/** Longest path a unix socket can be bound to (sun_path is 108 bytes with its NUL). */
const MAX_SOCKET_PATH_BYTES = 107;

/**
 * A name beside socketPath, unguessable, to bind the socket to before it is linked at socketPath; socketPath
 * itself when that name would be too long for a unix socket (then libuv's close unlinks socketPath by name).
 */
function asideSocketPath(socketPath: string): string {
  const aside = path.join(path.dirname(socketPath), `.ca-${randomBytes(6).toString('hex')}`);
  return Buffer.byteLength(aside) <= MAX_SOCKET_PATH_BYTES ? aside : socketPath;
}

/**
 * A socket file left by a killed agent blocks listen(); remove it, but only when it is a socket nobody
 * answers on — never a regular file, and never a live agent's socket.
 */
async function removeStaleSocket(socketPath: string): Promise<void> {
  let stats: Awaited<ReturnType<typeof lstat>>;
  try {
    stats = await lstat(socketPath);
  } catch (error) {
    if (errnoCode(error) === 'ENOENT') return;
    throw error;
  }
  if (!stats.isSocket()) {
    throw new SocketPathTakenError(`${socketPath} exists and is not a socket: refusing to replace it`, {
      retryable: false,
    });
  }
  const live = await new Promise<boolean>((resolve) => {
    const probe = createConnection(socketPath);
    probe.once('connect', () => {
      probe.destroy();
      resolve(true);
    });
    probe.once('error', () => resolve(false));
  });
  if (live) {
    throw new SocketPathTakenError(`another agent is already listening on ${socketPath}`, {
      retryable: false,
    });
  }
  await unlink(socketPath).catch((error: unknown) => {
    throw new SocketPathTakenError(`cannot remove stale socket ${socketPath}: ${errorMessage(error)}`, {
      retryable: false,
      cause: error,
    });
  });
}
