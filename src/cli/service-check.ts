// init and doctor: one GET /devices/{id} with the device's settings, classified into a sentence an operator can act on.
import { encodeId } from '../api/client.js';
import { withoutBom } from '../api/json-bytes.js';
import type { Transport, TransportResponse } from '../api/transport.js';
import { errnoCode, errorMessage } from '../lib/errors.js';
import { createSecretRegistry } from '../lib/secrets.js';
import { terminalSafe } from './summary.js';

export interface ServiceCheckInput {
  baseUrl: string;
  apiVersion: string;
  apiKey: string;
  deviceId: string;
  timeoutMs: number;
  /** The agent's own way to the service (api/transport.ts createServiceTransport). */
  transport: Transport;
}

export type ServiceCheckResult =
  | { ok: true; message: string; serverDate: Date | undefined }
  /** kind: what went wrong, for the exit code (auth/not_found: the settings; the rest: the network). */
  | {
      ok: false;
      kind: 'auth' | 'not_found' | 'tls' | 'unreachable' | 'http';
      message: string;
      serverDate: Date | undefined;
    };

/** Node's TLS verification failures (OpenSSL's names) and its own hostname check. */
const TLS_CODES = new Set([
  'CERT_HAS_EXPIRED',
  'CERT_NOT_YET_VALID',
  'DEPTH_ZERO_SELF_SIGNED_CERT',
  'SELF_SIGNED_CERT_IN_CHAIN',
  'UNABLE_TO_GET_ISSUER_CERT',
  'UNABLE_TO_GET_ISSUER_CERT_LOCALLY',
  'UNABLE_TO_VERIFY_LEAF_SIGNATURE',
  'ERR_TLS_CERT_ALTNAME_INVALID',
  'CERT_REVOKED',
  'CERT_UNTRUSTED',
]);

/** The deepest error of a cause chain that carries an errno-like code (undici wraps the socket's error). */
function rootCode(error: unknown): { code: string | undefined; message: string } {
  let current: unknown = error;
  let found: { code: string | undefined; message: string } = {
    code: undefined,
    message: errorMessage(error),
  };
  for (let depth = 0; current !== undefined && current !== null && depth < 8; depth += 1) {
    const code = errnoCode(current);
    if (code !== undefined) found = { code, message: errorMessage(current) };
    current = (current as { cause?: unknown }).cause;
  }
  return found;
}

function describeTransport(error: unknown, origin: string): ServiceCheckResult {
  const name = (error as { name?: unknown } | undefined)?.name;
  const { code, message } =
    name === 'TimeoutError' || name === 'AbortError'
      ? { code: 'ETIMEDOUT', message: 'timed out' }
      : rootCode(error);
  if (
    code !== undefined &&
    (TLS_CODES.has(code) || code.startsWith('ERR_SSL') || code.startsWith('ERR_TLS'))
  ) {
    return {
      ok: false,
      kind: 'tls',
      serverDate: undefined,
      message:
        `TLS: the certificate of ${origin} is not trusted (${code}: ${message}); check the URL and the clock, ` +
        'or trust a private CA with NODE_EXTRA_CA_CERTS in a drop-in',
    };
  }
  const hint =
    code === 'ENOTFOUND' || code === 'EAI_AGAIN'
      ? 'the host name does not resolve (check the URL and DNS)'
      : code === 'ECONNREFUSED'
        ? 'nothing listens there (check the URL and port)'
        : code === 'CONNECT_TIMEOUT' ||
            code === 'UND_ERR_CONNECT_TIMEOUT' ||
            code === 'ETIMEDOUT' ||
            code === 'ABORT_ERR'
          ? 'no answer in time (a firewall, or a proxy needed: HTTPS_PROXY or server.proxy)'
          : 'check the URL, the network and the proxy settings';
  return {
    ok: false,
    kind: 'unreachable',
    serverDate: undefined,
    message: `unreachable: cannot reach ${origin} (${code ?? message}): ${hint}`,
  };
}

function parseDate(value: string | string[] | undefined): Date | undefined {
  const text = Array.isArray(value) ? value[0] : value;
  if (text === undefined) return undefined;
  const date = new Date(text);
  return Number.isNaN(date.getTime()) ? undefined : date;
}

