// The loader on memfs: config path precedence, file errors, API key sources and modes, TLS refusal, directories.
import { execFileSync } from 'node:child_process';
import * as nodeFs from 'node:fs/promises';
import { mkdir, mkdtemp, rm, symlink, writeFile } from 'node:fs/promises';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { Volume } from 'memfs';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { memfsPort } from '../../test/helpers/memfs.js';
import { PowerCutFs } from '../../test/helpers/power-cut-fs.js';
import { exitCodeForStartupError } from '../cli/exit-codes.js';
import type { FsPort } from '../lib/fs-port.js';
import { ApiKeyError, ConfigError } from './errors.js';
import {
  assertTlsVerificationEnabled,
  type ConfigFs,
  ensureDirectories,
  loadAgentConfig,
  loadApiKey,
  loadConfigFile,
  parseAgentConfig,
  resolveConfigPath,
} from './load.js';
import type { AgentConfig } from './schema.js';

const KEY = 'sk_test_4f9c2b7e1a8d';
const CONFIG_JSON = JSON.stringify({
  deviceId: 'dvc_1',
  server: { baseUrl: 'https://configs.example.com', apiKeyFile: '/etc/config-agent/api-key' },
  rootDir: '/srv/config-agent',
  stateDir: '/var/lib/config-agent',
});

function memfs(files: Record<string, string> = {}, modes: Record<string, number> = {}) {
  const vol = Volume.fromJSON(files);
  // memfs makes files 0666; a config others can write is refused (loadConfigFile), so files start as 0644.
  for (const file of Object.keys(files)) vol.chmodSync(file, 0o644);
  for (const [file, mode] of Object.entries(modes)) vol.chmodSync(file, mode);
  // memfs makes directories 0777; one others can write is refused (whoElseCanSwap), so they start as 0755.
  for (const file of Object.keys(files)) {
    for (let dir = path.dirname(file); dir !== '/'; dir = path.dirname(dir)) vol.chmodSync(dir, 0o755);
  }
  vol.chmodSync('/', 0o755);
  // memfs's promise API is a structural superset of the slice the agent uses.
  return { fs: vol.promises as unknown as ConfigFs, vol };
}

function config(overrides: Partial<AgentConfig> = {}): AgentConfig {
  return { ...parseAgentConfig(JSON.parse(CONFIG_JSON), 'test'), ...overrides };
}

async function rejected<T extends Error>(
  promise: Promise<unknown>,
  type: new (...args: never[]) => T,
): Promise<T> {
  try {
    await promise;
  } catch (error) {
    if (error instanceof type) return error;
    throw error;
  }
  throw new Error(`expected ${type.name}, but the promise resolved`);
}

/** Every way an error can be turned into text: the key must appear in none of them. */
function allText(error: unknown): string {
  const e = error as Error & { cause?: unknown };
  return [String(e), e.message, e.stack ?? '', JSON.stringify(e), String(e.cause ?? '')].join('\n');
}

describe('resolveConfigPath', () => {
  it('prefers the flag, then CONFIG_AGENT_CONFIG, then the default', () => {
    expect(resolveConfigPath('/a.json', { CONFIG_AGENT_CONFIG: '/b.json' })).toBe('/a.json');
    expect(resolveConfigPath(undefined, { CONFIG_AGENT_CONFIG: '/b.json' })).toBe('/b.json');
    expect(resolveConfigPath(undefined, {})).toBe('/etc/config-agent/config.json');
  });

  it('treats empty values as unset', () => {
    expect(resolveConfigPath('', { CONFIG_AGENT_CONFIG: '' })).toBe('/etc/config-agent/config.json');
  });
});

