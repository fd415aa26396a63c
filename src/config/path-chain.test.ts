// A config or key file someone else could swap through a directory or symlink on its way: real files, chown/chmod.
import * as nodeFs from 'node:fs/promises';
import { chmod, chown, mkdir, mkdtemp, rm, symlink, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { exitCodeForStartupError } from '../cli/exit-codes.js';
import { ApiKeyError, ConfigError } from './errors.js';
import { loadAgentConfig, loadApiKey, loadConfigFile, parseAgentConfig } from './load.js';
import { whoElseCanSwap } from './path-chain.js';

const KEY = 'sk_test_4f9c2b7e1a8d';
/** A user that is neither root nor the agent (the test runs as root). */
const OTHER = 4242;
const isRoot = process.geteuid?.() === 0;

function configText(apiKeyFile = '/etc/config-agent/api-key'): string {
  return JSON.stringify({
    deviceId: 'dvc_1',
    server: { baseUrl: 'https://configs.example.com', apiKeyFile },
    rootDir: '/srv/config-agent',
    stateDir: '/var/lib/config-agent',
  });
}

async function refusal<T extends Error>(promise: Promise<unknown>, type: new (...args: never[]) => T) {
  const error = await promise.then(
    () => undefined,
    (caught: unknown) => caught,
  );
  expect(error).toBeInstanceOf(type);
  expect(exitCodeForStartupError(error)).toBe(78);
  return (error as T).message;
}

describe.runIf(isRoot)('a config file another user could swap through its directories', () => {
  // mkdtemp under /tmp: a 0700 directory owned by root in a sticky, root-owned one, the ordinary case.
  let dir: string;
  let file: string;
  beforeEach(async () => {
    dir = await mkdtemp(path.join(os.tmpdir(), 'config-agent-chain-'));
    await mkdir(path.join(dir, 'etc'), { mode: 0o755 });
    file = path.join(dir, 'etc', 'config.json');
    await writeFile(file, configText(), { mode: 0o644 });
  });
  afterEach(async () => {
    await rm(dir, { recursive: true, force: true });
  });

  it('loads from a 0700 mktemp directory under the sticky /tmp, and from root-owned 0755 directories', async () => {
    expect((await loadConfigFile(nodeFs, file)).deviceId).toBe('dvc_1');
  });

  it('a directory on the way that others can write (0777, not sticky) is refused, named with the fix', async () => {
    await chmod(path.join(dir, 'etc'), 0o777);
    const message = await refusal(loadConfigFile(nodeFs, file), ConfigError);
    expect(message).toBe(
      `config ${file}: the directory ${dir}/etc is writable by others (mode 0777): any local user could ` +
        `replace ${file}; remove that write permission (chmod o-w ${dir}/etc)`,
    );
  });

  it('a directory higher up that others can write is refused too', async () => {
    await chmod(dir, 0o777);
    expect(await refusal(loadConfigFile(nodeFs, file), ConfigError)).toContain(
      `the directory ${dir} is writable by others`,
    );
  });

  it('a directory owned by another user is refused, whatever its mode', async () => {
    await chown(path.join(dir, 'etc'), OTHER, 0);
    expect(await refusal(loadConfigFile(nodeFs, file), ConfigError)).toContain(
      `the directory ${dir}/etc is owned by uid ${OTHER}, neither root nor the agent's user`,
    );
  });

  it("group write: fine for root's group, refused for another group", async () => {
    await chmod(path.join(dir, 'etc'), 0o775);
    expect((await loadConfigFile(nodeFs, file)).deviceId).toBe('dvc_1');
    await chown(path.join(dir, 'etc'), 0, OTHER);
    expect(await refusal(loadConfigFile(nodeFs, file), ConfigError)).toContain(
      `writable by its group (mode 0775): every member of its group (gid ${OTHER})`,
    );
  });

  it('a sticky shared directory protects a root-owned entry, not another user’s', async () => {
    await chmod(path.join(dir, 'etc'), 0o1777);
    expect((await loadConfigFile(nodeFs, file)).deviceId).toBe('dvc_1');
    // The same file through a symlink the other user owns there: they can replace the symlink.
    const link = path.join(dir, 'etc', 'link.json');
    await symlink(file, link);
    await nodeFs.lchown(link, OTHER, OTHER);
    expect(await refusal(loadConfigFile(nodeFs, link), ConfigError)).toContain(
      `${link} is owned by uid ${OTHER} in the shared directory ${dir}/etc (mode 1777)`,
    );
  });

  it('a symlink is followed: its target’s directories are judged, and so is the directory holding it', async () => {
    const shared = path.join(dir, 'shared');
    await mkdir(shared);
    await chmod(shared, 0o777);
    await writeFile(path.join(shared, 'real.json'), configText(), { mode: 0o644 });
    await symlink('../shared/real.json', path.join(dir, 'etc', 'to-shared.json'));
    expect(
      await refusal(loadConfigFile(nodeFs, path.join(dir, 'etc', 'to-shared.json')), ConfigError),
    ).toContain(`the directory ${shared} is writable by others`);
    // A symlink in the shared directory to the good file: the symlink itself can be swapped.
    await symlink(file, path.join(shared, 'to-good.json'));
    expect(await refusal(loadConfigFile(nodeFs, path.join(shared, 'to-good.json')), ConfigError)).toContain(
      `the directory ${shared} is writable by others`,
    );
    // A symlinked directory in a good chain to a good directory loads.
    await symlink(path.join(dir, 'etc'), path.join(dir, 'etc-link'));
    expect((await loadConfigFile(nodeFs, path.join(dir, 'etc-link', 'config.json'))).deviceId).toBe('dvc_1');
  });

  it('the whole start-up refuses it (exit 78) before it looks for the key', async () => {
    await chmod(path.join(dir, 'etc'), 0o777);
    const message = await refusal(
      loadAgentConfig(nodeFs, { configFlag: file, env: { CONFIG_AGENT_API_KEY: KEY } }),
      ConfigError,
    );
    expect(message).toContain('could replace');
  });

  it("the agent's own user may own the directories (euid given)", async () => {
    await chown(path.join(dir, 'etc'), OTHER, OTHER);
    expect(await whoElseCanSwap(nodeFs, file, OTHER)).toBeUndefined();
    expect(await whoElseCanSwap(nodeFs, file, OTHER + 1)).toContain(`owned by uid ${OTHER}`);
    expect(await whoElseCanSwap(nodeFs, path.join(dir, 'missing', 'x.json'), 0)).toBeUndefined();
  });
});

describe.runIf(isRoot)('server.apiKeyFile another user could change or swap', () => {
  let dir: string;
  beforeEach(async () => {
    dir = await mkdtemp(path.join(os.tmpdir(), 'config-agent-keychain-'));
    await mkdir(path.join(dir, 'keys'), { mode: 0o755 });
    await writeFile(path.join(dir, 'keys', 'api-key'), KEY, { mode: 0o600 });
  });
  afterEach(async () => {
    await rm(dir, { recursive: true, force: true });
  });

  const config = (keyFile: string) => parseAgentConfig(JSON.parse(configText(keyFile)), 'test');

  it('loads from a root-owned 0600 file in root-owned directories', async () => {
    const keyFile = path.join(dir, 'keys', 'api-key');
    expect((await loadApiKey(nodeFs, config(keyFile), {})).apiKey).toBe(KEY);
  });

  it('a 0600 key file owned by another user is refused (they can chmod it or rewrite it)', async () => {
    const keyFile = path.join(dir, 'keys', 'api-key');
    await chown(keyFile, OTHER, OTHER);
    const message = await refusal(loadApiKey(nodeFs, config(keyFile), {}), ApiKeyError);
    expect(message).toBe(
      `the API key file ${keyFile} is owned by uid ${OTHER}, neither root nor the agent's user (uid 0): ` +
        `that user can rewrite it or open it to anyone; make root its owner (chown root ${keyFile})`,
    );
    expect(message).not.toContain(KEY);
  });

  it('a key file in a directory others can write, or owned by another user, is refused', async () => {
    const keyFile = path.join(dir, 'keys', 'api-key');
    await chmod(path.join(dir, 'keys'), 0o777);
    expect(await refusal(loadApiKey(nodeFs, config(keyFile), {}), ApiKeyError)).toContain(
      `the API key file ${keyFile}: the directory ${dir}/keys is writable by others`,
    );
    await chmod(path.join(dir, 'keys'), 0o755);
    await chown(path.join(dir, 'keys'), OTHER, 0);
    expect(await refusal(loadApiKey(nodeFs, config(keyFile), {}), ApiKeyError)).toContain(
      `the directory ${dir}/keys is owned by uid ${OTHER}`,
    );
  });
});
