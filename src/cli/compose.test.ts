// The composition root in-process: main's exit codes and messages, and the daemon's signals wired by runAgent.
import { type ChildProcess, spawnSync } from 'node:child_process';
import { EventEmitter } from 'node:events';
import { existsSync } from 'node:fs';
import * as nodeFs from 'node:fs/promises';
import { mkdir, mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { createConnection } from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { PassThrough } from 'node:stream';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { tryMount, unmount } from '../../test/helpers/harness.js';
import { canMountFuse, hungFuseMount } from '../../test/helpers/hung-fuse.js';
import { PATIENCE_MS, waitFor } from '../../test/helpers/wait-for.js';
import { parseAgentConfig } from '../config/load.js';
import { createSecretRegistry } from '../lib/secrets.js';
import { main } from '../main.js';
import { type RunningMockServer, startMockServer } from '../mock-server/server.js';
import { acquireStateLock, linuxProcessProbe } from '../store/lock.js';
import { reconcilerSettings, runAgent } from './compose.js';
import type { CommandIo } from './io.js';
import { callAgent } from './local-client.js';

const KEY = 'sk_test_compose_5b1e0c9d7a';

let dir: string;

beforeEach(async () => {
  dir = await mkdtemp(path.join(os.tmpdir(), 'config-agent-compose-'));
});

afterEach(async () => {
  await rm(dir, { recursive: true, force: true });
});

function bufferedIo(env: NodeJS.ProcessEnv = {}): CommandIo & { out: () => string; err: () => string } {
  const stdout = new PassThrough();
  const stderr = new PassThrough();
  let out = '';
  let err = '';
  stdout.on('data', (chunk: Buffer) => {
    out += chunk.toString();
  });
  stderr.on('data', (chunk: Buffer) => {
    err += chunk.toString();
  });
  return { stdout, stderr, env, isTty: false, out: () => out, err: () => err };
}

/** A valid config in `dir`; its service (port 9, discard) never answers, which the daemon survives. */
async function writeConfig(overrides: Record<string, unknown> = {}): Promise<string> {
  const file = path.join(dir, 'config.json');
  await writeFile(
    file,
    JSON.stringify({
      deviceId: 'dvc_compose',
      server: { baseUrl: 'http://127.0.0.1:9', timeoutSeconds: 1 },
      rootDir: path.join(dir, 'root'),
      stateDir: path.join(dir, 'state'),
      socketPath: path.join(dir, 'agent.sock'),
      drift: 'off',
      ...overrides,
    }),
  );
  return file;
}

const run = (argv: string[], io: CommandIo) => main(argv, io, new EventEmitter());

/** Whether a new connection to the unix socket at `socketPath` is accepted. */
function connects(socketPath: string): Promise<boolean> {
  return new Promise((resolve) => {
    const socket = createConnection(socketPath);
    socket.once('connect', () => {
      socket.destroy();
      resolve(true);
    });
    socket.once('error', () => resolve(false));
  });
}

describe('main', () => {
  it('--help and --version print to stdout and exit 0', async () => {
    const help = bufferedIo();
    expect(await run(['--help'], help)).toBe(0);
    expect(help.out()).toMatch(/^config-agent: keeps this device's config files in sync/);
    const version = bufferedIo();
    expect(await run(['--version'], version)).toBe(0);
    expect(version.out()).toMatch(/^config-agent \d+\.\d+\.\d+\n$/);
  });

  it('a usage error exits 2 with the problem and the hint, on stderr only', async () => {
    const io = bufferedIo();
    expect(await run(['--once', '--bogus'], io)).toBe(2);
    expect(io.err()).toBe("config-agent: unknown option '--bogus'\nRun 'config-agent --help' for usage.\n");
    expect(io.out()).toBe('');
  });

  it('an invalid configuration exits 78 with one line naming the key, for --once and the daemon', async () => {
    const configPath = await writeConfig({ poll: { intervalSeconds: 0 } });
    // (status is left out: it falls back to the socket of the file's previous version, see local-client.ts.)
    for (const argv of [['--once'], []]) {
      const io = bufferedIo({ CONFIG_AGENT_API_KEY: KEY });
      expect(await run([...argv, '--config', configPath], io), argv.join(' ')).toBe(78);
      expect(io.err(), argv.join(' ')).toMatch(
        /^config-agent: config .*config\.json: poll\.intervalSeconds: .*\n$/,
      );
    }
  });

  it('no API key exits 78 naming where it looked, for --once and the daemon', async () => {
    const configPath = await writeConfig({
      server: { baseUrl: 'http://127.0.0.1:9', apiKeyFile: path.join(dir, 'absent-key') },
    });
    for (const argv of [['--once'], []]) {
      const io = bufferedIo();
      expect(await run([...argv, '--config', configPath], io)).toBe(78);
      expect(io.err()).toContain('absent-key');
    }
  });
});

/** A hostile service's listing that echoes the API key: in an instance id, and in a path it rejects. */
function listKeyEchoes(server: RunningMockServer): void {
  for (const [id, where] of [
    [`cfg_${KEY}`, 'ok.json'],
    ['cfg_b', `../${KEY}.json`],
  ] as const) {
    server.state.instances.set(id, {
      id,
      device_id: 'dvc_compose',
      relative_filepath: where,
      config_schema_id: `sch_${id}`,
      config_type_id: 'typ',
      target_status: 'deployed',
      activity_status: 'queued',
      error_status: 'none',
      content: { a: 1 },
      created_at: '2026-01-01T00:00:00.000Z',
      updated_at: '2026-01-01T00:00:00.000Z',
    });
  }
}

describe('--once: the summary never carries the API key', () => {
  it('not even when a hostile service echoes it in an id and a path', async () => {
    const server = await startMockServer({ apiKeys: [KEY] });
    try {
      listKeyEchoes(server);
      const file = await writeConfig({ server: { baseUrl: server.url, timeoutSeconds: 5 } });
      for (const extra of [['--dry-run'], [], ['--json']]) {
        const io = bufferedIo({ CONFIG_AGENT_API_KEY: KEY });
        await run(['--once', '--config', file, ...extra], io);
        // Both are refused (misc25: the id; fix30: the path), named without the key; a dry run plans neither.
        if (extra[0] !== '--dry-run') expect(io.out()).toContain("its id holds the agent's API key");
        expect(io.out()).not.toContain(KEY);
        expect(io.err()).not.toContain(KEY);
      }
    } finally {
      await server.close();
    }
  });
});

describe('the local API never carries the API key', () => {
  it('not in a sync answer nor in the status, when a hostile service echoes it in an id and a path', async () => {
    const server = await startMockServer({ apiKeys: [KEY] });
    const socketPath = path.join(dir, 'agent.sock');
    const events = new EventEmitter();
    try {
      listKeyEchoes(server);
      const configPath = await writeConfig({ server: { baseUrl: server.url, timeoutSeconds: 5 } });
      const io = bufferedIo({ CONFIG_AGENT_API_KEY: KEY });
      const exit = runAgent({ configPath }, io, createSecretRegistry(), events);
      await waitFor(() => callAgent(socketPath, 'GET', '/v1/health', PATIENCE_MS), PATIENCE_MS, {
        what: 'the socket',
      });
      const answers = [
        await callAgent(socketPath, 'POST', '/v1/sync', PATIENCE_MS),
        await callAgent(socketPath, 'GET', '/v1/status', PATIENCE_MS),
      ].map((answer) => JSON.stringify(answer.body));
      expect(answers[0]).toContain("its id holds the agent's API key");
      for (const answer of answers) expect(answer).not.toContain(KEY);
      events.emit('SIGTERM');
      expect(await exit).toBe(0);
      expect(io.err()).not.toContain(KEY);
    } finally {
      events.emit('SIGTERM');
      await server.close();
    }
  });
});

describe('runAgent: signals and reload', () => {
  it('SIGHUP with an invalid file keeps the running configuration; a valid one is applied; SIGTERM exits 0', async () => {
    const configPath = await writeConfig();
    const socketPath = path.join(dir, 'agent.sock');
    const io = bufferedIo({ CONFIG_AGENT_API_KEY: KEY });
    const events = new EventEmitter();
    const exit = runAgent({ configPath }, io, createSecretRegistry(), events);
    await waitFor(() => io.err().includes('"agent started"'), PATIENCE_MS, { what: 'the agent started' });
    await waitFor(() => callAgent(socketPath, 'GET', '/v1/health', PATIENCE_MS), PATIENCE_MS, {
      what: 'the socket',
    });

    await writeFile(configPath, '{"deviceId": ');
    events.emit('SIGHUP');
    await waitFor(() => io.err().includes('configuration reload failed'), PATIENCE_MS, {
      what: 'the failed reload',
    });
    const failed = io
      .err()
      .split('\n')
      .find((line) => line.includes('configuration reload failed'));
    expect(JSON.parse(failed ?? '{}')).toMatchObject({
      level: 'error',
      reason: expect.stringMatching(/JSON/),
    });
    expect((await callAgent(socketPath, 'GET', '/v1/status', PATIENCE_MS)).body).toMatchObject({
      deviceId: 'dvc_compose',
    });

    await writeConfig({ deviceId: 'dvc_compose_renamed' });
    events.emit('SIGHUP');
    await waitFor(() => io.err().includes('"configuration reloaded"'), PATIENCE_MS, { what: 'the reload' });
    expect((await callAgent(socketPath, 'GET', '/v1/status', PATIENCE_MS)).body).toMatchObject({
      deviceId: 'dvc_compose_renamed',
    });

    events.emit('SIGTERM');
    expect(await exit).toBe(0);
    expect(io.err()).toContain('"stopped"');
    expect(io.err()).not.toContain(KEY);
    expect(io.out()).toBe('');
  });

  // A clean-up of /run or an operator's rm took the socket file: the agent went on listening on the unlinked
  // socket, and no application (nor `config-agent status`) could reach it again until a restart.
  it('SIGHUP makes the socket again when its file was removed under the running agent', async () => {
    const configPath = await writeConfig();
    const socketPath = path.join(dir, 'agent.sock');
    const io = bufferedIo({ CONFIG_AGENT_API_KEY: KEY });
    const events = new EventEmitter();
    const exit = runAgent({ configPath }, io, createSecretRegistry(), events);
    try {
      await waitFor(() => io.err().includes('"agent started"'), PATIENCE_MS, { what: 'the agent started' });
      await waitFor(() => callAgent(socketPath, 'GET', '/v1/health', PATIENCE_MS), PATIENCE_MS, {
        what: 'the socket',
      });
      await rm(socketPath);
      events.emit('SIGHUP');
      await waitFor(() => io.err().includes('"configuration reloaded"'), PATIENCE_MS, { what: 'the reload' });
      // A new connection: the http agent's kept-alive one reaches the unlinked socket still.
      expect(await connects(socketPath)).toBe(true);
      events.emit('SIGTERM');
      expect(await exit).toBe(0);
    } finally {
      events.emit('SIGTERM');
    }
  });

  it('a SIGHUP right after SIGTERM does not listen again: exit 0, no socket left behind', async () => {
    const configPath = await writeConfig();
    const socketPath = path.join(dir, 'agent.sock');
    const io = bufferedIo({ CONFIG_AGENT_API_KEY: KEY });
    const events = new EventEmitter();
    const exit = runAgent({ configPath }, io, createSecretRegistry(), events);
    await waitFor(() => io.err().includes('"agent started"'), PATIENCE_MS, { what: 'the agent started' });
    events.emit('SIGTERM');
    events.emit('SIGHUP');
    expect(await exit).toBe(0);
    // The reload ends with one of these lines (before the fix: reloaded, listening again).
    await waitFor(
      () => /the local API stays closed|"configuration reloaded"|configuration reload failed/.test(io.err()),
      PATIENCE_MS,
      { what: 'the end of the reload' },
    );
    expect(await connects(socketPath)).toBe(false);
    expect(existsSync(socketPath)).toBe(false);
  });

  it('a SIGTERM that arrives while starting stops the agent once started', async () => {
    const configPath = await writeConfig();
    const io = bufferedIo({ CONFIG_AGENT_API_KEY: KEY });
    const events = new EventEmitter();
    const exit = runAgent({ configPath }, io, createSecretRegistry(), events);
    events.emit('SIGTERM');
    expect(await exit).toBe(0);
    expect(
      JSON.parse(
        io
          .err()
          .split('\n')
          .find((line) => line.includes('shutdown requested')) ?? '{}',
      ),
    ).toMatchObject({
      signal: 'SIGTERM',
    });
    expect(io.err()).toContain('"stopped"');
  });
});

describe('runAgent: a full stateDir at start', () => {
  // Exit 1 let systemd restart the agent, but 10 starts in 10 minutes left the unit failed for good
  // (StartLimitBurst): a disk full for a minute at boot left the device unmanaged after space came back.
  it('is waited out in-process, not exited: a stop while waiting exits 0; once space is back the agent starts (at once on SIGHUP)', async (ctx) => {
    const stateDir = path.join(dir, 'state');
    await mkdir(stateDir, { mode: 0o700 });
    const refused = tryMount(['-t', 'tmpfs', '-o', 'mode=0700,size=16k', 'tmpfs', stateDir]);
    if (refused !== undefined) {
      ctx.skip(refused);
      return;
    }
    const events = new EventEmitter();
    const second = new EventEmitter();
    try {
      // Fill the tmpfs: a filler written until ENOSPC.
      const filler = path.join(stateDir, 'filler');
      await writeFile(filler, Buffer.alloc(64 * 1024)).catch(() => undefined);
      const configPath = await writeConfig();
      const retry = { firstDelayMs: 20, maxDelayMs: 40 };

      const stopped = bufferedIo({ CONFIG_AGENT_API_KEY: KEY });
      const exitWhileWaiting = runAgent({ configPath }, stopped, createSecretRegistry(), events, retry);
      await waitFor(() => stopped.err().split('cannot start yet').length > 2, PATIENCE_MS, {
        what: 'two attempts',
      });
      expect(stopped.err()).toContain('no space left on device (ENOSPC)');
      events.emit('SIGTERM');
      expect(await exitWhileWaiting).toBe(0);

      // The next attempt an hour away: the operator who freed space sends SIGHUP, and it starts at once.
      const io = bufferedIo({ CONFIG_AGENT_API_KEY: KEY });
      const hourly = { firstDelayMs: 3_600_000, maxDelayMs: 3_600_000 };
      const exit = runAgent({ configPath }, io, createSecretRegistry(), second, hourly);
      await waitFor(() => io.err().includes('cannot start yet'), PATIENCE_MS, { what: 'a first attempt' });
      await rm(filler);
      second.emit('SIGHUP');
      await waitFor(() => io.err().includes('"agent started"'), PATIENCE_MS, { what: 'the agent started' });
      second.emit('SIGTERM');
      expect(await exit).toBe(0);
      expect(io.err()).not.toContain(KEY);
    } finally {
      events.emit('SIGTERM');
      second.emit('SIGTERM');
      unmount(stateDir);
    }
  });
});

describe('runAgent: stateDir locked by another live agent at start', () => {
  // An operator's `config-agent --once` running when the service starts (at boot, after an upgrade): the daemon
  // exited 1, systemd restarted it every 5 s, and a run longer than the start limit (10 starts) left the unit
  // failed for good.
  it('is waited out in-process: the agent starts once the other lets go; a stop while waiting exits 0', async () => {
    const stateDir = path.join(dir, 'state');
    await mkdir(stateDir, { mode: 0o700 });
    // The other agent is the parent process (alive to the probe), with its own start time (field 22 of its stat).
    const stat = await readFile(`/proc/${process.ppid}/stat`, 'utf8');
    const procStart = stat.slice(stat.lastIndexOf(')') + 2).split(' ')[19] ?? '';
    const other = await acquireStateLock(nodeFs, stateDir, {
      self: async () => ({ pid: process.ppid, procStart }),
      alive: linuxProcessProbe.alive,
    });
    const events = new EventEmitter();
    const second = new EventEmitter();
    try {
      const configPath = await writeConfig();
      const retry = { firstDelayMs: 20, maxDelayMs: 40 };
      const stopped = bufferedIo({ CONFIG_AGENT_API_KEY: KEY });
      const exitWhileWaiting = runAgent({ configPath }, stopped, createSecretRegistry(), events, retry);
      await waitFor(() => stopped.err().split('cannot start yet').length > 2, PATIENCE_MS, {
        what: 'two attempts',
      });
      expect(stopped.err()).toContain(`another config-agent (pid ${process.ppid})`);
      events.emit('SIGTERM');
      expect(await exitWhileWaiting).toBe(0);

      const io = bufferedIo({ CONFIG_AGENT_API_KEY: KEY });
      const exit = runAgent({ configPath }, io, createSecretRegistry(), second, retry);
      await waitFor(() => io.err().includes('cannot start yet'), PATIENCE_MS, { what: 'a first attempt' });
      await other.release();
      await waitFor(() => io.err().includes('"agent started"'), PATIENCE_MS, { what: 'the agent started' });
      second.emit('SIGTERM');
      expect(await exit).toBe(0);
    } finally {
      events.emit('SIGTERM');
      second.emit('SIGTERM');
      await other.release();
    }
  });
});

describe.runIf(canMountFuse)('runAgent: a stop while start-up hangs on rootDir', () => {
  let child: ChildProcess | undefined;
  afterEach(() => {
    child?.kill('SIGKILL');
    spawnSync('umount', ['-l', path.join(dir, 'hung')]);
  });

  // rootDir on a dead NFS server or a wedged FUSE daemon: start-up's realpath of it waits in the kernel for
  // good. A SIGTERM was only acted on once started, so the agent ran on until systemd's SIGKILL.
  it('exits 1 at the stop deadline, while the mount still hangs', async () => {
    const mountPoint = path.join(dir, 'hung');
    await mkdir(mountPoint);
    child = await hungFuseMount(mountPoint, 30_000);
    const configPath = await writeConfig({ rootDir: path.join(mountPoint, 'root') });
    const io = bufferedIo({ CONFIG_AGENT_API_KEY: KEY });
    const events = new EventEmitter();
    const retry = { firstDelayMs: 20, maxDelayMs: 40, stopDeadlineMs: 100 };
    const exit = runAgent({ configPath }, io, createSecretRegistry(), events, retry);
    events.emit('SIGTERM');
    expect(await exit).toBe(1);
    expect(child.exitCode === null && child.signalCode === null, 'the mount still hangs').toBe(true);
    expect(io.err()).toBe(
      'config-agent: SIGTERM: start-up has not finished after 0.1 s (a hung file system under rootDir or stateDir?): exiting without it\n',
    );
  }, 20_000);
});

describe('reconcilerSettings', () => {
  it("hands the daemon's poll interval to the retry policy (device conditions wait for it), not --once's", () => {
    const config = parseAgentConfig(
      {
        deviceId: 'dvc_unit',
        server: { baseUrl: 'https://dcds.example.com' },
        rootDir: '/srv/config',
        stateDir: '/var/lib/config-agent',
        retry: { baseDelaySeconds: 0.001, maxDelaySeconds: 0.001 },
        poll: { intervalSeconds: 45 },
      },
      'compose.test',
    );
    expect(reconcilerSettings(config, 0, true, undefined).retry).toMatchObject({ pollIntervalSeconds: 45 });
    expect(reconcilerSettings(config, 0, false, undefined).retry.pollIntervalSeconds).toBeUndefined();
  });
});
