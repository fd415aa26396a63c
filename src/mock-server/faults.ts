// Fault injection: the next n requests whose path matches a registered pattern, after `skip` of them, fail as chosen.
import type { HttpBindings } from '@hono/node-server';
import { RESPONSE_ALREADY_SENT } from '@hono/node-server/utils/response';
import type { Context, MiddlewareHandler } from 'hono';
import type { ContentfulStatusCode } from 'hono/utils/http-status';
import type { ActiveFault } from '../api/admin-schemas.js';
import type { Logger } from '../lib/logger.js';
import { codeForStatus, errorBody } from './errors.js';
import type { MockState } from './state.js';

const DEFAULT_FAULT_STATUS = 503;
const SLOW_CHUNK_BYTES = 8;
const SLOW_INTERVAL_MS = 300;
const MALFORMED_BODY = '<!doctype html><title>502 Bad Gateway</title>{"object": "list", "data": [';

export function isAdminPath(path: string): boolean {
  return path === '/_admin' || path.startsWith('/_admin/');
}

/** The raw node objects of @hono/node-server; absent when the app is driven in-process with `app.request`. */
function nodeBindings(c: Context): Partial<HttpBindings> {
  return (c.env as Partial<HttpBindings> | undefined) ?? {};
}

/**
 * Runs before authentication, as a proxy or network failure would. Status, reset, hang and malformed faults
 * never reach the handler (nothing changes); truncate and slow serve the real response, so its effects
 * (a deploy, a recorded report) happen even though the client may never read the answer.
 */
export interface FaultContext {
  state: MockState;
  logger: Logger;
  /** The `paging` fault of a request, for the list handler to apply (keyed by the raw request). */
  pagingFaults: WeakMap<Request, ActiveFault>;
  /** Creation time of instances a `mutate` fault adds. */
  at: () => string;
}

export function faultMiddleware({ state, logger, pagingFaults, at }: FaultContext): MiddlewareHandler {
  return async (c, next) => {
    if (isAdminPath(c.req.path)) return next();
    const { fault, paging } = state.takeFaults(c.req.path);
    if (paging !== undefined) {
      logger.info(
        { fault: paging.id, mode: 'paging', method: c.req.method, path: c.req.path },
        'injecting fault',
      );
      pagingFaults.set(c.req.raw, paging);
    }
    if (fault === undefined) return next();
    const mode = fault.mode ?? 'status';
    logger.info({ fault: fault.id, mode, method: c.req.method, path: c.req.path }, 'injecting fault');
    const { incoming, outgoing } = nodeBindings(c);

    switch (fault.mode) {
      case undefined: {
        const status = (fault.status ?? DEFAULT_FAULT_STATUS) as ContentfulStatusCode;
        if (fault.retry_after !== undefined) c.header('Retry-After', String(fault.retry_after));
        return c.json(
          errorBody(codeForStatus(status), `injected fault ${fault.id}: status ${status}`, {
            fault_id: fault.id,
          }),
          status,
        );
      }
      case 'malformed':
        return c.body(MALFORMED_BODY, 200, { 'content-type': 'application/json' });
      case 'reset':
        if (incoming === undefined) return unsupported(c, mode);
        incoming.socket.destroy();
        return RESPONSE_ALREADY_SENT;
      case 'hang':
        if (outgoing === undefined) return unsupported(c, mode);
        // Settles only when the connection closes (client gave up, or close() destroyed it), so nothing leaks.
        return new Promise<Response>((resolve) => {
          if (outgoing.destroyed) resolve(RESPONSE_ALREADY_SENT);
          else outgoing.once('close', () => resolve(RESPONSE_ALREADY_SENT));
        });
      case 'truncate': {
        if (outgoing === undefined) return unsupported(c, mode);
        await next();
        const text = await c.res.text();
        // Without content-length or chunking the body ends where the connection does: the client sees a
        // complete 200 response whose JSON stops in the middle.
        outgoing.useChunkedEncodingByDefault = false;
        outgoing.writeHead(200, { 'content-type': 'application/json', connection: 'close' });
        outgoing.end(text.slice(0, Math.max(1, Math.floor(text.length / 2))));
        // After next() hono ignores a returned response, so replace it; clearing first avoids a header merge.
        c.res = undefined;
        c.res = RESPONSE_ALREADY_SENT;
        return;
      }
      case 'paging':
        // Taken apart (as `paging` above), so that it applies together with another fault.
        return next();
      case 'mutate':
        for (const id of fault.remove_instances ?? []) state.deleteInstance(id);
        for (const request of fault.add_instances ?? []) state.createInstance(request, at());
        return next();
      case 'rewrite': {
        await next();
        let text = fault.body ?? (await c.res.text());
        if (fault.body === undefined) {
          for (const { find, with: replacement } of fault.replace ?? [])
            text = text.split(find).join(replacement);
        }
        const status = fault.status ?? c.res.status;
        const headers = new Headers(c.res.headers);
        headers.delete('content-length');
        c.res = undefined;
        // 204 and 304 carry no body by definition.
        c.res = new Response(status === 204 || status === 304 ? null : text, { status, headers });
        return;
      }
      case 'slow': {
        await next();
        const body = new Uint8Array(await c.res.arrayBuffer());
        const headers = new Headers(c.res.headers);
        headers.set('content-length', String(body.byteLength));
        const status = c.res.status;
        c.res = undefined;
        c.res = new Response(
          trickle(body, fault.chunk_bytes ?? SLOW_CHUNK_BYTES, fault.interval_ms ?? SLOW_INTERVAL_MS),
          { status, headers },
        );
        return;
      }
    }
  };
}

function unsupported(c: Context, mode: string): Response {
  return c.json(
    errorBody('fault_unsupported', `fault mode ${mode} needs the node server (startMockServer)`, { mode }),
    500,
  );
}

/** A stream of `body` that yields `chunkBytes` at a time with `intervalMs` between chunks; cancel stops it. */
function trickle(body: Uint8Array, chunkBytes: number, intervalMs: number): ReadableStream<Uint8Array> {
  let offset = 0;
  let timer: NodeJS.Timeout | undefined;
  return new ReadableStream<Uint8Array>({
    pull(controller) {
      if (offset >= body.byteLength) {
        controller.close();
        return;
      }
      const first = offset === 0;
      const chunk = body.slice(offset, offset + chunkBytes);
      offset += chunk.byteLength;
      if (first) {
        controller.enqueue(chunk);
        return;
      }
      return new Promise<void>((resolve) => {
        timer = setTimeout(() => {
          timer = undefined;
          controller.enqueue(chunk);
          resolve();
        }, intervalMs);
      });
    },
    cancel() {
      if (timer !== undefined) clearTimeout(timer);
    },
  });
}
