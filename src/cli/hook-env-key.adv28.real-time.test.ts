// A hook's environment never holds the API key, whatever the variable's name (adv28): runAgent, a real hook.
import { EventEmitter } from 'node:events';
import { mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
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
