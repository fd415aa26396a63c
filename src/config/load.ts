// Loads the agent's configuration: the file (flag > env > default path), the API key (env > credentials > file).
import { X509Certificate } from 'node:crypto';
import { constants } from 'node:fs';
import path from 'node:path';
import type { z } from 'zod';
import { chooseProxy } from '../api/proxy.js';
import { errnoCode, errorMessage } from '../lib/errors.js';
import { formatFieldPath } from '../lib/field-path.js';
import type { FsPort } from '../lib/fs-port.js';
import { MIN_SECRET_LENGTH } from '../lib/secrets.js';
import { resolveConfigPath } from './config-path.js';
import { ApiKeyError, ConfigError, type ConfigIssue } from './errors.js';
import { assertHookProgramsTrusted, type HookCheckUnanswered } from './hook-programs.js';
import { firstDuplicateKey, jsonSyntaxErrorOffset, lineAndColumn } from './json-position.js';
import { assertOwnPathsOutsideRoot, type OwnPathsPort, ownPaths } from './own-paths.js';
import { type PathChainFs, whoElseCanCreateIn, whoElseCanSwap } from './path-chain.js';
import { type AgentConfig, AgentConfigSchema, describeType } from './schema.js';

export { ENV_CONFIG_PATH, resolveConfigPath } from './config-path.js';

export type ApiKeySource = 'env' | 'credentials' | 'file';

/** What the loader reads with: the agent's fs slice, plus readlink to walk a path's directories and symlinks. */
export type ConfigFs = FsPort & PathChainFs;

export interface LoadedConfig {
  config: AgentConfig;
  apiKey: string;
  configPath: string;
  apiKeySource: ApiKeySource;
  /** Hooks whose program check hit a mount that did not answer: taken unjudged, for the caller to say so. */
  hookChecksUnanswered?: HookCheckUnanswered[];
}

const ENV_API_KEY = 'CONFIG_AGENT_API_KEY';
const ENV_CREDENTIALS_DIRECTORY = 'CREDENTIALS_DIRECTORY';
/** The credential name to give systemd: `LoadCredential=api-key:/path/to/key`. */
export const CREDENTIAL_NAME = 'api-key';
const STATE_DIR_MODE = 0o700;
/** A key file bigger than this is not a key file: refuse rather than send megabytes in a header. */
export const MAX_KEY_FILE_BYTES = 64 * 1024;
/** A config file is a few KiB; a bigger one is a mistake (a log, an image), not worth reading into memory. */
const MAX_CONFIG_FILE_BYTES = 1024 * 1024;
/** O_NONBLOCK: opening a FIFO for reading would otherwise wait for a writer; O_NOCTTY: never adopt a tty. */
const NONBLOCKING_READ = constants.O_RDONLY | constants.O_NONBLOCK | constants.O_NOCTTY;
/** HTTP header values: visible ASCII only; anything else is a mangled file, not a key. */
const KEY_CHARS = /^[\x21-\x7e]+$/;

// ---- the config file ----

/**
 * Validates parsed JSON against the schema; every bad key is named in one ConfigError. `jitless`: a process parses
 * its configuration once, so zod's generated fast path for the schema's objects (compiled with `new Function` on
 * the first parse) never pays back: 4.1 → 2.5 ms of CPU for the bench's config in a fresh process (medians of 9).
 */
export function parseAgentConfig(json: unknown, source: string): AgentConfig {
  const illFormed = illFormedStrings(json, []);
  if (illFormed.length > 0) throw new ConfigError(source, illFormed);
  const result = AgentConfigSchema.safeParse(json, { error: issueMessage, jitless: true });
  if (result.success) return result.data;
  throw new ConfigError(source, result.error.issues.flatMap(toConfigIssues), { cause: result.error });
}

/** A lone UTF-16 surrogate: what a JSON `\\ud800` escape gives, which no UTF-8 text can hold. */
const LONE_SURROGATE = /\p{Cs}/u;
const MAX_WALKED_DEPTH = 8;

/**
 * Strings holding a lone surrogate (`"\\ud800"` in the file), named by their path. Node writes one as U+FFFD in a
 * path, a header or argv, so the agent would act on another text than the one checked: `rootDir` `/x/\\ud800` and
 * `stateDir` `/x/\\udc00` passed as two directories and were one (the service wrote into the state directory), and
 * a `deviceId` with one failed every request (`URI malformed`) as a network error, retried for ever.
 */
function illFormedStrings(value: unknown, at: readonly (string | number)[]): ConfigIssue[] {
  if (typeof value === 'string') {
    return LONE_SURROGATE.test(value)
      ? [{ path: formatFieldPath(at), message: 'must be well-formed Unicode (a lone surrogate \\u escape)' }]
      : [];
  }
  // The schema is 4 levels deep: anything deeper is refused by it, and never walked here (a file nested 400,000
  // levels must not overflow the stack).
  if (value === null || typeof value !== 'object' || at.length > MAX_WALKED_DEPTH) return [];
  if (Array.isArray(value)) return value.flatMap((item, index) => illFormedStrings(item, [...at, index]));
  return Object.entries(value).flatMap(([key, item]) => illFormedStrings(item, [...at, shownKey(key)]));
}

