// adv19: config strings that are not well-formed Unicode (a JSON `\ud800` escape) are refused at load, naming the key.
import path from 'node:path';
import { Volume } from 'memfs';
import { describe, expect, it } from 'vitest';
import { exitCodeForStartupError } from '../cli/exit-codes.js';
import { ConfigError } from './errors.js';
import { type ConfigFs, loadConfigFile } from './load.js';

const BASE = {
  deviceId: 'dvc_1',
  server: { baseUrl: 'https://configs.example.com' },
  rootDir: '/srv/config-agent',
  stateDir: '/var/lib/config-agent',
};

/** The config file as an operator's editor or a generator could write it: JSON with `\uXXXX` escapes kept. */
function configText(overrides: Record<string, unknown>): string {
  return JSON.stringify({ ...BASE, ...overrides }).replace(
    /[\ud800-\udfff]/g,
    (unit) => `\\u${unit.charCodeAt(0).toString(16)}`,
  );
}

function memfs(text: string): ConfigFs {
  const vol = Volume.fromJSON({ '/etc/c.json': text });
  vol.chmodSync('/etc/c.json', 0o644);
  vol.chmodSync('/etc', 0o755);
  vol.chmodSync('/', 0o755);
  return vol.promises as unknown as ConfigFs;
}

async function refusal(overrides: Record<string, unknown>): Promise<ConfigError> {
  const text = configText(overrides);
  expect(text).toMatch(/\\ud[89a-f]/);
  const error = await loadConfigFile(memfs(text), '/etc/c.json').then(
    () => undefined,
    (caught: unknown) => caught,
  );
  expect(error).toBeInstanceOf(ConfigError);
  return error as ConfigError;
}

describe('config strings with a lone surrogate', () => {
  it('a deviceId with one is refused (every request failed "URI malformed", retried for ever, exit 3)', async () => {
    const error = await refusal({ deviceId: 'dvc_\ud800x' });
    expect(error.message).toContain('deviceId: must be well-formed Unicode');
    expect(exitCodeForStartupError(error)).toBe(78);
  });

  it('rootDir and stateDir that differ as strings but name one directory on disk are refused', async () => {
    // Node writes a lone surrogate of a path as U+FFFD: both name /tmp/x/\ufffd, so the service wrote into stateDir.
    const error = await refusal({ rootDir: '/tmp/x/\ud800', stateDir: '/tmp/x/\udc00' });
    expect(error.message).toContain('rootDir: must be well-formed Unicode');
    expect(error.message).toContain('stateDir: must be well-formed Unicode');
    expect(exitCodeForStartupError(error)).toBe(78);
  });

  it('nested strings are named by their path: a hook argument, a rule glob, the socket', async () => {
    const error = await refusal({
      hooks: [{ match: 'a/**', run: ['/usr/bin/logger', 'x\udfff'] }],
      files: { rules: [{ match: 'b\ud834', mode: '0600' }] },
      socketPath: path.join('/run', '\udead'),
    });
    expect(error.message).toContain('hooks[0].run[1]: must be well-formed Unicode');
    expect(error.message).toContain('files.rules[0].match: must be well-formed Unicode');
    expect(error.message).toContain('socketPath: must be well-formed Unicode');
  });

  it('a surrogate pair (an emoji) is well-formed and loads', async () => {
    const text = configText({ deviceId: 'dvc_\ud83d\ude00' });
    expect((await loadConfigFile(memfs(text), '/etc/c.json')).deviceId).toBe('dvc_\u{1f600}');
  });
});
