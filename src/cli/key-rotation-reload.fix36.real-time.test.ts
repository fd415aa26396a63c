// After a reload that rotated the API key, a service echoing the key held before reaches no file name, state, report
// or log (fix36): runAgent against the mock service, SIGHUP, both keys valid as until the service revokes the old.
import { EventEmitter } from 'node:events';
import { mkdtemp, readdir, readFile, rm, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { PassThrough } from 'node:stream';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { PATIENCE_MS, waitFor } from '../../test/helpers/wait-for.js';
import { createSecretRegistry } from '../lib/secrets.js';
import { startMockServer } from '../mock-server/server.js';
import { runAgent } from './compose.js';

const OLD_KEY = 'sk_test_fix36_old_1a2b3c4d5e';
const NEW_KEY = 'sk_test_fix36_new_6f7a8b9c0d';

let dir: string;

beforeEach(async () => {
  dir = await mkdtemp(path.join(os.tmpdir(), 'config-agent-key-rotation-'));
});

afterEach(async () => {
  await rm(dir, { recursive: true, force: true });
});

/** Every file's name and bytes under `root`, as one text. */
async function everything(root: string): Promise<string> {
  const entries = await readdir(root, { recursive: true, withFileTypes: true });
  const parts: string[] = [];
  for (const entry of entries) {
    const full = path.join(entry.parentPath, entry.name);
    parts.push(full);
    if (entry.isFile()) parts.push(await readFile(full, 'utf8'));
  }
  return parts.join('\n');
}

describe('runAgent: the key held before a reload, echoed by the service (fix36)', () => {
  it('refuses an instance whose path holds the rotated key, as one holding the key held now', async () => {
    const server = await startMockServer({ apiKeys: [OLD_KEY, NEW_KEY] });
    const keyFile = path.join(dir, 'api-key');
    const rootDir = path.join(dir, 'root');
    const stateDir = path.join(dir, 'state');
    const put = (id: string, relative: string) =>
      server.state.instances.set(id, {
        id,
        device_id: 'dvc_fix36',
        relative_filepath: relative,
        config_schema_id: 'sch_a',
        config_type_id: 'typ',
        target_status: 'deployed',
        activity_status: 'queued',
        error_status: 'none',
        content: { id },
        created_at: '2026-01-01T00:00:00.000Z',
        updated_at: '2026-01-01T00:00:00.000Z',
      });
    const reported = (id: string) => server.state.reports.find((report) => report.config_instance_id === id);
    const stderr = new PassThrough();
    let err = '';
    stderr.on('data', (chunk: Buffer) => {
      err += chunk.toString();
    });
    const events = new EventEmitter();
    try {
      put('cfg_a', 'a.json');
      await writeFile(keyFile, `${OLD_KEY}\n`, { mode: 0o600 });
      const configPath = path.join(dir, 'config.json');
      await writeFile(
        configPath,
        JSON.stringify({
          deviceId: 'dvc_fix36',
          rootDir,
          stateDir,
          socketPath: path.join(dir, 'agent.sock'),
          drift: 'off',
          server: { baseUrl: server.url, timeoutSeconds: 5, apiKeyFile: keyFile },
          // Passes come from the reload's wake, not the poll.
          poll: { intervalSeconds: 3600, jitterRatio: 0, fullResyncSeconds: 3600 },
        }),
      );
      const exit = runAgent(
        { configPath },
        {
          stdout: new PassThrough(),
          stderr,
          env: { PATH: process.env.PATH ?? '/usr/bin:/bin' },
          isTty: false,
        },
        createSecretRegistry(),
        events,
      );
      await waitFor(async () => reported('cfg_a')?.activity_status === 'deployed', PATIENCE_MS, {
        what: 'the first pass',
      });

      // The key rotated in its file and the agent reloaded; the service, echoing the old one, lists it in a path.
      await writeFile(keyFile, `${NEW_KEY}\n`, { mode: 0o600 });
      put('cfg_echo', `echo/${OLD_KEY}.json`);
      put('cfg_b', 'b.json');
      events.emit('SIGHUP');
      await waitFor(
        async () => reported('cfg_b') !== undefined && reported('cfg_echo') !== undefined,
        PATIENCE_MS,
        {
          what: 'the pass after the reload',
        },
      );
      expect(reported('cfg_b')).toMatchObject({ activity_status: 'deployed' });
      expect(reported('cfg_echo')).toMatchObject({ error_status: 'failed' });
      events.emit('SIGTERM');
      expect(await exit).toBe(0);

      expect(await everything(rootDir)).not.toContain(OLD_KEY);
      expect(await everything(stateDir)).not.toContain(OLD_KEY);
      expect(JSON.stringify(server.state.reports)).not.toContain(OLD_KEY);
      expect(err).not.toContain(OLD_KEY);
      expect(err).not.toContain(NEW_KEY);
    } finally {
      events.emit('SIGTERM');
      await server.close();
    }
  }, 60_000);
});
