// compose.ts where mutation testing found it untested in the unit tier: --once clears only the owner's bits of the
// umask it inherits (keepOwnerBits; the built agent under UMask=0777 is test/integration/umask.adv18.test.ts), and
// a SIGHUP after a reload has ended reloads again (requestReload).
import { EventEmitter } from 'node:events';
import { mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { PassThrough } from 'node:stream';
import { afterEach, describe, expect, it } from 'vitest';
import { AgentHarness } from '../../test/helpers/harness.js';
import { PATIENCE_MS, waitFor } from '../../test/helpers/wait-for.js';
import { createSecretRegistry } from '../lib/secrets.js';
import { main } from '../main.js';
import { startMockServer } from '../mock-server/server.js';
import { runAgent } from './compose.js';
import type { CommandIo } from './io.js';
import { callAgent } from './local-client.js';

let harness: AgentHarness | undefined;
let saved: number | undefined;

afterEach(async () => {
  if (saved !== undefined) process.umask(saved);
  saved = undefined;
  await harness?.close();
  harness = undefined;
});

describe('--once under a umask taking the owner’s bits', () => {
  it.each([0o777, 0o477])(
    'umask %o: the file deployed, and the umask left with the owner’s bits clear',
    async (umask) => {
      const h = await AgentHarness.create({ registerDevice: true });
      harness = h;
      await h.createAndDeploy({ relative_filepath: 'app/a.json', content: { a: 1 } });
      const io: CommandIo = { stdout: new PassThrough(), stderr: new PassThrough(), env: {}, isTty: false };
      saved = process.umask(umask);
      const code = await main(['--once', '--config', h.configPath], io, new EventEmitter());
      const after = process.umask(saved);
      saved = undefined;
      expect(code).toBe(0);
      expect(JSON.parse(await readFile(path.join(h.rootDir, 'app/a.json'), 'utf8'))).toEqual({ a: 1 });
      expect(after).toBe(umask & 0o077);
    },
  );
});

describe('runAgent: SIGHUPs one after another', () => {
  it('each SIGHUP after the last reload ended reloads again, with the configuration as then written', async () => {
    const KEY = 'sk_test_mut18_reload_5d1f0a';
    const dir = await mkdtemp(path.join(os.tmpdir(), 'config-agent-mut18-'));
    const server = await startMockServer({ apiKeys: [KEY] });
    const configPath = path.join(dir, 'config.json');
    const socketPath = path.join(dir, 'agent.sock');
    const writeConfig = (deviceId: string) =>
      writeFile(
        configPath,
        JSON.stringify({
          deviceId,
          server: { baseUrl: server.url, timeoutSeconds: 5 },
          rootDir: path.join(dir, 'root'),
          stateDir: path.join(dir, 'state'),
          socketPath,
          drift: 'off',
          poll: { intervalSeconds: 3600, jitterRatio: 0, fullResyncSeconds: 3600 },
        }),
      );
    const stderr = new PassThrough();
    let err = '';
    stderr.on('data', (chunk: Buffer) => {
      err += chunk.toString();
    });
    const stdout = new PassThrough();
    stdout.resume();
    const io: CommandIo = { stdout, stderr, env: { CONFIG_AGENT_API_KEY: KEY }, isTty: false };
    const events = new EventEmitter();
    // A connection the local API closes with the request unread (one of its idle or head timeouts firing first
    // when the process is starved, load ~20) fails the call with ECONNRESET: asked again, like health below. A
    // wrong answer is not retried.
    const deviceId = async () =>
      (
        (
          await waitFor(() => callAgent(socketPath, 'GET', '/v1/status', PATIENCE_MS), PATIENCE_MS, {
            what: 'the status',
          })
        ).body as { deviceId?: string }
      ).deviceId;
    await writeConfig('dvc_first');
    const exit = runAgent({ configPath }, io, createSecretRegistry(), events);
    try {
      await waitFor(() => callAgent(socketPath, 'GET', '/v1/health', PATIENCE_MS), PATIENCE_MS, {
        what: 'the socket',
      });
      for (const [round, next] of [
        [1, 'dvc_second'],
        [2, 'dvc_third'],
      ] as const) {
        await writeConfig(next);
        events.emit('SIGHUP');
        await waitFor(
          () => err.split('\n').filter((line) => line.includes('"configuration reloaded"')).length === round,
          PATIENCE_MS,
          { what: `reload ${round} ended` },
        );
        expect(await deviceId()).toBe(next);
      }
      events.emit('SIGTERM');
      expect(await exit).toBe(0);
    } finally {
      events.emit('SIGTERM');
      await server.close();
      await rm(dir, { recursive: true, force: true });
    }
  });
});
