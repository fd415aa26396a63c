// The one judgement of an HTTP status from the service: request retries, report delivery and exit codes read it.
import type { DeliveryVerdict } from '../store/outbox.js';

export type { DeliveryVerdict };

/**
 * - `success`: 2xx.
 * - `too_large`: 413, 414, 431: the service refuses this request for its size (body, URL, headers); repeating
 *   it as it is changes nothing (a report is sent once more without its message, then dropped: report.ts).
 * - `rejected`: every other 4xx not named below (400, 404, 405, 409, 410, 415, 422, 451, ...): the service will
 *   never accept this request as sent (a bad body, an instance that is gone, a conflict, a method or media type
 *   it refuses); repeating it changes nothing.
 * - `denied`: 401, 403, 407: the key (or the proxy's credentials) is refused; nothing succeeds until an
 *   operator fixes it.
 * - `unavailable`: 408, 425, 429, 502, 503, 504: the service cannot take requests now (overload, a gateway, a
 *   timeout); every request will fail for a while.
 * - `server_error`: any other 5xx: this request failed at the server; it may succeed later, others may now.
 * - `unexpected`: anything else (1xx, 3xx: redirects are never followed): an answer the client did not plan
 *   for; repeating it is pointless.
 */
export type StatusClass =
  | 'success'
  | 'too_large'
  | 'rejected'
  | 'denied'
  | 'unavailable'
  | 'server_error'
  | 'unexpected';

const TOO_LARGE: ReadonlySet<number> = new Set([413, 414, 431]);
const DENIED: ReadonlySet<number> = new Set([401, 403, 407]);
const UNAVAILABLE: ReadonlySet<number> = new Set([408, 425, 429, 502, 503, 504]);

export function classifyStatus(status: number): StatusClass {
  if (status >= 200 && status <= 299) return 'success';
  if (TOO_LARGE.has(status)) return 'too_large';
  if (DENIED.has(status)) return 'denied';
  if (UNAVAILABLE.has(status)) return 'unavailable';
  if (status >= 400 && status <= 499) return 'rejected';
  if (status >= 500) return 'server_error';
  return 'unexpected';
}

/** Worth repeating the same request after a wait: the service is busy or failed on its side. */
export function isRetryableStatus(status: number): boolean {
  const kind = classifyStatus(status);
  return kind === 'unavailable' || kind === 'server_error';
}

/**
 * The service could not be used at all (exit code 3): it refused the key, or is down or overloaded. A
 * `rejected`, `too_large` or `unexpected` answer came from a server that works but disagrees with the client (a wrong base
 * URL or API version): that is not an outage.
 */
export function isServiceUnusableStatus(status: number): boolean {
  const kind = classifyStatus(status);
  return kind === 'denied' || kind === 'unavailable' || kind === 'server_error';
}

/**
 * What an HTTP status means for a status report in the outbox; a 2xx is delivered. `drop`: the service will
 * never accept it (`rejected`; `too_large` once the report was shrunk, report.ts) — dropping is the only way
 * forward, or one poisoned report is retried on every pass forever and the device never converges. `stop`:
 * the service takes no report now (a refused key the operator will fix, overload): keep them all, in order.
 * `skip`: this one failed on its own (a 500 for this instance): keep it and deliver the others.
 */
export function deliveryVerdictForStatus(status: number): DeliveryVerdict | 'delivered' {
  switch (classifyStatus(status)) {
    case 'success':
      return 'delivered';
    case 'rejected':
    case 'too_large':
      return 'drop';
    case 'denied':
    case 'unavailable':
      return 'stop';
    case 'server_error':
    case 'unexpected':
      return 'skip';
  }
}
