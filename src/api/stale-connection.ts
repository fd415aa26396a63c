// Tells a request that met a keep-alive connection the other side had already closed from any other failure.

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
