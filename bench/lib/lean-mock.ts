// The bench's lean mock: the same service, state and wire bytes, with a first sync's two requests served cheaply.
//
// In the bench the mock runs in the bench process, on the same two cores as the agent it serves: a first sync of
// 1,000 cost it 260–400 ms of user CPU (hono's routing and middleware, zod checks of each answer, JSON printing;
// docs/performance-history.md, "Session 18, sync23"), which the floor loops, talking to no service, never pay. This
// server answers the listing's pages from bytes printed before the run (`warm`) and a status report (PATCH) without
// the router, its middleware or the answer's schema check, through the real mock's own state (`MockState`), views
// and JSON printer; every other request, and any of those two it is not sure of (faults registered, another API
// key, an unknown instance, a body that is not a plain report), goes to the real mock (hono) unchanged.
// test/bench/lean-mock.test.ts compares its answers with the real mock's, byte for byte but the Date header.
import { Buffer } from 'node:buffer';
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { getRequestListener } from '@hono/node-server';
import { stringifyJson } from '../../src/api/json.js';
import { StatusReport } from '../../src/api/schemas.js';
import { API_VERSION, createMockService, type MockServiceOptions } from '../../src/mock-server/app.js';
import { DEFAULT_HOST } from '../../src/mock-server/server.js';
import type { MockState } from '../../src/mock-server/state.js';
import { instanceView } from '../../src/mock-server/views.js';

export interface LeanMockServer {
  url: string;
  port: number;
  state: MockState;
  /**
   * Prints the answers to these GETs (paths with their query, as the agent sends them) with the real mock, to be
   * sent as they are while nothing changed: any report, and any request the lean path does not serve, drops them.
   */
  warm(paths: readonly string[]): Promise<void>;
  /** Requests answered by the lean path (pages from `warm`, reports) and by the real mock. */
  served(): { pages: number; reports: number; real: number };
  close(): Promise<void>;
}

const LIST_PATH = `/${API_VERSION}/config_instances`;
const REPORT_PREFIX = `${LIST_PATH}/`;
/** What the agent sends and the real mock accepts (readJson and StatusReport in src/mock-server/app.ts). */
const REPORT_BODY_LIMIT = 64 * 1024;

export async function startLeanMockServer(
  options: MockServiceOptions & { port?: number; host?: string },
): Promise<LeanMockServer> {
  const { port = 0, host = DEFAULT_HOST, ...serviceOptions } = options;
  const now = serviceOptions.now ?? (() => new Date());
  const { app, state } = createMockService({ ...serviceOptions, now });
  const real = getRequestListener(app.fetch, { overrideGlobalObjects: false });
  const pages = new Map<string, Buffer>();
  const keys = new Set(serviceOptions.apiKeys);
  const counts = { pages: 0, reports: 0, real: 0 };

  const toReal = (request: IncomingMessage, response: ServerResponse) => {
    counts.real += 1;
    pages.clear();
    void real(request, response);
  };

  /**
   * The real mock's answer to a request whose body this server has read already: hono's adapter takes a body read
   * before it as `rawBody` (@hono/node-server, readRawBodyIfAvailable) and answers as it does any other request.
   */
  const realWithBody = (request: IncomingMessage, response: ServerResponse, body: Buffer) => {
    (request as IncomingMessage & { rawBody?: Buffer }).rawBody = body;
    toReal(request, response);
  };

  const lean = (request: IncomingMessage, response: ServerResponse) => {
    const url = request.url ?? '';
    const key = request.headers['x-api-key'];
    if (state.faults.length > 0 || typeof key !== 'string' || !keys.has(key))
      return toReal(request, response);
    if (request.method === 'GET') {
      const page = pages.get(url);
      if (page === undefined) return toReal(request, response);
      state.countRequest(`GET ${LIST_PATH}`);
      counts.pages += 1;
      sendJson(response, page);
      return;
    }
    const id = url.startsWith(REPORT_PREFIX) ? url.slice(REPORT_PREFIX.length) : '';
    if (request.method !== 'PATCH' || !/^[A-Za-z0-9_-]+$/.test(id) || !state.instances.has(id)) {
      return toReal(request, response);
    }
    const chunks: Buffer[] = [];
    let length = 0;
    request.on('data', (chunk: Buffer) => {
      chunks.push(chunk);
      length += chunk.byteLength;
    });
    request.on('end', () => {
      const body = Buffer.concat(chunks, length);
      const report = length <= REPORT_BODY_LIMIT ? plainReport(body) : undefined;
      if (report === undefined) {
        realWithBody(request, response, body);
        return;
      }
      state.countRequest(`PATCH ${LIST_PATH}/:id`);
      counts.reports += 1;
      pages.clear();
      const updated = state.applyReport(id, report, now().toISOString());
      sendJson(response, stringifyJson(instanceView(updated, state)));
    });
  };

  const server: Server = createServer(lean);
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(port, host, () => {
      server.off('error', reject);
      resolve();
    });
  });
  const address = server.address() as AddressInfo;
  const url = `http://${host}:${address.port}`;
  return {
    url,
    port: address.port,
    state,
    async warm(paths) {
      for (const path of paths) {
        const key = serviceOptions.apiKeys[0] ?? '';
        const answer = await app.request(`${url}${path}`, { headers: { 'x-api-key': key } });
        if (answer.status !== 200) throw new Error(`lean mock: ${path} answered ${answer.status}`);
        pages.set(path, Buffer.from(await answer.arrayBuffer()));
      }
      // The warming requests went through the real mock's middleware, which counts them: they were not the agent's.
      const counted = state.stats.get(`GET ${LIST_PATH}`) ?? 0;
      if (counted <= paths.length) state.stats.delete(`GET ${LIST_PATH}`);
      else state.stats.set(`GET ${LIST_PATH}`, counted - paths.length);
    },
    served: () => ({ ...counts }),
    close: () =>
      new Promise<void>((resolve, reject) => {
        server.close((error) => (error ? reject(error) : resolve()));
        server.closeAllConnections();
      }),
  };
}

/**
 * A 200 with a JSON body, framed as hono's adapter frames the real mock's: its `content-type` header, then node's
 * own (Date, Connection, Keep-Alive) and a Content-Length node adds at `end` (not a header of writeHead: that one
 * would come before node's, and without it the body would go in chunks).
 */
function sendJson(response: ServerResponse, body: Buffer | string): void {
  response.statusCode = 200;
  response.setHeader('content-type', 'application/json');
  response.end(body);
}

/**
 * The report in `body` when it is a plain one the real mock takes as it is (a JSON object of StatusReport's
 * fields, nothing else): else undefined, and the real mock answers (its 400s and their bodies).
 */
function plainReport(body: Buffer): StatusReport | undefined {
  let value: unknown;
  try {
    value = JSON.parse(body.toString('utf8'));
  } catch {
    return undefined;
  }
  if (typeof value !== 'object' || value === null || Array.isArray(value)) return undefined;
  const parsed = StatusReport.safeParse(value);
  if (!parsed.success) return undefined;
  // A field zod dropped or changed: the real mock's answer decides.
  if (Object.keys(value).length !== Object.keys(parsed.data).length) return undefined;
  return parsed.data;
}
