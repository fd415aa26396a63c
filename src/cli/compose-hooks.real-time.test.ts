// runAgent's daemon over real 1 s polls running a real hook program: the program's check just before each run
// (integration tier: seconds of real time, see vitest.config.ts REAL_TIME; the rest of runAgent is compose.test.ts).
import { EventEmitter } from 'node:events';
import { chmod, mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { PassThrough } from 'node:stream';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { PATIENCE_MS, waitFor } from '../../test/helpers/wait-for.js';
import { createSecretRegistry } from '../lib/secrets.js';
import { startMockServer } from '../mock-server/server.js';
import { runAgent } from './compose.js';
import type { CommandIo } from './io.js';

const KEY = 'sk_test_compose_5b1e0c9d7a';

let dir: string;

beforeEach(async () => {
  dir = await mkdtemp(path.join(os.tmpdir(), 'config-agent-compose-hooks-'));
});

afterEach(async () => {
  await rm(dir, { recursive: true, force: true });
});

function bufferedIo(env: NodeJS.ProcessEnv = {}): CommandIo & { out: () => string; err: () => string } {
  const stdout = new PassThrough();
  const stderr = new PassThrough();
  let out = '';
  let err = '';
  stdout.on('data', (chunk: Buffer) => {
    out += chunk.toString();
  });
  stderr.on('data', (chunk: Buffer) => {
    err += chunk.toString();
  });
  return { stdout, stderr, env, isTty: false, out: () => out, err: () => err };
}

/** A valid config in `dir` with `overrides` (the service's address among them). */
async function writeConfig(overrides: Record<string, unknown>): Promise<string> {
  const file = path.join(dir, 'config.json');
  await writeFile(
    file,
    JSON.stringify({
      deviceId: 'dvc_compose',
      rootDir: path.join(dir, 'root'),
      stateDir: path.join(dir, 'state'),
      socketPath: path.join(dir, 'agent.sock'),
      drift: 'off',
      ...overrides,
    }),
  );
  return file;
}

describe('runAgent: a hook program changed after start', () => {
  // Trusted at start (exit 78 otherwise), a program made writable by others later ran as the agent.
  it('is not run while others can write it, and runs again once fixed', async () => {
    const server = await startMockServer({ apiKeys: [KEY] });
    const program = path.join(dir, 'reload.sh');
    const runs = path.join(dir, 'runs');
    await writeFile(program, `#!/bin/sh\necho ran >> '${runs}'\n`);
    await chmod(program, 0o755);
    const deploy = (version: number) =>
      server.state.instances.set('cfg_a', {
        id: 'cfg_a',
        device_id: 'dvc_compose',
        relative_filepath: 'a.json',
        config_schema_id: 'sch_a',
        config_type_id: 'typ',
        target_status: 'deployed',
        activity_status: 'queued',
        error_status: 'none',
        content: { version },
        created_at: '2026-01-01T00:00:00.000Z',
        updated_at: `2026-01-0${version}T00:00:00.000Z`,
      });
    const runCount = async () => (await readFile(runs, 'utf8').catch(() => '')).split('\n').length - 1;
    const hookLines = (io: { err: () => string }) =>
      io
        .err()
        .split('\n')
        .filter((line) => line.includes('"component":"hooks"'));
    const events = new EventEmitter();
    try {
      deploy(1);
      const configPath = await writeConfig({
        server: { baseUrl: server.url, timeoutSeconds: 5 },
        poll: { intervalSeconds: 1, jitterRatio: 0 },
        hooks: [{ match: '**', run: [program], timeoutSeconds: 30 }],
      });
      const io = bufferedIo({ CONFIG_AGENT_API_KEY: KEY, PATH: process.env.PATH ?? '/usr/bin:/bin' });
      const exit = runAgent({ configPath }, io, createSecretRegistry(), events);
      await waitFor(async () => (await runCount()) === 1, PATIENCE_MS, { what: 'the first hook run' });

      await chmod(program, 0o777);
      deploy(2);
      await waitFor(() => hookLines(io).length === 2, PATIENCE_MS, { what: 'the second hook' });
      expect(JSON.parse(hookLines(io)[1] ?? '{}')).toMatchObject({
        level: 'warn',
        msg: expect.stringMatching(/^hook failed: not run: .*reload\.sh: .*writable by others/),
      });
      expect(await runCount()).toBe(1);

      await chmod(program, 0o755);
      deploy(3);
      await waitFor(async () => (await runCount()) === 2, PATIENCE_MS, { what: 'the hook run once fixed' });
      events.emit('SIGTERM');
      expect(await exit).toBe(0);
    } finally {
      events.emit('SIGTERM');
      await server.close();
    }
  });
});

describe('runAgent: proxy credentials and hooks', () => {
  // HTTPS_PROXY's user:password reached every hook's environment, and a hook printing it (curl -v does, and its
  // Proxy-Authorization header) put it in the journal through the logged stderr tail.
  it('gives a hook the proxy variables without credentials unless configured, and logs none of them', async () => {
    const server = await startMockServer({ apiKeys: [KEY] });
    const password = 'pr0xy-s3cret-pw';
    const proxy = `http://agent-user:${password}@proxy.invalid:3128`;
    const basic = Buffer.from(`agent-user:${password}`).toString('base64');
    const seen = (name: string) => path.join(dir, `${name}.env`);
    // Writes its proxy variables to a file, prints them and the Basic token to stderr, and fails.
    const hook = (name: string) => [
      '/bin/sh',
      '-c',
      `printf '%s %s' "$HTTPS_PROXY" "$http_proxy" > '${seen(name)}'; echo "proxy $HTTPS_PROXY $http_proxy" >&2; u=\${HTTPS_PROXY#http://}; printf 'Proxy-Authorization: Basic %s\\n' "$(printf '%s' "\${u%@*}" | base64)" >&2; exit 1`,
    ];
    server.state.instances.set('cfg_a', {
      id: 'cfg_a',
      device_id: 'dvc_compose',
      relative_filepath: 'a.json',
      config_schema_id: 'sch_a',
      config_type_id: 'typ',
      target_status: 'deployed',
      activity_status: 'queued',
      error_status: 'none',
      content: { version: 1 },
      created_at: '2026-01-01T00:00:00.000Z',
      updated_at: '2026-01-01T00:00:00.000Z',
    });
    const events = new EventEmitter();
    try {
      const configPath = await writeConfig({
        server: { baseUrl: server.url, timeoutSeconds: 5 },
        poll: { intervalSeconds: 60, jitterRatio: 0 },
        hooks: [
          { match: '**', run: hook('plain'), timeoutSeconds: 30 },
          { match: '**', run: hook('given'), timeoutSeconds: 30, proxyCredentials: true },
        ],
      });
      const io = bufferedIo({
        CONFIG_AGENT_API_KEY: KEY,
        PATH: process.env.PATH ?? '/usr/bin:/bin',
        HTTPS_PROXY: proxy,
        http_proxy: `http://other:${password}-2@proxy.invalid:8080`,
      });
      const exit = runAgent({ configPath }, io, createSecretRegistry(), events);
      const failures = () =>
        io
          .err()
          .split('\n')
          .filter((line) => line.includes('"msg":"hook failed"'));
      await waitFor(() => failures().length === 2, PATIENCE_MS, { what: 'both hooks to fail' });
      events.emit('SIGTERM');
      expect(await exit).toBe(0);

      expect(await readFile(seen('plain'), 'utf8')).toBe(
        'http://proxy.invalid:3128 http://proxy.invalid:8080',
      );
      expect(await readFile(seen('given'), 'utf8')).toBe(
        `${proxy} http://other:${password}-2@proxy.invalid:8080`,
      );
      const tails = failures().map((line) =>
        String((JSON.parse(line) as { stderrTail: unknown }).stderrTail),
      );
      expect(tails[0]).toBe(
        `proxy http://proxy.invalid:3128 http://proxy.invalid:8080\nProxy-Authorization: Basic ${Buffer.from('proxy.invalid:3128').toString('base64')}\n`,
      );
      expect(tails[1]).toBe(
        'proxy http://[REDACTED]@proxy.invalid:3128 http://[REDACTED]@proxy.invalid:8080\nProxy-Authorization: Basic [REDACTED]\n',
      );
      for (const secret of [password, basic]) expect(io.err()).not.toContain(secret);
    } finally {
      events.emit('SIGTERM');
      await server.close();
    }
  });
});

describe('runAgent: the API key under another variable name (adv28)', () => {
  // The hook runner drops variables by name (API_KEY, CREDENTIALS_DIRECTORY): the key set for the operator's own
  // scripts under another name (an EnvironmentFile's DCDS_TOKEN, a wrapper's argument list) reached every hook.
  it('passes no variable whose value holds the key to a hook', async () => {
    const server = await startMockServer({ apiKeys: [KEY] });
    const seen = path.join(dir, 'hook.env');
    server.state.instances.set('cfg_a', {
      id: 'cfg_a',
      device_id: 'dvc_compose',
      relative_filepath: 'a.json',
      config_schema_id: 'sch_a',
      config_type_id: 'typ',
      target_status: 'deployed',
      activity_status: 'queued',
      error_status: 'none',
      content: { version: 1 },
      created_at: '2026-01-01T00:00:00.000Z',
      updated_at: '2026-01-01T00:00:00.000Z',
    });
    const events = new EventEmitter();
    try {
      const configPath = await writeConfig({
        server: { baseUrl: server.url, timeoutSeconds: 5 },
        poll: { intervalSeconds: 60, jitterRatio: 0 },
        hooks: [{ match: '**', run: ['/bin/sh', '-c', `env > '${seen}'; echo "$DCDS_TOKEN" >&2; exit 1`] }],
      });
      const io = bufferedIo({
        CONFIG_AGENT_API_KEY: KEY,
        PATH: process.env.PATH ?? '/usr/bin:/bin',
        DCDS_TOKEN: KEY,
        WRAPPER_ARGS: `--verbose --key=${KEY}`,
        KEEP_ME: 'yes',
      });
      const exit = runAgent({ configPath }, io, createSecretRegistry(), events);
      await waitFor(() => io.err().includes('"msg":"hook failed"'), PATIENCE_MS, { what: 'the hook to run' });
      events.emit('SIGTERM');
      expect(await exit).toBe(0);
      const env = await readFile(seen, 'utf8');
      expect(env).toContain('KEEP_ME=yes');
      expect(env).not.toContain(KEY);
      expect(env).not.toContain('DCDS_TOKEN=');
      expect(io.err()).not.toContain(KEY);
    } finally {
      events.emit('SIGTERM');
      await server.close();
    }
  });
});
