// `config-agent init`: writes config.json and the API key with the right owners and modes, then checks them live.
import { constants } from 'node:fs';
import * as nodeFs from 'node:fs/promises';
import path from 'node:path';
import { createInterface } from 'node:readline/promises';
import { Writable } from 'node:stream';
import { createServiceTransport } from '../api/transport.js';
import { ApiKeyError, ConfigError } from '../config/errors.js';
import {
  assertConfigPlaces,
  type ConfigFs,
  describeJsonError,
  MAX_KEY_FILE_BYTES,
  parseAgentConfig,
  readKeyFile,
  resolveConfigPath,
} from '../config/load.js';
import { DEFAULT_CONFIG_PATH } from '../config/schema.js';
import { AgentError, errnoCode, errorMessage } from '../lib/errors.js';
import { makeDirectoryDurably, publishFile, removeManagedFile } from '../store/durable-writer.js';
import { DiskError } from '../store/errors.js';
import { boundedPlaces, notAnswered, notJudgedText, type PlacesBounds } from './doctor-bounds.js';
import { ExitCode } from './exit-codes.js';
import type { CommandIo } from './io.js';
import { MountNotAnswering, mountDidNotAnswer } from './mount-gate.js';
import { checkService, type ServiceCheckResult } from './service-check.js';
import {
  type HiddenDir,
  type RealpathFs,
  rootDirHiddenFromUnit,
  textfileHiddenFromUnit,
  UNIT_HIDDEN_DIRS,
} from './unit-sandbox.js';

export interface InitCommand {
  configPath?: string;
  deviceId?: string;
  baseUrl?: string;
  rootDir?: string;
  /** A file holding the key, or '-' for standard input. */
  apiKeyFile?: string;
}

/** Where init looks and writes besides the config path; tests point these into a scratch directory. */
export interface InitEnvironment extends PlacesBounds {
  stdin: NodeJS.ReadableStream;
  stdinIsTty: boolean;
  groupFile: string;
  passwdFile: string;
  /** The unit's drop-in directory, for a rootDir other than the default. */
  dropInDir: string;
  /** The service check's deadline. */
  checkTimeoutMs: number;
  /** The caller's user id: init runs only as root (0). */
  uid: number | undefined;
  /** What init reads and writes through: node's own unless a test passes another (a power-cut model). */
  fs?: InitFs;
  /** The directories the unit hides from the agent, where no rootDir may go (none judged when absent). */
  unitHides?: readonly HiddenDir[];
  /** The configuration the unit runs: only init writing it touches the unit's drop-in (any, when absent). */
  unitConfigPath?: string;
}

/** The agent's config fs: init gives the directories it makes their owner through a descriptor (fchown). */
export type InitFs = ConfigFs;

export const SYSTEM_INIT_ENVIRONMENT: Omit<InitEnvironment, 'stdin' | 'stdinIsTty' | 'uid'> = {
  groupFile: '/etc/group',
  passwdFile: '/etc/passwd',
  dropInDir: '/etc/systemd/system/config-agent.service.d',
  checkTimeoutMs: 15_000,
  unitHides: UNIT_HIDDEN_DIRS,
  unitConfigPath: DEFAULT_CONFIG_PATH,
};

export const AGENT_ACCOUNT = 'config-agent';
const DEFAULT_ROOT_DIR = '/srv/config-agent';
const DEFAULT_STATE_DIR = '/var/lib/config-agent';
const ROOT_DIR_DROP_IN = '50-root-dir.conf';

/** `init` cannot go on: printed as is, and `exitCode` is the command's (usage, config). */
export class InitFailure extends AgentError {
  constructor(
    message: string,
    readonly exitCode: number,
  ) {
    super('init_failed', message, { retryable: false });
  }
}

async function readOptional(fs: ConfigFs, file: string): Promise<string | undefined> {
  try {
    return await fs.readFile(file, 'utf8');
  } catch (error) {
    if (errnoCode(error) === 'ENOENT') return undefined;
    // A mount that did not answer (bounded: doctor-bounds.ts): said as such, with what to do.
    if (mountDidNotAnswer(error))
      throw new InitFailure(unansweredText(file, error, 'nothing written'), ExitCode.Config);
    throw new InitFailure(`cannot read ${file}: ${errorMessage(error)}`, ExitCode.Config);
  }
}

