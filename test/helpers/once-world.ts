// `--once` in-process (`main`) against the mock on loopback, in a temp dir: the world of the CLI's end-to-end unit tests.
import { execFile } from 'node:child_process';
import { EventEmitter } from 'node:events';
import { mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { PassThrough } from 'node:stream';
import { promisify } from 'node:util';
import { afterEach, beforeEach } from 'vitest';
import type { FixtureConfigInstance as FixtureInstance } from '../../src/api/admin-schemas.js';
import type { CommandIo } from '../../src/cli/io.js';
import { main } from '../../src/main.js';
import { type RunningMockServer, startMockServer } from '../../src/mock-server/server.js';
import { textSink } from './text-sink.js';

/** An instance of the world's device as the mock's fixtures take it: `deployed`, `queued` unless `fields` say. */
export function onceInstance(
  device: string,
  id: string,
  relativeFilepath: string,
  content: FixtureInstance['content'],
  fields: Partial<FixtureInstance> = {},
): FixtureInstance {
  return {
    id,
    device_id: device,
    relative_filepath: relativeFilepath,
    content,
    target_status: 'deployed',
    activity_status: 'queued',
    ...fields,
  };
}

/** Whether `file` can be read (false for a directory). */
export const readable = (file: string): Promise<boolean> =>
  readFile(file).then(
    () => true,
    () => false,
  );

/**
 * Writes dir/config.json for device `deviceId` of the service at `baseUrl` (5 s timeouts), rootDir, stateDir and
 * socketPath in dir (root, state, agent.sock), `fields` over them: its path.
 */
export async function writeAgentConfig(
  dir: string,
  deviceId: string,
  baseUrl: string,
  fields: Record<string, unknown> = {},
): Promise<string> {
  const file = path.join(dir, 'config.json');
  const config = {
    deviceId,
    server: { baseUrl, timeoutSeconds: 5 },
    rootDir: path.join(dir, 'root'),
    stateDir: path.join(dir, 'state'),
    socketPath: path.join(dir, 'agent.sock'),
    ...fields,
  };
  await writeFile(file, JSON.stringify(config));
  return file;
}

export interface OnceWorld {
  /** The temp dir: config.json, root/, state/ and agent.sock are in it. */
  readonly dir: string;
  readonly rootDir: string;
  readonly stateDir: string;
  /** The mock; a test that closes it may set another. */
  server: RunningMockServer;
  /** The admin API's view of the reports the mock received for `id`, as their activity statuses in order. */
  reportsOf(id: string): Promise<string[]>;
  /** Writes config.json for the world (the mock at `server.url`) and runs `--once` on it: exit code and stderr. */
  once(): Promise<{ code: number; err: string }>;
  /** Closes the mock and removes the dir (`rm -rf` when `deep`: Node's rm fails on paths past PATH_MAX). */
  close(options?: { deep?: boolean }): Promise<void>;
}

export interface OnceWorldOptions {
  /** The agent's log level; its log is the stderr `once` returns (default: info, the agent's own default). */
  logLevel?: 'silent' | 'info';
  /** Remove the dir with `rm -rf` (see `OnceWorld.close`). */
  deep?: boolean;
  /** `--once`'s first request-retry wait in ms (CommandIo.requestRetryBaseMs; default the production 500 ms). */
  requestRetryBaseMs?: number;
}

/**
 * The world of each test of the file that calls it: opened before the test, closed after. `key` is the API key the
 * mock takes and `--once` is given; the mock holds `instances` of `device`; `prefix` names the temp dir.
 */
export function onceWorldEachTest(
  key: string,
  device: string,
  prefix: string,
  instances: FixtureInstance[],
  options: OnceWorldOptions = {},
): () => OnceWorld {
  let world: OnceWorld | undefined;
  beforeEach(async () => {
    world = await openOnceWorld(key, device, prefix, instances, options);
  });
  afterEach(async () => {
    await world?.close({ deep: options.deep === true });
    world = undefined;
  });
  return () => {
    if (world === undefined) throw new TypeError('a once world is open during a test only');
    return world;
  };
}

/** Starts the mock holding `instances` of `device` and makes the temp dir (see onceWorldEachTest). */
export async function openOnceWorld(
  key: string,
  device: string,
  prefix: string,
  instances: FixtureInstance[],
  options: OnceWorldOptions = {},
): Promise<OnceWorld> {
  const dir = await mkdtemp(path.join(os.tmpdir(), prefix));
  const server = await startMockServer({
    apiKeys: [key],
    fixtures: { devices: [{ id: device, name: 'robot' }], config_instances: instances },
  });
  const world: OnceWorld = {
    dir,
    rootDir: path.join(dir, 'root'),
    stateDir: path.join(dir, 'state'),
    server,
    async reportsOf(id) {
      const response = await fetch(`${world.server.url}/_admin/reports`, { headers: { 'X-API-Key': key } });
      const body = (await response.json()) as {
        data: Array<{ config_instance_id: string; activity_status: string }>;
      };
      return body.data.filter((r) => r.config_instance_id === id).map((r) => r.activity_status);
    },
    async once() {
      const file = await writeAgentConfig(
        dir,
        device,
        world.server.url,
        options.logLevel === undefined ? {} : { log: { level: options.logLevel } },
      );
      const err = textSink();
      const io: CommandIo = {
        stdout: new PassThrough().resume(),
        stderr: err.stream,
        env: { CONFIG_AGENT_API_KEY: key },
        isTty: false,
        ...(options.requestRetryBaseMs === undefined
          ? {}
          : { requestRetryBaseMs: options.requestRetryBaseMs }),
      };
      const code = await main(['--once', '--config', file], io, new EventEmitter());
      return { code, err: err.text() };
    },
    async close(closing = {}) {
      await world.server.close();
      if (closing.deep === true) await promisify(execFile)('rm', ['-rf', dir]);
      else await rm(dir, { recursive: true, force: true });
    },
  };
  return world;
}
