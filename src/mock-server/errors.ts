// Failures the mock service answers with its error body `{"error": {"code", "message", "params"}}`.
import type { ContentfulStatusCode } from 'hono/utils/http-status';
import type { ZodError } from 'zod';
import type { ErrorBody } from '../api/schemas.js';
import { AgentError } from '../lib/errors.js';
import { formatFieldPath } from '../lib/field-path.js';

export class MockServiceError extends AgentError<string> {
  readonly status: ContentfulStatusCode;
  readonly params: Record<string, unknown>;

  constructor(
    status: ContentfulStatusCode,
    code: string,
    message: string,
    params: Record<string, unknown> = {},
  ) {
    super(code, message, { retryable: status >= 500 || status === 429 });
    this.status = status;
    this.params = params;
  }

  toBody(): ErrorBody {
    return errorBody(this.code, this.message, this.params);
  }
}

export function errorBody(code: string, message: string, params: Record<string, unknown> = {}): ErrorBody {
  return { error: { code, message, params } };
}

export function notFound(what: string, id: string): MockServiceError {
  return new MockServiceError(404, 'not_found', `${what} ${JSON.stringify(id)} not found`, { id });
}

export function invalidRequest(message: string, params: Record<string, unknown> = {}): MockServiceError {
  return new MockServiceError(400, 'invalid_request', message, params);
}

/** A 400 naming the first offending field of a zod failure, e.g. `activity_status: Invalid option ...`. */
export function invalidBody(error: ZodError, where = 'body'): MockServiceError {
  const issue = error.issues[0];
  const field = issue === undefined ? '' : formatFieldPath(issue.path);
  const problem = issue?.message ?? 'invalid';
  const unknownKeys = issue?.code === 'unrecognized_keys' ? issue.keys.join(', ') : undefined;
  const message =
    unknownKeys === undefined
      ? `${where}${field === '' ? '' : ` field ${field}`}: ${problem}`
      : `${where}${field === '' ? '' : ` field ${field}`}: unknown field(s) ${unknownKeys}`;
  return invalidRequest(message, { field: unknownKeys ?? field });
}

/** A stable snake_case code for an injected status fault. */
export function codeForStatus(status: number): string {
  switch (status) {
    case 400:
      return 'invalid_request';
    case 401:
      return 'unauthorized';
    case 403:
      return 'forbidden';
    case 404:
      return 'not_found';
    case 409:
      return 'conflict';
    case 429:
      return 'rate_limited';
    case 502:
      return 'bad_gateway';
    case 503:
      return 'service_unavailable';
    case 504:
      return 'gateway_timeout';
    default:
      return status >= 500 ? 'internal_error' : 'request_failed';
  }
}
