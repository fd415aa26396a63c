// The agent's own paths outside rootDir on real paths: symlinks (dangling too), bind mounts, mountinfo.
import { mkdir, mkdtemp, realpath, rm, symlink, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { tryMount, unmount } from '../../test/helpers/harness.js';
import { exitCodeForStartupError } from '../cli/exit-codes.js';
import { ConfigError } from './errors.js';
import { parseAgentConfig } from './load.js';
import {
  assertOwnPathsOutsideRoot,
  nodeOwnPathsPort,
  type OwnPath,
  ownPaths,
  parseMountinfo,
} from './own-paths.js';
import type { AgentConfig } from './schema.js';

let dir: string;
let root: string;
const mounted: string[] = [];

beforeEach(async () => {
  dir = await realpath(await mkdtemp(path.join(os.tmpdir(), 'config-agent-own-')));
  root = path.join(dir, 'root');
  await mkdir(path.join(root, 'etc'), { recursive: true });
  await mkdir(path.join(dir, 'outside'));
});

afterEach(async () => {
  for (const target of mounted.splice(0).reverse()) unmount(target);
  await rm(dir, { recursive: true, force: true });
});

function config(overrides: Record<string, unknown> = {}): AgentConfig {
  return parseAgentConfig(
    {
      deviceId: 'dvc_1',
      server: { baseUrl: 'https://x.example.com', apiKeyFile: path.join(dir, 'outside', 'api-key') },
      rootDir: root,
      stateDir: path.join(dir, 'outside', 'state'),
      socketPath: path.join(dir, 'outside', 'agent.sock'),
      ...overrides,
    },
    'test',
  );
}

const NO_CODE: OwnPath[] = [];

async function refusal(
  cfg: AgentConfig,
  configPath: string,
  env: NodeJS.ProcessEnv = {},
): Promise<ConfigError> {
  try {
    await assertOwnPathsOutsideRoot(cfg, configPath, ownPaths(cfg, configPath, env, NO_CODE));
  } catch (error) {
    if (error instanceof ConfigError) return error;
    throw error;
  }
  throw new Error('expected a ConfigError, but the paths were accepted');
}

describe('assertOwnPathsOutsideRoot on the real file system', () => {
  it('accepts a layout whose own paths are all outside rootDir', async () => {
    const cfg = config();
    await expect(
      assertOwnPathsOutsideRoot(
        cfg,
        path.join(dir, 'outside', 'c.json'),
        ownPaths(cfg, path.join(dir, 'outside', 'c.json'), {}),
      ),
    ).resolves.toBeUndefined();
  });

  it('refuses a config file reached through a symlink into rootDir (exit 78), naming the real path', async () => {
    await symlink(path.join(root, 'etc'), path.join(dir, 'etc-link'));
    const configPath = path.join(dir, 'etc-link', 'config.json');
    await writeFile(configPath, '{}');
    const error = await refusal(config(), configPath);
    expect(error.issues).toEqual([
      {
        path: 'the config file',
        message: `${configPath} (really ${root}/etc/config.json) is inside rootDir ${root}, where the service decides what is written: move it out of rootDir`,
      },
    ]);
    expect(exitCodeForStartupError(error)).toBe(78);
  });

  it('follows a dangling symlink: the directory it names may be created later by the service', async () => {
    await symlink(path.join(root, 'run'), path.join(dir, 'run'));
    const error = await refusal(
      config({ socketPath: path.join(dir, 'run', 'agent.sock') }),
      path.join(dir, 'c.json'),
    );
    expect(error.issues.map((issue) => issue.path)).toEqual(['socketPath']);
    expect(error.message).toContain(`really ${root}/run/agent.sock`);
  });

  it('refuses every kind of own path: key file, credentials, metrics file, stateDir, an absolute hook program', async () => {
    await symlink(root, path.join(dir, 'alias'));
    const alias = path.join(dir, 'alias');
    const cfg = config({
      server: { baseUrl: 'https://x.example.com', apiKeyFile: `${alias}/key` },
      stateDir: `${alias}/state`,
      metrics: { textfile: `${alias}/m.prom` },
      hooks: [
        { match: '**', run: [`${alias}/bin/reload`] },
        { match: '**', run: ['systemctl', 'reload', 'x'] },
      ],
    });
    const error = await refusal(cfg, path.join(dir, 'c.json'), { CREDENTIALS_DIRECTORY: `${alias}/creds` });
    expect(error.issues.map((issue) => issue.path)).toEqual([
      'stateDir',
      'server.apiKeyFile',
      '$CREDENTIALS_DIRECTORY',
      'metrics.textfile',
      'hooks[0].run[0]',
    ]);
  });

  it('refuses a PATH entry inside rootDir (or a relative one: hooks run in rootDir) when a hook names a bare program', async () => {
    const cfg = config({ hooks: [{ match: '**', run: ['reload-app'] }] });
    const configPath = path.join(dir, 'c.json');
    const check = (PATH: string) =>
      assertOwnPathsOutsideRoot(cfg, configPath, ownPaths(cfg, configPath, { PATH }, NO_CODE));
    await expect(check('/usr/bin:/bin')).resolves.toBeUndefined();
    await expect(check(`/usr/bin:${root}/bin`)).rejects.toMatchObject({
      issues: [{ path: `PATH entry "${root}/bin" (hooks look programs up there)` }],
    });
    await expect(check('/usr/bin::/bin')).rejects.toBeInstanceOf(ConfigError);
    await expect(check('.:/usr/bin')).rejects.toBeInstanceOf(ConfigError);
    // Without a bare program, PATH is not consulted.
    const absolute = config({ hooks: [{ match: '**', run: ['/usr/bin/true'] }] });
    await expect(
      assertOwnPathsOutsideRoot(absolute, configPath, ownPaths(absolute, configPath, { PATH: '.' }, NO_CODE)),
    ).resolves.toBeUndefined();
  });

  it('refuses a hook program given as a relative path: hooks run in rootDir, so it names a file the service writes', async () => {
    const configPath = path.join(dir, 'c.json');
    for (const program of ['scripts/reload.sh', './reload']) {
      const cfg = config({ hooks: [{ match: '**', run: [program] }] });
      // PATH is not consulted for a name with a slash: even a clean PATH does not make it safe.
      await expect(
        assertOwnPathsOutsideRoot(cfg, configPath, ownPaths(cfg, configPath, { PATH: '/usr/bin' }, NO_CODE)),
        program,
      ).rejects.toMatchObject({ issues: [{ path: 'hooks[0].run[0]' }] });
    }
  });

  it('refuses NODE_EXTRA_CA_CERTS inside rootDir: a planted CA would impersonate the service', async () => {
    const cfg = config();
    const configPath = path.join(dir, 'c.json');
    const env = { NODE_EXTRA_CA_CERTS: path.join(root, 'ca.pem') };
    await expect(
      assertOwnPathsOutsideRoot(cfg, configPath, ownPaths(cfg, configPath, env, NO_CODE)),
    ).rejects.toMatchObject({ issues: [{ path: 'NODE_EXTRA_CA_CERTS' }] });
  });

  it("refuses rootDir containing the agent's own code or the node executable", async () => {
    const cfg = config();
    const code: OwnPath[] = [
      { key: "the agent's code", file: path.join(root, 'lib', 'config-agent', 'dist') },
    ];
    await expect(
      assertOwnPathsOutsideRoot(
        cfg,
        path.join(dir, 'c.json'),
        ownPaths(cfg, path.join(dir, 'c.json'), {}, code),
      ),
    ).rejects.toMatchObject({ issues: [{ path: "the agent's code" }] });
    expect(ownPaths(cfg, 'c', {}).map((own) => own.key)).toEqual(
      expect.arrayContaining(['the node executable', "the agent's code"]),
    );
  });

  it('refuses a config file in a bind mount of a directory inside rootDir', async (ctx) => {
    const bound = path.join(dir, 'bound');
    await mkdir(bound);
    const refused = tryMount(['--bind', path.join(root, 'etc'), bound]);
    if (refused !== undefined) return ctx.skip(refused);
    mounted.push(bound);
    const error = await refusal(config(), path.join(bound, 'config.json'));
    expect(error.issues.map((issue) => issue.path)).toEqual(['the config file']);
  });

  it('refuses a socket in a bind mount of rootDir itself', async (ctx) => {
    const bound = path.join(dir, 'bound-root');
    await mkdir(bound);
    const refused = tryMount(['--bind', root, bound]);
    if (refused !== undefined) return ctx.skip(refused);
    mounted.push(bound);
    const error = await refusal(
      config({ socketPath: path.join(bound, 'agent.sock') }),
      path.join(dir, 'c.json'),
    );
    expect(error.issues.map((issue) => issue.path)).toEqual(['socketPath']);
  });
});

describe('bind mounts judged from mountinfo alone (no mount needed)', () => {
  // rootDir /srv/root on /dev/sda1 (8:1) mounted at /; /etc/agent is a bind of /srv/root/etc.
  const MOUNTINFO = [
    '22 1 8:1 / / rw,relatime shared:1 - ext4 /dev/sda1 rw',
    '30 22 8:1 /srv/root/etc /etc/agent rw,relatime shared:1 - ext4 /dev/sda1 rw',
    '31 22 0:40 / /run rw - tmpfs tmpfs rw',
    '32 22 8:1 /srv/with\\040space /mnt/sp rw - ext4 /dev/sda1 rw',
  ].join('\n');
  const port = {
    ...nodeOwnPathsPort,
    realpath: async (file: string) => {
      if (file === '/' || file === '/srv' || file === '/etc' || file === '/run' || file === '/mnt')
        return file;
      throw Object.assign(new Error('ENOENT'), { code: 'ENOENT' });
    },
    readlink: async () => {
      throw Object.assign(new Error('EINVAL'), { code: 'EINVAL' });
    },
    stat: async () => {
      throw Object.assign(new Error('ENOENT'), { code: 'ENOENT' });
    },
    mountinfo: async () => MOUNTINFO,
  };
  const cfg = (rootDir: string) =>
    parseAgentConfig(
      { deviceId: 'd', server: { baseUrl: 'https://x.example.com' }, rootDir, stateDir: '/var/lib/agent' },
      'test',
    );

  it('parses mount points and roots, octal escapes included', () => {
    expect(parseMountinfo(MOUNTINFO)[3]).toEqual({
      device: '8:1',
      root: '/srv/with space',
      mountPoint: '/mnt/sp',
      type: 'ext4',
    });
  });

  it('a file under the bind mount is inside rootDir; a file on another filesystem is not', async () => {
    const check = (rootDir: string, file: string) =>
      assertOwnPathsOutsideRoot(cfg(rootDir), '/x.json', [{ key: 'the config file', file }], port);
    await expect(check('/srv/root', '/etc/agent/config.json')).rejects.toBeInstanceOf(ConfigError);
    await expect(check('/srv/root/etc', '/etc/agent/sub/config.json')).rejects.toBeInstanceOf(ConfigError);
    await expect(check('/srv/root', '/run/agent/config.json')).resolves.toBeUndefined();
    await expect(check('/srv/other', '/etc/agent/config.json')).resolves.toBeUndefined();
    await expect(check('/srv/with space', '/mnt/sp/config.json')).rejects.toBeInstanceOf(ConfigError);
  });
});
