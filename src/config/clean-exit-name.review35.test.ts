// clean-exit.json is one of the agent's own names in stateDir: a stateDir holding it is not refused, and no own path may take it.
import { Volume } from 'memfs';
import { describe, expect, it } from 'vitest';
import type { FsPort } from '../lib/fs-port.js';
import { CLEAN_EXIT_FILE } from '../store/clean-exit.js';
import { ConfigError } from './errors.js';
import { type ConfigFs, ensureDirectories, parseAgentConfig } from './load.js';
import { STATE_DIR_NAMES } from './schema.js';

const STATE = '/var/lib/config-agent';

function raw(patch: Record<string, unknown> = {}) {
  return {
    deviceId: 'dvc_1',
    server: { baseUrl: 'https://configs.example.com', apiKeyFile: '/etc/config-agent/api-key' },
    rootDir: '/srv/config-agent',
    stateDir: STATE,
    ...patch,
  };
}

function issues(patch: Record<string, unknown>) {
  try {
    parseAgentConfig(raw(patch), '/etc/x.json');
  } catch (error) {
    if (error instanceof ConfigError) return error.issues;
    throw error;
  }
  return [];
}

describe('clean-exit.json in stateDir (review35)', () => {
  it('a 0755 stateDir holding the marker an idle --once left is restricted, not refused', async () => {
    const vol = Volume.fromJSON({ [`${STATE}/state.json`]: '{}', [`${STATE}/${CLEAN_EXIT_FILE}`]: '{}' });
    vol.chmodSync('/', 0o755);
    vol.chmodSync('/var', 0o755);
    vol.chmodSync('/var/lib', 0o755);
    vol.chmodSync(STATE, 0o755);
    for (const name of ['state.json', CLEAN_EXIT_FILE]) vol.chmodSync(`${STATE}/${name}`, 0o600);
    const fs = vol.promises as unknown as ConfigFs;
    await ensureDirectories(fs, parseAgentConfig(raw(), 'test'));
    expect((await (fs as unknown as FsPort).stat(STATE)).mode & 0o7777).toBe(0o700);
    expect(vol.existsSync(`${STATE}/${CLEAN_EXIT_FILE}`)).toBe(true);
  });

  it('the key file, the socket and the metrics textfile may not be stateDir/clean-exit.json (each start unlinks it)', () => {
    expect(STATE_DIR_NAMES).toContain(CLEAN_EXIT_FILE);
    const at = `${STATE}/${CLEAN_EXIT_FILE}`;
    expect(issues({ server: { baseUrl: 'https://configs.example.com', apiKeyFile: at } })[0]?.path).toBe(
      'server.apiKeyFile',
    );
    expect(issues({ socketPath: at })[0]?.path).toBe('socketPath');
    expect(issues({ metrics: { textfile: at } })[0]?.path).toBe('metrics.textfile');
  });
});
