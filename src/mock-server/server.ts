// Starts the mock service on a real socket (port 0 = any free port) and stops it without waiting on clients.
import type { Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { createAdaptorServer } from '@hono/node-server';
import { createMockService, type MockServiceOptions } from './app.js';
import type { MockState } from './state.js';

export interface StartMockServerOptions extends MockServiceOptions {
  /** 0 or absent picks a free port; pass a previous server's port (and state) to restart "the same" service. */
  port?: number;
  host?: string;
}

export interface RunningMockServer {
  /** `http://127.0.0.1:<port>`: no trailing slash, no version segment. */
  url: string;
  port: number;
  state: MockState;
  /** Stops listening and destroys every open connection, hanging ones included, so it returns promptly. */
  close(): Promise<void>;
}

export const DEFAULT_HOST = '127.0.0.1';

export async function startMockServer(options: StartMockServerOptions): Promise<RunningMockServer> {
  const { port = 0, host = DEFAULT_HOST, ...serviceOptions } = options;
  const { app, state } = createMockService(serviceOptions);
  const server = createAdaptorServer({ fetch: app.fetch }) as Server;

  await new Promise<void>((resolve, reject) => {
    const onError = (error: Error) => reject(error);
    server.once('error', onError);
    server.listen(port, host, () => {
      server.off('error', onError);
      resolve();
    });
  });

  const address = server.address() as AddressInfo;
  const hostForUrl = address.family === 'IPv6' ? `[${address.address}]` : address.address;
  let closing: Promise<void> | undefined;
  return {
    url: `http://${hostForUrl}:${address.port}`,
    port: address.port,
    state,
    close() {
      closing ??= new Promise<void>((resolve, reject) => {
        server.close((error) => (error ? reject(error) : resolve()));
        server.closeAllConnections();
      });
      return closing;
    },
  };
}
