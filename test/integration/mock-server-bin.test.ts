// The compiled config-agent-mock-server bin: shebang, the one stdout line with the URL, exit 0 on SIGTERM.
import { spawn } from 'node:child_process';
import { existsSync, readFileSync } from 'node:fs';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { DeviceList } from '../../src/api/schemas.js';
import { API_KEY_ENV } from '../../src/mock-server/cli.js';
import { REPO_ROOT } from '../helpers/harness.js';
import { waitFor } from '../helpers/wait-for.js';
import { API_KEY, DEMO_FIXTURES_PATH } from '../mock-server/helpers.js';

describe('the compiled mock-server bin', () => {
  const bin = path.join(REPO_ROOT, 'dist/mock-server/cli.js');

  it('starts with a shebang, prints the URL, and exits 0 on SIGTERM', async () => {
    expect(existsSync(bin), `${bin} is built by test/global-setup.ts`).toBe(true);
    expect(readFileSync(bin, 'utf8').startsWith('#!/usr/bin/env node\n')).toBe(true);
    const child = spawn(process.execPath, [bin, '--port', '0', '--fixtures', DEMO_FIXTURES_PATH], {
      env: { ...process.env, [API_KEY_ENV]: API_KEY },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (chunk: Buffer) => {
      stdout += chunk.toString();
    });
    child.stderr.on('data', (chunk: Buffer) => {
      stderr += chunk.toString();
    });
    const exited = new Promise<number | null>((resolve) => child.once('exit', (code) => resolve(code)));
    try {
      const url = await waitFor(
        () => {
          if (child.exitCode !== null) throw new Error(`exited ${child.exitCode}: ${stderr}`);
          return stdout.includes('\n') ? stdout.slice(0, stdout.indexOf('\n')) : undefined;
        },
        30_000,
        { what: 'the URL line on stdout' },
      );
      const response = await fetch(`${url}/v1/devices`, { headers: { 'X-API-Key': API_KEY } });
      expect(response.status).toBe(200);
      expect(DeviceList.parse(await response.json()).data).toHaveLength(3);
      child.kill('SIGTERM');
      expect(await exited).toBe(0);
      expect(stdout).toBe(`${url}\n`);
      expect(stderr).not.toContain(API_KEY);
    } finally {
      if (child.exitCode === null) child.kill('SIGKILL');
    }
  });
});
