// The mock Device Configuration Delivery Service as a hono app factory: builds the routes, never listens.
import { timingSafeEqual } from 'node:crypto';
import { type Context, Hono } from 'hono';
import { routePath } from 'hono/route';
import { LinearRouter } from 'hono/router/linear-router';
import type { ContentfulStatusCode } from 'hono/utils/http-status';
import type { z } from 'zod';
import {
  ActiveFault,
  ActiveFaultList,
  AdminStats,
  CreateConfigInstanceRequest,
  FaultRequest,
  type Fixtures,
  ReceivedReportList,
} from '../api/admin-schemas.js';
import { parseJson, stringifyJson } from '../api/json.js';
import {
  ConfigInstance,
  ConfigInstanceActivityStatus,
  ConfigInstanceList,
  ConfigInstanceListExpand,
  ConfigInstanceTargetStatus,
  Deployment,
  DeploymentExpand,
  DeployResponse,
  Device,
  DeviceList,
  ErrorStatus,
  type ListEnvelope,
  ListExpand,
  ReleaseList,
  StatusReport,
} from '../api/schemas.js';
import { type Logger, silentLogger } from '../lib/logger.js';
import { errorBody, invalidBody, invalidRequest, MockServiceError } from './errors.js';
import { faultMiddleware, isAdminPath } from './faults.js';
import { stateFromFixtures } from './fixtures.js';
import {
  type Page,
  pageOf,
  parseEnumFilter,
  parseExpand,
  parseOrder,
  parsePage,
  sortItems,
  timestampKey,
} from './list-query.js';
import { type ConfigInstanceRecord, type DeviceRecord, MockState, type ReleaseRecord } from './state.js';
import { deploymentView, deviceView, type InstanceExpand, instanceView, releaseView } from './views.js';

export interface MockServiceOptions {
  /** Keys accepted in `X-API-Key`, on every route including /_admin. */
  apiKeys: readonly string[];
  /** Loaded into a new state; ignored when `state` is given (it already holds its world, e.g. on a restart). */
  fixtures?: Fixtures;
  now?: () => Date;
  state?: MockState;
  logger?: Logger;
}

export interface MockService {
  app: Hono;
  state: MockState;
}

export const API_VERSION = 'v1';
const V = `/${API_VERSION}`;

/** Sort fields: the two the spec names for the four-value lists, and the device list's wider set. */
const SIMPLE_SORT_FIELDS = ['id', 'created_at'] as const;
const DEVICE_SORT_FIELDS = ['id', 'name', 'created_at', 'updated_at', 'last_connected_at'] as const;
const DEFAULT_ORDER = 'created_at:desc';

/** Route patterns and their methods: requests with another method get 405. */
const ROUTES: ReadonlyArray<readonly [string, readonly string[]]> = [
  [`${V}/config_instances`, ['GET']],
  [`${V}/config_instances/:id`, ['PATCH']],
  [`${V}/config_instances/:id/deploy`, ['POST']],
  [`${V}/deployments/:id`, ['GET']],
  [`${V}/releases`, ['GET']],
  [`${V}/devices`, ['GET']],
  [`${V}/devices/:id`, ['GET']],
  ['/_admin/config_instances', ['POST']],
  ['/_admin/config_instances/:id/remove', ['POST']],
  ['/_admin/reports', ['GET']],
  ['/_admin/faults', ['GET', 'POST', 'DELETE']],
  ['/_admin/stats', ['GET']],
];

