// Shared setup of the mock-server tests: the demo fleet on port 0 and a fetch wrapper that sends the key.
import { readFileSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import type { Fixtures } from '../../src/api/admin-schemas.js';
import { parseFixtures } from '../../src/mock-server/fixtures.js';
import {
  type RunningMockServer,
  type StartMockServerOptions,
  startMockServer,
} from '../../src/mock-server/server.js';

export const API_KEY = 'mock-test-key-5f1c9a';
export const DEMO_FIXTURES_PATH = path.resolve(
  path.dirname(fileURLToPath(import.meta.url)),
  '../fixtures/demo.json',
);

export function demoFixtures(): Fixtures {
  return parseFixtures(JSON.parse(readFileSync(DEMO_FIXTURES_PATH, 'utf8')));
}

/** A clock the test moves by hand: every call returns the current value. */
export function manualClock(start = '2025-10-02T12:00:00.000Z') {
  let current = new Date(start).getTime();
  return {
    now: () => new Date(current),
    advance(ms: number) {
      current += ms;
    },
    iso: () => new Date(current).toISOString(),
  };
}

export async function startDemo(options: Partial<StartMockServerOptions> = {}): Promise<RunningMockServer> {
  return startMockServer({ apiKeys: [API_KEY], fixtures: demoFixtures(), ...options });
}

export interface ApiResponse {
  status: number;
  headers: Headers;
  body: unknown;
  text: string;
}

/** Calls the server with the key; `body` is sent as JSON. */
export async function call(
  server: { url: string },
  method: string,
  pathAndQuery: string,
  options: { body?: unknown; key?: string | null; rawBody?: string } = {},
): Promise<ApiResponse> {
  const headers: Record<string, string> = {};
  const key = options.key === undefined ? API_KEY : options.key;
  if (key !== null) headers['X-API-Key'] = key;
  let body: string | undefined;
  if (options.rawBody !== undefined) body = options.rawBody;
  else if (options.body !== undefined) body = JSON.stringify(options.body);
  if (body !== undefined) headers['content-type'] = 'application/json';
  const response = await fetch(`${server.url}${pathAndQuery}`, {
    method,
    headers,
    ...(body === undefined ? {} : { body }),
    signal: AbortSignal.timeout(10_000),
  });
  const text = await response.text();
  let parsed: unknown;
  try {
    parsed = JSON.parse(text);
  } catch {
    parsed = undefined;
  }
  return { status: response.status, headers: response.headers, body: parsed, text };
}

export const get = (server: { url: string }, pathAndQuery: string) => call(server, 'GET', pathAndQuery);
