// The socket, the metrics textfile and the key may not take a name the agent keeps in stateDir, nor one another's.
import { describe, expect, it } from 'vitest';
import { CODE_CACHE_DIR } from '../cli/code-cache.js';
import { CLEAN_EXIT_FILE } from '../store/clean-exit.js';
import { CACHE_DIR } from '../store/content-cache.js';
import { ASIDES_FILE } from '../store/directory-asides.js';
import { FINGERPRINTS_FILE } from '../store/fingerprints.js';
import { INTENT_FILE } from '../store/intent-journal.js';
import { LOCK_FILE } from '../store/lock.js';
import { OUTBOX_FILE } from '../store/outbox.js';
import { ROOT_MOUNT_FILE } from '../store/root-mount.js';
import { STATE_FILE } from '../store/state.js';
import { ConfigError } from './errors.js';
import { parseAgentConfig } from './load.js';
import { STATE_DIR_NAMES } from './schema.js';

const STATE = '/var/lib/config-agent';

function config(patch: Record<string, unknown>) {
  return {
    deviceId: 'dvc_123',
    server: { baseUrl: 'https://configs.example.com', ...((patch.server as object | undefined) ?? {}) },
    rootDir: '/srv/config-agent',
    stateDir: STATE,
    ...Object.fromEntries(Object.entries(patch).filter(([key]) => key !== 'server')),
  };
}

function issues(patch: Record<string, unknown>) {
  try {
    parseAgentConfig(config(patch), '/etc/x.json');
  } catch (error) {
    if (error instanceof ConfigError) return error.issues;
    throw error;
  }
  return [];
}

describe('own paths that clash with stateDir or with one another (adv30)', () => {
  it('the names the schema keeps out are every name the store keeps in stateDir', () => {
    expect([...STATE_DIR_NAMES].sort()).toEqual(
      [
        STATE_FILE,
        OUTBOX_FILE,
        INTENT_FILE,
        FINGERPRINTS_FILE,
        ASIDES_FILE,
        ROOT_MOUNT_FILE,
        CLEAN_EXIT_FILE,
        LOCK_FILE,
        CACHE_DIR,
        CODE_CACHE_DIR,
      ].sort(),
    );
  });

  it.each(STATE_DIR_NAMES)('socketPath at stateDir/%s is refused, naming the key and the clash', (name) => {
    expect(issues({ socketPath: `${STATE}/${name}` })).toEqual([
      { path: 'socketPath', message: `must not be ${STATE}/${name}: the agent keeps its ${name} there` },
    ]);
  });

  it('inside the content cache, at an aside of a state file, or stateDir itself: refused', () => {
    expect(issues({ socketPath: `${STATE}/cache/agent.sock` })).toEqual([
      { path: 'socketPath', message: `must not be ${STATE}/cache/...: the agent keeps its cache there` },
    ]);
    expect(issues({ socketPath: `${STATE}/state.json.not-regular-1` })[0]?.message).toContain('state.json');
    expect(issues({ socketPath: `${STATE}/` })).toEqual([
      { path: 'socketPath', message: 'must not be stateDir itself' },
    ]);
  });

  it('the metrics textfile and the key file alike; and no two of them one path', () => {
    expect(issues({ metrics: { textfile: `${STATE}/cache/node.prom` } })).toEqual([
      {
        path: 'metrics.textfile',
        message: `must not be ${STATE}/cache/...: the agent keeps its cache there`,
      },
    ]);
    expect(issues({ server: { apiKeyFile: `${STATE}/agent.lock` } })[0]?.path).toBe('server.apiKeyFile');
    expect(issues({ socketPath: '/run/m.prom', metrics: { textfile: '/run/m.prom' } })).toEqual([
      { path: 'metrics.textfile', message: 'must not be the same path as socketPath' },
    ]);
  });

  it('other names in stateDir stay allowed: a socket beside the state files is a layout in use', () => {
    expect(
      issues({ socketPath: `${STATE}/agent.sock`, metrics: { textfile: `${STATE}/agent.prom` } }),
    ).toEqual([]);
    expect(issues({ socketPath: `${STATE}/state.jsonl` })).toEqual([]);
    expect(issues({ socketPath: '/var/lib/config-agent-other/state.json' })).toEqual([]);
  });
});
