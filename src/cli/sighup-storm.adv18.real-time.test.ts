// A burst of SIGHUPs to the daemon (runAgent in-process, the mock service on loopback): one reload more, not one each.
import { EventEmitter } from 'node:events';
import { mkdtemp, rm, stat } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { mockRecord } from '../../test/helpers/instances.js';
import { bufferedIo } from '../../test/helpers/local-socket.js';
import { writeAgentConfig } from '../../test/helpers/once-world.js';
import { PATIENCE_MS, waitFor } from '../../test/helpers/wait-for.js';
import { createSecretRegistry } from '../lib/secrets.js';
import { type RunningMockServer, startMockServer } from '../mock-server/server.js';
import { runAgent } from './compose.js';
import { callAgent } from './local-client.js';

const KEY = 'sk_test_adv18_sighup_3c9e71';

/** runAgent's own stop deadline is 10 s, after which its exit settles: this is more than enough. */
const STOP_WAIT_MS = 15_000;

let dir: string;
/** What a test started, stopped by afterEach whatever became of the test (a failed expectation, its timeout). */
let agent: { events: EventEmitter; exit: Promise<number> } | undefined;
let server: RunningMockServer | undefined;

beforeEach(async () => {
  dir = await mkdtemp(path.join(os.tmpdir(), 'config-agent-adv18-'));
});

afterEach(async () => {
  // Before: a test that failed left the agent stopping (flushing stateDir) while rm ran: ENOTEMPTY, dir left behind.
  try {
    if (agent !== undefined) {
      agent.events.emit('SIGTERM');
      let timer: NodeJS.Timeout | undefined;
      await Promise.race([
        agent.exit.catch(() => undefined),
        new Promise((resolve) => {
          timer = setTimeout(resolve, STOP_WAIT_MS);
        }),
      ]);
      clearTimeout(timer);
    }
    await server?.close();
  } finally {
    agent = undefined;
    server = undefined;
    await rm(dir, { recursive: true, force: true, maxRetries: 10, retryDelay: 100 });
  }
});

async function listRequests(server: RunningMockServer): Promise<number> {
  const response = await fetch(`${server.url}/_admin/stats`, { headers: { 'X-API-Key': KEY } });
  const stats = (await response.json()) as { requests: Record<string, number> };
  return stats.requests['GET /v1/config_instances'] ?? 0;
}

const count = (text: string, what: RegExp) => text.split('\n').filter((line) => what.test(line)).length;
const RELOAD_STARTED = /"SIGHUP: reloading the configuration"/;
const RELOAD_ENDED = /"configuration reloaded"|configuration reload failed|the local API stays closed/;

describe('runAgent: a storm of SIGHUPs', () => {
  // 3,000 SIGHUPs to the built daemon made about 1,300 reloads, one after another for minutes, each rebuilding
  // the components, walking rootDir again for the drift watcher and running a full pass (a listing each).
  it('makes at most one reload more than the one running, and that one reads the configuration as last written', async () => {
    const service = await startMockServer({ apiKeys: [KEY] });
    server = service;
    service.state.instances.set(
      'cfg_a',
      mockRecord('cfg_a', {
        device_id: 'dvc_storm',
        relative_filepath: 'a.json',
        config_schema_id: 'sch_a',
        content: { a: 1 },
      }),
    );
    const configPath = path.join(dir, 'config.json');
    const socketPath = path.join(dir, 'agent.sock');
    const writeConfig = (deviceId: string) =>
      writeAgentConfig(dir, deviceId, service.url, {
        drift: 'off',
        poll: { intervalSeconds: 3600, jitterRatio: 0, fullResyncSeconds: 3600 },
      });
    await writeConfig('dvc_storm');
    const io = bufferedIo({ CONFIG_AGENT_API_KEY: KEY }, false);
    const events = new EventEmitter();
    const exit = runAgent({ configPath }, io, createSecretRegistry(), events);
    agent = { events, exit };
    await waitFor(
      () =>
        stat(path.join(dir, 'root', 'a.json')).then(
          () => true,
          () => false,
        ),
      PATIENCE_MS,
      {
        what: 'the first pass',
      },
    );
    await waitFor(() => callAgent(socketPath, 'GET', '/v1/health', PATIENCE_MS), PATIENCE_MS, {
      what: 'the socket',
    });
    const onePass = await listRequests(service);
    expect(onePass).toBeGreaterThan(0);

    for (let i = 0; i < 150; i += 1) events.emit('SIGHUP');
    await writeConfig('dvc_storm_renamed');
    for (let i = 0; i < 150; i += 1) events.emit('SIGHUP');
    await waitFor(
      () => {
        const started = count(io.err(), RELOAD_STARTED);
        return started > 0 && count(io.err(), RELOAD_ENDED) === started;
      },
      PATIENCE_MS,
      { what: 'every reload begun to end' },
    );
    // A pass after the reloads: every pass they asked for has run by its end.
    await callAgent(socketPath, 'POST', '/v1/sync', PATIENCE_MS);

    expect(count(io.err(), RELOAD_STARTED)).toBeLessThanOrEqual(2);
    // The reloads' full passes and the sync's: a listing each, not one per signal.
    expect((await listRequests(service)) - onePass).toBeLessThanOrEqual(3 * onePass);
    expect((await callAgent(socketPath, 'GET', '/v1/status', PATIENCE_MS)).body).toMatchObject({
      deviceId: 'dvc_storm_renamed',
    });
    events.emit('SIGTERM');
    expect(await exit).toBe(0);
  });
});
