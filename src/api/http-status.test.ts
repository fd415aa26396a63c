// The one HTTP status classifier, as a table, and the three judgements read from it: retry, delivery, exit code.
import { describe, expect, it } from 'vitest';
import {
  deliveryVerdict,
  HttpStatusError,
  InvalidResponseError,
  MalformedResponseError,
  NetworkError,
  ResponseTooLargeError,
  TimeoutError,
} from './errors.js';
import {
  classifyStatus,
  deliveryVerdictForStatus,
  isRetryableStatus,
  isServiceUnusableStatus,
  type StatusClass,
} from './http-status.js';

const target = { method: 'PATCH', route: '/v1/config_instances/{id}' };

// status, class, retryable, service unusable (exit 3), delivery verdict
const TABLE: [number, StatusClass, boolean, boolean, string][] = [
  [200, 'success', false, false, 'delivered'],
  [204, 'success', false, false, 'delivered'],
  [299, 'success', false, false, 'delivered'],
  // No working service answers these to this client (it never asks conditionally, for a range or with
  // Expect): a broken service, cache or proxy. The service is unusable (exit 3); a report is kept.
  [100, 'unexpected', false, true, 'skip'],
  [199, 'unexpected', false, true, 'skip'],
  [302, 'unexpected', false, true, 'skip'],
  [304, 'unexpected', false, true, 'skip'],
  [399, 'unexpected', false, true, 'skip'],
  [406, 'unexpected', false, true, 'skip'],
  [412, 'unexpected', false, true, 'skip'],
  [416, 'unexpected', false, true, 'skip'],
  [417, 'unexpected', false, true, 'skip'],
  [418, 'unexpected', false, true, 'skip'],
  [421, 'unexpected', false, true, 'skip'],
  [426, 'unexpected', false, true, 'skip'],
  [428, 'unexpected', false, true, 'skip'],
  [499, 'unexpected', false, true, 'skip'],
  [600, 'unexpected', false, true, 'skip'],
  [999, 'unexpected', false, true, 'skip'],
  [400, 'rejected', false, false, 'drop'],
  [404, 'rejected', false, false, 'drop'],
  [409, 'rejected', false, false, 'drop'],
  [410, 'rejected', false, false, 'drop'],
  [422, 'rejected', false, false, 'drop'],
  [401, 'denied', false, true, 'stop'],
  [403, 'denied', false, true, 'stop'],
  [408, 'unavailable', true, true, 'stop'],
  [429, 'unavailable', true, true, 'stop'],
  [502, 'unavailable', true, true, 'stop'],
  [503, 'unavailable', true, true, 'stop'],
  [504, 'unavailable', true, true, 'stop'],
  [500, 'server_error', true, true, 'skip'],
  [501, 'server_error', true, true, 'skip'],
  [505, 'server_error', true, true, 'skip'],
  [599, 'server_error', true, true, 'skip'],
  // A 4xx judging the request itself: the service will never accept it (a kept report was retried every pass).
  [405, 'rejected', false, false, 'drop'],
  [411, 'rejected', false, false, 'drop'],
  [415, 'rejected', false, false, 'drop'],
  // Blocked (by law or policy, at a proxy) or unpaid: no request judged, every report kept.
  [402, 'denied', false, true, 'stop'],
  [451, 'denied', false, true, 'stop'],
  // Refused for its size: a report is sent again without its message first (reconcile/report.ts).
  [413, 'too_large', false, false, 'drop'],
  [414, 'too_large', false, false, 'drop'],
  [431, 'too_large', false, false, 'drop'],
  [407, 'denied', false, true, 'stop'],
  [425, 'unavailable', true, true, 'stop'],
];

describe('classifyStatus and what is read from it', () => {
  it.each(TABLE)(
    '%i is %s (retryable %s, service unusable %s, report %s)',
    (status, kind, retry, down, verdict) => {
      expect(classifyStatus(status)).toBe(kind);
      expect(isRetryableStatus(status)).toBe(retry);
      expect(isServiceUnusableStatus(status)).toBe(down);
      expect(deliveryVerdictForStatus(status)).toBe(verdict);
      expect(new HttpStatusError(target, status, undefined, undefined).retryable).toBe(retry);
    },
  );

  it('the whole range has a class', () => {
    for (let status = 100; status < 1000; status += 1) {
      expect(classifyStatus(status)).toMatch(
        /^(success|too_large|rejected|denied|unavailable|server_error|unexpected)$/,
      );
    }
  });
});

describe('deliveryVerdict (the outbox reads it for a failed report)', () => {
  it('a permanently rejected report is dropped, so one poisoned report never blocks the rest', () => {
    for (const status of [400, 404, 405, 409, 410, 413, 414, 415, 422, 431]) {
      expect(deliveryVerdict(new HttpStatusError(target, status, undefined, undefined))).toBe('drop');
    }
  });

  it('a refused key, overload or no connection stops delivery and keeps every report', () => {
    for (const status of [401, 403, 408, 429, 502, 503, 504]) {
      expect(deliveryVerdict(new HttpStatusError(target, status, undefined, undefined))).toBe('stop');
    }
    expect(deliveryVerdict(new NetworkError(target, 'ECONNREFUSED'))).toBe('stop');
    expect(deliveryVerdict(new TimeoutError(target, 'total deadline'))).toBe('stop');
  });

  it("anything else is this report's own failure: skip it, keep it, deliver the others", () => {
    for (const status of [500, 501, 302]) {
      expect(deliveryVerdict(new HttpStatusError(target, status, undefined, undefined))).toBe('skip');
    }
    expect(deliveryVerdict(new MalformedResponseError(target, 200, 'cut'))).toBe('skip');
    expect(deliveryVerdict(new InvalidResponseError(target, [{ path: 'id', problem: 'missing' }]))).toBe(
      'skip',
    );
    expect(deliveryVerdict(new ResponseTooLargeError(target, 10))).toBe('skip');
    expect(deliveryVerdict(new Error('bug'))).toBe('skip');
    expect(deliveryVerdict('string')).toBe('skip');
  });
});