export async function loadConfigFile(fs: ConfigFs, configPath: string): Promise<AgentConfig> {
  let text = await readConfigText(fs, configPath);
  if (text.startsWith('\uFEFF')) text = text.slice(1);
  let json: unknown;
  try {
    json = JSON.parse(text);
  } catch (error) {
    throw new ConfigError(configPath, [{ path: '', message: describeJsonError(text, error) }]);
  }
  const duplicate = firstDuplicateKey(text);
  if (duplicate !== undefined) {
    throw new ConfigError(configPath, [
      {
        path: formatFieldPath(duplicate.map((key) => (typeof key === 'string' ? shownKey(key) : key))),
        message: 'appears twice in one object: remove one (JSON keeps the last)',
      },
    ]);
  }
  return parseAgentConfig(json, configPath);
}

/**
 * rootDir and stateDir must not be replaceable by another user: a directory on the way owned by someone other
 * than root or the agent's user, or writable by others (or a group but root's) without a sticky bit protecting an
 * entry root or the agent owns. Swapped for a symlink, either would have the agent write the service's files or
 * its own state wherever the symlink points (as root: anywhere), and a rootDir in /tmp could be planted as such a
 * symlink before the first start. Entries inside rootDir are another matter: the writer never follows a symlink
 * below the root (store/path-guard.ts, store/durable-writer.ts).
 */
async function assertDirectoriesUnswappable(
  fs: ConfigFs,
  config: AgentConfig,
  configPath: string,
  euid: number | undefined,
  servesSocket = false,
): Promise<void> {
  const issues: ConfigIssue[] = [];
  for (const key of ['rootDir', 'stateDir'] as const) {
    const directory = config[key];
    // Missing (the agent makes it at start): whoever can create entries where it will be could make it first.
    const missing = await nearestMissing(fs, directory);
    const problem =
      missing === undefined
        ? await whoElseCanSwap(fs, directory, euid)
        : await whoElseCanCreateIn(fs, path.dirname(missing), euid);
    if (problem !== undefined) issues.push({ path: key, message: `${directory}: ${problem}` });
  }
  // The daemon's local API socket: whoever can create entries in its directory can take the name before the
  // agent binds it (a listening socket of theirs in /tmp): the local API then never starts, and `status`/`sync`
  // talk to them. `--once` opens no socket, so it is not held to this.
  if (servesSocket) {
    const socketDirectory = path.dirname(config.socketPath);
    const missingSocketDirectory = await nearestMissing(fs, socketDirectory);
    const socketProblem = await whoElseCanCreateIn(
      fs,
      missingSocketDirectory === undefined ? socketDirectory : path.dirname(missingSocketDirectory),
      euid,
    );
    if (socketProblem !== undefined) {
      issues.push({ path: 'socketPath', message: `${config.socketPath}: ${socketProblem}` });
    }
  }
  if (issues.length > 0) throw new ConfigError(configPath, issues);
}

/** The outermost missing directory on the way to `directory` (itself included), or undefined when it exists. */
async function nearestMissing(fs: ConfigFs, directory: string): Promise<string | undefined> {
  let missing: string | undefined;
  for (
    let current = path.resolve(directory);
    current !== path.dirname(current);
    current = path.dirname(current)
  ) {
    try {
      await fs.lstat(current);
      return missing;
    } catch (error) {
      if (errnoCode(error) !== 'ENOENT') return missing;
      missing = current;
    }
  }
  return missing;
}

/**
 * The config file's text. Opened non-blocking and checked with fstat before reading: a FIFO (or a device)
 * given as the config would otherwise block the agent forever while systemd shows it running. Refused when
 * someone else could change it, or swap it through a directory or symlink on the way (whoElseCanSwap).
 */
export async function readConfigText(fs: ConfigFs, configPath: string): Promise<string> {
  const fail = (message: string, cause?: unknown): never => {
    throw new ConfigError(configPath, [{ path: '', message }], { cause });
  };
  const swappable = await whoElseCanSwap(fs, configPath, process.geteuid?.());
  if (swappable !== undefined) return fail(swappable);
  let handle: Awaited<ReturnType<FsPort['open']>>;
  try {
    handle = await fs.open(configPath, NONBLOCKING_READ);
  } catch (error) {
    const code = errnoCode(error);
    // The packaged config.json is 0640 root:config-agent: `config-agent status` by another user lands here.
    const hint =
      code === 'EACCES' || code === 'EPERM'
        ? ": run the command as root (sudo) or as a member of the file's group (the packages make it group config-agent's: sudo usermod -aG config-agent <user>, then log in again)"
        : code === 'ENOENT'
          ? ': sudo config-agent init --device-id <id> --base-url <url> --api-key-file <file> writes it (or give --config <file>)'
          : '';
    const kind = await unopenableKind(fs, configPath, error);
    if (kind !== undefined) return fail(`not a regular file (${kind})`, error);
    return fail(`cannot read the file: ${describeFsError(error)}${hint}`, error);
  }
  try {
    const stats = await handle.stat();
    if (!stats.isFile()) return fail(`not a regular file (${describeFileType(stats)})`);
    const untrusted = whoElseCanChange(stats, process.geteuid?.());
    if (untrusted !== undefined) return fail(untrusted);
    if (stats.size > MAX_CONFIG_FILE_BYTES)
      return fail(`larger than ${MAX_CONFIG_FILE_BYTES} bytes: not a config file`);
    return await handle.readFile({ encoding: 'utf8' });
  } catch (error) {
    if (error instanceof ConfigError) throw error;
    return fail(`cannot read the file: ${describeFsError(error)}`, error);
  } finally {
    await handle.close().catch(() => undefined);
  }
}