describe('loadConfigFile', () => {
  it('reads and validates the file', async () => {
    const { fs } = memfs({ '/etc/c.json': CONFIG_JSON });
    const loaded = await loadConfigFile(fs, '/etc/c.json');
    expect(loaded.deviceId).toBe('dvc_1');
    expect(loaded.retry.maxAttempts).toBe(10);
  });

  it('accepts a UTF-8 byte order mark', async () => {
    const { fs } = memfs({ '/etc/c.json': `\uFEFF${CONFIG_JSON}` });
    expect((await loadConfigFile(fs, '/etc/c.json')).deviceId).toBe('dvc_1');
  });

  it('tells a user who may not read it how to run the command (a config 0640 root:config-agent)', async () => {
    const { fs } = memfs({ '/etc/c.json': CONFIG_JSON });
    const denied = {
      ...fs,
      open: async () => {
        throw Object.assign(new Error("EACCES: permission denied, open '/etc/c.json'"), { code: 'EACCES' });
      },
    } as typeof fs;
    const error = await rejected(loadConfigFile(denied, '/etc/c.json'), ConfigError);
    expect(error.message).toBe(
      "config /etc/c.json: cannot read the file: permission denied (EACCES): run the command as root (sudo) or as a member of the file's group (the packages make it group config-agent's: sudo usermod -aG config-agent <user>, then log in again)",
    );
  });

  it('names the file when it is missing, and init, which writes it (ux23: a device never configured)', async () => {
    const { fs } = memfs({ '/etc/other': '' });
    const error = await rejected(loadConfigFile(fs, '/etc/c.json'), ConfigError);
    expect(error.message).toBe(
      'config /etc/c.json: cannot read the file: no such file or directory (ENOENT): sudo config-agent init --device-id <id> --base-url <url> --api-key-file <file> writes it (or give --config <file>)',
    );
    expect(error.code).toBe('invalid_config');
  });

  it('names the file when it is a directory', async () => {
    const { fs } = memfs({ '/etc/c.json/x': '' });
    const error = await rejected(loadConfigFile(fs, '/etc/c.json'), ConfigError);
    expect(error.message).toBe('config /etc/c.json: not a regular file (a directory)');
  });

  it('gives the line and column of a JSON syntax error', async () => {
    const { fs } = memfs({ '/etc/c.json': '{\n  "deviceId": "dvc_1",\n}\n' });
    const error = await rejected(loadConfigFile(fs, '/etc/c.json'), ConfigError);
    expect(error.message).toBe(
      'config /etc/c.json: invalid JSON at line 3, column 1: Expected double-quoted property name',
    );
  });

  it('places a truncated file at its end', async () => {
    const { fs } = memfs({ '/etc/c.json': '{\n  "deviceId": "dvc_1"' });
    const error = await rejected(loadConfigFile(fs, '/etc/c.json'), ConfigError);
    expect(error.message).toMatch(
      /^config \/etc\/c\.json: invalid JSON at line 2, column 22: Expected ',' or '}' after property value$/,
    );
  });

  it('does not quote the file in a syntax error, and places it even where V8 gives no position', async () => {
    const { fs } = memfs({ '/etc/c.json': '{"deviceId": "dvc_1", "token": s3cr3t-value}' });
    const error = await rejected(loadConfigFile(fs, '/etc/c.json'), ConfigError);
    expect(error.message).toBe("config /etc/c.json: invalid JSON at line 1, column 32: Unexpected token 's'");
  });

  it.each([
    ['a trailing comma in an array', '{\n  "hooks": [\n    {"match": "a", "run": ["x"]},\n  ]\n}\n', 4, 3],
    ['a bare word', '{\n  "deviceId": dvc_1\n}', 2, 15],
    ['a single-quoted key', "{\n  'deviceId': 1\n}", 2, 3],
    ['an empty file', '', 1, 1],
    ['a truncated literal', '{"a": tru', 1, 10],
  ])('gives the line and column of %s', async (_name, text, line, column) => {
    const { fs } = memfs({ '/etc/c.json': text });
    const error = await rejected(loadConfigFile(fs, '/etc/c.json'), ConfigError);
    expect(error.message).toMatch(
      new RegExp(`^config /etc/c\\.json: invalid JSON at line ${line}, column ${column}: \\S`),
    );
  });

  it.each([
    ['a top-level key', '{"deviceId": "dvc_1", "rootDir": "/srv/a", "deviceId": "dvc_2"}', 'deviceId'],
    [
      'a nested key',
      '{"server": {"baseUrl": "https://a.example", "baseUrl": "https://b.example"}}',
      'server.baseUrl',
    ],
    [
      'a key inside an array item',
      '{"hooks": [{"match": "a", "run": ["x"]}, {"match": "b", "\\u006datch": "c"}]}',
      'hooks[1].match',
    ],
  ])(
    'refuses %s given twice, naming it: JSON.parse would silently keep the last',
    async (_name, text, field) => {
      const { fs } = memfs({ '/etc/c.json': text });
      const error = await rejected(loadConfigFile(fs, '/etc/c.json'), ConfigError);
      expect(error.message).toBe(
        `config /etc/c.json: ${field}: appears twice in one object: remove one (JSON keeps the last)`,
      );
    },
  );

  it('accepts the same key in different objects, and strings that look like keys', async () => {
    const text = JSON.stringify({
      ...JSON.parse(CONFIG_JSON),
      hooks: [
        { match: 'a', run: ['x', '"match":'] },
        { match: 'b', run: ['y'] },
      ],
      files: { rules: [{ match: 'a', mode: '0600' }] },
    });
    const { fs } = memfs({ '/etc/c.json': text });
    expect((await loadConfigFile(fs, '/etc/c.json')).hooks).toHaveLength(2);
  });

  it('shows an unknown key holding control or format characters quoted and escaped, never raw', async () => {
    const text = JSON.stringify({ deviceId: 'dvc_1', '\u001b[2Jred\nforged: line\u202e': 1 });
    const { fs } = memfs({ '/etc/c.json': text });
    const error = await rejected(loadConfigFile(fs, '/etc/c.json'), ConfigError);
    expect(error.message).toContain('"\\u001b[2Jred\\nforged: line\\u202e": unknown key');
    for (const raw of ['\u001b', '\n', '\u202e']) expect(error.message.includes(raw)).toBe(false);
  });

  it('rejects a valid JSON value that is not an object', async () => {
    const { fs } = memfs({ '/etc/c.json': '"hello"' });
    const error = await rejected(loadConfigFile(fs, '/etc/c.json'), ConfigError);
    expect(error.message).toBe('config /etc/c.json: expected an object, got string');
  });
});

