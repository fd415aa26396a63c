// adv21: init writing a configuration the unit does not run leaves the unit's rootDir drop-in as it is.
import { existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { Readable } from 'node:stream';
import { afterAll, describe, expect, it } from 'vitest';
import { textSink } from '../../test/helpers/text-sink.js';
import { type InitEnvironment, runInit } from './init.js';

const BASE = mkdtempSync(path.join(os.tmpdir(), 'config-agent-init-drop-in-'));
afterAll(() => rmSync(BASE, { recursive: true, force: true }));
const isRoot = process.getuid?.() === 0;
const PRODUCTION = '# Written by config-agent init\n[Service]\nReadWritePaths=/data/configs\n';

const sink = textSink;

async function initWith(name: string, rootDir: (dir: string) => string, unitConfig: (dir: string) => string) {
  const dir = path.join(BASE, name);
  mkdirSync(path.join(dir, 'etc/drop-in'), { recursive: true });
  writeFileSync(path.join(dir, 'etc/passwd'), 'root:x:0:0::/root:/bin/sh\nconfig-agent:x:4241:4242::/:/x\n');
  writeFileSync(path.join(dir, 'etc/group'), 'root:x:0:\nconfig-agent:x:4242:\n');
  const dropIn = path.join(dir, 'etc/drop-in/50-root-dir.conf');
  writeFileSync(dropIn, PRODUCTION);
  const configPath = path.join(dir, 'etc/try/config.json');
  const env: InitEnvironment = {
    stdin: Readable.from(['sk_test_drop_in_0123456789abcdef\n']),
    stdinIsTty: false,
    groupFile: path.join(dir, 'etc/group'),
    passwdFile: path.join(dir, 'etc/passwd'),
    dropInDir: path.join(dir, 'etc/drop-in'),
    checkTimeoutMs: 2_000,
    uid: 0,
    unitConfigPath: unitConfig(dir),
  };
  const out = sink();
  const code = await runInit(
    { configPath, deviceId: 'dvc_1', baseUrl: 'http://127.0.0.1:9', rootDir: rootDir(dir), apiKeyFile: '-' },
    { stdout: out.stream, stderr: sink().stream, env: {}, isTty: false },
    env,
  );
  return { code, stdout: out.text(), dropIn, configPath };
}

describe.skipIf(!isRoot)("init and the unit's drop-in (adv21; skipped unless root: init chowns)", () => {
  it('leaves it when the configuration written is not the one the unit runs', async () => {
    // Before: init --config <another file> replaced the unit's 50-root-dir.conf with its own rootDir (or removed
    // it for the default rootDir), so the service lost write access to its rootDir at the next daemon-reload
    // (seen on the built agent under systemd 252: `removed …/50-root-dir.conf (rootDir is the default again)`).
    const other = await initWith(
      'other',
      (dir) => path.join(dir, 'srv/try'),
      () => '/etc/config-agent/config.json',
    );
    expect(existsSync(other.configPath)).toBe(true);
    expect(readFileSync(other.dropIn, 'utf8')).toBe(PRODUCTION);
    expect(other.stdout).toContain('as it is: the unit runs /etc/config-agent/config.json');
    expect(other.stdout).toContain('a unit running this one needs ReadWritePaths=');

    const unit = await initWith(
      'unit',
      (dir) => path.join(dir, 'srv/mine'),
      (dir) => path.join(dir, 'etc/try/config.json'),
    );
    expect(readFileSync(unit.dropIn, 'utf8')).toContain(`ReadWritePaths=${path.join(BASE, 'unit/srv/mine')}`);
  });
});
