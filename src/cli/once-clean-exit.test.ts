// `--once` end to end with the clean-exit marker: only a run that wrote nothing into rootDir lets the next skip the sweep.

import { EventEmitter } from 'node:events';
import { mkdtemp, readdir, readFile, rm, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { PassThrough } from 'node:stream';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { main } from '../main.js';
import { type RunningMockServer, startMockServer } from '../mock-server/server.js';
import { CLEAN_EXIT_FILE } from '../store/clean-exit.js';
import { TEMP_PREFIX } from '../store/path-guard.js';
import type { CommandIo } from './io.js';

const KEY = 'sk_test_clean_exit_0123456789';
const DEVICE = 'dvc_clean_exit';

let dir: string;
let server: RunningMockServer;

beforeEach(async () => {
  dir = await mkdtemp(path.join(os.tmpdir(), 'config-agent-clean-exit-'));
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
  await rm(dir, { recursive: true, force: true });
});

async function once(): Promise<number> {
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
  stdout.resume();
  stderr.resume();
  const io: CommandIo = { stdout, stderr, env: { CONFIG_AGENT_API_KEY: KEY }, isTty: false };
  return main(['--once', '--config', file], io, new EventEmitter());
}

const planted = () => path.join(dir, 'root', 'etc', `${TEMP_PREFIX}planted`);
const hasMarker = async () => (await readdir(path.join(dir, 'state'))).includes(CLEAN_EXIT_FILE);
const exists = (file: string) =>
  readFile(file).then(
    () => true,
    () => false,
  );

describe('--once and the clean-exit marker', () => {
  it('an idle run leaves it and the next skips the sweep; a run that writes leaves none, so the one after sweeps', async () => {
    expect(await once()).toBe(0);
    // That run wrote etc/a.json: no marker, whatever its end.
    expect(await hasMarker()).toBe(false);
    expect(await once()).toBe(0);
    expect(await hasMarker()).toBe(true);
    // Idle with the marker: rootDir is not swept (a temp-named file nobody's crash left stays), a marker again.
    await writeFile(planted(), 'not the agent’s');
    expect(await once()).toBe(0);
    expect(await exists(planted())).toBe(true);
    expect(await hasMarker()).toBe(true);
    // The file removed by hand: the run writes it back, so it leaves no marker and the next start sweeps.
    await rm(path.join(dir, 'root', 'etc', 'a.json'));
    expect(await once()).toBe(0);
    expect(JSON.parse(await readFile(path.join(dir, 'root', 'etc', 'a.json'), 'utf8'))).toEqual({ a: 1 });
    expect(await hasMarker()).toBe(false);
    expect(await exists(planted())).toBe(true);
    expect(await once()).toBe(0);
    expect(await exists(planted())).toBe(false);
    expect(await hasMarker()).toBe(true);
  });

  it('a run that cannot reach the service leaves none', async () => {
    expect(await once()).toBe(0);
    expect(await once()).toBe(0);
    expect(await hasMarker()).toBe(true);
    await server.close();
    expect(await once()).not.toBe(0);
    expect(await hasMarker()).toBe(false);
    server = await startMockServer({ apiKeys: [KEY], fixtures: { devices: [], config_instances: [] } });
  });
});
