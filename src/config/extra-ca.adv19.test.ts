// adv19: a NODE_EXTRA_CA_CERTS Node would ignore (missing, no certificate, a directory) is refused at start, exit 78.
import { spawnSync } from 'node:child_process';
import * as nodeFs from 'node:fs/promises';
import { mkdir, mkdtemp, rm, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { exitCodeForStartupError } from '../cli/exit-codes.js';
import { ConfigError } from './errors.js';
import { assertExtraCaCertsUsable, type ConfigFs, parseAgentConfig } from './load.js';

const fs = nodeFs as unknown as ConfigFs;
const hasOpenssl = spawnSync('openssl', ['version']).error === undefined;
let dir = '';

beforeAll(async () => {
  dir = await mkdtemp(path.join(os.tmpdir(), 'adv19-ca-'));
});
afterAll(async () => {
  await rm(dir, { recursive: true, force: true });
});

function config(baseUrl = 'https://configs.example.com') {
  return parseAgentConfig(
    {
      deviceId: 'dvc_1',
      server: { baseUrl },
      rootDir: '/srv/config-agent',
      stateDir: '/var/lib/config-agent',
    },
    'test.json',
  );
}

async function refusal(file: string, baseUrl?: string): Promise<ConfigError> {
  const error = await assertExtraCaCertsUsable(fs, config(baseUrl), { NODE_EXTRA_CA_CERTS: file }).then(
    () => undefined,
    (caught: unknown) => caught,
  );
  expect(error).toBeInstanceOf(ConfigError);
  expect(exitCodeForStartupError(error)).toBe(78);
  return error as ConfigError;
}

describe('NODE_EXTRA_CA_CERTS that Node would ignore', () => {
  // Each made every request to a private CA's service fail on its certificate, a network error: exit 3 for ever.
  it('a missing file', async () => {
    const error = await refusal(path.join(dir, 'missing.pem'));
    expect(error.message).toMatch(/NODE_EXTRA_CA_CERTS: \S+missing\.pem: cannot read the file: .*ENOENT/);
  });

  it('a file without a certificate (Node ignores it silently)', async () => {
    const file = path.join(dir, 'garbage.pem');
    await writeFile(file, 'not a certificate\n');
    expect((await refusal(file)).message).toContain('holds no PEM certificate');
  });

  it('a certificate block that does not parse', async () => {
    const file = path.join(dir, 'broken.pem');
    await writeFile(file, '-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n');
    expect((await refusal(file)).message).toContain('its first certificate does not parse');
  });

  it('also for a service whose scheme is written in capitals (HTTPS://), which the config takes as https', async () => {
    // Judged by the URL's scheme, not the text's first letters: 'HTTPS://' skipped the check before.
    const error = await refusal(path.join(dir, 'missing.pem'), 'HTTPS://configs.example.com');
    expect(error.message).toContain('cannot read the file');
  });

  it('a directory', async () => {
    const sub = path.join(dir, 'certs.d');
    await mkdir(sub);
    expect((await refusal(sub)).message).toContain('not a regular file (a directory)');
  });

  it('is not judged when unset or unused (an http loopback service)', async () => {
    await expect(assertExtraCaCertsUsable(fs, config(), {})).resolves.toBeUndefined();
    await expect(
      assertExtraCaCertsUsable(fs, config('http://127.0.0.1:8080'), {
        NODE_EXTRA_CA_CERTS: '/nonexistent.pem',
      }),
    ).resolves.toBeUndefined();
  });

  it.skipIf(!hasOpenssl)('a real CA certificate passes (skipped without openssl)', async () => {
    const cert = path.join(dir, 'ca.pem');
    const made = spawnSync('openssl', [
      'req',
      '-x509',
      '-newkey',
      'ec',
      '-pkeyopt',
      'ec_paramgen_curve:P-256',
      '-nodes',
      '-days',
      '1',
      '-subj',
      '/CN=adv19 CA',
      '-keyout',
      path.join(dir, 'ca.key'),
      '-out',
      cert,
    ]);
    expect(made.status).toBe(0);
    await expect(
      assertExtraCaCertsUsable(fs, config(), { NODE_EXTRA_CA_CERTS: cert }),
    ).resolves.toBeUndefined();
  });
});