describe('loadApiKey', () => {
  const CRED = '/run/credentials/config-agent.service';
  const allSources = () =>
    memfs(
      { [`${CRED}/api-key`]: 'from-credentials\n', '/etc/config-agent/api-key': 'from-file\n' },
      { [`${CRED}/api-key`]: 0o644, '/etc/config-agent/api-key': 0o600 },
    );

  it('takes CONFIG_AGENT_API_KEY first', async () => {
    const { fs } = allSources();
    const env = { CONFIG_AGENT_API_KEY: ` ${KEY}\n`, CREDENTIALS_DIRECTORY: CRED };
    expect(await loadApiKey(fs, config(), env)).toEqual({ apiKey: KEY, source: 'env' });
  });

  it('then $CREDENTIALS_DIRECTORY/api-key, whose mode systemd owns', async () => {
    const { fs } = allSources();
    const env = { CONFIG_AGENT_API_KEY: '  \n', CREDENTIALS_DIRECTORY: CRED };
    expect(await loadApiKey(fs, config(), env)).toEqual({
      apiKey: 'from-credentials',
      source: 'credentials',
    });
  });

  it("tells a user who may not read the key file (0600 root:root) what to run instead (ux23: --once as the agent's user)", async () => {
    const { fs } = memfs(
      { '/etc/config-agent/api-key': 'from-file\n' },
      { '/etc/config-agent/api-key': 0o600 },
    );
    const denied = {
      ...fs,
      open: async () => {
        throw Object.assign(new Error('EACCES: permission denied'), { code: 'EACCES' });
      },
    } as typeof fs;
    const error = await rejected(loadApiKey(denied, config(), {}), ApiKeyError);
    expect(error.message).toBe(
      "cannot open the API key file /etc/config-agent/api-key: permission denied (EACCES): the key is root's alone: run the command as root (sudo), or ask the running agent with 'config-agent sync'",
    );
  });

  it('then server.apiKeyFile', async () => {
    const { fs } = allSources();
    expect(await loadApiKey(fs, config(), {})).toEqual({ apiKey: 'from-file', source: 'file' });
  });

  it('falls through a credentials directory without an api-key credential', async () => {
    const { fs } = memfs(
      { [`${CRED}/other`]: 'x', '/etc/config-agent/api-key': 'from-file' },
      { '/etc/config-agent/api-key': 0o600 },
    );
    expect(await loadApiKey(fs, config(), { CREDENTIALS_DIRECTORY: CRED })).toEqual({
      apiKey: 'from-file',
      source: 'file',
    });
  });

  it('reads the file named by server.apiKeyFile', async () => {
    const { fs } = memfs({ '/opt/k': `${KEY}\r\n` }, { '/opt/k': 0o400 });
    const cfg = config({ server: { ...config().server, apiKeyFile: '/opt/k' } });
    expect(await loadApiKey(fs, cfg, {})).toEqual({ apiKey: KEY, source: 'file' });
  });

  it.each([0o644, 0o640, 0o604, 0o660, 0o610, 0o601])('refuses a key file with mode %o', async (mode) => {
    const { fs } = memfs({ '/etc/config-agent/api-key': KEY }, { '/etc/config-agent/api-key': mode });
    const error = await rejected(loadApiKey(fs, config(), {}), ApiKeyError);
    expect(error.message).toBe(
      `the API key file /etc/config-agent/api-key is accessible by group or others (mode 0${mode.toString(8)}); ` +
        'restrict it with: chmod 600 /etc/config-agent/api-key',
    );
    expect(error.code).toBe('api_key_unavailable');
    expect(error.retryable).toBe(false);
    expect(allText(error)).not.toContain(KEY);
  });

  it('explains where it looked when there is no key at all', async () => {
    const { fs } = memfs({ '/etc/x': '' });
    const error = await rejected(loadApiKey(fs, config(), { CREDENTIALS_DIRECTORY: CRED }), ApiKeyError);
    expect(error.message).toBe(
      `no API key found: CONFIG_AGENT_API_KEY is not set, ${CRED}/api-key does not exist, ` +
        'server.apiKeyFile /etc/config-agent/api-key does not exist',
    );
  });

  it.each([
    ['an empty key file', '', 'the API key file /etc/config-agent/api-key is empty'],
    ['a whitespace-only key file', ' \n\n', 'the API key file /etc/config-agent/api-key is empty'],
    [
      'a key of 3 characters',
      ' abc\n',
      'the API key file /etc/config-agent/api-key holds 3 character(s): an API key has at least 4 (a shorter one could not be kept out of the logs)',
    ],
    [
      'a key of 1 character',
      'K',
      'the API key file /etc/config-agent/api-key holds 1 character(s): an API key has at least 4 (a shorter one could not be kept out of the logs)',
    ],
    [
      'a key file of two lines',
      `${KEY}\nsecond-line-${KEY}`,
      'the API key file /etc/config-agent/api-key must hold only the key: printable ASCII, one line, no spaces (found other characters)',
    ],
  ])('refuses %s, without echoing it', async (_name, content, message) => {
    const { fs } = memfs({ '/etc/config-agent/api-key': content }, { '/etc/config-agent/api-key': 0o600 });
    const error = await rejected(loadApiKey(fs, config(), {}), ApiKeyError);
    expect(error.message).toBe(message);
    expect(allText(error)).not.toContain(KEY);
  });

  it('refuses an empty credential instead of falling through to the file', async () => {
    const { fs } = allSources();
    await fs.open(`${CRED}/api-key`, 'w').then((h) => h.close());
    const error = await rejected(loadApiKey(fs, config(), { CREDENTIALS_DIRECTORY: CRED }), ApiKeyError);
    expect(error.message).toBe(`the credential ${CRED}/api-key is empty`);
  });

  it('takes a key of 4 characters, the shortest the logs scrub', async () => {
    const { fs } = memfs({});
    expect(await loadApiKey(fs, config(), { CONFIG_AGENT_API_KEY: 'k3y!' })).toEqual({
      apiKey: 'k3y!',
      source: 'env',
    });
  });

  it('refuses a key with spaces from the environment, without echoing it', async () => {
    const { fs } = memfs({});
    const error = await rejected(
      loadApiKey(fs, config(), { CONFIG_AGENT_API_KEY: `${KEY} ${KEY}` }),
      ApiKeyError,
    );
    expect(error.message).toMatch(/^the environment variable CONFIG_AGENT_API_KEY must hold only the key/);
    expect(allText(error)).not.toContain(KEY);
  });

  it('refuses a key file that is a directory', async () => {
    const { fs } = memfs({ '/etc/config-agent/api-key/x': '' });
    const error = await rejected(loadApiKey(fs, config(), {}), ApiKeyError);
    expect(error.message).toBe(
      'the API key file /etc/config-agent/api-key is not a regular file (a directory)',
    );
  });
});

