// Failures of the service client as classes with a stable `code` and `retryable`, so callers never parse messages.
import { AgentError } from '../lib/errors.js';
import { type DeliveryVerdict, deliveryVerdictForStatus, isRetryableStatus } from './http-status.js';
import type { ErrorBody } from './schemas.js';

/** Where a request was going, for messages: the method and the route *pattern* (never ids, query or headers). */
export interface RequestTarget {
  method: string;
  route: string;
}

function where(target: RequestTarget): string {
  return `${target.method} ${target.route}`;
}

/**
 * How much of a service's error body an error carries: it goes into every log line naming the error (and its
 * `code` into the message: the `--once` summary, the local API, report messages). The client reads up to 64 KiB of
 * it; a service sending that much on every failure made each failed pass log three lines of 61 KB (journald cuts
 * lines at 48 KiB, so they were no JSON any more). A code is shown only when it is a plain token; a larger body
 * keeps its code and the size of what was left out. Left out whole, never cut: a cut could leave part of an API key
 * the service echoed, which the scrub of whole keys would not catch.
 */
const SHOWN_ERROR_BODY_CHARS = 1024;
const SHOWN_ERROR_CODE = /^[A-Za-z0-9_.:-]{1,64}$/;

function shownErrorCode(code: string): string | undefined {
  return SHOWN_ERROR_CODE.test(code) ? code : undefined;
}

function shownErrorBody(body: ErrorBody | undefined): ErrorBody | undefined {
  if (body === undefined) return undefined;
  const text = JSON.stringify(body);
  if (text.length <= SHOWN_ERROR_BODY_CHARS) return body;
  return {
    error: {
      code: shownErrorCode(body.error.code) ?? '(not shown)',
      message: `(an error body of ${text.length} characters, not shown)`,
      params: {},
    },
  };
}

/** The service answered with a non-2xx status; whether it is worth retrying is `http-status.ts`'s judgement. */
export class HttpStatusError extends AgentError {
  readonly method: string;
  readonly route: string;
  readonly status: number;
  /**
   * The parsed error body, or undefined when the body does not have the service's error shape; one over
   * SHOWN_ERROR_BODY_CHARS is replaced by its code and size.
   */
  readonly body: ErrorBody | undefined;
  /** Retry-After (seconds or HTTP-date) in ms from now, never negative; undefined when absent or unparseable. */
  readonly retryAfterMs: number | undefined;
  /** The answer was an HTML page (a proxy's or a captive portal's error page), not the service's JSON. */
  readonly htmlPage: boolean;

  constructor(
    target: RequestTarget,
    status: number,
    body: ErrorBody | undefined,
    retryAfterMs: number | undefined,
    htmlPage = false,
  ) {
    const shownCode = body === undefined ? undefined : shownErrorCode(body.error.code);
    const code = shownCode === undefined ? '' : ` (${shownCode})`;
    super('http_status', `${where(target)} failed with HTTP ${status}${code}`, {
      retryable: isRetryableStatus(status),
    });
    this.method = target.method;
    this.route = target.route;
    this.status = status;
    this.body = shownErrorBody(body);
    this.retryAfterMs = retryAfterMs;
    this.htmlPage = htmlPage;
  }
}

/** The connection failed, was refused or reset: the service may be back soon. */
export class NetworkError extends AgentError {
  readonly method: string;
  readonly route: string;
  constructor(target: RequestTarget, detail: string, cause?: unknown) {
    super('network_error', `${where(target)} failed: network error (${detail})`, { retryable: true, cause });
    this.method = target.method;
    this.route = target.route;
  }
}

/**
 * TLS's verdicts that depend on the device's clock: a certificate not valid yet (a device booted at 1970 or at its
 * image's build date, before NTP steps the clock) or expired (a clock that ran ahead). The device's condition, not
 * the service's: the clock can be set right any moment, so a pull failing so waits one poll, not an outage's backoff.
 */
const CLOCK_CERTIFICATE_CODES = new Set(['CERT_NOT_YET_VALID', 'CERT_HAS_EXPIRED']);

/** True when `error` is a network error whose cause (or a cause of it, a few deep) is such a TLS verdict. */
export function isCertificateClockError(error: unknown): boolean {
  if (!(error instanceof NetworkError)) return false;
  let cause: unknown = error.cause;
  for (let depth = 0; depth < 4 && typeof cause === 'object' && cause !== null; depth += 1) {
    const code = (cause as { code?: unknown }).code;
    if (typeof code === 'string' && CLOCK_CERTIFICATE_CODES.has(code)) return true;
    cause = (cause as { cause?: unknown }).cause;
  }
  return false;
}

