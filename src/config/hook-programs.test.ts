// Hook programs another local user could change, swap or shadow through PATH: real files, chown/chmod.
import * as nodeFs from 'node:fs/promises';
import { chmod, chown, mkdir, mkdtemp, rm, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { exitCodeForStartupError } from '../cli/exit-codes.js';
import { ConfigError } from './errors.js';
import { loadAgentConfig, parseAgentConfig } from './load.js';

const KEY = 'sk_test_4f9c2b7e1a8d';
/** A user that is neither root nor the agent (the test runs as root). */
const OTHER = 4242;

describe.runIf(process.geteuid?.() === 0)('hook programs another user could change', () => {
  let dir: string;
  let configFile: string;
  beforeEach(async () => {
    dir = await mkdtemp(path.join(os.tmpdir(), 'config-agent-hookprog-'));
    for (const sub of ['bin', 'shared', 'early']) await mkdir(path.join(dir, sub), { mode: 0o755 });
    await writeFile(path.join(dir, 'bin', 'reload'), '#!/bin/sh\n', { mode: 0o755 });
    configFile = path.join(dir, 'config.json');
  });
  afterEach(async () => {
    await rm(dir, { recursive: true, force: true });
  });

  /** Loads a config whose one hook runs `program`, with `PATH`; the ConfigError's message, or 'loaded'. */
  async function load(program: string, PATH?: string): Promise<string> {
    const text = {
      deviceId: 'dvc_1',
      server: { baseUrl: 'https://configs.example.com' },
      rootDir: path.join(dir, 'root'),
      stateDir: path.join(dir, 'state'),
      hooks: [{ match: '**', run: [program, 'now'] }],
    };
    parseAgentConfig(text, 'check');
    await writeFile(configFile, JSON.stringify(text), { mode: 0o644 });
    const env = { CONFIG_AGENT_API_KEY: KEY, ...(PATH === undefined ? {} : { PATH }) };
    try {
      await loadAgentConfig(nodeFs, { configFlag: configFile, env });
      return 'loaded';
    } catch (error) {
      if (!(error instanceof ConfigError)) throw error;
      expect(exitCodeForStartupError(error)).toBe(78);
      return error.message;
    }
  }

  it('a root-owned program in root-owned directories loads, by absolute path and through PATH', async () => {
    expect(await load(path.join(dir, 'bin', 'reload'))).toBe('loaded');
    expect(await load('reload', `${dir}/early:${dir}/bin`)).toBe('loaded');
    // (`sh now` would run <rootDir>/now as a script: refused since fix37, hook-code-args.fix37.test.ts.)
    expect(await load('true', '/usr/bin:/bin')).toBe('loaded');
  });

  it('a program others or another group can write, or another user owns, is refused', async () => {
    const program = path.join(dir, 'bin', 'reload');
    await chmod(program, 0o757);
    expect(await load(program)).toBe(
      `config ${configFile}: hooks[0].run[0]: ${program}: ${program} is writable by others (mode 0757): any ` +
        `local user could change what the hook runs; chmod o-w ${program}`,
    );
    await chmod(program, 0o775);
    await chown(program, 0, OTHER);
    expect(await load(program)).toContain(`is writable by its group (gid ${OTHER}, mode 0775)`);
    await chmod(program, 0o755);
    await chown(program, OTHER, 0);
    expect(await load(program)).toContain(`is owned by uid ${OTHER}, neither root nor the agent's user`);
  });

  it('a program in a directory others can write is refused (the file can be swapped)', async () => {
    await writeFile(path.join(dir, 'shared', 'reload'), '#!/bin/sh\n', { mode: 0o755 });
    await chmod(path.join(dir, 'shared'), 0o777);
    expect(await load(path.join(dir, 'shared', 'reload'))).toContain(
      `the directory ${dir}/shared is writable by others (mode 0777)`,
    );
  });

  it('a bare name: a PATH directory searched earlier that another user can write is refused (shadowing)', async () => {
    await chmod(path.join(dir, 'early'), 0o777);
    expect(await load('reload', `${dir}/early:${dir}/bin`)).toContain(
      `the directory ${dir}/early is writable by others (mode 0777): any local user could put a file there ` +
        '(named reload, it would run as the hook)',
    );
    // Searched after the program is found, it does not matter.
    expect(await load('reload', `${dir}/bin:${dir}/early`)).toBe('loaded');
    // Sticky does not protect a name nobody has taken yet.
    await chmod(path.join(dir, 'early'), 0o1777);
    expect(await load('reload', `${dir}/early:${dir}/bin`)).toContain(
      `the directory ${dir}/early is writable`,
    );
  });
});
