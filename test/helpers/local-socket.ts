// Whatever answers at socketPath for `config-agent status` and `sync` (a real unix-socket HTTP server), and the io
// they print to: the set-up of the local client's unit tests.
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import os from 'node:os';
import path from 'node:path';
import { afterEach, beforeEach } from 'vitest';
import type { CommandIo } from '../../src/cli/io.js';
import { textSink } from './text-sink.js';

export type SocketHandler = (request: IncomingMessage, response: ServerResponse) => void;

/** A command's io, stdout and stderr kept (`out`, `err`); a terminal unless `isTty` is false. */
export function bufferedIo(
  env: NodeJS.ProcessEnv = {},
  isTty = true,
): CommandIo & { out: () => string; err: () => string } {
  const out = textSink();
  const err = textSink();
  return { stdout: out.stream, stderr: err.stream, env, isTty, out: out.text, err: err.text };
}

export interface LocalSocket {
  /** The test's temp dir. */
  readonly dir: string;
  /**
   * Serves `handler` at dir/agent.sock and writes dir/config.json naming it (with `config`'s fields besides):
   * the config's path. One server a test; it is closed after the test.
   */
  serve(handler: SocketHandler, config?: Record<string, unknown>): Promise<string>;
}

/** A temp dir named by `prefix` for each test of the file, and the server it serves, closed and removed after. */
export function localSocketEachTest(prefix: string): LocalSocket {
  let dir: string | undefined;
  let server: Server | undefined;
  beforeEach(async () => {
    dir = await mkdtemp(path.join(os.tmpdir(), prefix));
  });
  afterEach(async () => {
    server?.closeAllConnections();
    await new Promise((resolve) => (server === undefined ? resolve(undefined) : server.close(resolve)));
    server = undefined;
    if (dir !== undefined) await rm(dir, { recursive: true, force: true });
    dir = undefined;
  });
  const dirNow = (): string => {
    if (dir === undefined) throw new TypeError('a local socket is served during a test only');
    return dir;
  };
  return {
    get dir() {
      return dirNow();
    },
    async serve(handler, config = {}) {
      const socketPath = path.join(dirNow(), 'agent.sock');
      const serving = createServer(handler);
      server = serving;
      await new Promise<void>((resolve) => serving.listen(socketPath, resolve));
      const configPath = path.join(dirNow(), 'config.json');
      await writeFile(configPath, JSON.stringify({ ...config, socketPath }));
      return configPath;
    },
  };
}

/**
 * An answer of the pieces `next` gives (given what was sent so far; undefined: the end) between `opening` and
 * `closing`, each piece written after the last drained, so a client that stops reading stops the writes. `sent`
 * counts the pieces' bytes the socket took.
 */
export function streamedAnswer(
  next: (sent: number) => Buffer | undefined,
  opening = '',
  closing = '',
): { sent: () => number; handler: SocketHandler } {
  let sent = 0;
  return {
    sent: () => sent,
    handler: (_request, response) => {
      response.writeHead(200, { 'content-type': 'application/json' });
      if (opening !== '') response.write(opening);
      const more = () => {
        for (let piece = next(sent); piece !== undefined && !response.destroyed; piece = next(sent)) {
          sent += piece.length;
          if (!response.write(piece)) return void response.once('drain', more);
        }
        if (!response.destroyed) response.end(closing);
      };
      more();
    },
  };
}