/**
 * Whoever can change the config decides where the agent sends the API key, where it writes and what its hooks
 * run: a file that a user other than root or the agent's own, the group of a non-root user (applications join
 * the agent's group for its socket), or anyone can rewrite is refused. Undefined when only they can.
 */
function whoElseCanChange(
  stats: { uid: number; gid: number; mode: number },
  euid: number | undefined,
  risk = 'could point the agent at another server (with the API key), another rootDir or other hooks',
): string | undefined {
  if (euid === undefined) return undefined;
  const mode = formatMode(stats.mode & 0o7777);
  if (stats.uid !== 0 && stats.uid !== euid) {
    return `owned by uid ${stats.uid}, neither root nor the agent's user (uid ${euid}): that user ${risk}; make root its owner`;
  }
  if ((stats.mode & 0o002) !== 0) {
    return `writable by others (mode ${mode}): any local user ${risk}; remove their write permission (chmod o-w)`;
  }
  if ((stats.mode & 0o020) !== 0 && stats.gid !== 0) {
    return `writable by its group (gid ${stats.gid}, mode ${mode}): every member ${risk}; remove the group's write permission (chmod g-w)`;
  }
  return undefined;
}

// ---- the API key ----

/**
 * CONFIG_AGENT_API_KEY (non-empty after trim) > $CREDENTIALS_DIRECTORY/api-key > server.apiKeyFile.
 * The key file must not be accessible by group or others; systemd already protects the credentials directory.
 */
export async function loadApiKey(
  fs: ConfigFs,
  config: AgentConfig,
  env: NodeJS.ProcessEnv,
): Promise<{ apiKey: string; source: ApiKeySource }> {
  const fromEnv = env[ENV_API_KEY];
  if (fromEnv !== undefined && fromEnv.trim() !== '') {
    return { apiKey: checkKey(fromEnv, `the environment variable ${ENV_API_KEY}`), source: 'env' };
  }
  const looked: string[] = [`${ENV_API_KEY} is not set`];
  const credentialsDir = env[ENV_CREDENTIALS_DIRECTORY];
  if (credentialsDir !== undefined && credentialsDir !== '') {
    const credentialPath = path.join(credentialsDir, CREDENTIAL_NAME);
    const text = await readKeyFile(fs, credentialPath, { requirePrivate: false });
    if (text !== undefined)
      return { apiKey: checkKey(text, `the credential ${credentialPath}`), source: 'credentials' };
    looked.push(`${credentialPath} does not exist`);
  } else {
    looked.push(`${ENV_CREDENTIALS_DIRECTORY} is not set`);
  }
  const keyFile = config.server.apiKeyFile;
  const text = await readKeyFile(fs, keyFile, { requirePrivate: true });
  if (text !== undefined) return { apiKey: checkKey(text, `the API key file ${keyFile}`), source: 'file' };
  looked.push(`server.apiKeyFile ${keyFile} does not exist`);
  throw new ApiKeyError(`no API key found: ${looked.join(', ')}`);
}

/** The file's text, or undefined when it does not exist. Never puts the content in an error. */
export async function readKeyFile(
  fs: ConfigFs,
  file: string,
  options: { requirePrivate: boolean },
): Promise<string | undefined> {
  const euid = process.geteuid?.();
  if (options.requirePrivate) {
    const swappable = await whoElseCanSwap(fs, file, euid);
    if (swappable !== undefined) throw new ApiKeyError(`the API key file ${file}: ${swappable}`);
  }
  let handle: Awaited<ReturnType<FsPort['open']>>;
  try {
    handle = await fs.open(file, NONBLOCKING_READ);
  } catch (error) {
    const code = errnoCode(error);
    if (code === 'ENOENT') return undefined;
    // The packaged key is 0600 root:root (the service reads it through LoadCredential=): a command run as the
    // agent's user, or as an application's, lands here.
    const hint =
      code === 'EACCES' || code === 'EPERM'
        ? ": the key is root's alone: run the command as root (sudo), or ask the running agent with 'config-agent sync'"
        : '';
    const kind = await unopenableKind(fs, file, error);
    if (kind !== undefined) {
      throw new ApiKeyError(`the API key file ${file} is not a regular file (${kind})`, { cause: error });
    }
    throw new ApiKeyError(`cannot open the API key file ${file}: ${describeFsError(error)}${hint}`, {
      cause: error,
    });
  }
  try {
    // Stat the open handle, not the path, so the mode we check is the mode of the bytes we read.
    const stats = await handle.stat();
    if (!stats.isFile())
      throw new ApiKeyError(`the API key file ${file} is not a regular file (${describeFileType(stats)})`);
    const mode = stats.mode & 0o7777;
    if (options.requirePrivate && euid !== undefined && stats.uid !== 0 && stats.uid !== euid) {
      throw new ApiKeyError(
        `the API key file ${file} is owned by uid ${stats.uid}, neither root nor the agent's user (uid ${euid}): ` +
          `that user can rewrite it or open it to anyone; make root its owner (chown root ${file})`,
      );
    }
    if (options.requirePrivate && (mode & 0o077) !== 0) {
      throw new ApiKeyError(
        `the API key file ${file} is accessible by group or others (mode ${formatMode(mode)}); ` +
          `restrict it with: chmod 600 ${file}`,
      );
    }
    if (stats.size > MAX_KEY_FILE_BYTES) {
      throw new ApiKeyError(`the API key file ${file} is larger than ${MAX_KEY_FILE_BYTES} bytes: not a key`);
    }
    return await handle.readFile({ encoding: 'utf8' });
  } catch (error) {
    if (error instanceof ApiKeyError) throw error;
    throw new ApiKeyError(`cannot read the API key file ${file}: ${describeFsError(error)}`, {
      cause: error,
    });
  } finally {
    await handle.close();
  }
}