export function createMockService(options: MockServiceOptions): MockService {
  if (options.apiKeys.length === 0 || options.apiKeys.some((key) => key === '')) {
    throw new TypeError('createMockService: apiKeys must hold at least one non-empty key');
  }
  const now = options.now ?? (() => new Date());
  const at = () => now().toISOString();
  const logger = (options.logger ?? silentLogger()).child({ component: 'mock-server' });
  const state =
    options.state ?? (options.fixtures ? stateFromFixtures(options.fixtures, at()) : new MockState());
  const keys = options.apiKeys.map((key) => Buffer.from(key));

  // Hono's default router compiles its routes into one RegExp at the first request of each app: ~1 ms of CPU for
  // every mock a test starts (2.8-3.3 ms for a start, one listing and a close; 1.9-2.0 ms with this one), against
  // a few microseconds more per request matching ~40 routes one by one.
  const app = new Hono({ router: new LinearRouter() });

  app.use('*', async (c, next) => {
    const started = performance.now();
    if (!isAdminPath(c.req.path)) state.countRequest(routeKey(c));
    await next();
    logger.info(
      {
        method: c.req.method,
        path: c.req.path,
        status: c.res.status,
        duration_ms: Math.round(performance.now() - started),
      },
      'request',
    );
  });
  const pagingFaults = new WeakMap<Request, ActiveFault>();
  app.use('*', faultMiddleware({ state, logger, pagingFaults, at }));

  /** One page of a list, as the spec pages it, unless a `paging` fault bends the rules for this request. */
  function listPage<T>(c: Context, sorted: readonly T[], page: Page, withTotal: boolean): ListEnvelope<T> {
    const fault = pagingFaults.get(c.req.raw);
    if (fault === undefined) return pageOf(sorted, page, withTotal);
    // A limit imposed below the one asked is what the envelope says: data and has_more follow it.
    const limit = Math.min(page.limit, fault.limit ?? page.limit);
    const envelope = pageOf(
      sorted,
      { limit, offset: fault.ignore_offset === true ? 0 : page.offset },
      withTotal,
    );
    return {
      ...envelope,
      offset: page.offset,
      ...(fault.has_more === undefined ? {} : { has_more: fault.has_more }),
    };
  }
  app.use('*', async (c, next) => {
    const presented = c.req.header('x-api-key');
    if (presented === undefined || presented === '') {
      return c.json(errorBody('unauthorized', 'missing X-API-Key header'), 401);
    }
    if (!isKnownKey(keys, presented)) return c.json(errorBody('unauthorized', 'invalid API key'), 401);
    return next();
  });

  // ---- the service (spec: Endpoints) ----

  app.get(`${V}/config_instances`, (c) => {
    const page = parsePage(c.req.query('limit'), c.req.query('offset'));
    const order = parseOrder(c.req.query('order_by'), SIMPLE_SORT_FIELDS, DEFAULT_ORDER);
    const expand = parseExpand(c.req.queries('expand[]'), ConfigInstanceListExpand.options);
    const filters = {
      id: c.req.query('id'),
      target_status: parseEnumFilter(
        'target_status',
        c.req.query('target_status'),
        ConfigInstanceTargetStatus.options,
      ),
      activity_status: parseEnumFilter(
        'activity_status',
        c.req.query('activity_status'),
        ConfigInstanceActivityStatus.options,
      ),
      error_status: parseEnumFilter('error_status', c.req.query('error_status'), ErrorStatus.options),
      device_id: c.req.query('device_id'),
      config_schema_id: c.req.query('config_schema_id'),
      config_type_id: c.req.query('config_type_id'),
    };
    const matching = [...state.instances.values()].filter((i) => matches(i, filters));
    const sorted = sortItems<ConfigInstanceRecord>(matching, order, {
      id: (i) => i.id,
      created_at: (i) => timestampKey(i.created_at),
    });
    const itemExpand = new Set([...expand].filter((e): e is InstanceExpand => e !== 'total_count'));
    const envelope = listPage(c, sorted, page, expand.has('total_count'));
    return send(c, ConfigInstanceList, {
      ...envelope,
      data: envelope.data.map((i) => instanceView(i, state, itemExpand)),
    });
  });

  app.post(`${V}/config_instances/:id/deploy`, (c) => {
    const rawDryRun = c.req.query('dry_run');
    if (rawDryRun !== undefined && rawDryRun !== 'true' && rawDryRun !== 'false') {
      throw invalidRequest(`dry_run: ${JSON.stringify(rawDryRun)} is not a boolean (true or false)`, {
        parameter: 'dry_run',
      });
    }
    const outcome = state.deploy(c.req.param('id'), { dryRun: rawDryRun === 'true', at: at() });
    return send(c, DeployResponse, {
      deploy: instanceView(outcome.deploy, state),
      remove: outcome.remove.map((r) => ({
        code: r.code,
        explanation: r.explanation,
        config_instance: instanceView(r.instance, state),
      })),
    });
  });

  // Extension for the agent (not in the spec): the device reports an instance's activity and error status.
  app.patch(`${V}/config_instances/:id`, async (c) => {
    const id = c.req.param('id');
    state.instance(id);
    const report = parseBody(StatusReport, await readJson(c));
    return send(c, ConfigInstance, instanceView(state.applyReport(id, report, at()), state));
  });

  app.get(`${V}/deployments/:id`, (c) => {
    const expand = parseExpand(c.req.queries('expand[]'), DeploymentExpand.options);
    return send(c, Deployment, deploymentView(state.deployment(c.req.param('id')), state, expand));
  });

  app.get(`${V}/releases`, (c) => {
    const page = parsePage(c.req.query('limit'), c.req.query('offset'));
    const order = parseOrder(c.req.query('order_by'), SIMPLE_SORT_FIELDS, DEFAULT_ORDER);
    const expand = parseExpand(c.req.queries('expand[]'), ListExpand.options);
    const filters = { id: c.req.query('id'), version: c.req.query('version') };
    const matching = [...state.releases.values()].filter((r) => matches(r, filters));
    const sorted = sortItems<ReleaseRecord>(matching, order, {
      id: (r) => r.id,
      created_at: (r) => timestampKey(r.created_at),
    });
    const envelope = listPage(c, sorted, page, expand.has('total_count'));
    return send(c, ReleaseList, { ...envelope, data: envelope.data.map(releaseView) });
  });

  app.get(`${V}/devices`, (c) => {
    const page = parsePage(c.req.query('limit'), c.req.query('offset'));
    const order = parseOrder(c.req.query('order_by'), DEVICE_SORT_FIELDS, DEFAULT_ORDER);
    const expand = parseExpand(c.req.queries('expand[]'), ListExpand.options);
    // The spec leaves device status values open, so the status filter is a plain string.
    const filters = { id: c.req.query('id'), name: c.req.query('name'), status: c.req.query('status') };
    const matching = [...state.devices.values()].filter((d) => matches(d, filters));
    const sorted = sortItems<DeviceRecord>(matching, order, {
      id: (d) => d.id,
      name: (d) => d.name,
      created_at: (d) => timestampKey(d.created_at),
      updated_at: (d) => timestampKey(d.updated_at),
      last_connected_at: (d) => timestampKey(d.last_connected_at),
    });
    const envelope = listPage(c, sorted, page, expand.has('total_count'));
    return send(c, DeviceList, { ...envelope, data: envelope.data.map(deviceView) });
  });

  app.get(`${V}/devices/:id`, (c) => send(c, Device, deviceView(state.device(c.req.param('id')))));

  // ---- admin API for tests and the demo (not versioned, same key) ----

  app.post('/_admin/config_instances', async (c) => {
    const request = parseBody(CreateConfigInstanceRequest, await readJson(c));
    return send(c, ConfigInstance, instanceView(state.createInstance(request, at()), state), 201);
  });

  app.post('/_admin/config_instances/:id/remove', (c) =>
    send(c, ConfigInstance, instanceView(state.removeInstance(c.req.param('id'), at()), state)),
  );

  app.get('/_admin/reports', (c) => send(c, ReceivedReportList, { data: state.reports }));

  app.get('/_admin/faults', (c) => send(c, ActiveFaultList, { data: state.faults }));
  app.post('/_admin/faults', async (c) => {
    const request = parseBody(FaultRequest, await readJson(c));
    return send(c, ActiveFault, state.addFault(request), 201);
  });
  app.delete('/_admin/faults', (c) => c.json({ cleared: state.clearFaults() }));

  app.get('/_admin/stats', (c) => send(c, AdminStats, state.statsSnapshot()));

  for (const [pattern, methods] of ROUTES) {
    app.all(pattern, (c) => {
      c.header('Allow', methods.join(', '));
      return c.json(
        errorBody('method_not_allowed', `method ${c.req.method} is not allowed on ${pattern}`, {
          allowed: [...methods],
        }),
        405,
      );
    });
  }

  app.notFound((c) => {
    const first = c.req.path.split('/')[1] ?? '';
    if (first !== API_VERSION && first !== '_admin' && /^v\d+$/.test(first)) {
      return c.json(
        errorBody('not_found', `API version ${first} does not exist (supported: ${API_VERSION})`, {
          version: first,
        }),
        404,
      );
    }
    return c.json(errorBody('not_found', `no route for ${c.req.method} ${c.req.path}`), 404);
  });

  app.onError((error, c) => {
    if (error instanceof MockServiceError) return c.json(error.toBody(), error.status);
    logger.error({ err: error, method: c.req.method, path: c.req.path }, 'mock service failed');
    return c.json(errorBody('internal_error', 'internal error of the mock service'), 500);
  });

  return { app, state };
}

