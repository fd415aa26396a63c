// adv21: Ctrl+C or Ctrl+D at one of init's questions ends it quietly (130 / 2), nothing written, no stack trace.
import { existsSync, mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { PassThrough, Writable } from 'node:stream';
import { afterAll, describe, expect, it } from 'vitest';
import { ExitCode } from './exit-codes.js';
import { type InitEnvironment, runInit } from './init.js';

const BASE = mkdtempSync(path.join(os.tmpdir(), 'config-agent-init-prompt-'));
afterAll(() => rmSync(BASE, { recursive: true, force: true }));

/** init asking for the key on a "terminal" that answers with `keys` once the question is out. */
async function answerWith(name: string, keys: string) {
  const dir = path.join(BASE, name);
  mkdirSync(path.join(dir, 'etc'), { recursive: true });
  writeFileSync(path.join(dir, 'etc/passwd'), 'root:x:0:0::/root:/bin/sh\nconfig-agent:x:4241:4242::/:/x\n');
  writeFileSync(path.join(dir, 'etc/group'), 'root:x:0:\nconfig-agent:x:4242:\n');
  const stdin = new PassThrough();
  let stderr = '';
  const errors = new Writable({
    write(chunk, _encoding, done) {
      stderr += String(chunk);
      // The question is out: the operator presses the keys.
      if (stderr.includes('API key (input hidden): ')) setImmediate(() => stdin.write(keys));
      done();
    },
  });
  const env: InitEnvironment = {
    stdin,
    stdinIsTty: true,
    groupFile: path.join(dir, 'etc/group'),
    passwdFile: path.join(dir, 'etc/passwd'),
    dropInDir: path.join(dir, 'etc/drop-in'),
    checkTimeoutMs: 2_000,
    uid: 0,
  };
  const configPath = path.join(dir, 'etc/config-agent/config.json');
  const code = await runInit(
    { configPath, deviceId: 'dvc_1', baseUrl: 'http://127.0.0.1:9', rootDir: path.join(dir, 'root') },
    { stdout: new PassThrough(), stderr: errors, env: {}, isTty: true },
    env,
  );
  stdin.destroy();
  return { code, stderr, written: existsSync(configPath) || existsSync(path.join(dir, 'root')) };
}

describe('init interrupted at a question (adv21)', () => {
  it('Ctrl+C exits 130 saying nothing was written', async () => {
    // Before: readline's AbortError went up to runProcess: `unexpected error: AbortError: Aborted with Ctrl+C`,
    // a Node stack trace and exit 1 (seen on the built agent in a pty).
    const result = await answerWith('ctrl-c', '\x03');
    expect(result.code).toBe(ExitCode.Interrupted);
    expect(result.stderr).toContain('config-agent init: interrupted (Ctrl+C): nothing written');
    expect(result.stderr).not.toContain('    at ');
    expect(result.written).toBe(false);
  });

  it('Ctrl+D (no answer) exits 2 saying nothing was written', async () => {
    const result = await answerWith('ctrl-d', '\x04');
    expect(result.code).toBe(ExitCode.Usage);
    expect(result.stderr).toContain('config-agent init: no answer (Ctrl+D): nothing written');
    expect(result.written).toBe(false);
  });
});
