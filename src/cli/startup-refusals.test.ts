// Start-up refusals through the commands themselves: inputs and directories that must exit 78, never hang.
import { execFileSync } from 'node:child_process';
import { EventEmitter } from 'node:events';
import { mkdir, mkdtemp, rm, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { PassThrough } from 'node:stream';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { tryMount, unmount } from '../../test/helpers/harness.js';
import { main } from '../main.js';
import type { CommandIo } from './io.js';

const KEY = 'sk_test_startup_refusals_0123';

let dir: string;

beforeEach(async () => {
  dir = await mkdtemp(path.join(os.tmpdir(), 'config-agent-refusal-'));
});

afterEach(async () => {
  await rm(dir, { recursive: true, force: true });
});

/** The command line, in-process, as main.ts runs it: what it prints and the exit code. */
const run = (argv: string[], io: CommandIo) => main(argv, io, new EventEmitter());

function bufferedIo(env: NodeJS.ProcessEnv = {}): CommandIo & { out: () => string; err: () => string } {
  const stdout = new PassThrough();
  const stderr = new PassThrough();
  let out = '';
  let err = '';
  stdout.on('data', (chunk: Buffer) => {
    out += chunk.toString();
  });
  stderr.on('data', (chunk: Buffer) => {
    err += chunk.toString();
  });
  return { stdout, stderr, env, isTty: false, out: () => out, err: () => err };
}

/** A valid config in `dir`; the service URL is never reached by these tests. */
async function writeConfig(overrides: Record<string, unknown> = {}): Promise<string> {
  const keyFile = path.join(dir, 'api-key');
  await writeFile(keyFile, KEY, { mode: 0o600 });
  const file = path.join(dir, 'config.json');
  await writeFile(
    file,
    JSON.stringify({
      deviceId: 'dvc_refusal',
      server: { baseUrl: 'http://127.0.0.1:9', apiKeyFile: keyFile, timeoutSeconds: 1 },
      rootDir: path.join(dir, 'root'),
      stateDir: path.join(dir, 'state'),
      socketPath: path.join(dir, 'agent.sock'),
      ...overrides,
    }),
  );
  return file;
}

describe('inputs that are not regular files exit 78, never hang', () => {
  it('--config naming a FIFO: --once and status', async () => {
    const fifo = path.join(dir, 'config.fifo');
    execFileSync('mkfifo', [fifo]);
    const once = bufferedIo();
    expect(await run(['--once', '--config', fifo], once)).toBe(78);
    expect(once.err()).toBe(`config-agent: config ${fifo}: not a regular file (a FIFO)\n`);
    const status = bufferedIo();
    expect(await run(['status', '--config', fifo], status)).toBe(78);
    expect(status.err()).toContain('not a regular file (a FIFO)');
  });

  it('server.apiKeyFile and $CREDENTIALS_DIRECTORY/api-key naming a FIFO', async () => {
    const fifo = path.join(dir, 'key.fifo');
    execFileSync('mkfifo', [fifo]);
    const configPath = await writeConfig({
      server: { baseUrl: 'http://127.0.0.1:9', apiKeyFile: fifo },
    });
    const io = bufferedIo();
    expect(await run(['--once', '--config', configPath], io)).toBe(78);
    expect(io.err()).toBe(`config-agent: the API key file ${fifo} is not a regular file (a FIFO)\n`);

    const credentials = path.join(dir, 'credentials');
    await mkdir(credentials);
    execFileSync('mkfifo', [path.join(credentials, 'api-key')]);
    const fromCredentials = bufferedIo({ CREDENTIALS_DIRECTORY: credentials });
    expect(await run(['--once', '--config', configPath], fromCredentials)).toBe(78);
    expect(fromCredentials.err()).toContain(`${credentials}/api-key is not a regular file (a FIFO)`);
  });
});

describe('a read-only stateDir exits 78 naming stateDir and the reason', () => {
  it('--once on a read-only mount: no raw EROFS, no exit 1 (which systemd would restart forever)', async (ctx) => {
    const stateDir = path.join(dir, 'state');
    await mkdir(stateDir);
    const refused = tryMount(['-t', 'tmpfs', '-o', 'ro,mode=0700,size=64k', 'tmpfs', stateDir]);
    if (refused !== undefined) {
      ctx.skip(refused);
      return;
    }
    try {
      const configPath = await writeConfig();
      const io = bufferedIo();
      expect(await run(['--once', '--config', configPath], io)).toBe(78);
      expect(io.err()).toContain(
        `stateDir ${stateDir} is not usable: cannot create agent.lock: read-only file system: stateDir must be ` +
          'on a writable file system (under systemd: inside StateDirectory= or ReadWritePaths=) (EROFS)',
      );
    } finally {
      unmount(stateDir);
    }
  });
});