/** Compares in constant time so the mock does not teach clients a timing side channel by example. */
function isKnownKey(keys: readonly Buffer[], presented: string): boolean {
  const candidate = Buffer.from(presented);
  let known = false;
  for (const key of keys) {
    if (key.length === candidate.length && timingSafeEqual(key, candidate)) known = true;
  }
  return known;
}

/** `<METHOD> <route pattern>`; a request that matched only the catch-all middleware counts as unmatched. */
function routeKey(c: Context): string {
  const pattern = routePath(c, -1);
  return pattern === '*' || pattern === '/*' || pattern === ''
    ? `${c.req.method} (unmatched)`
    : `${c.req.method} ${pattern}`;
}

function matches<T extends object>(item: T, filters: Record<string, string | undefined>): boolean {
  return Object.entries(filters).every(
    ([field, wanted]) => wanted === undefined || (item as Record<string, unknown>)[field] === wanted,
  );
}

async function readJson(c: Context): Promise<unknown> {
  const text = await c.req.text();
  if (text.trim() === '') throw invalidRequest('body: a JSON body is required', { field: '' });
  try {
    // Numbers kept as sent, so content with 64-bit integers round-trips through the mock.
    return parseJson(text);
  } catch {
    throw invalidRequest('body: not valid JSON', { field: '' });
  }
}

function parseBody<S extends z.ZodType>(schema: S, body: unknown): z.infer<S> {
  const result = schema.safeParse(body);
  if (!result.success) throw invalidBody(result.error);
  return result.data;
}

/** Every response goes through its wire schema, so a mock bug surfaces as a 500 instead of a silent drift. */
function send<S extends z.ZodType>(
  c: Context,
  schema: S,
  value: z.input<S>,
  status: ContentfulStatusCode = 200,
): Response {
  return c.body(stringifyJson(schema.parse(value)), status, { 'content-type': 'application/json' });
}