describe('assertTlsVerificationEnabled', () => {
  it('refuses NODE_TLS_REJECT_UNAUTHORIZED=0', () => {
    let caught: unknown;
    try {
      assertTlsVerificationEnabled({ NODE_TLS_REJECT_UNAUTHORIZED: '0' });
    } catch (error) {
      caught = error;
    }
    expect(caught).toBeInstanceOf(ConfigError);
    expect((caught as ConfigError).code).toBe('invalid_config');
    expect((caught as ConfigError).message).toMatch(
      /^config environment: NODE_TLS_REJECT_UNAUTHORIZED: is "0", which turns off TLS certificate verification/,
    );
  });

  it.each([{}, { NODE_TLS_REJECT_UNAUTHORIZED: '1' }, { NODE_TLS_REJECT_UNAUTHORIZED: '' }])(
    'accepts %j',
    (env) => {
      expect(assertTlsVerificationEnabled(env)).toBeUndefined();
    },
  );
});

describe('loadAgentConfig', () => {
  it('loads the file named by CONFIG_AGENT_CONFIG and the key', async () => {
    const { fs } = memfs(
      { '/opt/agent.json': CONFIG_JSON, '/etc/config-agent/api-key': KEY },
      { '/etc/config-agent/api-key': 0o600 },
    );
    const loaded = await loadAgentConfig(fs, { env: { CONFIG_AGENT_CONFIG: '/opt/agent.json' } });
    expect(loaded).toEqual({
      config: config(),
      apiKey: KEY,
      configPath: '/opt/agent.json',
      apiKeySource: 'file',
    });
  });

  it('prefers the --config flag over the environment', async () => {
    const { fs } = memfs({ '/a.json': CONFIG_JSON });
    const loaded = await loadAgentConfig(fs, {
      configFlag: '/a.json',
      env: { CONFIG_AGENT_CONFIG: '/missing.json', CONFIG_AGENT_API_KEY: KEY },
    });
    expect([loaded.configPath, loaded.apiKeySource]).toEqual(['/a.json', 'env']);
  });

  it('refuses disabled TLS verification before anything else', async () => {
    const { fs } = memfs({});
    const error = await rejected(
      loadAgentConfig(fs, {
        env: { NODE_TLS_REJECT_UNAUTHORIZED: '0', CONFIG_AGENT_CONFIG: '/missing.json' },
      }),
      ConfigError,
    );
    expect(error.source).toBe('environment');
  });

  it('reports a bad config before looking for the key', async () => {
    const { fs } = memfs({ '/etc/config-agent/config.json': '{"deviceId": "d"}' });
    const error = await rejected(loadAgentConfig(fs, { env: {} }), ConfigError);
    expect(error.message).toBe(
      'config /etc/config-agent/config.json: server: required; rootDir: required; stateDir: required',
    );
  });
});