function checkKey(raw: string, where: string): string {
  const key = raw.trim();
  if (key === '') throw new ApiKeyError(`${where} is empty`);
  if (key.length < MIN_SECRET_LENGTH) {
    throw new ApiKeyError(
      `${where} holds ${key.length} character(s): an API key has at least ${MIN_SECRET_LENGTH} ` +
        '(a shorter one could not be kept out of the logs)',
    );
  }
  if (!KEY_CHARS.test(key)) {
    throw new ApiKeyError(
      `${where} must hold only the key: printable ASCII, one line, no spaces (found other characters)`,
    );
  }
  return key;
}

// ---- the environment and the directories ----

/** NODE_TLS_REJECT_UNAUTHORIZED=0 silently disables certificate checks for every connection: refuse to run. */
export function assertTlsVerificationEnabled(env: NodeJS.ProcessEnv): void {
  if (env.NODE_TLS_REJECT_UNAUTHORIZED === '0') {
    throw new ConfigError('environment', [
      {
        path: 'NODE_TLS_REJECT_UNAUTHORIZED',
        message:
          'is "0", which turns off TLS certificate verification and would expose the API key; unset it ' +
          '(trust a private CA with NODE_EXTRA_CA_CERTS instead)',
      },
    ]);
  }
}

/**
 * The proxy variables of the environment, when requests would go through them (an https `baseUrl`, no
 * `server.proxy`), must be URLs a request can use: undici refused a malformed one (`127.0.0.1:3128` without its
 * scheme, `not a url`) or a port 0 on every request as a network error, so a setting only the operator can fix
 * looked like an outage (exit 3, the daemon retrying for ever). Values are never quoted (they may hold a password).
 */
export function assertEnvironmentProxyUsable(config: AgentConfig, env: NodeJS.ProcessEnv): void {
  const proxy = config.server.proxy;
  const choice = chooseProxy(config.server.baseUrl, proxy === undefined ? { env } : { url: proxy, env });
  if (choice.kind !== 'environment') return;
  const issues: ConfigIssue[] = [];
  for (const [name, value] of [
    ['https_proxy', choice.httpsProxy],
    ['http_proxy', choice.httpProxy],
  ] as const) {
    const problem = value === undefined ? undefined : proxyUrlProblem(value);
    if (problem === undefined) continue;
    const shown = env[name] !== undefined && env[name]?.trim() !== '' ? name : name.toUpperCase();
    issues.push({ path: shown, message: `${problem} (or set server.proxy, which wins over it)` });
  }
  if (issues.length > 0) throw new ConfigError('environment', issues);
}

function proxyUrlProblem(value: string): string | undefined {
  let url: URL;
  try {
    url = new URL(value);
  } catch {
    return 'must be an absolute URL like "http://proxy.example.com:3128" (with its scheme)';
  }
  if (url.protocol !== 'http:' && url.protocol !== 'https:') return 'must use http or https';
  if (url.hostname === '') return 'must name a host';
  if (url.port === '0') return 'must not use port 0 (no proxy listens there)';
  return undefined;
}

/** A CA bundle is a few hundred KiB (Debian's whole one ~220 KiB): a larger file is not one. */
const MAX_CA_FILE_BYTES = 4 * 1024 * 1024;
/** What whoever can change NODE_EXTRA_CA_CERTS can do. */
const CA_RISK =
  'could have the agent trust their own certificate authority and send the API key to their server';
const PEM_BEGIN = '-----BEGIN CERTIFICATE-----';
const PEM_END = '-----END CERTIFICATE-----';

/**
 * `NODE_EXTRA_CA_CERTS`, when set and an https service is used, must be a readable file of PEM certificates:
 * Node ignores one it cannot load (missing: one warning line; no certificate in it: silently), so a private CA's
 * service then failed every request on its certificate as a network error (exit 3, the daemon retrying for ever)
 * while the cause was the setting.
 */