/** The request's total deadline, or a connect/headers/body timeout, expired. */
export class TimeoutError extends AgentError {
  readonly method: string;
  readonly route: string;
  constructor(target: RequestTarget, detail: string, cause?: unknown) {
    super('timeout', `${where(target)} timed out (${detail})`, { retryable: true, cause });
    this.method = target.method;
    this.route = target.route;
  }
}

/** The response body exceeded the client's byte cap: retrying would fetch the same oversize body. */
export class ResponseTooLargeError extends AgentError {
  readonly method: string;
  readonly route: string;
  readonly maxBytes: number;
  /** The body's first bytes (at most 64 KiB) when any arrived: never logged, read only to name an item. */
  readonly bodyPrefix: string | undefined;
  constructor(target: RequestTarget, maxBytes: number, cause?: unknown, bodyPrefix?: string) {
    super('response_too_large', `${where(target)} response exceeds the limit of ${maxBytes} bytes`, {
      retryable: false,
      cause,
    });
    this.method = target.method;
    this.route = target.route;
    this.maxBytes = maxBytes;
    this.bodyPrefix = bodyPrefix;
  }
}

/** The body is not valid JSON: typically a close-delimited transfer cut short, so a retry may succeed. */
export class MalformedResponseError extends AgentError {
  readonly method: string;
  readonly route: string;
  readonly status: number;
  /** An HTML page (a captive portal, a proxy's page): something other than the service answered. */
  readonly htmlPage: boolean;
  constructor(target: RequestTarget, status: number, detail: string, htmlPage = false) {
    super(
      'malformed_response',
      `${where(target)} returned HTTP ${status} with a body that is not JSON (${detail})`,
      {
        retryable: true,
      },
    );
    this.method = target.method;
    this.route = target.route;
    this.status = status;
    this.htmlPage = htmlPage;
  }
}

/** Valid JSON that violates the wire schema: the server and client disagree, and retrying will not fix it. */
export class InvalidResponseError extends AgentError {
  readonly method: string;
  readonly route: string;
  /** The failing field paths, such as `data[0].created_at`. */
  readonly paths: readonly string[];
  constructor(target: RequestTarget, problems: readonly { path: string; problem: string }[]) {
    const shown = problems
      .slice(0, 3)
      .map((p) => `${p.path || '(root)'}: ${p.problem}`)
      .join('; ');
    const more = problems.length > 3 ? ` (and ${problems.length - 3} more)` : '';
    super(
      'invalid_response',
      `${where(target)} returned a response that violates the schema: ${shown}${more}`,
      {
        retryable: false,
      },
    );
    this.method = target.method;
    this.route = target.route;
    this.paths = problems.map((p) => p.path);
  }
}

/**
 * A 2xx to a status report whose body is the reported instance in other statuses: the service did not take the
 * report (a bug, or something answering for it). Judged `skip`: kept, sent again after its backoff.
 */
export class ReportContradictedError extends AgentError {
  constructor(instanceId: string, sent: string, answered: string) {
    super(
      'report_contradicted',
      `the service answered the report ${sent} of ${instanceId} with the instance still ${answered}`,
      { retryable: false },
    );
  }
}

/** The caller passed an argument the client refuses to send (an empty id, an invalid status report). */
export class InvalidArgumentError extends AgentError {
  constructor(message: string) {
    super('invalid_argument', message, { retryable: false });
  }
}

export function isRetryableError(e: unknown): boolean {
  return e instanceof AgentError && e.retryable;
}

/**
 * The outbox's verdict on a failed status report (see `deliveryVerdictForStatus`): the status decides for an
 * HTTP answer; no connection, a timeout or an HTML page stops delivery (no report gets through now); anything else (a body
 * that breaks the schema, a malformed answer) is this report's own failure: skip it.
 */
export function deliveryVerdict(error: unknown): DeliveryVerdict {
  // Refused before it was sent, for good (an id no URL can carry): kept, it would block convergence forever.
  if (error instanceof InvalidArgumentError) return 'drop';
  if (error instanceof HttpStatusError) {
    const verdict = deliveryVerdictForStatus(error.status);
    // A 4xx HTML page (nginx's 405 for a PATCH, a proxy's 404, a portal's 400) is no verdict of the service on
    // this report: kept and sent again after its backoff. Dropped, every queued report went with it, `failed`s
    // the state already records included, which are never derived again.
    if (verdict === 'drop' && error.htmlPage) return 'skip';
    return verdict === 'delivered' ? 'skip' : verdict;
  }
  // An HTML page answers for the service (a captive portal): no report gets through it now.
  if (error instanceof MalformedResponseError && error.htmlPage) return 'stop';
  return error instanceof NetworkError || error instanceof TimeoutError ? 'stop' : 'skip';
}
