// The daemon run in-process (runAgent) on a config file a test rewrites and reloads with SIGHUP, its stderr kept.
import { EventEmitter } from 'node:events';
import { writeFile } from 'node:fs/promises';
import path from 'node:path';
import { PassThrough } from 'node:stream';
import { runAgent } from '../../src/cli/compose.js';
import type { CommandIo } from '../../src/cli/io.js';
import { createSecretRegistry } from '../../src/lib/secrets.js';
import { PATIENCE_MS, waitFor } from './wait-for.js';

export function bufferedIo(env: NodeJS.ProcessEnv): CommandIo & { err: () => string } {
  const stderr = new PassThrough();
  let err = '';
  stderr.on('data', (chunk: Buffer) => {
    err += chunk.toString();
  });
  return { stdout: new PassThrough(), stderr, env, isTty: false, err: () => err };
}

/**
 * Writes the config file, its service (port 9, discard) never answering, which the daemon survives; drift off;
 * its local socket `agent.sock` beside the config file unless told.
 */
export async function writeSilentConfig(
  configPath: string,
  fields: { deviceId: string; rootDir: string; stateDir: string; socketPath?: string },
): Promise<void> {
  await writeFile(
    configPath,
    JSON.stringify({
      deviceId: fields.deviceId,
      server: { baseUrl: 'http://127.0.0.1:9', timeoutSeconds: 1 },
      rootDir: fields.rootDir,
      stateDir: fields.stateDir,
      socketPath: fields.socketPath ?? path.join(path.dirname(configPath), 'agent.sock'),
      drift: 'off',
    }),
  );
}

export interface ReloadableDaemon {
  /** What it logged so far. */
  err(): string;
  /** Sends it SIGHUP: it reloads the config file. */
  hup(): void;
  /** Waits until its log holds `text`. */
  logged(text: string, what: string): Promise<void>;
  /** Sends it SIGTERM and waits for it to end. */
  stop(): Promise<void>;
}

/** Starts the daemon on `configPath` and waits for "agent started"; stops it again if it does not get there. */
export async function startReloadable(configPath: string, apiKey: string): Promise<ReloadableDaemon> {
  const io = bufferedIo({ CONFIG_AGENT_API_KEY: apiKey });
  const events = new EventEmitter();
  const exit = runAgent({ configPath }, io, createSecretRegistry(), events);
  const daemon: ReloadableDaemon = {
    err: () => io.err(),
    hup: () => {
      events.emit('SIGHUP');
    },
    logged: async (text, what) => {
      await waitFor(() => io.err().includes(text), PATIENCE_MS, { what });
    },
    stop: async () => {
      events.emit('SIGTERM');
      await exit;
    },
  };
  try {
    await daemon.logged('"agent started"', 'the agent started');
  } catch (error) {
    await daemon.stop();
    throw error;
  }
  return daemon;
}
