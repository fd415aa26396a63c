// init's and doctor's service check against loopback stand-ins: a 200 is the service only when it is the device.
import { createServer, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterEach, describe, expect, it } from 'vitest';
import { HttpTransport } from '../api/http-transport.js';
import { checkService } from './service-check.js';

const DEVICE = 'dvc_check';
const cleanups: (() => Promise<void>)[] = [];
afterEach(async () => {
  for (const cleanup of cleanups.splice(0).reverse()) await cleanup();
});

async function check(
  answer: (res: ServerResponse) => void,
  timeoutMs = 2_000,
  deviceId = DEVICE,
  urls: string[] = [],
) {
  const server = createServer((req, res) => {
    urls.push(req.url ?? '');
    req.resume();
    req.on('end', () => answer(res));
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  cleanups.push(async () => {
    server.closeAllConnections();
    await new Promise<void>((resolve) => server.close(() => resolve()));
  });
  const baseUrl = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  const transport = new HttpTransport({ timeoutMs });
  cleanups.push(async () => transport.destroy());
  return checkService({
    baseUrl,
    apiVersion: 'v1',
    apiKey: 'sk-check-test',
    deviceId,
    timeoutMs,
    transport,
  });
}

const json = (status: number, value: unknown) => (res: ServerResponse) => {
  res.writeHead(status, { 'content-type': 'application/json' });
  res.end(JSON.stringify(value));
};

describe('checkService: a 200 that is not the device', () => {
  it('the device itself is found', async () => {
    const result = await check(json(200, { object: 'device', id: DEVICE, name: 'robot' }));
    expect(result).toMatchObject({
      ok: true,
      message: expect.stringContaining(`device ${DEVICE} ("robot") found`),
    });
  });

  it("shows the device's name without the key it may echo, and never a terminal control sequence", async () => {
    // The name is the service's text, printed by `doctor` and `init` on a terminal.
    const echoed = await check(json(200, { object: 'device', id: DEVICE, name: 'robot sk-check-test' }));
    expect(echoed).toMatchObject({ ok: true, message: expect.stringContaining('("robot [REDACTED]")') });
    expect(echoed.message).not.toContain('sk-check-test');
    const hostile = await check(json(200, { object: 'device', id: DEVICE, name: 'a\u001b[2Jb\nc' }));
    expect(hostile.message).toContain('("a\\u001b[2Jb\\nc")');
    expect(hostile.message).not.toContain('\u001b');
    expect(hostile.message).not.toContain('\n');
    const huge = await check(json(200, { object: 'device', id: DEVICE, name: 'x'.repeat(20_000) }));
    expect(huge.message).toContain('(<20000 characters, not shown>)');
  });

  it('a device with an empty or no name is found with nothing in brackets', async () => {
    for (const name of ['', undefined, 7]) {
      const result = await check(json(200, { object: 'device', id: DEVICE, name }));
      expect([name, result.ok, result.message]).toEqual([
        name,
        true,
        expect.stringMatching(new RegExp(`^device ${DEVICE} found at `)),
      ]);
    }
  });

  it('the device behind a UTF-8 byte order mark is found, as the agent reads it', async () => {
    const result = await check((res) => {
      res.writeHead(200, { 'content-type': 'application/json' });
      res.end(`\ufeff${JSON.stringify({ object: 'device', id: DEVICE })}`);
    });
    expect(result).toMatchObject({ ok: true, message: expect.stringContaining(`device ${DEVICE} found`) });
  });

  it.each([
    [
      'an HTML page (a captive portal)',
      (res: ServerResponse) => {
        res.writeHead(200, { 'content-type': 'text/html' });
        res.end('<!doctype html><title>Sign in to the Wi-Fi</title>');
      },
      'its answer is an HTML page',
    ],
    ['a JSON object of another kind', json(200, { ok: true }), `its answer is not the device ${DEVICE}`],
    [
      'another device',
      json(200, { object: 'device', id: 'dvc_other', name: 'x' }),
      `its answer is not the device ${DEVICE}`,
    ],
    ['JSON that is not an object', json(200, [1, 2]), 'its answer is not a JSON object'],
    [
      'a body larger than 1 MiB',
      (res: ServerResponse) => {
        res.writeHead(200, { 'content-type': 'application/json' });
        res.end(`{"object":"device","id":"${DEVICE}","pad":"${'x'.repeat(1 << 20)}"}`);
      },
      'its answer is larger than 1048576 bytes',
    ],
  ])('%s is not the service (it said the device was found)', async (_what, answer, why) => {
    const result = await check(answer);
    expect(result).toMatchObject({ ok: false, kind: 'http', message: expect.stringContaining(why) });
    expect(result.message).toContain('not the service');
  });

  it('a body cut short is not the service either (it said found)', async () => {
    const result = await check((res) => {
      res.writeHead(200, { 'content-type': 'application/json', 'content-length': '4096' });
      res.write(`{"object":"device","id":"${DEVICE}",`, () => res.socket?.destroy());
    });
    expect(result).toMatchObject({
      ok: false,
      kind: 'http',
      message: expect.stringContaining('its answer did not arrive whole'),
    });
  });
});

describe('checkService: the device id in the path', () => {
  // A dot segment is collapsed by URL normalisers on the way: `/v1/devices/..` asks for `/v1/`, not the device.
  it('spells a device id of "." or ".." as the agent does, so no normaliser collapses it', async () => {
    for (const [deviceId, expected] of [
      ['..', '/v1/devices/%2E%2E'],
      ['.', '/v1/devices/%2E'],
      ['a/b', '/v1/devices/a%2Fb'],
    ] as const) {
      const urls: string[] = [];
      const result = await check(json(200, { object: 'device', id: deviceId }), 2_000, deviceId, urls);
      expect(urls).toEqual([expected]);
      expect(result.ok).toBe(true);
    }
  });
});
