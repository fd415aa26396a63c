// Startup failures of configuration: a bad config file or environment, and an unavailable API key.
import { AgentError } from '../lib/errors.js';

/** One problem with one key; `path` is dotted (`server.timeoutSeconds`, `hooks[0].run`), '' for the whole file. */
export interface ConfigIssue {
  path: string;
  message: string;
}

/** The config file (or the environment) is invalid: the agent must not start. Exit code 78. */
export class ConfigError extends AgentError {
  /** Where the configuration came from: the config file's path, or `environment`. */
  readonly source: string;
  readonly issues: readonly ConfigIssue[];

  constructor(source: string, issues: readonly ConfigIssue[], options: { cause?: unknown } = {}) {
    super('invalid_config', formatConfigMessage(source, issues), { retryable: false, cause: options.cause });
    this.source = source;
    this.issues = issues;
  }
}

function formatConfigMessage(source: string, issues: readonly ConfigIssue[]): string {
  const body = issues.map((issue) => (issue.path === '' ? issue.message : `${issue.path}: ${issue.message}`));
  return `config ${source}: ${body.join('; ')}`;
}

/**
 * No usable API key: none found, unreadable, empty, or a key file open to group/others.
 * The message names where the agent looked, never the key itself.
 */
export class ApiKeyError extends AgentError {
  constructor(message: string, options: { cause?: unknown } = {}) {
    super('api_key_unavailable', message, { retryable: false, cause: options.cause });
  }
}
