// A hook program on a mount that does not answer at start or reload: taken unjudged and named, not passed silently.
import * as nodeFs from 'node:fs/promises';
import { mkdir, mkdtemp, rm, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { MountNotAnswering } from '../cli/mount-gate.js';
import type { FsPort } from '../lib/fs-port.js';
import { type ConfigFs, loadAgentConfig, parseAgentConfig } from './load.js';

const KEY = 'sk_test_4f9c2b7e1a8d';

describe('a hook program whose check hits a mount that does not answer (hook27)', () => {
  let dir: string;
  let hung: string;
  let configFile: string;
  beforeEach(async () => {
    dir = await mkdtemp(path.join(os.tmpdir(), 'config-agent-hookprog-hung-'));
    hung = path.join(dir, 'nfs');
    for (const sub of ['bin', 'nfs']) await mkdir(path.join(dir, sub), { mode: 0o755 });
    await writeFile(path.join(dir, 'bin', 'reload'), '#!/bin/sh\n', { mode: 0o755 });
    await writeFile(path.join(hung, 'reload'), '#!/bin/sh\n', { mode: 0o755 });
    configFile = path.join(dir, 'config.json');
  });
  afterEach(async () => {
    await rm(dir, { recursive: true, force: true });
  });

  /**
   * The start-up port as cli/hang-safe-fs.ts gates it: every call at or below `hung` (a dead NFS share) fails with
   * the gate's ETIMEDOUT once its bound has passed; the rest is the real disk.
   */
  function gatedFs(): ConfigFs {
    const late = (file: string) =>
      path.resolve(file) === hung || path.resolve(file).startsWith(`${hung}/`)
        ? Promise.reject(new MountNotAnswering(hung, 15_000))
        : undefined;
    return {
      ...nodeFs,
      lstat: ((file: string) => late(file) ?? nodeFs.lstat(file)) as FsPort['lstat'],
      stat: ((file: string) => late(file) ?? nodeFs.stat(file)) as FsPort['stat'],
      readlink: ((file: string) => late(file) ?? nodeFs.readlink(file)) as typeof nodeFs.readlink,
    } as unknown as ConfigFs;
  }

  async function load(program: string, PATH?: string) {
    const text = {
      deviceId: 'dvc_1',
      server: { baseUrl: 'https://configs.example.com' },
      rootDir: path.join(dir, 'root'),
      stateDir: path.join(dir, 'state'),
      hooks: [
        { match: 'a/**', run: [path.join(dir, 'bin', 'reload')] },
        { match: '**', run: [program, 'now'] },
      ],
    };
    parseAgentConfig(text, 'check');
    await writeFile(configFile, JSON.stringify(text), { mode: 0o644 });
    const env = { CONFIG_AGENT_API_KEY: KEY, ...(PATH === undefined ? {} : { PATH }) };
    return loadAgentConfig(gatedFs(), { configFlag: configFile, env });
  }

  it('by absolute path: the configuration loads, naming that hook and the mount as not judged', async () => {
    const program = path.join(hung, 'reload');
    const loaded = await load(program);
    expect(loaded.config.hooks).toHaveLength(2);
    expect(loaded.hookChecksUnanswered).toEqual([
      {
        hook: 'hooks[1].run[0]',
        program,
        why: expect.stringContaining(`the mount at ${hung} did not answer within 15 s`),
      },
    ]);
  });

  it('through PATH, a directory searched first on that mount (a file there would run instead): named too', async () => {
    const loaded = await load('reload', `${hung}:${dir}/bin`);
    expect(loaded.hookChecksUnanswered?.map((entry) => [entry.hook, entry.program])).toEqual([
      ['hooks[1].run[0]', 'reload'],
    ]);
  });

  it('a program on an answering disk is judged as before: nothing named', async () => {
    const loaded = await load('reload', `${dir}/bin:${hung}`);
    expect(loaded.config.hooks).toHaveLength(2);
    expect(loaded.hookChecksUnanswered).toBeUndefined();
  });
});
