// After a reload that rotated the API key, the key held before still never reaches a hook (fix32): runAgent, real hook.
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

const OLD_KEY = 'sk_test_fix32_old_0a1b2c3d4e';
const NEW_KEY = 'sk_test_fix32_new_5f6a7b8c9d';

let dir: string;

beforeEach(async () => {
  dir = await mkdtemp(path.join(os.tmpdir(), 'config-agent-hook-env-reload-'));
});

afterEach(async () => {
  await rm(dir, { recursive: true, force: true });
});

describe('runAgent: the key held before a reload and hooks (fix32)', () => {
  it('keeps a variable holding the rotated key out of the hooks after the reload, as before it', async () => {
    const server = await startMockServer({ apiKeys: [OLD_KEY, NEW_KEY] });
    const seen = path.join(dir, 'hook.env');
    const runs = path.join(dir, 'runs');
    const keyFile = path.join(dir, 'api-key');
    const deploy = (version: number) =>
      server.state.instances.set('cfg_a', {
        id: 'cfg_a',
        device_id: 'dvc_fix32',
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
    const stderr = new PassThrough();
    let err = '';
    stderr.on('data', (chunk: Buffer) => {
      err += chunk.toString();
    });
    const events = new EventEmitter();
    try {
      deploy(1);
      await writeFile(keyFile, `${OLD_KEY}\n`, { mode: 0o600 });
      const configPath = path.join(dir, 'config.json');
      await writeFile(
        configPath,
        JSON.stringify({
          deviceId: 'dvc_fix32',
          rootDir: path.join(dir, 'root'),
          stateDir: path.join(dir, 'state'),
          socketPath: path.join(dir, 'agent.sock'),
          drift: 'off',
          server: { baseUrl: server.url, timeoutSeconds: 5, apiKeyFile: keyFile },
          // Passes come from the reload's wake, not the poll.
          poll: { intervalSeconds: 3600, jitterRatio: 0, fullResyncSeconds: 3600 },
          hooks: [{ match: '**', run: ['/bin/sh', '-c', `env > '${seen}'; echo ran >> '${runs}'`] }],
        }),
      );
      // The operator's own scripts have the key under another name, as it was when the agent started.
      const env = { PATH: process.env.PATH ?? '/usr/bin:/bin', DCDS_TOKEN: OLD_KEY, KEEP_ME: 'yes' };
      const exit = runAgent(
        { configPath },
        { stdout: new PassThrough(), stderr, env, isTty: false },
        createSecretRegistry(),
        events,
      );
      await waitFor(async () => (await runCount()) === 1, PATIENCE_MS, { what: 'the first hook run' });
      expect(await readFile(seen, 'utf8')).not.toContain(OLD_KEY);

      // The key is rotated in its file, and the agent reloaded: a new version's hook run comes after it.
      await writeFile(keyFile, `${NEW_KEY}\n`, { mode: 0o600 });
      deploy(2);
      events.emit('SIGHUP');
      await waitFor(async () => (await runCount()) === 2, PATIENCE_MS, {
        what: 'the hook run after the reload',
      });
      const after = await readFile(seen, 'utf8');
      expect(after).toContain('KEEP_ME=yes');
      expect(after).not.toContain(OLD_KEY);
      expect(after).not.toContain(NEW_KEY);
      events.emit('SIGTERM');
      expect(await exit).toBe(0);
      expect(err).not.toContain(OLD_KEY);
    } finally {
      events.emit('SIGTERM');
      await server.close();
    }
  }, 60_000);
});