/**
 * What init says when a call on `file` (the config directory, the key, config.json, the drop-in, /etc/passwd: its own
 * places under /etc, or `--api-key-file`) did not answer within the bound: the path, the mount, what is written.
 */
function unansweredText(file: string, error: unknown, written: string): string {
  const why = error instanceof MountNotAnswering ? error.message : errorMessage(error);
  return (
    `${file}: ${why.startsWith('ETIMEDOUT') ? why : `ETIMEDOUT: ${why}`}; init stops here: ${written}. Run ` +
    'config-agent init again once the mount answers'
  );
}

/** `step` on `file`, a mount that did not answer there stopping init (exit 78) with what is `written` so far. */
async function stepOn<T>(file: string, written: string, step: () => Promise<T>): Promise<T> {
  try {
    return await step();
  } catch (error) {
    if (error instanceof InitFailure || !mountDidNotAnswer(error)) throw error;
    throw new InitFailure(unansweredText(file, error, written), ExitCode.Config);
  }
}

/** Asks on the terminal (prompts on stderr, so stdout stays the command's output); hidden input for the key. */
class Prompter {
  #muted = false;
  readonly #rl;
  constructor(
    stdin: NodeJS.ReadableStream,
    private readonly stderr: NodeJS.WritableStream,
  ) {
    const output = new Writable({
      write: (chunk, _encoding, done) => {
        if (!this.#muted) stderr.write(chunk);
        done();
      },
    });
    this.#rl = createInterface({ input: stdin, output, terminal: true });
  }
  async ask(question: string, fallback?: string): Promise<string> {
    const suffix = fallback === undefined ? '' : ` [${fallback}]`;
    const answer = (await this.#rl.question(`${question}${suffix}: `)).trim();
    return answer === '' ? (fallback ?? '') : answer;
  }
  async askHidden(question: string): Promise<string> {
    this.stderr.write(`${question} (input hidden): `);
    this.#muted = true;
    try {
      return (await this.#rl.question('')).trim();
    } finally {
      this.#muted = false;
      this.stderr.write('\n');
    }
  }
  close(): void {
    this.#rl.close();
  }
}

/** Standard input whole, up to a key file's limit: `--api-key-file - </dev/zero` read without end before. */
async function readAll(stream: NodeJS.ReadableStream): Promise<string> {
  const chunks: Buffer[] = [];
  let length = 0;
  for await (const chunk of stream) {
    const bytes = typeof chunk === 'string' ? Buffer.from(chunk) : chunk;
    length += bytes.length;
    if (length > MAX_KEY_FILE_BYTES) {
      throw new InitFailure(
        `standard input holds more than ${MAX_KEY_FILE_BYTES} bytes: not a key`,
        ExitCode.Usage,
      );
    }
    chunks.push(bytes);
  }
  return Buffer.concat(chunks).toString('utf8');
}

/**
 * `--api-key-file` read as the agent reads a key file: opened without blocking (a FIFO with no writer hung init for
 * good), a regular file of at most 64 KiB (`/dev/zero` was read until memory ran out); undefined when missing.
 */
async function readKeySource(fs: ConfigFs, file: string): Promise<string | undefined> {
  try {
    return await readKeyFile(fs, file, { requirePrivate: false });
  } catch (error) {
    if (mountDidNotAnswer(error))
      throw new InitFailure(unansweredText(file, error, 'nothing written'), ExitCode.Config);
    if (error instanceof ApiKeyError) throw new InitFailure(error.message, ExitCode.Usage);
    throw error;
  }
}

/** The first line, trimmed: a key file with a trailing newline (or CRLF) is the normal case. */
function keyFromText(text: string, where: string): string {
  const key = (text.split(/\r?\n/).find((line) => line.trim() !== '') ?? '').trim();
  if (key === '') throw new InitFailure(`no API key in ${where}`, ExitCode.Usage);
  if (!/^[\x21-\x7e]+$/.test(key)) {
    throw new InitFailure(
      `the API key from ${where} must be printable ASCII without spaces (found other characters)`,
      ExitCode.Usage,
    );
  }
  return key;
}

/** The uid (passwd) or gid (group) of `name`: the third field in both files. */
function idOf(file: string, text: string | undefined, name: string): number {
  const line = text?.split('\n').find((entry) => entry.split(':')[0] === name);
  const id = line?.split(':')[2];
  if (id === undefined || !/^\d+$/.test(id)) {
    throw new InitFailure(
      `${name} is not in ${file}: install the config-agent package first (its postinst runs systemd-sysusers)`,
      ExitCode.Config,
    );
  }
  return Number(id);
}

/** The uid and gid of the config-agent account; InitFailure when the package has not created it. */
export async function agentAccount(env: Pick<InitEnvironment, 'groupFile' | 'passwdFile' | 'fs'>): Promise<{
  uid: number;
  gid: number;
}> {
  const fs = env.fs ?? nodeFs;
  return {
    uid: idOf(env.passwdFile, await readOptional(fs, env.passwdFile), AGENT_ACCOUNT),
    gid: idOf(env.groupFile, await readOptional(fs, env.groupFile), AGENT_ACCOUNT),
  };
}

/**
 * A directory as one value of a systemd `ReadWritePaths=` line: `%` doubled (systemd expands `%d`, `%h`, ...
 * there: `/srv/100%d` named the credentials directory) and, when it holds a space or a single quote, the whole in
 * double quotes (a space split the line into two paths, `/srv/my configs` into `/srv/my` and an ignored
 * `configs`; a lone `'` made systemd ignore the line): either way the unit could not write rootDir.
 * Undefined for a `"` or `\`, which that line keeps or unquotes in ways not worth trusting.
 */
function systemdPathValue(dir: string): string | undefined {
  if (/["\\]/.test(dir)) return undefined;
  const value = dir.replaceAll('%', '%%');
  return /[\s']/.test(value) ? `"${value}"` : value;
}

/**
 * mkdir -p, each directory made fsynced into its parent (a power cut after init must not take the config
 * directory, and config.json and the key with it); with `owner`, the last one then chowned and chmodded (the
 * umask aside). Reports whether it made the last component (`made`), gave one it found the owner and mode it
 * would have (`settled`: see looksUnsettled), or kept one as it found it (`kept`).
 */
async function ensureDir(
  fs: InitFs,
  dir: string,
  options: { mode: number; owner?: { uid: number; gid: number } },
): Promise<'made' | 'settled' | 'kept'> {
  try {
    const stats = await fs.stat(dir);
    if (!stats.isDirectory()) throw new InitFailure(`${dir} exists and is not a directory`, ExitCode.Config);
    if (options.owner === undefined || !(await looksUnsettled(fs, dir, options.mode, options.owner)))
      return 'kept';
    await settleOwnerDurably(fs, dir, options.mode, options.owner, false);
    return 'settled';
  } catch (error) {
    if (error instanceof InitFailure) throw error;
    if (errnoCode(error) !== 'ENOENT') throw error;
  }
  try {
    await makeDirectoryDurably(fs, dir, options.mode);
  } catch (error) {
    if (!(error instanceof DiskError)) throw error;
    throw new InitFailure(
      `cannot make ${dir} durable: ${error.operation} of its parent failed (${error.errno ?? 'unknown error'}), ` +
        'so a power cut could take it and what is written below it; init stops here. Check the disk (dmesg) and ' +
        'run config-agent init again',
      ExitCode.Config,
    );
  }
  if (options.owner !== undefined) await settleOwnerDurably(fs, dir, options.mode, options.owner, true);
  return 'made';
}

/**
 * Whether a directory init finds where it would make one with `owner` and `mode` looks like its own mkdir that a
 * power cut or a failure gave back before its owner and mode were settled: empty, owned by root, its mode within
 * `mode` (mkdir's, narrowed by the umask), and not already as asked. Any other (files in it, another owner, a
 * mode init would not have made) is an operator's, kept as it is.
 */
async function looksUnsettled(
  fs: InitFs,
  dir: string,
  mode: number,
  owner: { uid: number; gid: number },
): Promise<boolean> {
  // The directory itself: a symlink to one (an operator's choice) is never init's mkdir.
  const stats = await fs.lstat(dir);
  if (!stats.isDirectory()) return false;
  const permissions = stats.mode & 0o7777;
  if (stats.uid !== 0 || (permissions & ~mode) !== 0) return false;
  if (stats.uid === owner.uid && stats.gid === owner.gid && permissions === mode) return false;
  return (await fs.readdir(dir)).length === 0;
}

/**
 * Chowns and chmods the directory just made (`made`), or found as its mkdir left it (looksUnsettled), then
 * fsyncs it: an owner and a mode are the inode's own metadata, which its parent's fsync does not write, so
 * without this a power cut could give rootDir back as mkdir made it (root's, the umask's mode) and the service
 * could not write it. When that fails, a directory it made is removed again (still empty), and the removal
 * fsynced into its parent: else a cut could bring it back root's (which the next init would settle, as above).
 */
async function settleOwnerDurably(
  fs: InitFs,
  dir: string,
  mode: number,
  owner: { uid: number; gid: number },
  made: boolean,
): Promise<void> {
  let failed: string | undefined;
  try {
    const handle = await fs.open(dir, constants.O_RDONLY | constants.O_DIRECTORY | constants.O_NOFOLLOW);
    try {
      await handle.chown(owner.uid, owner.gid);
      await handle.chmod(mode);
      await handle.sync().catch((error: unknown) => {
        const code = errnoCode(error);
        // A filesystem that cannot fsync a directory (EINVAL, ENOTSUP) is taken as the writer takes it.
        if (code !== 'EINVAL' && code !== 'ENOTSUP') failed = `its fsync failed (${code ?? 'unknown error'})`;
      });
    } finally {
      await handle.close().catch(() => undefined);
    }
  } catch (error) {
    failed = `its chown or chmod failed (${errnoCode(error) ?? errorMessage(error)})`;
  }
  if (failed === undefined) return;
  const removal = made ? await removeDurably(fs, dir) : 'not made by this init: left as it is';
  throw new InitFailure(
    `cannot make the owner and mode of ${dir} durable: ${failed}, so a power cut could give it back as mkdir ` +
      `made it (owned by root); ${removal}; init stops here. Check the disk (dmesg) and run config-agent init again`,
    ExitCode.Config,
  );
}

/** rmdir of the empty `dir`, fsynced into its parent; what became of it, for the message. */
async function removeDurably(fs: InitFs, dir: string): Promise<string> {
  try {
    await fs.rmdir(dir);
  } catch (error) {
    return `it could not be removed (${errnoCode(error) ?? 'unknown error'})`;
  }
  try {
    const parent = await fs.open(path.dirname(dir), constants.O_RDONLY | constants.O_DIRECTORY);
    try {
      await parent.sync();
    } finally {
      await parent.close().catch(() => undefined);
    }
  } catch (error) {
    const code = errnoCode(error);
    if (code !== 'EINVAL' && code !== 'ENOTSUP')
      return `it was removed, but the fsync of its parent failed (${code ?? 'unknown error'})`;
  }
  return 'it was removed';
}

/** The durable writer's temp file names (store/durable-writer.ts): its prefix and 12 random bytes in hex. */
const WRITER_TEMP_NAME = /^\.config-agent\.tmp-[0-9a-f]{24}$/;

/**
 * Removes from `dir` (not below it) the temp files a killed init left: names of the writer's pattern only, regular
 * files (lstat: a symlink is never followed) owned by `uid`. Best effort: what cannot be listed or removed stays.
 */
export async function removeStaleTempFiles(
  fs: InitFs,
  dir: string,
  uid: number | undefined,
): Promise<string[]> {
  let names: string[];
  try {
    names = await fs.readdir(dir);
  } catch {
    return [];
  }
  const removed: string[] = [];
  for (const name of names) {
    if (!WRITER_TEMP_NAME.test(name)) continue;
    const file = path.join(dir, name);
    try {
      const stats = await fs.lstat(file);
      if (!stats.isFile() || stats.uid !== uid) continue;
      await fs.unlink(file);
      removed.push(file);
    } catch {
      // Gone meanwhile, or not ours to remove: left as it is.
    }
  }
  return removed.sort();
}

async function publish(fs: ConfigFs, file: string, text: string, mode: number, gid: number): Promise<void> {
  await publishFile(fs, {
    rootDir: path.dirname(file),
    relativePath: path.basename(file),
    data: Buffer.from(text, 'utf8'),
    mode,
    dirMode: 0o750,
    gid,
  });
}

/** A call on one of init's places (rootDir, stateDir, the textfile) that its mount did not answer in time. */
interface LateCall {
  key: string;
  dir: string;
  error: MountNotAnswering;
}

/**
 * The stop at a place on a mount that does not answer (exit 78, as for a disk init cannot make durable): before
 * any write, nothing written; at rootDir's making, the config and key are written and rootDir is not (a mkdir
 * the mount carries out after init ended leaves it empty and root's, which the next init settles).
 */
function lateFailure(late: LateCall, written: boolean): InitFailure {
  const outcome = written
    ? `the configuration and the key are written, ${late.dir} is not made`
    : 'nothing written';
  return new InitFailure(
    `${late.key} ${late.dir}: ${late.error.message}; init stops here: ${outcome}. Run config-agent init again once ` +
      `the mount answers, or choose a ${late.key} elsewhere`,
    ExitCode.Config,
  );
}

function throwIfLate(late: readonly LateCall[], written: boolean): void {
  const first = late[0];
  if (first !== undefined) throw lateFailure(first, written);
}

/**
 * `fs`'s realpath for unit-sandbox's checks, the calls that did not answer noted in `late`: that walk takes any
 * failure for a part not there yet and goes on to the parent, so a dead mount would pass for a missing directory.
 */
function realpathNotingLate(fs: ConfigFs, late: LateCall[]): (key: string) => RealpathFs {
  return (key) => ({
    realpath: async (file) => {
      try {
        if (fs.realpath === undefined) return await nodeFs.realpath(file);
        return await fs.realpath(file);
      } catch (error) {
        if (notAnswered(error)) late.push({ key, dir: file, error });
        throw error;
      }
    },
  });
}

/**
 * An lstat of `dir`, or of its nearest parent that is there, through the bounded port: InitFailure (nothing
 * written) when its mount does not answer; any other answer (there, missing, refused) is left to the steps after.
 */
async function probeAnswering(fs: ConfigFs, key: string, dir: string): Promise<void> {
  for (let current = path.resolve(dir); ; current = path.dirname(current)) {
    try {
      await fs.lstat(current);
      return;
    } catch (error) {
      if (notAnswered(error)) throw lateFailure({ key, dir, error }, false);
      if (errnoCode(error) !== 'ENOENT' || path.dirname(current) === current) return;
    }
  }
}

function failureExit(result: ServiceCheckResult): number {
  if (result.ok) return ExitCode.Converged;
  return result.kind === 'not_found' ? ExitCode.Config : ExitCode.Unreachable;
}

export async function runInit(command: InitCommand, io: CommandIo, env: InitEnvironment): Promise<number> {
  let prompter: Prompter | undefined;
  let places: Awaited<ReturnType<typeof boundedPlaces>> | undefined;
  try {
    if (env.uid !== 0) {
      throw new InitFailure(
        'init writes /etc/config-agent and chowns files to config-agent: run it as root (sudo config-agent init ...)',
        ExitCode.Config,
      );
    }
    // Every call init makes on a file goes through start-up's bounds: rootDir and stateDir on a dead NFS or FUSE
    // mount held init for good (hook29's gap, bound26), and so did its own places under /etc (an NFS root); each such
    // mount is asked from another process first, so a call that does not answer holds none of this process's
    // threads and init exits 78, not by SIGTERM (doctor28).
    places = await boundedPlaces({ ...env, placesFs: env.placesFs ?? env.fs ?? nodeFs });
    const fs = places.fs;
    const configPath = resolveConfigPath(command.configPath, io.env);
    const existingText = await readOptional(fs, configPath);
    let existing: Record<string, unknown> = {};
    // Every key of an existing config is kept, so one that cannot be read is never replaced: a trailing comma
    // left by a hand edit had init write a new file without the operator's hooks, rules and proxy. An empty one
    // holds nothing to keep.
    const existingJson = existingText?.replace(/^\uFEFF/, '');
    if (existingJson !== undefined && existingJson.trim() !== '') {
      let parsed: unknown;
      try {
        parsed = JSON.parse(existingJson);
      } catch (error) {
        throw new InitFailure(
          `${configPath}: ${describeJsonError(existingJson, error)}; init keeps the keys of an existing ` +
            'configuration and cannot read this one: fix it, or move it aside to start anew (nothing written)',
          ExitCode.Config,
        );
      }
      if (typeof parsed !== 'object' || parsed === null || Array.isArray(parsed)) {
        throw new InitFailure(
          `${configPath} holds no JSON object; fix it, or move it aside to start anew (nothing written)`,
          ExitCode.Config,
        );
      }
      existing = parsed as Record<string, unknown>;
    }
    const existingServer =
      typeof existing.server === 'object' && existing.server !== null
        ? (existing.server as Record<string, unknown>)
        : {};
    const keyPath =
      typeof existingServer.apiKeyFile === 'string' && configPath !== DEFAULT_CONFIG_PATH
        ? existingServer.apiKeyFile
        : path.join(path.dirname(configPath), 'api-key');
    const keyExists = (await readOptional(fs, keyPath)) !== undefined;

    const stringOr = (value: unknown): string | undefined => (typeof value === 'string' ? value : undefined);
    const missing: string[] = [];
    if (command.deviceId === undefined && stringOr(existing.deviceId) === undefined)
      missing.push('--device-id');
    if (command.baseUrl === undefined && stringOr(existingServer.baseUrl) === undefined)
      missing.push('--base-url');
    if (command.apiKeyFile === undefined && !keyExists) missing.push('--api-key-file');
    if (missing.length > 0 && !env.stdinIsTty) {
      throw new InitFailure(
        `missing ${missing.join(', ')} (no terminal to ask on); e.g. config-agent init --device-id dvc_123 ` +
          '--base-url https://configs.example.com --api-key-file /path/to/key',
        ExitCode.Usage,
      );
    }
    if (env.stdinIsTty && (missing.length > 0 || command.apiKeyFile === '-'))
      prompter = new Prompter(env.stdin, io.stderr);

    const deviceId =
      command.deviceId ??
      stringOr(existing.deviceId) ??
      (await prompter?.ask('Device id (like dvc_123)')) ??
      '';
    const baseUrl =
      command.baseUrl ??
      stringOr(existingServer.baseUrl) ??
      (await prompter?.ask('Service base URL', 'https://configs.example.com')) ??
      '';
    const rootDir = command.rootDir ?? stringOr(existing.rootDir) ?? DEFAULT_ROOT_DIR;

    let apiKey: string | undefined;
    if (command.apiKeyFile === '-') {
      apiKey = env.stdinIsTty
        ? keyFromText((await prompter?.askHidden('API key')) ?? '', 'the terminal')
        : keyFromText(await readAll(env.stdin), 'standard input');
    } else if (command.apiKeyFile !== undefined) {
      const text = await readKeySource(fs, command.apiKeyFile);
      if (text === undefined) throw new InitFailure(`${command.apiKeyFile} does not exist`, ExitCode.Usage);
      apiKey = keyFromText(text, command.apiKeyFile);
    } else if (!keyExists) {
      apiKey = keyFromText((await prompter?.askHidden('API key')) ?? '', 'the terminal');
    }
    prompter?.close();
    prompter = undefined;

    const raw = {
      ...existing,
      deviceId,
      server: { ...existingServer, baseUrl, apiKeyFile: keyPath },
      rootDir,
      stateDir: stringOr(existing.stateDir) ?? DEFAULT_STATE_DIR,
    };
    // Validated before anything is written: a typo never leaves a half-configured device.
    const config = parseAgentConfig(raw, configPath);
    const rootDirValue = systemdPathValue(config.rootDir);
    if (rootDirValue === undefined) {
      throw new InitFailure(
        `rootDir ${JSON.stringify(config.rootDir)} holds a double quote or a backslash, which a ReadWritePaths= line of ` +
          'the unit cannot carry: choose another rootDir',
        ExitCode.Config,
      );
    }
    // Calls on rootDir and stateDir (and the textfile's way) that do not answer stop init naming the directory and
    // the mount.
    const late: LateCall[] = [];
    const resolving = realpathNotingLate(places.fs, late);
    // The drop-in would name a directory the unit replaces (ProtectHome=, PrivateTmp=): init said `ok`, then the
    // service exited 78 (EACCES) or failed 226/NAMESPACE every 30 s.
    const hidden =
      env.unitHides === undefined
        ? undefined
        : await rootDirHiddenFromUnit(resolving('rootDir'), config.rootDir, env.unitHides);
    throwIfLate(late, false);
    if (hidden !== undefined) throw new InitFailure(hidden, ExitCode.Config);
    const textfile = config.metrics.textfile;
    const textfileHidden =
      env.unitHides === undefined || textfile === undefined
        ? undefined
        : await textfileHiddenFromUnit(resolving('metrics.textfile'), textfile, env.unitHides);
    throwIfLate(late, false);
    if (textfileHidden !== undefined) throw new InitFailure(textfileHidden, ExitCode.Config);

    const { uid, gid } = await agentAccount({ ...env, fs });
    // What start-up refuses of where things are (exit 78, no restart), refused before anything is written. Bounded
    // as start-up's checks: a hook program on a dead mount held init for good; such a one is taken, as start-up does.
    const unjudged = await assertConfigPlaces(
      places.fs,
      config,
      configPath,
      io.env,
      uid,
      places.ownPathsPort,
    );
    for (const unanswered of unjudged) io.stdout.write(`warning: ${notJudgedText(unanswered)}\n`);
    // rootDir and stateDir answer (or are not there yet) before anything is written: a dead mount writes nothing.
    await probeAnswering(places.fs, 'rootDir', config.rootDir);
    await probeAnswering(places.fs, 'stateDir', config.stateDir);

    // An init killed mid-write left its temp file there: removed now, before this run writes its own.
    const written = new Set([path.dirname(configPath), path.dirname(keyPath), env.dropInDir]);
    for (const dir of written) {
      if (dir === config.rootDir || dir === config.stateDir) continue;
      for (const stale of await removeStaleTempFiles(fs, dir, env.uid)) {
        io.stdout.write(`removed ${stale} (the temp file of an interrupted write)\n`);
      }
    }

    const confDir = path.dirname(configPath);
    await stepOn(confDir, 'nothing written', () =>
      ensureDir(fs, confDir, { mode: 0o750, owner: { uid: 0, gid } }),
    );
    if (apiKey !== undefined) {
      const key = apiKey;
      await stepOn(keyPath, 'nothing written (an interrupted write is removed by the next init)', () =>
        publish(fs, keyPath, `${key}\n`, 0o600, 0),
      );
      io.stdout.write(`wrote ${keyPath} (0600 root:root)\n`);
    } else {
      apiKey = keyFromText((await readOptional(fs, keyPath)) ?? '', keyPath);
      io.stdout.write(`kept ${keyPath}\n`);
    }
    await stepOn(configPath, `${keyPath} is written or kept, ${configPath} is not`, () =>
      publish(fs, configPath, `${JSON.stringify(raw, null, 2)}\n`, 0o640, gid),
    );
    io.stdout.write(`wrote ${configPath} (0640 root:${AGENT_ACCOUNT})\n`);

    const createdRoot = await ensureDir(places.fs, config.rootDir, {
      mode: config.files.dirMode,
      owner: { uid, gid },
    }).catch((error: unknown) => {
      if (notAnswered(error)) throw lateFailure({ key: 'rootDir', dir: config.rootDir, error }, true);
      throw error;
    });
    if (createdRoot === 'settled')
      io.stdout.write(
        `settled ${config.rootDir} (${config.files.dirMode.toString(8).padStart(4, '0')} ${AGENT_ACCOUNT}): found empty and root's as mkdir makes it\n`,
      );
    if (createdRoot === 'made')
      io.stdout.write(
        `created ${config.rootDir} (${config.files.dirMode.toString(8).padStart(4, '0')} ${AGENT_ACCOUNT})\n`,
      );
    let needsReload = false;
    const dropIn = path.join(env.dropInDir, ROOT_DIR_DROP_IN);
    const dropInUnwritten = `the configuration, the key and ${config.rootDir} are, ${dropIn} is not as it should be`;
    // The drop-in is the unit's, which runs one configuration: init writing another (a copy to try, a --once
    // setup) replaced or removed it, and the service lost write access to its own rootDir at the next
    // daemon-reload (EROFS on every write).
    const forTheUnit =
      env.unitConfigPath === undefined || path.resolve(configPath) === path.resolve(env.unitConfigPath);
    if (!forTheUnit) {
      io.stdout.write(
        `left ${dropIn} as it is: the unit runs ${env.unitConfigPath}, not ${configPath} ` +
          `(a unit running this one needs ReadWritePaths=${rootDirValue})\n`,
      );
    } else if (config.rootDir !== DEFAULT_ROOT_DIR) {
      await stepOn(dropIn, dropInUnwritten, async () => {
        await ensureDir(fs, env.dropInDir, { mode: 0o755 });
        await publishFile(fs, {
          rootDir: env.dropInDir,
          relativePath: ROOT_DIR_DROP_IN,
          data: Buffer.from(
            `# Written by config-agent init: the unit may write rootDir (ProtectSystem=strict).\n[Service]\nReadWritePaths=${rootDirValue}\n`,
          ),
          mode: 0o644,
          dirMode: 0o755,
        });
      });
      io.stdout.write(`wrote ${dropIn} (ReadWritePaths=${rootDirValue})\n`);
      needsReload = true;
    } else if (
      await stepOn(dropIn, dropInUnwritten, () =>
        fs.readFile(dropIn, 'utf8').then(
          () => true,
          (error: unknown) => {
            if (errnoCode(error) === 'ENOENT') return false;
            if (mountDidNotAnswer(error)) throw error;
            throw new InitFailure(`cannot read ${dropIn}: ${errorMessage(error)}`, ExitCode.Config);
          },
        ),
      )
    ) {
      // Its removal made durable: a drop-in a power cut brought back names the old rootDir, and systemd fails the
      // unit (226/NAMESPACE) once that directory is gone.
      const removal = { rootDir: env.dropInDir, relativePath: ROOT_DIR_DROP_IN, pruneDirs: [] };
      await stepOn(dropIn, dropInUnwritten, async () => {
        if ((await removeManagedFile(fs, removal)) === 'refused') {
          // Not a regular file (a symlink put there): unlinked as before; the second call fsyncs its directory.
          await fs.unlink(dropIn);
          await removeManagedFile(fs, removal);
        }
      });
      io.stdout.write(`removed ${dropIn} (rootDir is the default again)\n`);
      needsReload = true;
    }

    const transport = createServiceTransport({
      timeoutMs: env.checkTimeoutMs,
      maxResponseBytes: 1024 * 1024,
      baseUrl: config.server.baseUrl,
      // The agent's own way to the service: server.proxy, else HTTPS_PROXY/NO_PROXY of this environment.
      proxy: { ...(config.server.proxy === undefined ? {} : { url: config.server.proxy }), env: io.env },
    });
    let result: ServiceCheckResult;
    try {
      result = await checkService({
        baseUrl: config.server.baseUrl,
        apiVersion: config.server.apiVersion,
        apiKey,
        deviceId: config.deviceId,
        timeoutMs: env.checkTimeoutMs,
        transport,
      });
    } finally {
      await transport.close().catch(() => undefined);
    }
    const reload = needsReload ? 'sudo systemctl daemon-reload && ' : '';
    if (!result.ok) {
      io.stdout.write(`check failed: ${result.message}\n`);
      io.stdout.write(
        'The files are written; fix the setting and run config-agent init again (only the flags that change), ' +
          'or see config-agent doctor.\n',
      );
      return failureExit(result);
    }
    io.stdout.write(`check: ${result.message}\n`);
    io.stdout.write(`next: ${reload}sudo systemctl restart config-agent && config-agent status\n`);
    return ExitCode.Converged;
  } catch (error) {
    prompter?.close();
    if (error instanceof InitFailure) {
      io.stderr.write(`config-agent init: ${error.message}\n`);
      return error.exitCode;
    }
    if (error instanceof ConfigError || error instanceof DiskError) {
      io.stderr.write(`config-agent init: ${error.message}\n`);
      return ExitCode.Config;
    }
    // Ctrl+C or Ctrl+D at a question (readline's AbortError): every question comes before the first write.
    if (error instanceof Error && error.name === 'AbortError') {
      const eof = error.message.includes('Ctrl+D');
      io.stderr.write(
        `config-agent init: ${eof ? 'no answer (Ctrl+D)' : 'interrupted (Ctrl+C)'}: nothing written\n`,
      );
      return eof ? ExitCode.Usage : ExitCode.Interrupted;
    }
    // A call the bounds gave up on that no step above named (belt and braces): still exit 78, the mount named.
    if (mountDidNotAnswer(error)) {
      io.stderr.write(`config-agent init: ${errorMessage(error)}; init stops here\n`);
      return ExitCode.Config;
    }
    const code = errnoCode(error);
    // init runs as root only (checked first), so "run it as root" was never the way out.
    if (code === 'EROFS') {
      io.stderr.write(
        `config-agent init: ${errorMessage(error)} (a read-only file system: remount it writable, or write ` +
          'the configuration elsewhere with --config)\n',
      );
      return ExitCode.Config;
    }
    if (code === 'EACCES' || code === 'EPERM') {
      io.stderr.write(
        `config-agent init: ${errorMessage(error)} (refused to root: an immutable attribute, see lsattr, or a ` +
          'mount that maps root to another user)\n',
      );
      return ExitCode.Config;
    }
    throw error;
  } finally {
    // Askings of mounts still waiting in the kernel are given up: their processes killed, none left behind.
    places?.close();
  }
}
