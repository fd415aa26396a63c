// Contract-test harness: the real mock service with the demo fleet on 127.0.0.1:0, driven through the real client.
import { readFileSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { request } from 'undici';
import {
  ActiveFault,
  type FaultRequest,
  type ReceivedReport,
  ReceivedReportList,
} from '../../src/api/admin-schemas.js';
import { type ClientOptions, createClient, type ServiceClient } from '../../src/api/client.js';
import { ConfigInstance } from '../../src/api/schemas.js';
import { createServiceTransport, type Transport } from '../../src/api/transport.js';
import { parseFixtures } from '../../src/mock-server/fixtures.js';
import { type RunningMockServer, startMockServer } from '../../src/mock-server/server.js';

export const API_KEY = 'contract-test-key-7d2e91c4';
/** A fixed clock: a dry run and the real deploy after it then produce byte-identical responses. */
export const NOW = '2025-10-02T12:00:00.000Z';

const DEMO_PATH = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../fixtures/demo.json');

export interface Contract {
  server: RunningMockServer;
  /**
   * A client on the mock with the test key, on the transport production builds for a direct connection
   * (node:http); `overrides` change any option. With `builtDispatcher` the client builds its own; the mock's
   * close() ends its sockets.
   */
  client(overrides?: Partial<ClientOptions>, options?: { builtDispatcher?: boolean }): ServiceClient;
  admin: Admin;
  close(): Promise<void>;
}

export interface Admin {
  createInstance(body: Record<string, unknown>): Promise<ConfigInstance>;
  removeInstance(id: string): Promise<ConfigInstance>;
  reports(): Promise<ReceivedReport[]>;
  addFault(fault: FaultRequest): Promise<ActiveFault>;
  clearFaults(): Promise<void>;
  stats(): Promise<Record<string, number>>;
}

export async function startContract(): Promise<Contract> {
  const fixtures = parseFixtures(JSON.parse(readFileSync(DEMO_PATH, 'utf8')));
  const server = await startMockServer({ apiKeys: [API_KEY], fixtures, now: () => new Date(NOW) });
  const transports: Transport[] = [];

  async function admin(method: 'GET' | 'POST' | 'DELETE', route: string, body?: unknown): Promise<unknown> {
    const response = await request(`${server.url}${route}`, {
      method,
      headers: { 'x-api-key': API_KEY, 'content-type': 'application/json' },
      body: body === undefined ? null : JSON.stringify(body),
      signal: AbortSignal.timeout(5_000),
    });
    const text = await response.body.text();
    if (response.statusCode >= 300)
      throw new Error(`admin ${method} ${route} → ${response.statusCode}: ${text}`);
    return JSON.parse(text) as unknown;
  }

  return {
    server,
    client(overrides = {}, options = {}) {
      const base = { baseUrl: server.url, apiKey: API_KEY, timeoutMs: 5_000, maxResponseBytes: 4_000_000 };
      if (options.builtDispatcher === true) return createClient({ ...base, ...overrides });
      // Each client gets its own transport so that closing the harness leaves no sockets behind.
      const transport = createServiceTransport({ ...base, ...overrides });
      transports.push(transport);
      return createClient({ ...base, transport, ...overrides });
    },
    admin: {
      createInstance: async (body) =>
        ConfigInstance.parse(await admin('POST', '/_admin/config_instances', body)),
      removeInstance: async (id) =>
        ConfigInstance.parse(
          await admin('POST', `/_admin/config_instances/${encodeURIComponent(id)}/remove`),
        ),
      reports: async () => ReceivedReportList.parse(await admin('GET', '/_admin/reports')).data,
      addFault: async (fault) => ActiveFault.parse(await admin('POST', '/_admin/faults', fault)),
      clearFaults: async () => {
        await admin('DELETE', '/_admin/faults');
      },
      stats: async () =>
        ((await admin('GET', '/_admin/stats')) as { requests: Record<string, number> }).requests,
    },
    async close() {
      await server.close();
      await Promise.all(transports.map((transport) => transport.destroy()));
    },
  };
}

/** Drains an async iterator, failing loudly instead of looping forever if a server never ends a listing. */
export async function collect<T>(iterator: AsyncIterable<T>, max = 10_000): Promise<T[]> {
  const items: T[] = [];
  for await (const item of iterator) {
    items.push(item);
    if (items.length > max) throw new Error(`iterator yielded more than ${max} items`);
  }
  return items;
}

export async function failure(promise: Promise<unknown>): Promise<unknown> {
  try {
    await promise;
  } catch (error) {
    return error;
  }
  throw new Error('expected the promise to reject');
}

/** Orders by the given terms, then by id ascending: the spec's tie-break, computed independently of the mock. */
export function expectedOrder<T extends { id: string }>(
  items: readonly T[],
  terms: readonly [field: keyof T & string, direction: 'asc' | 'desc'][],
): string[] {
  const withTieBreak = terms.some(([field]) => field === 'id') ? terms : [...terms, ['id', 'asc'] as const];
  const key = (item: T, field: string): string | number => {
    const value = (item as Record<string, unknown>)[field];
    if (typeof value !== 'string') throw new Error(`no sortable ${field} on ${item.id}`);
    return field.endsWith('_at') ? Date.parse(value) : value;
  };
  return [...items]
    .sort((a, b) => {
      for (const [field, direction] of withTieBreak) {
        const x = key(a, field);
        const y = key(b, field);
        if (x === y) continue;
        return (x < y ? -1 : 1) * (direction === 'asc' ? 1 : -1);
      }
      return 0;
    })
    .map((item) => item.id);
}
