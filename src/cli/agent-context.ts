// Builds everything a command needs from the loaded config: deps, logger, client, reconciler settings.
import * as nodeFs from 'node:fs/promises';
import { type ClientOptions, createClient, type ServiceClient } from '../api/client.js';
import type { AgentConfig } from '../config/schema.js';
import { systemClock } from '../lib/clock.js';
import type { Deps } from '../lib/deps.js';
import type { FsPort } from '../lib/fs-port.js';
import { createLogger, createSecretRegistry, type SecretRegistry } from '../lib/logger.js';
import type { ReconcilerSettings } from '../reconcile/pass-runner.js';

export function createDeps(options: {
  config: AgentConfig;
  secrets: SecretRegistry;
  stderr: NodeJS.WritableStream;
  fs?: FsPort;
}): Deps {
  return {
    fs: options.fs ?? nodeFs,
    clock: systemClock,
    random: Math.random,
    logger: createLogger({
      level: options.config.log.level,
      secrets: options.secrets,
      destination: options.stderr,
    }),
  };
}

export function createServiceClient(
  config: AgentConfig,
  apiKey: string,
  deps: Deps,
  onRequest?: ClientOptions['onRequest'],
): ServiceClient {
  return createClient({
    baseUrl: config.server.baseUrl,
    apiVersion: config.server.apiVersion,
    apiKey,
    timeoutMs: config.server.timeoutSeconds * 1000,
    maxResponseBytes: config.server.maxResponseBytes,
    clock: deps.clock,
    ...(deps.dispatcher === undefined ? {} : { dispatcher: deps.dispatcher }),
    ...(onRequest === undefined ? {} : { onRequest }),
  });
}

/** `forDaemon`: the daemon runs hooks, so changed paths are kept for them until they ran. */
export function reconcilerSettings(
  config: AgentConfig,
  requestRetries: number,
  forDaemon = false,
): ReconcilerSettings {
  return {
    deviceId: config.deviceId,
    rootDir: config.rootDir,
    stateDir: config.stateDir,
    fileMode: config.files.mode,
    dirMode: config.files.dirMode,
    retry: config.retry,
    requestRetries,
    restoreDrift: config.drift === 'restore',
    trackHookPaths: forDaemon && config.hooks.length > 0,
  };
}

export { createSecretRegistry };
