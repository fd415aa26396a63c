#!/usr/bin/env node
// The config-agent-mock-server command: flags → a running mock service until SIGTERM/SIGINT.
import { realpathSync } from 'node:fs';
import { readFile } from 'node:fs/promises';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';
import { parseJson } from '../api/json.js';
import { UsageError } from '../lib/errors.js';
import { createLogger, type LogLevel } from '../lib/logger.js';
import { createSecretRegistry, type SecretRegistry } from '../lib/secrets.js';
import { FixtureError, type Fixtures, parseFixtures } from './fixtures.js';
import { DEFAULT_HOST, startMockServer } from './server.js';

const EXIT_OK = 0;
const EXIT_FAILURE = 1;
const EXIT_USAGE = 2;

export const API_KEY_ENV = 'CONFIG_AGENT_MOCK_API_KEY';
const NAME = 'config-agent-mock-server';
const USAGE = `usage: ${NAME} --port <n> [--host ${DEFAULT_HOST}] [--fixtures <file.json>] --api-key <key>
  (the key may come from ${API_KEY_ENV} instead of --api-key; --port 0 picks a free port;
  LOG_LEVEL sets the level of the JSON log lines on stderr: fatal, error, warn, info (default), debug, trace, silent)`;
const LOG_LEVELS: readonly LogLevel[] = ['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent'];

export interface CliIo {
  /** Receives exactly one line, the base URL, once the server is ready. */
  stdout: NodeJS.WritableStream;
  /** Usage errors as text, then JSON logs. */
  stderr: NodeJS.WritableStream;
  /** Aborting it stops the server; main then resolves 0. */
  signal?: AbortSignal;
  readFile?: (path: string) => Promise<string>;
}

interface CliOptions {
  port: number;
  host: string;
  apiKey: string;
  fixturesPath: string | undefined;
}

/** Runs the command; resolves with the exit code (2 for bad flags or fixtures) once the server has stopped. */
export async function main(
  argv: readonly string[],
  env: Readonly<Record<string, string | undefined>>,
  io: CliIo,
): Promise<number> {
  const secrets = createSecretRegistry();
  const fail = (code: number, message: string): number => {
    io.stderr.write(`${NAME}: ${secrets.scrub(message)}\n`);
    return code;
  };

  let options: CliOptions;
  let fixtures: Fixtures | undefined;
  try {
    options = parseFlags(argv, env, secrets);
    fixtures =
      options.fixturesPath === undefined
        ? undefined
        : await loadFixtures(options.fixturesPath, io.readFile ?? ((p) => readFile(p, 'utf8')));
  } catch (error) {
    if (error instanceof UsageError) return fail(EXIT_USAGE, `${error.message}\n${USAGE}`);
    if (error instanceof FixtureError) return fail(EXIT_USAGE, error.message);
    throw error;
  }

  const level = env.LOG_LEVEL ?? 'info';
  const logger = createLogger({
    level: (LOG_LEVELS as readonly string[]).includes(level) ? (level as LogLevel) : 'info',
    secrets,
    destination: io.stderr,
    name: NAME,
  });

  if (io.signal?.aborted) return EXIT_OK;
  let server: Awaited<ReturnType<typeof startMockServer>>;
  try {
    server = await startMockServer({
      port: options.port,
      host: options.host,
      apiKeys: [options.apiKey],
      ...(fixtures === undefined ? {} : { fixtures }),
      logger,
    });
  } catch (error) {
    logger.error({ err: error, port: options.port, host: options.host }, 'cannot start the mock server');
    return EXIT_FAILURE;
  }
  logger.info(
    {
      url: server.url,
      devices: server.state.devices.size,
      config_instances: server.state.instances.size,
      deployments: server.state.deployments.size,
    },
    'mock server listening',
  );
  io.stdout.write(`${server.url}\n`);

  await new Promise<void>((resolve) => {
    if (io.signal === undefined) return;
    if (io.signal.aborted) resolve();
    else io.signal.addEventListener('abort', () => resolve(), { once: true });
  });
  logger.info('shutting down');
  await server.close();
  return EXIT_OK;
}

function parseFlags(
  argv: readonly string[],
  env: Readonly<Record<string, string | undefined>>,
  secrets: SecretRegistry,
): CliOptions {
  let values: { port?: string; host?: string; fixtures?: string; 'api-key'?: string };
  try {
    ({ values } = parseArgs({
      args: [...argv],
      options: {
        port: { type: 'string' },
        host: { type: 'string' },
        fixtures: { type: 'string' },
        'api-key': { type: 'string' },
      },
      strict: true,
      allowPositionals: false,
    }));
  } catch (error) {
    const code = (error as { code?: unknown }).code;
    // A stray positional may well be a key pasted in the wrong place: never echo it.
    if (code === 'ERR_PARSE_ARGS_UNEXPECTED_POSITIONAL')
      throw new UsageError('unexpected positional argument');
    throw new UsageError(error instanceof Error ? error.message : String(error));
  }
  const apiKey = values['api-key'] ?? env[API_KEY_ENV];
  if (apiKey !== undefined) secrets.add(apiKey);

  if (values.port === undefined) throw new UsageError('--port is required');
  if (!/^\d+$/.test(values.port) || Number(values.port) > 65_535) {
    throw new UsageError(`--port: ${JSON.stringify(values.port)} is not a port number (0-65535)`);
  }
  if (apiKey === undefined || apiKey === '') {
    throw new UsageError(`--api-key (or the ${API_KEY_ENV} environment variable) is required`);
  }
  const host = values.host ?? DEFAULT_HOST;
  if (host === '') throw new UsageError('--host: must not be empty');
  return { port: Number(values.port), host, apiKey, fixturesPath: values.fixtures };
}

async function loadFixtures(path: string, read: (path: string) => Promise<string>): Promise<Fixtures> {
  let text: string;
  try {
    text = await read(path);
  } catch (error) {
    const reason =
      (error as { code?: unknown }).code ?? (error instanceof Error ? error.message : String(error));
    throw new UsageError(`--fixtures: cannot read ${path}: ${String(reason)}`);
  }
  let json: unknown;
  try {
    json = parseJson(text);
  } catch (error) {
    throw new UsageError(
      `--fixtures: ${path} is not valid JSON: ${error instanceof Error ? error.message : ''}`,
    );
  }
  try {
    return parseFixtures(json);
  } catch (error) {
    if (error instanceof FixtureError) {
      throw new FixtureError(`${path}: ${error.item}`, error.field, error.problem);
    }
    throw error;
  }
}

function isEntryPoint(): boolean {
  const script = process.argv[1];
  if (script === undefined) return false;
  try {
    return realpathSync(script) === fileURLToPath(import.meta.url);
  } catch {
    return false;
  }
}

if (isEntryPoint()) {
  const controller = new AbortController();
  for (const signal of ['SIGTERM', 'SIGINT'] as const) process.once(signal, () => controller.abort());
  main(process.argv.slice(2), process.env, {
    stdout: process.stdout,
    stderr: process.stderr,
    signal: controller.signal,
  }).then(
    (code) => {
      process.exitCode = code;
    },
    (error: unknown) => {
      process.stderr.write(`${NAME}: ${error instanceof Error ? error.message : String(error)}\n`);
      process.exitCode = EXIT_FAILURE;
    },
  );
}