export async function assertExtraCaCertsUsable(
  fs: ConfigFs,
  config: AgentConfig,
  env: NodeJS.ProcessEnv,
): Promise<void> {
  const file = env.NODE_EXTRA_CA_CERTS;
  // The URL's scheme, not the text's first letters: the config takes `HTTPS://` as https.
  if (file === undefined || file === '' || new URL(config.server.baseUrl).protocol !== 'https:') return;
  const fail = (problem: string, cause?: unknown): never => {
    throw new ConfigError(
      'environment',
      [
        {
          path: 'NODE_EXTRA_CA_CERTS',
          message: `${file}: ${problem}: Node would ignore it, and trust no private CA`,
        },
      ],
      { cause },
    );
  };
  // Whoever can change the file (or swap it) adds the authority the agent trusts for the service, so their own
  // server would be taken for the service and get the API key: judged as the config file is (adv21).
  const refuse = (problem: string): never => {
    throw new ConfigError('environment', [{ path: 'NODE_EXTRA_CA_CERTS', message: `${file}: ${problem}` }]);
  };
  const euid = process.geteuid?.();
  const swappable = await whoElseCanSwap(fs, file, euid);
  if (swappable !== undefined) refuse(swappable);
  let text = '';
  let handle: Awaited<ReturnType<FsPort['open']>>;
  try {
    handle = await fs.open(file, NONBLOCKING_READ);
  } catch (error) {
    const kind = await unopenableKind(fs, file, error);
    if (kind !== undefined) return fail(`not a regular file (${kind})`, error);
    return fail(`cannot read the file: ${describeFsError(error)}`, error);
  }
  try {
    const stats = await handle.stat();
    if (!stats.isFile()) return fail(`not a regular file (${describeFileType(stats)})`);
    const untrusted = whoElseCanChange(stats, euid, CA_RISK);
    if (untrusted !== undefined) refuse(untrusted);
    if (stats.size > MAX_CA_FILE_BYTES) return fail(`larger than ${MAX_CA_FILE_BYTES} bytes: not a CA file`);
    text = await handle.readFile({ encoding: 'utf8' });
  } catch (error) {
    if (error instanceof ConfigError) throw error;
    return fail(`cannot read the file: ${describeFsError(error)}`, error);
  } finally {
    await handle.close().catch(() => undefined);
  }
  const begin = text.indexOf(PEM_BEGIN);
  const end = begin < 0 ? -1 : text.indexOf(PEM_END, begin);
  if (end < 0) return fail('holds no PEM certificate (-----BEGIN CERTIFICATE-----)');
  // The first alone: parsing all of a distribution's bundle (144) cost ~150 ms of every start.
  try {
    new X509Certificate(text.slice(begin, end + PEM_END.length));
  } catch (error) {
    return fail('its first certificate does not parse', error);
  }
}

export async function loadAgentConfig(
  fs: ConfigFs,
  options: {
    configFlag?: string | undefined;
    env: NodeJS.ProcessEnv;
    ownPathsPort?: OwnPathsPort;
    /** The daemon: its socketPath must lie where no other user can take the name first. */
    servesSocket?: boolean;
  },
): Promise<LoadedConfig> {
  assertTlsVerificationEnabled(options.env);
  const configPath = resolveConfigPath(options.configFlag, options.env);
  const config = await loadConfigFile(fs, configPath);
  assertEnvironmentProxyUsable(config, options.env);
  await assertOwnPathsOutsideRoot(
    config,
    configPath,
    ownPaths(config, configPath, options.env),
    options.ownPathsPort,
  );
  await assertExtraCaCertsUsable(fs, config, options.env);
  const hookChecksUnanswered = await assertHookProgramsTrusted(fs, config, configPath, options.env);
  await assertDirectoriesUnswappable(
    fs,
    config,
    configPath,
    process.geteuid?.(),
    options.servesSocket === true,
  );
  const { apiKey, source } = await loadApiKey(fs, config, options.env);
  return {
    config,
    apiKey,
    configPath,
    apiKeySource: source,
    ...(hookChecksUnanswered.length === 0 ? {} : { hookChecksUnanswered }),
  };
}

/**
 * What start-up (loadAgentConfig) judges of a parsed configuration's places beyond its file: the agent's own
 * paths outside rootDir on real paths, hook programs no other user could change (`PATH` from `env`), and rootDir
 * and stateDir that no other user could swap, for the user `euid` (doctor runs as root and judges for
 * config-agent). Throws the ConfigError start-up exits 78 with. Returns the hooks whose program check did not
 * answer (on `fs` gated as start-up's: `hangSafeConfigCalls`), which start-up takes unjudged.
 */
export async function assertConfigPlaces(
  fs: ConfigFs,
  config: AgentConfig,
  configPath: string,
  env: NodeJS.ProcessEnv,
  euid: number | undefined,
  ownPathsPort?: OwnPathsPort,
): Promise<HookCheckUnanswered[]> {
  await assertOwnPathsOutsideRoot(config, configPath, ownPaths(config, configPath, env), ownPathsPort);
  const unanswered = await assertHookProgramsTrusted(fs, config, configPath, env, euid);
  await assertDirectoriesUnswappable(fs, config, configPath, euid, true);
  return unanswered;
}

/**
 * Creates stateDir (0700) and rootDir (files.dirMode), with their missing parents, when missing.
 * An existing stateDir open to group/others is tightened to 0700: it holds the content cache of every file.
 * An existing rootDir is left as the operator made it. Modes are set with chmod, so the umask does not matter.
 */
export async function ensureDirectories(fs: FsPort, config: AgentConfig): Promise<void> {
  await ensureDirectory(fs, 'stateDir', config.stateDir, STATE_DIR_MODE, true);
  await ensureDirectory(fs, 'rootDir', config.rootDir, config.files.dirMode, false);
}