/** A device's answer is small: a body past this is not read on (its name is then not shown). */
const BODY_MAX_BYTES = 1024 * 1024;

/**
 * The device's name as `doctor` and `init` print it: the service's text, so the key it may echo is scrubbed (as
 * `--once` scrubs its summary) and control characters are escaped, a name past terminalSafe's bound left out.
 */
function shownName(name: string, apiKey: string): string {
  const secrets = createSecretRegistry();
  secrets.add(apiKey);
  const scrubbed = secrets.scrub(name);
  const safe = terminalSafe(scrubbed);
  return safe === scrubbed ? `"${safe}"` : safe;
}

/** The answer's text, or `too_large` once it passed BODY_MAX_BYTES; rejects when the body did not arrive whole. */
async function readText(body: TransportResponse['body']): Promise<string | 'too_large'> {
  const chunks: Buffer[] = [];
  let total = 0;
  try {
    for await (const chunk of body as AsyncIterable<Buffer>) {
      total += chunk.length;
      if (total > BODY_MAX_BYTES) return 'too_large';
      chunks.push(chunk);
    }
  } finally {
    if (!body.readableEnded) {
      body.on('error', () => {});
      body.destroy();
    }
  }
  // A leading byte order mark is ignored, as the agent's client ignores it (api/json-bytes.ts withoutBom).
  return withoutBom(Buffer.concat(chunks, total)).toString('utf8');
}

/** Never throws; the key is only ever sent in the header, never put in a message. */
export async function checkService(input: ServiceCheckInput): Promise<ServiceCheckResult> {
  const base = new URL(input.baseUrl);
  const origin = base.origin;
  const path = `${base.pathname.replace(/\/+$/, '')}/${input.apiVersion}/devices/${encodeId('device', input.deviceId)}`;
  let response: TransportResponse;
  const signal = AbortSignal.timeout(input.timeoutMs);
  try {
    response = await input.transport.request({
      origin,
      path,
      method: 'GET',
      headers: { 'x-api-key': input.apiKey, accept: 'application/json' },
      body: null,
      signal,
    });
  } catch (error) {
    return describeTransport(error, origin);
  }
  const serverDate = parseDate(response.headers.date);
  const status = response.statusCode;
  let text: string | undefined;
  let unread = 'its answer did not arrive whole (cut short, or not within the timeout)';
  try {
    const read = await readText(response.body);
    if (read === 'too_large') unread = `its answer is larger than ${BODY_MAX_BYTES} bytes`;
    else text = read;
  } catch {}
  let body: unknown;
  try {
    body = text === undefined ? undefined : JSON.parse(text);
  } catch {
    body = undefined;
  }
  const where = `${origin}${path}`;
  if (status === 200) {
    const device =
      typeof body === 'object' && body !== null && !Array.isArray(body)
        ? (body as Record<string, unknown>)
        : undefined;
    if (device?.object !== 'device' || device.id !== input.deviceId) {
      // A captive portal, a proxy's page or anything else answering 200 for every path is not the service.
      const what =
        text === undefined
          ? unread
          : /^\s*</.test(text)
            ? 'its answer is an HTML page'
            : device === undefined
              ? 'its answer is not a JSON object'
              : `its answer is not the device ${input.deviceId}`;
      return {
        ok: false,
        kind: 'http',
        serverDate,
        message: `HTTP 200 from ${where}, but ${what}: not the service (a captive portal or a proxy? check the URL and the proxy settings)`,
      };
    }
    const name = device.name;
    const named = typeof name === 'string' && name !== '' ? ` (${shownName(name, input.apiKey)})` : '';
    return { ok: true, serverDate, message: `device ${input.deviceId}${named} found at ${origin}` };
  }
  if (status === 401 || status === 403) {
    return {
      ok: false,
      kind: 'auth',
      serverDate,
      message: `HTTP ${status} from ${where}: the service rejected the API key (wrong, revoked, or for another workspace)`,
    };
  }
  if (status === 404) {
    return {
      ok: false,
      kind: 'not_found',
      serverDate,
      message:
        `HTTP 404 from ${where}: no device ${input.deviceId} there (check the device id; ` +
        `or the base URL, if the service answers 404 for every path)`,
    };
  }
  return { ok: false, kind: 'http', serverDate, message: `HTTP ${status} from ${where}` };
}
