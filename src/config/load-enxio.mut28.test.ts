// What the loader says when opening the config, the API key or NODE_EXTRA_CA_CERTS fails (897e92b's ENXIO naming), pinned by mut28's mutants.
import * as nodeFs from 'node:fs/promises';
import { mkdir, mkdtemp, rm, writeFile } from 'node:fs/promises';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { exitCodeForStartupError } from '../cli/exit-codes.js';
import type { FsPort } from '../lib/fs-port.js';
import { ApiKeyError, ConfigError } from './errors.js';
import {
  assertExtraCaCertsUsable,
  type ConfigFs,
  loadConfigFile,
  parseAgentConfig,
  readKeyFile,
} from './load.js';

/** node's fs whose open fails with `code` (a disk gone away: ENXIO, EIO), whatever is at the path. */
function openFailing(code: string): ConfigFs {
  return {
    ...(nodeFs as unknown as ConfigFs),
    open: (async () => {
      throw Object.assign(new Error(`${code}: simulated`), { code });
    }) as FsPort['open'],
  };
}

async function caught(promise: Promise<unknown>): Promise<unknown> {
  return promise.then(
    () => undefined,
    (error: unknown) => error,
  );
}

function config() {
  return parseAgentConfig(
    {
      deviceId: 'dvc_1',
      server: { baseUrl: 'https://configs.example.com' },
      rootDir: '/srv/config-agent',
      stateDir: '/var/lib/config-agent',
    },
    'test.json',
  );
}

describe('a failed open named by what is there only on ENXIO (mut28)', () => {
  let dir: string;
  let server: net.Server | undefined;
  beforeEach(async () => {
    dir = await mkdtemp(path.join(os.tmpdir(), 'config-agent-mut28-enxio-'));
  });
  afterEach(async () => {
    if (server !== undefined) await new Promise((done) => server?.close(done));
    server = undefined;
    await rm(dir, { recursive: true, force: true });
  });

  async function socketAt(at: string): Promise<void> {
    const listening = net.createServer();
    server = listening;
    await new Promise<void>((done, fail) => listening.once('error', fail).listen(at, done));
  }

  it('EIO opening a directory: the errno, not "not a regular file"', async () => {
    const at = path.join(dir, 'config.d');
    await mkdir(at);
    const error = await caught(loadConfigFile(openFailing('EIO'), at));
    expect(error).toBeInstanceOf(ConfigError);
    expect((error as Error).message).toBe(`config ${at}: cannot read the file: EIO`);
  });

  it('ENXIO opening a regular file (its disk gone): the errno, not "not a regular file (a regular file)"', async () => {
    const at = path.join(dir, 'config.json');
    await writeFile(at, '{}');
    const error = await caught(loadConfigFile(openFailing('ENXIO'), at));
    expect(error).toBeInstanceOf(ConfigError);
    expect((error as Error).message).toMatch(new RegExp(`^config ${at}: cannot read the file: .*ENXIO`));
    const key = await caught(readKeyFile(openFailing('ENXIO'), at, { requirePrivate: false }));
    expect(key).toBeInstanceOf(ApiKeyError);
    expect((key as Error).message).toMatch(/^cannot open the API key file .*ENXIO/);
  });

  it('ENXIO for a path gone by the time it is looked at: the errno (the look finding nothing is no error of its own)', async () => {
    const at = path.join(dir, 'gone.json');
    const error = await caught(loadConfigFile(openFailing('ENXIO'), at));
    expect(error).toBeInstanceOf(ConfigError);
    expect((error as Error).message).toMatch(new RegExp(`^config ${at}: cannot read the file: .*ENXIO`));
    const ca = await caught(
      assertExtraCaCertsUsable(openFailing('ENXIO'), config(), { NODE_EXTRA_CA_CERTS: at }),
    );
    expect(ca).toBeInstanceOf(ConfigError);
    expect((ca as Error).message).toMatch(/cannot read the file: .*ENXIO/);
  });

  it('a socket as the API key file keeps the open error as its cause', async () => {
    const at = path.join(dir, 'key.sock');
    await socketAt(at);
    const error = await caught(readKeyFile(nodeFs as unknown as ConfigFs, at, { requirePrivate: false }));
    expect(error).toBeInstanceOf(ApiKeyError);
    expect((error as Error).message).toBe(`the API key file ${at} is not a regular file (a socket)`);
    expect((error as Error).cause).toMatchObject({ code: 'ENXIO' });
  });

  it('a socket as NODE_EXTRA_CA_CERTS: "not a regular file (a socket)", exit 78', async () => {
    const at = path.join(dir, 'ca.sock');
    await socketAt(at);
    const error = await caught(
      assertExtraCaCertsUsable(nodeFs as unknown as ConfigFs, config(), { NODE_EXTRA_CA_CERTS: at }),
    );
    expect(error).toBeInstanceOf(ConfigError);
    expect((error as Error).message).toContain(`NODE_EXTRA_CA_CERTS: ${at}: not a regular file (a socket)`);
    expect(exitCodeForStartupError(error)).toBe(78);
  });
});
