// `config-agent status` against a stand-in agent on a real unix socket: what reaches the operator's terminal.
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { createServer, type Server } from 'node:http';
import os from 'node:os';
import path from 'node:path';
import { PassThrough } from 'node:stream';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import type { CommandIo } from './io.js';
import { runStatus } from './local-client.js';

let dir: string;
let server: Server | undefined;

beforeEach(async () => {
  dir = await mkdtemp(path.join(os.tmpdir(), 'config-agent-status-'));
});

afterEach(async () => {
  await new Promise((resolve) => (server === undefined ? resolve(undefined) : server.close(resolve)));
  server = undefined;
  await rm(dir, { recursive: true, force: true });
});

/** An agent whose status holds `body`, listening where the config written beside it says. */
async function agentAnswering(body: unknown): Promise<string> {
  const socketPath = path.join(dir, 'agent.sock');
  server = createServer((_request, response) => {
    response.writeHead(200, { 'content-type': 'application/json' });
    response.end(JSON.stringify(body));
  });
  await new Promise<void>((resolve) => server?.listen(socketPath, resolve));
  const configPath = path.join(dir, 'config.json');
  await writeFile(
    configPath,
    JSON.stringify({
      deviceId: 'dvc_1',
      server: { baseUrl: 'https://configs.example.com' },
      rootDir: path.join(dir, 'root'),
      stateDir: path.join(dir, 'state'),
      socketPath,
    }),
  );
  return configPath;
}

function bufferedIo(): CommandIo & { out: () => string } {
  const stdout = new PassThrough();
  let out = '';
  stdout.on('data', (chunk: Buffer) => {
    out += chunk.toString();
  });
  return { stdout, stderr: new PassThrough(), env: {}, isTty: true, out: () => out };
}

describe('config-agent status', () => {
  it("shows the service's ids and messages quoted and escaped: they cannot drive the terminal or forge a line", async () => {
    // Ids and messages come from the service (state.json keeps them as sent).
    const hostileId = 'cfg_\u001b[2J\u001b[31mx\nDevice:             dvc_forged';
    const configPath = await agentAnswering({
      deviceId: 'dvc_1',
      pendingReports: 0,
      managedFiles: [{ path: 'app/a.json', instanceId: hostileId, status: 'deployed' }],
      errors: [
        {
          instanceId: 'cfg_b\u009b31m',
          path: 'app/b.json',
          status: 'retrying',
          message: `path conflict: "app/b.json" is also targeted by ${hostileId}`,
        },
      ],
    });
    const io = bufferedIo();

    expect(await runStatus({ configPath, json: false }, io)).toBe(1);

    const out = io.out();
    expect(out.includes('\u001b') || out.includes('\u009b')).toBe(false);
    expect(out.match(/^Device:/gmu)).toHaveLength(1);
    expect(out).toContain('app/a.json ("cfg_\\u001b[2J\\u001b[31mx\\nDevice:             dvc_forged")');
    expect(out).toContain('app/b.json ("cfg_b\\u009b31m")');
  });
});
