// adv21: init never replaces an existing config.json it cannot read (a hand edit's trailing comma): exit 78, kept as is.
import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { PassThrough, Readable, Writable } from 'node:stream';
import { afterAll, describe, expect, it } from 'vitest';
import { ExitCode } from './exit-codes.js';
import { type InitEnvironment, runInit } from './init.js';

const BASE = mkdtempSync(path.join(os.tmpdir(), 'config-agent-init-existing-'));
afterAll(() => rmSync(BASE, { recursive: true, force: true }));

async function initOver(name: string, existing: string, baseUrl = 'http://127.0.0.1:9') {
  const dir = path.join(BASE, name);
  mkdirSync(path.join(dir, 'etc/config-agent'), { recursive: true });
  writeFileSync(path.join(dir, 'etc/passwd'), 'root:x:0:0::/root:/bin/sh\nconfig-agent:x:4241:4242::/:/x\n');
  writeFileSync(path.join(dir, 'etc/group'), 'root:x:0:\nconfig-agent:x:4242:\n');
  const configPath = path.join(dir, 'etc/config-agent/config.json');
  writeFileSync(configPath, existing, { mode: 0o640 });
  const env: InitEnvironment = {
    stdin: Readable.from(['sk_test_existing_0123456789abcdef\n']),
    stdinIsTty: false,
    groupFile: path.join(dir, 'etc/group'),
    passwdFile: path.join(dir, 'etc/passwd'),
    dropInDir: path.join(dir, 'etc/drop-in'),
    checkTimeoutMs: 2_000,
    // Refused before init writes or chowns anything, so no root is needed.
    uid: 0,
  };
  let stderr = '';
  const code = await runInit(
    { configPath, deviceId: 'dvc_1', baseUrl, rootDir: path.join(dir, 'root'), apiKeyFile: '-' },
    {
      stdout: new PassThrough(),
      stderr: new Writable({
        write(chunk, _encoding, done) {
          stderr += String(chunk);
          done();
        },
      }),
      env: {},
      isTty: false,
    },
    env,
  );
  return { code, stderr, after: readFileSync(configPath, 'utf8') };
}

describe('init over an existing config.json it cannot read (adv21)', () => {
  it('a trailing comma: exit 78 naming the position, the file and its hooks kept', async () => {
    // Before: `... is not JSON; writing a new one`, exit 0, and the new file had lost the hooks, rules and proxy.
    const existing =
      '{"deviceId": "dvc_1",\n "hooks": [{"match": "nginx/**", "run": ["systemctl", "reload", "nginx"]}],\n' +
      ' "files": {"rules": [{"match": "secrets/**", "mode": "0600"}]},\n}\n';
    const result = await initOver('comma', existing);
    expect(result.code).toBe(ExitCode.Config);
    expect(result.stderr).toContain('invalid JSON at line 4, column 1');
    expect(result.stderr).toContain('move it aside to start anew (nothing written)');
    expect(result.after).toBe(existing);
  });

  it('a JSON value that is no object is refused too; an empty file holds nothing to keep', async () => {
    const array = await initOver('array', '[]\n');
    expect(array.code).toBe(ExitCode.Config);
    expect(array.stderr).toContain('holds no JSON object');
    expect(array.after).toBe('[]\n');
    // Past the existing file: the next refusal is the setting's own (before anything is written).
    const empty = await initOver('empty', '\n', 'http://configs.example.com');
    expect(empty.code).toBe(ExitCode.Config);
    expect(empty.stderr).toContain('server.baseUrl: must use https');
    expect(empty.stderr).not.toContain('move it aside');
  });
});