async function ensureDirectory(
  fs: FsPort,
  key: string,
  dir: string,
  mode: number,
  tighten: boolean,
): Promise<void> {
  const fail = (what: string, error?: unknown): never => {
    throw new ConfigError('directories', [{ path: key, message: what }], { cause: error });
  };
  try {
    const existing = await statOrUndefined(fs, dir);
    if (existing !== undefined) {
      if (!existing.isDirectory()) fail(`${dir} exists and is not a directory`);
      if (tighten && (existing.mode & 0o077) !== 0) {
        await refuseSharedStateDir(fs, dir, existing.mode & 0o7777, fail);
        await fs
          .chmod(dir, mode)
          .catch((error: unknown) =>
            fail(`cannot restrict ${dir} to mode ${formatMode(mode)}: ${describeFsError(error)}`, error),
          );
      }
      return;
    }
    const missing = [dir];
    for (let parent = path.dirname(dir); parent !== path.dirname(parent); parent = path.dirname(parent)) {
      const stats = await statOrUndefined(fs, parent);
      if (stats === undefined) {
        missing.unshift(parent);
        continue;
      }
      if (!stats.isDirectory()) fail(`cannot create ${dir}: ${parent} is not a directory`);
      break;
    }
    for (const each of missing) {
      try {
        await fs.mkdir(each, { mode });
      } catch (error) {
        // Another process may have created it in between: fine, as long as it is a directory.
        if (errnoCode(error) !== 'EEXIST') throw error;
        continue;
      }
      try {
        await fs.chmod(each, mode);
        // A new directory's entry lives in its parent: without this fsync a power cut can take the whole
        // directory (and for stateDir, the record of which files the agent wrote) with it.
        await fsyncDirectoryOf(fs, path.dirname(each));
      } catch (error) {
        // Not durable, it goes again (still empty): the next start or reload makes it anew and fsyncs it,
        // instead of finding it there and writing below an entry a power cut can take.
        await fs.rmdir(each).catch(() => undefined);
        throw error;
      }
    }
  } catch (error) {
    if (error instanceof ConfigError) throw error;
    // rootDir on a mount that did not answer in time (cli/mount-gate.ts): the agent starts, and its files are
    // retried (ETIMEDOUT) until the mount answers, instead of a start that waits on it for good.
    if (key === 'rootDir' && errnoCode(error) === 'ETIMEDOUT') return;
    fail(`cannot create ${dir}: ${describeFsError(error)}`, error);
  }
}

/**
 * The names the agent itself makes in stateDir (store/, cli/code-cache.ts): its state files, their set-aside
 * copies, the lock, the caches, the clean-exit marker, temp files; `lost+found` for a stateDir that is its own filesystem.
 */
const AGENT_STATE_ENTRY =
  /^(?:\.config-agent\.tmp-.*|(?:state|outbox|intent|fingerprints|renewal-asides)\.json(?:\.corrupt|\.not-regular-\d+(?:-\d+)?)?|root-mount\.json|clean-exit\.json|agent\.lock(?:\.not-regular-\d+(?:-\d+)?)?|cache(?:\.not-a-directory-\d+(?:-\d+)?)?|code-cache|lost\+found)$/;

/** At most this many foreign entries are named when stateDir is refused. */
const FOREIGN_ENTRIES_NAMED = 5;

/**
 * A stateDir the agent would have to restrict to 0700 is refused, not restricted, when it is plainly not a
 * directory of the agent's own: a shared one (sticky or writable by others: `/tmp`, `/var/tmp`, `/dev/shm`), or
 * one holding entries the agent never makes (`/etc`, a home directory). Restricted, such a directory locked every
 * other user of the device out of it (`stateDir: "/tmp"` made /tmp 0700 as root: no other program could make a
 * temp file), and the agent's sweep and state files went into it.
 */
async function refuseSharedStateDir(
  fs: FsPort,
  dir: string,
  mode: number,
  fail: (what: string, error?: unknown) => never,
): Promise<void> {
  const shown = formatMode(mode);
  if ((mode & 0o1002) !== 0) {
    fail(
      `${dir} is a shared directory (mode ${shown}): the agent would restrict it to 0700 and lock every other user out; give stateDir a directory of its own`,
    );
  }
  let names: string[];
  try {
    names = (await fs.readdir(dir)).map(String);
  } catch (error) {
    return fail(`cannot list ${dir}: ${describeFsError(error)}`, error);
  }
  const foreign = names.filter((name) => !AGENT_STATE_ENTRY.test(name)).sort();
  if (foreign.length > 0) {
    const named = foreign
      .slice(0, FOREIGN_ENTRIES_NAMED)
      .map((name) => JSON.stringify(name))
      .join(', ');
    const more =
      foreign.length > FOREIGN_ENTRIES_NAMED ? ` and ${foreign.length - FOREIGN_ENTRIES_NAMED} more` : '';
    fail(
      `${dir} is open to others (mode ${shown}) and holds entries the agent did not make (${named}${more}): not restricting it to 0700; give stateDir a directory of its own`,
    );
  }
  // Named as the agent's but another user's: one who could write stateDir may have put a state.json (files the
  // agent then takes for its own to remove), a fingerprints.json (items it then takes as judged) or an
  // outbox.json (reports it then sends with the device's key) there for it to trust once restricted.
  const euid = process.geteuid?.();
  if (euid === undefined) return;
  const othersOwn: string[] = [];
  for (const name of names.sort()) {
    const stats = await fs.lstat(path.join(dir, name)).catch(() => undefined);
    if (stats !== undefined && stats.uid !== 0 && stats.uid !== euid) {
      othersOwn.push(`${JSON.stringify(name)} of uid ${stats.uid}`);
    }
  }
  if (othersOwn.length > 0) {
    const more =
      othersOwn.length > FOREIGN_ENTRIES_NAMED ? ` and ${othersOwn.length - FOREIGN_ENTRIES_NAMED} more` : '';
    fail(
      `${dir} is open to others (mode ${shown}) and holds entries owned by neither root nor the agent's user (uid ${euid}): ${othersOwn.slice(0, FOREIGN_ENTRIES_NAMED).join(', ')}${more}; another user may have put them there for the agent to trust: not restricting it to 0700; remove them (or chown them to the agent's user if they are its own)`,
    );
  }
}

