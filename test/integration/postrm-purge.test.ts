// The packages' postrm on purge, run for real in a mount namespace of its own (tmpfs over /etc and /var/lib): it
// never deletes managed files under a rootDir inside /etc/config-agent or /var/lib/config-agent, however
// config.json writes rootDir.
import { spawnSync } from 'node:child_process';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { skipWithoutRoot } from '../helpers/built-packages.js';
import { REPO_ROOT } from '../helpers/harness.js';

const POSTRM = path.join(REPO_ROOT, 'packaging', 'debian', 'postrm');

const probe = spawnSync('unshare', ['-m', 'sh', '-c', 'mount -t tmpfs probe /etc'], { encoding: 'utf8' });
const skip =
  probe.error !== undefined || probe.status !== 0
    ? skipWithoutRoot(
        `needs root and unshare -m to mount over /etc in a namespace of its own (${probe.error?.message ?? probe.stderr.trim()})`,
      )
    : undefined;
if (skip !== undefined) process.stderr.write(`postrm-purge.test: skipping: ${skip}\n`);

interface Purge {
  /** `test -e` of each path after the purge. */
  present: Record<string, boolean>;
  stderr: string;
  status: number | null;
}

/**
 * Makes /etc/config-agent (config.json holding `config`) and /var/lib/config-agent with state, runs `setup` (sh),
 * then `postrm purge`, and reports which of `check` are still there.
 */
function purge(config: string, setup: string, check: readonly string[]): Purge {
  const script = [
    'set -e',
    'mount -t tmpfs etc /etc',
    'mount -t tmpfs lib /var/lib',
    'mkdir -p /etc/config-agent /var/lib/config-agent',
    'printf "%s" "$1" > /etc/config-agent/config.json',
    'echo key > /etc/config-agent/api-key',
    'echo "{}" > /var/lib/config-agent/state.json',
    setup,
    `sh "$2" purge`,
    'shift 2',
    'for path in "$@"; do if test -e "$path"; then echo "present $path"; else echo "absent $path"; fi; done',
  ].join('\n');
  const result = spawnSync('unshare', ['-m', 'sh', '-c', script, 'sh', config, POSTRM, ...check.slice(0)], {
    encoding: 'utf8',
    timeout: 30_000,
  });
  const present: Record<string, boolean> = {};
  for (const line of result.stdout.split('\n')) {
    const [state, file] = line.split(' ');
    if (file !== undefined && (state === 'present' || state === 'absent'))
      present[file] = state === 'present';
  }
  return { present, stderr: result.stderr, status: result.status };
}

describe.skipIf(skip !== undefined)('postrm purge', () => {
  const etcRoot = '/etc/config-agent/files';
  const libRoot = '/var/lib/config-agent/files';
  const plant = `mkdir -p ${etcRoot} ${libRoot} && echo managed > ${etcRoot}/app.json && echo managed > ${libRoot}/app.json`;

  it.each([
    [
      'pretty-printed, as config-agent init writes it',
      `{\n  "deviceId": "d",\n  "rootDir": "${etcRoot}"\n}\n`,
    ],
    ['on one line', `{"deviceId":"d","rootDir":"${etcRoot}","stateDir":"/var/lib/config-agent"}`],
    ['with the value on the next line', `{\n  "deviceId": "d",\n  "rootDir":\n    "${etcRoot}"\n}\n`],
    ['with "/" written "\\/"', `{"deviceId":"d","rootDir":"${etcRoot.replaceAll('/', '\\/')}"}`],
  ])('keeps /etc/config-agent when rootDir is inside it, written %s', (_how, config) => {
    const result = purge(config, plant, [`${etcRoot}/app.json`, '/var/lib/config-agent']);
    expect(result.status, result.stderr).toBe(0);
    expect(result.present).toEqual({ [`${etcRoot}/app.json`]: true, '/var/lib/config-agent': false });
    expect(result.stderr).toContain(`keeping /etc/config-agent: the managed files (rootDir ${etcRoot})`);
  });

  it('keeps /var/lib/config-agent when rootDir is inside it through a symlink', () => {
    const config = '{"deviceId":"d","rootDir":"/var/lib/apps","stateDir":"/var/lib/agent-state"}';
    const result = purge(config, `${plant} && ln -s ${libRoot} /var/lib/apps`, [
      `${libRoot}/app.json`,
      '/etc/config-agent',
    ]);
    expect(result.status, result.stderr).toBe(0);
    expect(result.present).toEqual({ [`${libRoot}/app.json`]: true, '/etc/config-agent': false });
  });

  it('keeps both when config.json holds no rootDir it can read', () => {
    const result = purge('{"deviceId":"d","root\\u0044ir":"/etc/config-agent/files"}', plant, [
      `${etcRoot}/app.json`,
      `${libRoot}/app.json`,
    ]);
    expect(result.status, result.stderr).toBe(0);
    expect(result.present).toEqual({ [`${etcRoot}/app.json`]: true, [`${libRoot}/app.json`]: true });
    expect(result.stderr).toContain('could not be read');
  });

  it('removes both, configuration and state, when rootDir is elsewhere', () => {
    const config = '{"deviceId":"d","rootDir":"/srv/config-agent"}';
    const result = purge(config, 'true', ['/etc/config-agent', '/var/lib/config-agent']);
    expect(result.status, result.stderr).toBe(0);
    expect(result.present).toEqual({ '/etc/config-agent': false, '/var/lib/config-agent': false });
  });
});