describe('ensureDirectories', () => {
  const modeOf = async (fs: FsPort, path: string) => (await fs.stat(path)).mode & 0o7777;

  it('creates stateDir 0700 and rootDir with files.dirMode, parents included', async () => {
    const { fs } = memfs({ '/etc/x': '' });
    const cfg = config({ files: { mode: 0o640, dirMode: 0o750, rules: [] } });
    await ensureDirectories(fs, cfg);
    expect(await modeOf(fs, '/var/lib/config-agent')).toBe(0o700);
    expect(await modeOf(fs, '/srv/config-agent')).toBe(0o750);
    expect((await fs.stat('/var/lib')).isDirectory()).toBe(true);
  });

  it('fsyncs the parent of every directory it creates, so a power cut cannot take a new stateDir away', async () => {
    const { fs: base } = memfs({ '/etc/x': '' });
    const synced: string[] = [];
    const fs: FsPort = {
      ...base,
      open: (async (file: string, flags: number) => {
        const handle = await base.open(file, flags);
        return Object.assign(Object.create(handle), {
          sync: async () => {
            synced.push(String(file));
          },
          close: () => handle.close(),
        });
      }) as FsPort['open'],
    };
    await ensureDirectories(fs, config());
    expect(synced).toEqual(['/', '/var', '/var/lib', '/', '/srv']);
  });

  it('a directory made whose entry could not be made durable (its parent fsync fails) is made again by the next start', async () => {
    const { vol } = memfs({ '/etc/x': '' });
    const model = await PowerCutFs.over(memfsPort(vol), '/');
    let failSyncOf: string | undefined = '/srv';
    const fs: FsPort = {
      ...model.fs,
      open: (async (file: string, flags: number) => {
        const handle = await model.fs.open(file, flags);
        if (String(file) !== failSyncOf) return handle;
        failSyncOf = undefined;
        return Object.assign(Object.create(handle), {
          sync: async () => {
            throw Object.assign(new Error('EIO: simulated, fsync'), { code: 'EIO' });
          },
          close: () => handle.close(),
        });
      }) as FsPort['open'],
    };
    await rejected(ensureDirectories(fs, config()), ConfigError);
    // The start-up retried (or the next start): before, it found rootDir there and never fsynced its entry.
    await ensureDirectories(fs, config());
    expect(model.afterPowerCut()['srv/config-agent']).toBe('dir');
    expect(model.afterPowerCut()['var/lib/config-agent']).toBe('dir');
  });

  it('tightens an existing stateDir open to group or others, and leaves an existing rootDir alone', async () => {
    const { fs, vol } = memfs({ '/var/lib/config-agent/state.json': '{}', '/srv/config-agent/a.conf': 'x' });
    vol.chmodSync('/var/lib/config-agent', 0o755);
    vol.chmodSync('/srv/config-agent', 0o775);
    await ensureDirectories(fs, config());
    expect(await modeOf(fs, '/var/lib/config-agent')).toBe(0o700);
    expect(await modeOf(fs, '/srv/config-agent')).toBe(0o775);
    expect(await fs.readFile('/var/lib/config-agent/state.json', 'utf8')).toBe('{}');
    expect(await fs.readFile('/srv/config-agent/a.conf', 'utf8')).toBe('x');
  });

  it('refuses, without restricting it, a stateDir that is shared (sticky or writable by others) or holds entries the agent did not make', async () => {
    for (const mode of [0o1777, 0o777, 0o1775]) {
      const { fs, vol } = memfs({ '/var/lib/config-agent/x': '' });
      vol.chmodSync('/var/lib/config-agent', mode);
      const error = await rejected(ensureDirectories(fs, config()), ConfigError);
      expect(error.message).toContain('is a shared directory');
      expect(await modeOf(fs, '/var/lib/config-agent')).toBe(mode);
    }
    const { fs, vol } = memfs({
      '/var/lib/config-agent/passwd': 'root:x:0:0',
      '/var/lib/config-agent/state.json': '{}',
    });
    vol.chmodSync('/var/lib/config-agent', 0o755);
    const error = await rejected(ensureDirectories(fs, config()), ConfigError);
    expect(error.message).toBe(
      'config directories: stateDir: /var/lib/config-agent is open to others (mode 0755) and holds entries the agent did not make ("passwd"): not restricting it to 0700; give stateDir a directory of its own',
    );
    expect(await modeOf(fs, '/var/lib/config-agent')).toBe(0o755);
  });

  it("refuses, without restricting it, a stateDir open to others where another user owns an agent's file", async () => {
    // A group member who could write the 0770 stateDir planted a fingerprints.json (items taken as judged) and
    // a state.json (files taken as the agent's to remove): restricted to 0700, the agent trusted them.
    const { fs, vol } = memfs({
      '/var/lib/config-agent/state.json': '{}',
      '/var/lib/config-agent/fingerprints.json': '{}',
      '/var/lib/config-agent/outbox.json': '{}',
    });
    const stranger = (process.geteuid?.() ?? 0) + 4242;
    vol.chownSync('/var/lib/config-agent/fingerprints.json', stranger, stranger);
    vol.chownSync('/var/lib/config-agent/state.json', stranger, stranger);
    vol.chmodSync('/var/lib/config-agent', 0o770);
    const error = await rejected(ensureDirectories(fs, config()), ConfigError);
    expect(error.message).toContain(
      `holds entries owned by neither root nor the agent's user (uid ${process.geteuid?.()}): "fingerprints.json" of uid ${stranger}, "state.json" of uid ${stranger}; another user may have put them there`,
    );
    expect(await modeOf(fs, '/var/lib/config-agent')).toBe(0o770);
    // Owned by root: kept and restricted.
    vol.chownSync('/var/lib/config-agent/fingerprints.json', 0, 0);
    vol.chownSync('/var/lib/config-agent/state.json', 0, 0);
    await ensureDirectories(fs, config());
    expect(await modeOf(fs, '/var/lib/config-agent')).toBe(0o700);
  });

  it('still restricts a stateDir holding only what the agent makes there', async () => {
    const { fs, vol } = memfs({
      '/var/lib/config-agent/state.json': '{}',
      '/var/lib/config-agent/state.json.corrupt': 'x',
      '/var/lib/config-agent/outbox.json.not-regular-1732412345678/x': '',
      '/var/lib/config-agent/intent.json': '{}',
      '/var/lib/config-agent/fingerprints.json': '{}',
      '/var/lib/config-agent/agent.lock': '{}',
      // Made by a directory renewal (store/directory-asides.ts) and the root mount watch (store/root-mount.ts).
      '/var/lib/config-agent/renewal-asides.json': '{}',
      '/var/lib/config-agent/renewal-asides.json.not-regular-1732412345678': '{}',
      '/var/lib/config-agent/root-mount.json': '{}',
      '/var/lib/config-agent/cache/abc': 'x',
      '/var/lib/config-agent/cache.not-a-directory-1732412345678': 'x',
      // A second set aside at the same ms (a clock at 1970 each boot): `-<n>` added (store/state.ts).
      '/var/lib/config-agent/cache.not-a-directory-1732412345678-1': 'x',
      '/var/lib/config-agent/outbox.json.not-regular-1732412345678-2/x': '',
      '/var/lib/config-agent/code-cache/x': 'x',
      '/var/lib/config-agent/.config-agent.tmp-0123abcd': 'x',
      '/var/lib/config-agent/lost+found/x': '',
    });
    vol.chmodSync('/var/lib/config-agent', 0o755);
    await ensureDirectories(fs, config());
    expect(await modeOf(fs, '/var/lib/config-agent')).toBe(0o700);
  });

  it('is idempotent', async () => {
    const { fs } = memfs({ '/etc/x': '' });
    await ensureDirectories(fs, config());
    await ensureDirectories(fs, config());
    expect(await modeOf(fs, '/var/lib/config-agent')).toBe(0o700);
    expect(await modeOf(fs, '/srv/config-agent')).toBe(0o755);
  });

  it('names the key when its path is a file', async () => {
    const { fs } = memfs({ '/var/lib/config-agent': 'not a dir' });
    const error = await rejected(ensureDirectories(fs, config()), ConfigError);
    expect(error.message).toBe(
      'config directories: stateDir: /var/lib/config-agent exists and is not a directory',
    );
  });

  it('names the key when a parent is a file', async () => {
    const { fs } = memfs({ '/srv': 'not a dir' });
    const error = await rejected(ensureDirectories(fs, config()), ConfigError);
    expect(error.message).toBe(
      'config directories: rootDir: cannot create /srv/config-agent: /srv is not a directory',
    );
  });
});