async function fsyncDirectoryOf(fs: FsPort, dir: string): Promise<void> {
  const handle = await fs.open(dir, constants.O_RDONLY | constants.O_DIRECTORY);
  try {
    await handle.sync().catch((error: unknown) => {
      // Some filesystems cannot fsync a directory at all; there is nothing more to do for them.
      const code = errnoCode(error);
      if (code !== 'EINVAL' && code !== 'ENOTSUP') throw error;
    });
  } finally {
    await handle.close().catch(() => undefined);
  }
}

async function statOrUndefined(fs: FsPort, file: string) {
  try {
    return await fs.stat(file);
  } catch (error) {
    // ENOTDIR: a parent is a file; the caller's walk up finds it and says so.
    const code = errnoCode(error);
    if (code === 'ENOENT' || code === 'ENOTDIR') return undefined;
    throw error;
  }
}

// ---- messages ----

const FS_ERRORS: Record<string, string> = {
  ENOENT: 'no such file or directory',
  EACCES: 'permission denied',
  EPERM: 'operation not permitted',
  EISDIR: 'is a directory',
  ENOTDIR: 'a parent is not a directory',
  EROFS: 'read-only file system',
  ELOOP: 'too many symbolic links',
};

function describeFsError(error: unknown): string {
  const code = errnoCode(error);
  if (code === undefined) return errorMessage(error);
  const text = FS_ERRORS[code];
  return text === undefined ? code : `${text} (${code})`;
}

/**
 * What is at `file` when opening it failed with ENXIO, in words (a socket, a device without its driver: open(2)
 * refuses them before any fstat could say so); undefined for anything else, a regular file there included (a disk
 * gone away). Followed as the open follows it. Before, a socket given as the config or key said only "ENXIO" (adv36).
 */
async function unopenableKind(fs: FsPort, file: string, error: unknown): Promise<string | undefined> {
  if (errnoCode(error) !== 'ENXIO') return undefined;
  const stats = await fs.stat(file).catch(() => undefined);
  return stats === undefined || stats.isFile() ? undefined : describeFileType(stats);
}

/** What a non-regular file is, in words, for "not a regular file (...)". */
function describeFileType(stats: {
  isDirectory(): boolean;
  isFIFO(): boolean;
  isSocket(): boolean;
  isCharacterDevice(): boolean;
  isBlockDevice(): boolean;
  isSymbolicLink(): boolean;
}): string {
  if (stats.isDirectory()) return 'a directory';
  if (stats.isFIFO()) return 'a FIFO';
  if (stats.isSocket()) return 'a socket';
  if (stats.isCharacterDevice()) return 'a character device';
  if (stats.isBlockDevice()) return 'a block device';
  if (stats.isSymbolicLink()) return 'a symbolic link';
  return 'a regular file';
}

function formatMode(mode: number): string {
  return `0${mode.toString(8).padStart(3, '0')}`;
}

/**
 * JSON syntax errors with line and column, always: the position comes from our own scan, since V8 gives one
 * for some errors only. V8's own text can quote the file, so only its first clause is kept.
 */
