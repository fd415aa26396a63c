// Tells a request that met a keep-alive connection the other side had already closed (or timed out with a 408) from any other failure.

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

/**
 * Marks `error` as a stale connection's when it is one: a closed or reset connection, met by a request on a
 * connection that had served earlier ones (`reused`) before any byte of its response was read.
 */
export function markIfStale(error: unknown, reused: boolean, awaitingResponse: boolean): void {
  if (!reused || !awaitingResponse || typeof error !== 'object' || error === null) return;
  const code = (error as { code?: unknown }).code;
  if (typeof code === 'string' && CLOSED_CODES.has(code) && !(STALE in error)) {
    Object.defineProperty(error, STALE, { value: true });
  }
}

/** Methods the client sends again on a stale connection (client.ts `idempotent`): a GET, and the status PATCH. */
const RESENT_METHODS = new Set(['GET', 'PATCH']);

/**
 * The error a transport fails a request with when its answer is a `408 Request Timeout` on a connection that had
 * served earlier answers, for a GET or a PATCH: the service (Node's http server, a proxy) timed the idle
 * connection out as the request arrived and closes it, so the request was never read, as with a FIN. Marked
 * stale, so the client sends it once more at once on a new connection instead of the pass backing off. Undefined
 * for any other answer: a 408 on a new connection, or to the deploy POST, stays the service's answer.
 */
export function staleTimeoutError(statusCode: number, reused: boolean, method: string): Error | undefined {
  if (statusCode !== 408 || !reused || !RESENT_METHODS.has(method)) return undefined;
  const message = 'the service timed a kept-alive connection out (408) as the request came';
  const error = Object.assign(new Error(message), { code: 'ECONNRESET' });
  Object.defineProperty(error, STALE, { value: true });
  return error;
}
