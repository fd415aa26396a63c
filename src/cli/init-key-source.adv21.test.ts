// adv21: init's --api-key-file that is a FIFO, a device, a huge file or an endless stdin: refused at once, nothing written.
import { spawnSync } from 'node:child_process';
import { existsSync, mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { PassThrough, Readable, Writable } from 'node:stream';
import { afterAll, describe, expect, it } from 'vitest';
import { ExitCode } from './exit-codes.js';
import { type InitEnvironment, runInit } from './init.js';

const BASE = mkdtempSync(path.join(os.tmpdir(), 'config-agent-init-key-'));
afterAll(() => rmSync(BASE, { recursive: true, force: true }));

/** Zeros for ever, as `< /dev/zero` gives; counts what was read. */
function endless(): { stream: Readable; read: () => number } {
  let read = 0;
  const block = Buffer.alloc(16 * 1024);
  const stream = new Readable({
    read() {
      read += block.length;
      this.push(block);
    },
  });
  return { stream, read: () => read };
}

async function initWithKey(
  name: string,
  apiKeyFile: string,
  stdin: NodeJS.ReadableStream = Readable.from([]),
) {
  const dir = path.join(BASE, name);
  mkdirSync(path.join(dir, 'etc'), { recursive: true });
  writeFileSync(path.join(dir, 'etc/passwd'), 'root:x:0:0::/root:/bin/sh\nconfig-agent:x:4241:4242::/:/x\n');
  writeFileSync(path.join(dir, 'etc/group'), 'root:x:0:\nconfig-agent:x:4242:\n');
  const env: InitEnvironment = {
    stdin,
    stdinIsTty: false,
    groupFile: path.join(dir, 'etc/group'),
    passwdFile: path.join(dir, 'etc/passwd'),
    dropInDir: path.join(dir, 'etc/drop-in'),
    checkTimeoutMs: 2_000,
    // The key is read before init writes or chowns anything, so no root is needed.
    uid: 0,
  };
  const configPath = path.join(dir, 'etc/config-agent/config.json');
  let stderr = '';
  const code = await runInit(
    {
      configPath,
      deviceId: 'dvc_1',
      baseUrl: 'http://127.0.0.1:9',
      rootDir: path.join(dir, 'root'),
      apiKeyFile,
    },
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
  return { code, stderr, written: existsSync(configPath) || existsSync(path.join(dir, 'root')) };
}

describe("init's --api-key-file that is no key file (adv21)", () => {
  it('a FIFO with no writer is refused at once (it hung init for good)', async () => {
    const fifo = path.join(BASE, 'key.fifo');
    expect(spawnSync('mkfifo', ['-m', '600', fifo]).status).toBe(0);
    const result = await initWithKey('fifo', fifo);
    expect(result.code).toBe(ExitCode.Usage);
    expect(result.stderr).toContain(`the API key file ${fifo} is not a regular file (a FIFO)`);
    expect(result.written).toBe(false);
  });

  it('/dev/zero and a file over 64 KiB are refused unread (/dev/zero was read until memory ran out)', async () => {
    const device = await initWithKey('zero', '/dev/zero');
    expect(device.code).toBe(ExitCode.Usage);
    expect(device.stderr).toContain('/dev/zero is not a regular file');
    const big = path.join(BASE, 'big.key');
    writeFileSync(big, `sk_${'a'.repeat(100 * 1024)}\n`);
    const large = await initWithKey('large', big);
    expect(large.code).toBe(ExitCode.Usage);
    expect(large.stderr).toContain('is larger than 65536 bytes: not a key');
    expect(large.stderr).not.toContain('aaaa');
    expect([device.written, large.written]).toEqual([false, false]);
  });

  it('- on an endless standard input stops reading past 64 KiB', async () => {
    const input = endless();
    const result = await initWithKey('stdin', '-', input.stream);
    expect(result.code).toBe(ExitCode.Usage);
    expect(result.stderr).toContain('standard input holds more than 65536 bytes: not a key');
    expect(input.read()).toBeLessThan(1024 * 1024);
    expect(result.written).toBe(false);
  });
});
