// Junk a local user or an application leaves under rootDir (a directory the agent cannot read, a tree deeper
// than PATH_MAX, a temp-named file it cannot unlink) never keeps the agent from starting: `--once` against the mock.
import { execFileSync } from 'node:child_process';
import { EventEmitter } from 'node:events';
import { mkdir, mkdtemp, readFile, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { PassThrough } from 'node:stream';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import type { CommandIo } from '../cli/io.js';
import { main } from '../main.js';
import { type RunningMockServer, startMockServer } from '../mock-server/server.js';
import { TEMP_PREFIX } from './path-guard.js';

const KEY = 'sk_test_sweep_junk_0123456789';
const DEVICE = 'dvc_junk';

let dir: string;
let server: RunningMockServer;

beforeEach(async () => {
  dir = await mkdtemp(path.join(os.tmpdir(), 'config-agent-junk-'));
  server = await startMockServer({
    apiKeys: [KEY],
    fixtures: {
      devices: [{ id: DEVICE, name: 'robot' }],
      config_instances: [
        {
          id: 'cfg_a',
          device_id: DEVICE,
          relative_filepath: 'etc/a.json',
          content: { a: 1 },
          target_status: 'deployed',
          activity_status: 'queued',
        },
      ],
    },
  });
});

afterEach(async () => {
  await server.close();
  // Node's rm names every path whole, which fails past PATH_MAX; rm(1) walks by descriptors.
  execFileSync('rm', ['-rf', dir]);
});

async function once(): Promise<{ code: number; err: string }> {
  const file = path.join(dir, 'config.json');
  await writeFile(
    file,
    JSON.stringify({
      deviceId: DEVICE,
      server: { baseUrl: server.url, timeoutSeconds: 5 },
      rootDir: path.join(dir, 'root'),
      stateDir: path.join(dir, 'state'),
      socketPath: path.join(dir, 'agent.sock'),
    }),
  );
  const stdout = new PassThrough();
  const stderr = new PassThrough();
  let err = '';
  stdout.resume();
  stderr.on('data', (chunk: Buffer) => {
    err += chunk.toString();
  });
  const io: CommandIo = { stdout, stderr, env: { CONFIG_AGENT_API_KEY: KEY }, isTty: false };
  const code = await main(['--once', '--config', file], io, new EventEmitter());
  return { code, err };
}

const reportsOf = async (id: string) => {
  const response = await fetch(`${server.url}/_admin/reports`, { headers: { 'X-API-Key': KEY } });
  const body = (await response.json()) as {
    data: Array<{ config_instance_id: string; activity_status: string }>;
  };
  return body.data.filter((r) => r.config_instance_id === id).map((r) => r.activity_status);
};

describe('the start-up sweep meets junk under rootDir', () => {
  it('a tree deeper than PATH_MAX: the agent starts, writes and reports; its own leftover beside it is swept', async () => {
    const root = path.join(dir, 'root');
    // 20 levels of 250-byte names: the deepest directories lie past PATH_MAX (4096) from rootDir. A shell makes
    // them one `cd` at a time (a path that long cannot be named at once), with a temp-named file at the bottom.
    await mkdir(root, { recursive: true });
    const name = 'd'.repeat(250);
    execFileSync('bash', [
      '-c',
      `cd "$1" && for i in $(seq 20); do mkdir "$2" && cd "$2" || exit 1; done && echo junk > "$3"`,
      'bash',
      root,
      name,
      `${TEMP_PREFIX}deep`,
    ]);
    await writeFile(path.join(root, `${TEMP_PREFIX}ours`), 'left by a crash');

    const { code } = await once();

    expect(code).toBe(0);
    expect(JSON.parse(await readFile(path.join(root, 'etc/a.json'), 'utf8'))).toEqual({ a: 1 });
    expect(await reportsOf('cfg_a')).toEqual(['deployed']);
    await expect(readFile(path.join(root, `${TEMP_PREFIX}ours`))).rejects.toMatchObject({ code: 'ENOENT' });
  });
});
