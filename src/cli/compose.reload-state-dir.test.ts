// A reload to another stateDir that fails leaves nothing of the new one held: its lock is not kept by the running agent.
import { EventEmitter } from 'node:events';
import { existsSync } from 'node:fs';
import { mkdtemp, rename, rm, symlink, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { PassThrough } from 'node:stream';
import { afterEach, beforeEach, expect, it } from 'vitest';
import { PATIENCE_MS, waitFor } from '../../test/helpers/wait-for.js';
import { createSecretRegistry } from '../lib/secrets.js';
import { LOCK_FILE } from '../store/lock.js';
import { runAgent } from './compose.js';
import type { CommandIo } from './io.js';

const KEY = 'sk_test_reload_state_4c2d9e8f1a';

let dir: string;

beforeEach(async () => {
  dir = await mkdtemp(path.join(os.tmpdir(), 'config-agent-reload-state-'));
});

afterEach(async () => {
  await rm(dir, { recursive: true, force: true });
});

function bufferedIo(env: NodeJS.ProcessEnv): CommandIo & { err: () => string } {
  const stderr = new PassThrough();
  let err = '';
  stderr.on('data', (chunk: Buffer) => {
    err += chunk.toString();
  });
  return { stdout: new PassThrough(), stderr, env, isTty: false, err: () => err };
}

/** The config file, its service (port 9, discard) never answering, which the daemon survives. */
async function writeConfig(configPath: string, stateDir: string): Promise<void> {
  await writeFile(
    configPath,
    JSON.stringify({
      deviceId: 'dvc_reload_state',
      server: { baseUrl: 'http://127.0.0.1:9', timeoutSeconds: 1 },
      rootDir: path.join(dir, 'root'),
      stateDir,
      socketPath: path.join(dir, 'agent.sock'),
      drift: 'off',
    }),
  );
}

it('SIGHUP to another stateDir while the old one cannot be flushed: the reload fails and the new stateDir is not locked', async () => {
  const configPath = path.join(dir, 'config.json');
  const oldState = path.join(dir, 'state');
  const newState = path.join(dir, 'state-new');
  await writeConfig(configPath, oldState);
  const io = bufferedIo({ CONFIG_AGENT_API_KEY: KEY });
  const events = new EventEmitter();
  const exit = runAgent({ configPath }, io, createSecretRegistry(), events);
  try {
    await waitFor(() => io.err().includes('"agent started"'), PATIENCE_MS, { what: 'the agent started' });
    // The old stateDir swapped for a symlink under the running agent: its state is flushed nowhere (the lock check
    // refuses a stateDir that resolves elsewhere now), so the reload fails and the old configuration stays.
    await rename(oldState, `${oldState}.real`);
    await symlink(`${oldState}.real`, oldState);
    await writeConfig(configPath, newState);
    events.emit('SIGHUP');
    await waitFor(() => io.err().includes('configuration reload failed'), PATIENCE_MS, {
      what: 'the failed reload',
    });
    // Before: the new stateDir was opened (and locked) before the old one was flushed, and left so: the running
    // agent held its lock, with a record of renewal asides read from it in place of the running one's.
    expect(existsSync(path.join(newState, LOCK_FILE))).toBe(false);
  } finally {
    events.emit('SIGTERM');
    await exit;
  }
});
