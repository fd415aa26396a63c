// The config-agent-mock-server command in-process: flags, the one stdout line, JSON logs without the key, exit codes.
import { readFileSync } from 'node:fs';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { PassThrough } from 'node:stream';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { DeviceList } from '../../src/api/schemas.js';
import { API_KEY_ENV, main } from '../../src/mock-server/cli.js';
import { startMockServer } from '../../src/mock-server/server.js';
import { API_KEY, DEMO_FIXTURES_PATH } from './helpers.js';

let dir: string;

beforeAll(async () => {
  dir = await mkdtemp(path.join(tmpdir(), 'mock-cli-'));
});
afterAll(async () => {
  await rm(dir, { recursive: true, force: true });
});

function collect(stream: PassThrough): { text: () => string } {
  const chunks: string[] = [];
  stream.on('data', (chunk: Buffer) => chunks.push(chunk.toString()));
  return { text: () => chunks.join('') };
}

function run(argv: string[], env: Record<string, string> = {}) {
  const stdout = new PassThrough();
  const stderr = new PassThrough();
  const out = collect(stdout);
  const err = collect(stderr);
  const controller = new AbortController();
  const exit = main(argv, env, { stdout, stderr, signal: controller.signal });
  return { exit, out, err, stop: () => controller.abort() };
}

async function firstLine(read: () => string, exit: Promise<number>): Promise<string> {
  let exited = false;
  void exit.then(() => {
    exited = true;
  });
  for (let i = 0; i < 500 && !exited; i++) {
    const text = read();
    if (text.includes('\n')) return text.slice(0, text.indexOf('\n'));
    await new Promise((resolve) => setTimeout(resolve, 10));
  }
  throw new Error(`no line on stdout (exited: ${exited})`);
}

async function devices(url: string) {
  const response = await fetch(`${url}/v1/devices`, { headers: { 'X-API-Key': API_KEY } });
  expect(response.status).toBe(200);
  return DeviceList.parse(await response.json());
}

describe('main', () => {
  it('serves the fixtures, prints exactly one line with the base URL, logs JSON without the key, exits 0 on stop', async () => {
    const cli = run(['--port', '0', '--fixtures', DEMO_FIXTURES_PATH, '--api-key', API_KEY]);
    const url = await firstLine(cli.out.text, cli.exit);
    expect(url).toMatch(/^http:\/\/127\.0\.0\.1:\d+$/);
    expect((await devices(url)).data).toHaveLength(3);
    const refused = await fetch(`${url}/v1/devices`, { headers: { 'X-API-Key': 'other' } });
    expect(refused.status).toBe(401);

    cli.stop();
    expect(await cli.exit).toBe(0);
    expect(cli.out.text()).toBe(`${url}\n`);
    const lines = cli.err.text().trim().split('\n');
    const logs = lines.map((line) => JSON.parse(line) as { msg?: string; level?: string });
    expect(logs.map((l) => l.msg)).toContain('mock server listening');
    expect(logs.map((l) => l.msg)).toContain('shutting down');
    expect(cli.err.text()).not.toContain(API_KEY);
    await expect(fetch(`${url}/v1/devices`)).rejects.toThrow();
  });

  it('logs at LOG_LEVEL (warn: no info lines; an unknown level: info, as without it)', async () => {
    const quiet = run(['--port', '0', '--api-key', API_KEY], { LOG_LEVEL: 'warn' });
    await firstLine(quiet.out.text, quiet.exit);
    quiet.stop();
    expect(await quiet.exit).toBe(0);
    expect(quiet.err.text()).toBe('');
    const unknown = run(['--port', '0', '--api-key', API_KEY], { LOG_LEVEL: 'loud' });
    await firstLine(unknown.out.text, unknown.exit);
    unknown.stop();
    expect(await unknown.exit).toBe(0);
    const messages = unknown.err
      .text()
      .trim()
      .split('\n')
      .map((line) => (JSON.parse(line) as { msg?: string }).msg);
    expect(messages).toContain('mock server listening');
  });

  it(`takes the key from ${API_KEY_ENV}, the port and host from flags (= form too)`, async () => {
    const cli = run(['--port=0', '--host=127.0.0.1'], { [API_KEY_ENV]: API_KEY });
    const url = await firstLine(cli.out.text, cli.exit);
    expect((await devices(url)).data).toEqual([]);
    cli.stop();
    expect(await cli.exit).toBe(0);
    expect(cli.err.text()).not.toContain(API_KEY);
  });

  it.each([
    [['--api-key', API_KEY], '--port is required'],
    [['--port', 'abc', '--api-key', API_KEY], '--port'],
    [['--port', '70000', '--api-key', API_KEY], '--port'],
    [['--port', '-1', '--api-key', API_KEY], '--port'],
    [['--port', '0'], '--api-key'],
    [['--port', '0', '--api-key', ''], '--api-key'],
    [['--port', '0', '--api-key', API_KEY, '--verbose'], '--verbose'],
    [['--port', '0', '--api-key'], '--api-key'],
    [['--port', '0', API_KEY], 'unexpected positional argument'],
    [['--port', '0', '--host', '', '--api-key', API_KEY], '--host'],
  ])('exits 2 on bad flags %j, naming %s, without the key', async (argv, named) => {
    const cli = run(argv);
    expect(await cli.exit).toBe(2);
    expect(cli.out.text()).toBe('');
    expect(cli.err.text()).toContain(named);
    expect(cli.err.text()).toContain('usage:');
    expect(cli.err.text()).not.toContain(API_KEY);
  });

  it('exits 2 on a fixtures file that is missing or not JSON, naming the file', async () => {
    const missing = path.join(dir, 'missing.json');
    const notJson = path.join(dir, 'broken.json');
    await writeFile(notJson, '{"devices": [');
    for (const file of [missing, notJson]) {
      const cli = run(['--port', '0', '--fixtures', file, '--api-key', API_KEY]);
      expect(await cli.exit).toBe(2);
      expect(cli.err.text()).toContain(file);
      expect(cli.out.text()).toBe('');
    }
  });

  it('exits 2 on bad fixtures with a message naming the file, the item and the field', async () => {
    const demo = JSON.parse(readFileSync(DEMO_FIXTURES_PATH, 'utf8')) as {
      config_instances: { device_id: string }[];
    };
    const target = demo.config_instances[3];
    if (target === undefined) throw new Error('demo fixtures too small');
    target.device_id = 'dvc_unknown';
    const file = path.join(dir, 'bad.json');
    await writeFile(file, JSON.stringify(demo));
    const cli = run(['--port', '0', '--fixtures', file, '--api-key', API_KEY]);
    expect(await cli.exit).toBe(2);
    const message = cli.err.text();
    expect(message).toContain(file);
    expect(message).toContain('config_instances[3] (id "cfg_r1_app_logging")');
    expect(message).toContain('field device_id');
    expect(message).toContain('dvc_unknown');
  });

  it('exits 1 when the port is taken', async () => {
    const other = await startMockServer({ apiKeys: [API_KEY] });
    try {
      const cli = run(['--port', String(other.port), '--api-key', API_KEY]);
      expect(await cli.exit).toBe(1);
      expect(cli.out.text()).toBe('');
      expect(cli.err.text()).toContain('EADDRINUSE');
    } finally {
      await other.close();
    }
  });
});
