// SIGHUP to a rootDir another agent holds (adv24): the reload fails half-way (new deps made, the old state flushed), nothing of the new one is held, the running configuration goes on; once the holder ends, the reload takes it.
import { EventEmitter } from 'node:events';
import { existsSync } from 'node:fs';
import { mkdir, mkdtemp, readdir, rm, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { PassThrough } from 'node:stream';
import { afterEach, beforeEach, expect, it } from 'vitest';
import { holdRootName, killRootHolders } from '../../test/helpers/root-lock-holder.js';
import { PATIENCE_MS, waitFor } from '../../test/helpers/wait-for.js';
import { createSecretRegistry } from '../lib/secrets.js';
import { LOCK_FILE } from '../store/lock.js';
import { runAgent } from './compose.js';
import type { CommandIo } from './io.js';

const KEY = 'sk_test_reload_root_7e1f0a2b9c';

let dir: string;

beforeEach(async () => {
  dir = await mkdtemp(path.join(os.tmpdir(), 'config-agent-reload-root-adv24-'));
});

afterEach(async () => {
  killRootHolders();
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
async function writeConfig(configPath: string, rootDir: string, stateDir: string): Promise<void> {
  await writeFile(
    configPath,
    JSON.stringify({
      deviceId: 'dvc_reload_root',
      server: { baseUrl: 'http://127.0.0.1:9', timeoutSeconds: 1 },
      rootDir,
      stateDir,
      socketPath: path.join(dir, 'agent.sock'),
      drift: 'off',
    }),
  );
}

it('SIGHUP to a rootDir another agent holds: refused naming it, the running configuration kept; taken once it ends', async () => {
  const configPath = path.join(dir, 'config.json');
  const oldRoot = path.join(dir, 'root');
  const newRoot = path.join(dir, 'root-new');
  const newState = path.join(dir, 'state-new');
  await mkdir(newRoot);
  await writeFile(
    path.join(newRoot, `.config-agent.tmp-${'cd'.repeat(12)}`),
    '{"other agent\'s write in flight',
  );
  await writeConfig(configPath, oldRoot, path.join(dir, 'state'));
  const io = bufferedIo({ CONFIG_AGENT_API_KEY: KEY });
  const events = new EventEmitter();
  const exit = runAgent({ configPath }, io, createSecretRegistry(), events);
  try {
    await waitFor(() => io.err().includes('"agent started"'), PATIENCE_MS, { what: 'the agent started' });
    const holder = await holdRootName(newRoot);
    await writeConfig(configPath, newRoot, newState);
    events.emit('SIGHUP');
    await waitFor(() => io.err().includes('configuration reload failed'), PATIENCE_MS, {
      what: 'the failed reload',
    });
    const failed =
      io
        .err()
        .split('\n')
        .find((line) => line.includes('configuration reload failed')) ?? '';
    expect(failed).toContain(newRoot);
    expect(failed).toContain(`pid ${holder.pid}`);
    expect(failed).toContain('/srv/other/state');
    // Nothing of the new configuration held, nothing of the other agent's swept.
    expect(existsSync(path.join(newState, LOCK_FILE))).toBe(false);
    expect(await readdir(newRoot)).toEqual([`.config-agent.tmp-${'cd'.repeat(12)}`]);
    expect(existsSync(path.join(dir, 'state', LOCK_FILE))).toBe(true);

    await holder.end();
    await rm(path.join(newRoot, `.config-agent.tmp-${'cd'.repeat(12)}`));
    events.emit('SIGHUP');
    await waitFor(() => io.err().includes('configuration reloaded'), PATIENCE_MS, { what: 'the reload' });
    expect(existsSync(path.join(newState, LOCK_FILE))).toBe(true);
    expect(existsSync(path.join(dir, 'state', LOCK_FILE))).toBe(false);
  } finally {
    events.emit('SIGTERM');
    await exit;
  }
});
