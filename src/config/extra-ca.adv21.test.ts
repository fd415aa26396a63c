// adv21: a NODE_EXTRA_CA_CERTS another user could change or swap is refused (exit 78), as the config file would be.
import { spawnSync } from 'node:child_process';
import * as nodeFs from 'node:fs/promises';
import { chmod, chown, mkdir, mkdtemp, rm } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { exitCodeForStartupError } from '../cli/exit-codes.js';
import { assertExtraCaCertsUsable, type ConfigFs, parseAgentConfig } from './load.js';

const fs = nodeFs as unknown as ConfigFs;
const hasOpenssl = spawnSync('openssl', ['version']).error === undefined;
const isRoot = process.getuid?.() === 0;
let dir = '';

beforeAll(async () => {
  dir = await mkdtemp(path.join(os.tmpdir(), 'adv21-ca-'));
});
afterAll(async () => {
  await rm(dir, { recursive: true, force: true });
});

const config = parseAgentConfig(
  {
    deviceId: 'dvc_1',
    server: { baseUrl: 'https://configs.example.com' },
    rootDir: '/srv/config-agent',
    stateDir: '/var/lib/config-agent',
  },
  'test.json',
);

/** A real CA certificate at `file` (openssl). */
function makeCa(file: string): void {
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
    '/CN=adv21 CA',
    '-keyout',
    `${file}.key`,
    '-out',
    file,
  ]);
  expect(made.status).toBe(0);
}

async function verdict(file: string): Promise<string | undefined> {
  return assertExtraCaCertsUsable(fs, config, { NODE_EXTRA_CA_CERTS: file }).then(
    () => undefined,
    (error: unknown) => {
      expect(exitCodeForStartupError(error)).toBe(78);
      return String(error);
    },
  );
}

describe('NODE_EXTRA_CA_CERTS that another user could change (adv21)', () => {
  // Before: only whether Node could load it was judged; whoever could write the file (or swap it) could add an
  // authority of their own, and their server would then be taken for the service and sent the API key.
  it.skipIf(!hasOpenssl || !isRoot)(
    'is refused when others can write it, another user owns it or can swap it',
    async () => {
      const mine = path.join(dir, 'ca.pem');
      makeCa(mine);
      expect(await verdict(mine)).toBeUndefined();

      await chmod(mine, 0o666);
      expect(await verdict(mine)).toContain('writable by others (mode 0666)');
      await chmod(mine, 0o644);

      const theirs = path.join(dir, 'theirs.pem');
      makeCa(theirs);
      await chown(theirs, 4242, 4242);
      expect(await verdict(theirs)).toContain('owned by uid 4242');
      expect(await verdict(theirs)).toContain('trust their own certificate authority');

      const open = path.join(dir, 'open');
      await mkdir(open);
      await chmod(open, 0o777);
      const swappable = path.join(open, 'ca.pem');
      makeCa(swappable);
      expect(await verdict(swappable)).toContain(open);
    },
  );
});