/** A JSON syntax error as `invalid JSON at line L, column C: <reason>`, without the file's text. */
export function describeJsonError(text: string, error: unknown): string {
  const raw = errorMessage(error);
  const v8Position = /at position (\d+)/.exec(raw)?.[1];
  const position =
    jsonSyntaxErrorOffset(text) ?? (v8Position === undefined ? text.length : Number(v8Position));
  const reason = raw
    .replace(/, (?:\.\.\.)?".*is not valid JSON$/s, '')
    .replace(/ in JSON at position \d+.*$/s, '')
    .replace(/ at position \d+.*$/s, '')
    .replace(/ \(line \d+ column \d+\)$/, '');
  const { line, column } = lineAndColumn(text, position);
  return `invalid JSON at line ${line}, column ${column}: ${reason}`;
}

function article(word: string): string {
  return /^[aeiou]/.test(word) ? `an ${word}` : `a ${word}`;
}

/** Per-parse zod error map: wording of the issues, never echoing a value (a secret may sit in the wrong key). */
function issueMessage(issue: z.core.$ZodRawIssue): string | undefined {
  switch (issue.code) {
    case 'invalid_type': {
      if (issue.input === undefined) return 'required';
      // JSON.parse reads 1e400 as Infinity: "expected a number, got number" would name no problem.
      if (typeof issue.input === 'number' && !Number.isFinite(issue.input))
        return 'number out of range (beyond ±1.8e308)';
      if (issue.expected === 'int') {
        return `expected an integer, got ${typeof issue.input === 'number' ? 'a fractional number' : describeType(issue.input)}`;
      }
      return `expected ${article(issue.expected)}, got ${describeType(issue.input)}`;
    }
    case 'too_small': {
      const min = Number(issue.minimum);
      if (issue.origin === 'string')
        return min <= 1 ? 'must not be empty' : `must be at least ${min} characters`;
      if (issue.origin === 'array') return min <= 1 ? 'must not be empty' : `must have at least ${min} items`;
      return `must be ${issue.inclusive ? '>=' : '>'} ${min}`;
    }
    case 'too_big': {
      const max = Number(issue.maximum);
      if (issue.origin === 'string') return `must be at most ${max} characters`;
      if (issue.origin === 'array') return `must have at most ${max} items`;
      return `must be ${issue.inclusive ? '<=' : '<'} ${max}`;
    }
    case 'invalid_value':
      return `expected one of ${issue.values.map((v) => JSON.stringify(v)).join(', ')}`;
    case 'unrecognized_keys':
      return 'unknown key';
    default:
      return undefined;
  }
}

function toConfigIssues(issue: z.core.$ZodIssue): ConfigIssue[] {
  if (issue.code !== 'unrecognized_keys')
    return [{ path: formatFieldPath(issue.path), message: issue.message }];
  const known = knownKeysAt(issue.path);
  return issue.keys.map((key) => {
    const suggestion = closestKey(key, known);
    return {
      path: formatFieldPath([...issue.path, shownKey(key)]),
      message: suggestion === undefined ? 'unknown key' : `unknown key (did you mean "${suggestion}"?)`,
    };
  });
}

const UNSAFE_KEY_CHARS = /[\p{Cc}\p{Cf}\p{Cs}\u2028\u2029]/u;

/**
 * An unknown key is text from the file, printed to a terminal and the journal: with a control or format
 * character it is shown quoted and escaped (an escape sequence or a newline in a key drove the terminal or
 * forged a line).
 */
function shownKey(key: string): string {
  if (!UNSAFE_KEY_CHARS.test(key)) return key;
  return JSON.stringify(key).replace(
    /[\p{Cf}\u2028\u2029]/gu,
    (char) => `\\u${(char.codePointAt(0) ?? 0).toString(16).padStart(4, '0')}`,
  );
}

/** The keys the schema allows in the object at `at`, found by walking the schema's definitions. */
function knownKeysAt(at: readonly PropertyKey[]): string[] {
  interface Def {
    type: string;
    innerType?: unknown;
    in?: unknown;
    element?: unknown;
    shape?: Record<string, unknown>;
  }
  const defOf = (schema: unknown): Def => (schema as { _zod: { def: Def } })._zod.def;
  const unwrap = (schema: unknown): Def => {
    let def = defOf(schema);
    for (let depth = 0; depth < 16; depth++) {
      if (def.innerType !== undefined) def = defOf(def.innerType);
      else if (def.type === 'pipe' && def.in !== undefined) def = defOf(def.in);
      else break;
    }
    return def;
  };
  let def = unwrap(AgentConfigSchema);
  for (const segment of at) {
    if (def.type === 'array' && def.element !== undefined) def = unwrap(def.element);
    else if (def.shape !== undefined && typeof segment === 'string' && def.shape[segment] !== undefined)
      def = unwrap(def.shape[segment]);
    else return [];
  }
  if (def.type === 'array' && def.element !== undefined) def = unwrap(def.element);
  return def.shape === undefined ? [] : Object.keys(def.shape);
}

function closestKey(key: string, known: readonly string[]): string | undefined {
  let best: string | undefined;
  let bestDistance = Number.POSITIVE_INFINITY;
  for (const candidate of known) {
    const a = key.toLowerCase();
    const b = candidate.toLowerCase();
    // A truncated key ("timeout" for "timeoutSeconds") is as likely a slip as a typo.
    const truncated = Math.min(a.length, b.length) >= 4 && (a.startsWith(b) || b.startsWith(a));
    const distance = a === b || truncated ? 0 : editDistance(a, b);
    if (distance < bestDistance) {
      best = candidate;
      bestDistance = distance;
    }
  }
  return bestDistance <= Math.max(1, Math.floor(key.length / 4)) ? best : undefined;
}

function editDistance(a: string, b: string): number {
  let previous = Array.from({ length: b.length + 1 }, (_, i) => i);
  for (let i = 1; i <= a.length; i++) {
    const current = [i];
    for (let j = 1; j <= b.length; j++) {
      const substitution = (previous[j - 1] ?? 0) + (a[i - 1] === b[j - 1] ? 0 : 1);
      current.push(Math.min((previous[j] ?? 0) + 1, (current[j - 1] ?? 0) + 1, substitution));
    }
    previous = current;
  }
  return previous[b.length] ?? 0;
}