describe('inputs that are not regular files, on the real file system', () => {
  // A FIFO blocks open() and read() until a writer comes: these would hang without O_NONBLOCK and fstat.
  let dir: string;
  /** A unix socket at `sock`, listening while the test runs (closing it unlinks it): open(2) answers ENXIO. */
  let server: net.Server;
  beforeEach(async () => {
    dir = await mkdtemp(path.join(os.tmpdir(), 'config-agent-special-'));
    execFileSync('mkfifo', [path.join(dir, 'fifo')]);
    await mkdir(path.join(dir, 'dir'));
    await writeFile(path.join(dir, 'config.json'), CONFIG_JSON);
    server = net.createServer();
    await new Promise<void>((done, fail) => server.once('error', fail).listen(path.join(dir, 'sock'), done));
  });
  afterEach(async () => {
    await new Promise((done) => server.close(done));
    await rm(dir, { recursive: true, force: true });
  });

  it.each([
    ['fifo', 'a FIFO'],
    ['dir', 'a directory'],
    ['/dev/null', 'a character device'],
    // open(2) refuses a socket before any fstat (ENXIO): it said only "cannot read the file: ENXIO" (adv36).
    ['sock', 'a socket'],
  ])('--config %s: ConfigError "not a regular file (%s)", without blocking', async (name, what) => {
    const file = name.startsWith('/') ? name : path.join(dir, name);
    const error = await rejected(loadAgentConfig(nodeFs, { configFlag: file, env: {} }), ConfigError);
    expect(error.message).toBe(`config ${file}: not a regular file (${what})`);
    expect(exitCodeForStartupError(error)).toBe(78);
  });

  it.each([
    ['fifo', 'a FIFO'],
    ['dir', 'a directory'],
    ['/dev/null', 'a character device'],
    ['sock', 'a socket'],
  ])('server.apiKeyFile %s: ApiKeyError "not a regular file (%s)", without blocking', async (name, what) => {
    const file = name.startsWith('/') ? name : path.join(dir, name);
    const cfg = config({ server: { ...config().server, apiKeyFile: file } });
    const error = await rejected(loadApiKey(nodeFs, cfg, {}), ApiKeyError);
    expect(error.message).toBe(`the API key file ${file} is not a regular file (${what})`);
    expect(exitCodeForStartupError(error)).toBe(78);
  });

  it.each([
    ['fifo', 'a FIFO'],
    ['dir', 'a directory'],
  ])('$CREDENTIALS_DIRECTORY/api-key as %s: refused, without blocking', async (name, what) => {
    const credentials = path.join(dir, 'credentials');
    await mkdir(credentials);
    if (name === 'fifo') execFileSync('mkfifo', [path.join(credentials, 'api-key')]);
    else await mkdir(path.join(credentials, 'api-key'));
    const error = await rejected(
      loadApiKey(nodeFs, config(), { CREDENTIALS_DIRECTORY: credentials }),
      ApiKeyError,
    );
    expect(error.message).toBe(`the API key file ${credentials}/api-key is not a regular file (${what})`);
  });

  it('a config file larger than 1 MiB is refused unread', async () => {
    const file = path.join(dir, 'huge.json');
    await writeFile(file, `{"deviceId": "${'x'.repeat(1024 * 1024)}"}`);
    const error = await rejected(loadConfigFile(nodeFs, file), ConfigError);
    expect(error.message).toBe(`config ${file}: larger than 1048576 bytes: not a config file`);
  });

  // Whoever can change the config decides where the agent sends the API key, where it writes and what its
  // hooks run: a file others (or the socket's group, which applications join) can rewrite is refused.
  it.each([
    [0o666, 'writable by others'],
    [0o602, 'writable by others'],
  ])('a config file of mode %o is refused (exit 78): %s', async (mode, what) => {
    const file = path.join(dir, 'config.json');
    await nodeFs.chmod(file, mode);
    const error = await rejected(
      loadAgentConfig(nodeFs, { configFlag: file, env: { CONFIG_AGENT_API_KEY: KEY } }),
      ConfigError,
    );
    expect(error.message).toContain(what);
    expect(exitCodeForStartupError(error)).toBe(78);
  });

  it.runIf(process.geteuid?.() === 0)(
    'a config file writable by a group other than root, or owned by another user, is refused; root:root 0664 and 0644 load',
    async () => {
      const file = path.join(dir, 'config.json');
      await nodeFs.chmod(file, 0o660);
      await nodeFs.chown(file, 0, 1);
      expect((await rejected(loadConfigFile(nodeFs, file), ConfigError)).message).toContain(
        'writable by its group',
      );
      await nodeFs.chown(file, 0, 0);
      expect((await loadConfigFile(nodeFs, file)).deviceId).toBe('dvc_1');
      await nodeFs.chmod(file, 0o644);
      await nodeFs.chown(file, 1, 0);
      expect((await rejected(loadConfigFile(nodeFs, file), ConfigError)).message).toContain('owned by uid 1');
      await nodeFs.chown(file, 0, 0);
      expect((await loadConfigFile(nodeFs, file)).deviceId).toBe('dvc_1');
    },
  );

  it('a regular config file reached through a symlink still loads', async () => {
    await symlink(path.join(dir, 'config.json'), path.join(dir, 'link.json'));
    expect((await loadConfigFile(nodeFs, path.join(dir, 'link.json'))).deviceId).toBe('dvc_1');
  });
});
