// The one judgement of an HTTP status from the service: request retries, report delivery and exit codes read it.
import type { DeliveryVerdict } from '../store/outbox.js';

export type { DeliveryVerdict };

/**
 * - `success`: 2xx.
 * - `too_large`: 413, 414, 431: the service refuses this request for its size (body, URL, headers); repeating
 *   it as it is changes nothing (a report is sent once more without its message, then dropped: report.ts).
 * - `rejected`: 400, 404, 405, 409, 410, 411, 415, 422: the service will never accept this request as sent (a
 *   bad body, an instance that is gone, a conflict, a method or media type it refuses); repeating it changes
 *   nothing.
 * - `denied`: 401, 402, 403, 407, 451: the key (or the proxy's credentials) is refused, the account is not
 *   paid, or the service is blocked for this device (451: by law or policy, usually at a proxy); nothing
 *   succeeds until someone acts, and no request is judged on its own.
 * - `unavailable`: 408, 425, 429, 502, 503, 504: the service cannot take requests now (overload, a gateway, a
 *   timeout); every request will fail for a while.
 * - `server_error`: any other 5xx: this request failed at the server; it may succeed later, others may now.
 * - `unexpected`: an answer no working service gives this client: 1xx and 3xx as a final answer (redirects are
 *   never followed; the client never asks conditionally, so a 304 is a broken cache or proxy), 412, 416 and 417
 *   (it never sends a precondition, a range or an Expect), 406, 421, 426 and 428 (about the connection or the
 *   protocol, the same for every request), a 4xx HTTP does not define (418, 499, ...), anything from 600 on. A
 *   broken service or something between, not a verdict on the request; repeating it at once is pointless.
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
const DENIED: ReadonlySet<number> = new Set([401, 402, 403, 407, 451]);
const UNAVAILABLE: ReadonlySet<number> = new Set([408, 425, 429, 502, 503, 504]);
/** The 4xx that judge the request itself (its body, target, method or media type): never accepted as sent. */
const REJECTED: ReadonlySet<number> = new Set([400, 404, 405, 409, 410, 411, 415, 422]);

export function classifyStatus(status: number): StatusClass {
  if (status >= 200 && status <= 299) return 'success';
  if (TOO_LARGE.has(status)) return 'too_large';
  if (DENIED.has(status)) return 'denied';
  if (UNAVAILABLE.has(status)) return 'unavailable';
  if (REJECTED.has(status)) return 'rejected';
  if (status >= 500 && status <= 599) return 'server_error';
  return 'unexpected';
}

/** Worth repeating the same request after a wait: the service is busy or failed on its side. */
export function isRetryableStatus(status: number): boolean {
  const kind = classifyStatus(status);
  return kind === 'unavailable' || kind === 'server_error';
}

/**
 * The service could not be used at all (exit code 3): it refused the key, is blocked, down or overloaded, or
 * what answered is broken (`unexpected`: a 304 to a request that was never conditional is a cache or proxy in
 * the way, not the agent's failure). A `rejected` or `too_large` answer came from a server that works but
 * disagrees with the client (a wrong base URL or API version): that is not an outage.
 */
export function isServiceUnusableStatus(status: number): boolean {
  const kind = classifyStatus(status);
  return kind !== 'success' && kind !== 'rejected' && kind !== 'too_large';
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
