// Daemon lifecycle: SIGTERM/SIGINT exit 0 in time with no temp file; SIGHUP reloads; unhandled errors exit 1 with a fatal line.
import { readFileSync } from 'node:fs';
import { readdir, readFile, readlink, stat, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { pathToFileURL } from 'node:url';
import { afterEach, describe, expect, it } from 'vitest';
import { launcherScript } from '../../packaging/launcher.mjs';
import type { Fixtures } from '../../src/api/admin-schemas.js';
import { STRAY_SIGNALS } from '../../src/cli/stray-signals.js';
import { callLocalApi, DaemonProcess, findTempFiles, killAllDaemons } from '../helpers/daemon.js';
import { AGENT_BIN, AgentHarness, REPO_ROOT } from '../helpers/harness.js';
import { LIST_PATH } from '../helpers/outage.js';
import { PATIENCE_MS, waitFor } from '../helpers/wait-for.js';

/** package.json's version: what `dist/main.js`, the entry these tests start, reads beside it. */
const PACKAGE_VERSION = (
  JSON.parse(readFileSync(new URL('../../package.json', import.meta.url), 'utf8')) as { version: string }
).version;

/** systemd SIGKILLs a unit that has not stopped after TimeoutStopSec: the agent must exit on its own before. */
const STOP_TIMEOUT_MS =
  Number(
    /^TimeoutStopSec=(\d+)$/m.exec(
      readFileSync(path.join(REPO_ROOT, 'systemd/config-agent.service'), 'utf8'),
    )?.[1],
  ) * 1000;

let harness: AgentHarness | undefined;

afterEach(async () => {
  await killAllDaemons();
  await harness?.close();
  harness = undefined;
});

async function exists(file: string): Promise<boolean> {
  return stat(file).then(
    () => true,
    () => false,
  );
}

/** Many queued instances with sizeable content, so the first pass spends a while writing. */
function bulkFixtures(deviceId: string, count: number): Fixtures {
  return {
    devices: [{ id: deviceId }],
    config_instances: Array.from({ length: count }, (_, n) => ({
      id: `cfg_bulk_${String(n).padStart(4, '0')}`,
      device_id: deviceId,
      relative_filepath: `bulk/${String(n).padStart(4, '0')}.json`,
      content: { n, padding: 'x'.repeat(16_384) },
      target_status: 'deployed' as const,
      activity_status: 'queued' as const,
    })),
  };
}

function bulkBytes(n: number): string {
  return `${JSON.stringify({ n, padding: 'x'.repeat(16_384) }, null, 2)}\n`;
}

describe('start', () => {
  it('exits 78 on an invalid configuration, so systemd does not restart it in a loop', async () => {
    const h = await AgentHarness.create({ registerDevice: true });
    harness = h;
    await h.writeConfig({ poll: { intervalSeconds: 10, jitterRatio: 0.1, fullResyncSeconds: 5 } });
    const daemon = DaemonProcess.start(h);
    const exit = await daemon.waitForExit(PATIENCE_MS);
    expect(exit.code).toBe(78);
    expect(daemon.stderr).toContain('fullResyncSeconds');
  });
});

describe('SIGUSR1', () => {
  // Node's default opened its inspector on 127.0.0.1:9229, unauthenticated: any local user could connect and
  // run code as the agent (read the API key; root in many installs).
  it('opens no inspector: logged and ignored, the agent goes on and stops with exit 0', async () => {
    harness = await AgentHarness.create({
      registerDevice: true,
      config: { poll: { intervalSeconds: 1, jitterRatio: 0.1, fullResyncSeconds: 600 } },
    });
    const daemon = DaemonProcess.start(harness);
    await daemon.waitForPasses(1, PATIENCE_MS);
    daemon.signal('SIGUSR1');
    // Before: Node's inspector answered instead ("Debugger listening on ws://127.0.0.1:9229/...").
    await waitFor(
      () => daemon.stderr.includes('inspector') || daemon.stderr.includes('Debugger listening'),
      PATIENCE_MS,
      { what: 'the answer to SIGUSR1' },
    );
    expect(daemon.logsWith(/^SIGUSR1 ignored/)).toHaveLength(1);
    expect(daemon.stderr).not.toContain('Debugger listening');
    expect(await listeningTcpSockets(daemon.child.pid ?? 0)).toEqual([]);
    const passes = daemon.passes().length;
    await daemon.waitForPasses(1, PATIENCE_MS, { after: passes });
    expect((await daemon.stop()).code).toBe(0);
  });
});

describe('signals the agent has no use for', () => {
  // Their default action ended the daemon (exit by signal, or a core dump for SIGTRAP): systemd restarted it
  // 30 s later, configs unwatched meanwhile. Each is now ignored with one line; the agent goes on.
  it('SIGUSR2, SIGALRM, SIGIO, SIGPWR, SIGTRAP, SIGVTALRM, SIGSTKFLT: one line each, passes go on, exit 0', async () => {
    harness = await AgentHarness.create({
      registerDevice: true,
      config: { poll: { intervalSeconds: 1, jitterRatio: 0.1, fullResyncSeconds: 600 } },
    });
    const daemon = DaemonProcess.start(harness);
    await daemon.waitForPasses(1, PATIENCE_MS);
    for (const signal of STRAY_SIGNALS) {
      daemon.signal(signal);
      // Fails at once, with the log tail, when the signal ended the daemon (before: each of them did).
      await daemon.waitForLog((line) => line.msg.startsWith(`${signal} ignored`), PATIENCE_MS, signal);
      expect(daemon.logsWith(new RegExp(`^${signal} ignored`))).toMatchObject([
        { level: 'warn', signal, count: 1 },
      ]);
    }
    const passes = daemon.passes().length;
    await daemon.waitForPasses(1, PATIENCE_MS, { after: passes });
    expect((await daemon.stop()).code).toBe(0);
  });
});

describe('real-time signals (34-64)', () => {
  // Node can neither listen to them nor ignore them: the packages' launcher starts the daemon with them ignored
  // (packaging/launcher.mjs REAL_TIME_SIGNALS), and the agent keeps them so. Before, kill -RTMIN ended it.
  it('do not end the daemon started by the launcher: passes go on, SIGTERM exits 0', async () => {
    harness = await AgentHarness.create({
      registerDevice: true,
      config: { poll: { intervalSeconds: 1, jitterRatio: 0.1, fullResyncSeconds: 600 } },
    });
    const launcher = path.join(harness.dir, 'config-agent');
    await writeFile(
      launcher,
      launcherScript({ interpreter: process.execPath, mainJs: AGENT_BIN, runtime: 'a test' }),
      { mode: 0o755 },
    );
    const daemon = DaemonProcess.start(harness, {}, { node: '/bin/sh', bin: launcher });
    await daemon.waitForPasses(1, PATIENCE_MS);
    for (const signal of [34, 35, 50, 64]) process.kill(daemon.child.pid!, signal);
    const passes = daemon.passes().length;
    // Times out with the stderr tail when a signal ended the daemon (it did at 34 before).
    await daemon.waitForPasses(2, PATIENCE_MS, { after: passes });
    expect((await daemon.stop()).code).toBe(0);
  });
});

describe('a profiled daemon', () => {
  // SIGPROF is V8's sampling profiler's own signal: with a listener on it (ee83783 ignored it as a stray) libuv's
  // handler took the profiler's ticks, and a profile of the daemon (--cpu-prof, the inspector's Profiler) held 1-5
  // samples instead of hundreds; a process ending without process.exit then died of it (exit 155).
  it("keeps V8's profiler working: a profile taken until its stop holds its samples", async () => {
    harness = await AgentHarness.create({
      registerDevice: true,
      config: { poll: { intervalSeconds: 1, jitterRatio: 0.1, fullResyncSeconds: 600 } },
    });
    const preload = path.join(harness.dir, 'profile.mjs');
    const out = path.join(harness.dir, 'samples');
    await writeFile(
      preload,
      [
        "import { writeFileSync } from 'node:fs';",
        "import { Session } from 'node:inspector';",
        'const session = new Session();',
        'session.connect();',
        "session.post('Profiler.enable');",
        "session.post('Profiler.setSamplingInterval', { interval: 1000 });",
        "session.post('Profiler.start');",
        "process.on('exit', () => {",
        "  session.post('Profiler.stop', (error, result) => {",
        `    writeFileSync(${JSON.stringify(out)}, String(error ? -1 : result.profile.samples.length));`,
        '  });',
        '});',
        '',
      ].join('\n'),
    );
    const daemon = DaemonProcess.start(harness, { NODE_OPTIONS: `--import=${pathToFileURL(preload).href}` });
    await daemon.waitForPasses(2, PATIENCE_MS);
    expect((await daemon.stop()).code).toBe(0);
    // A sample a millisecond over a life of more than one poll interval: hundreds; 1-5 before.
    expect(Number(await readFile(out, 'utf8'))).toBeGreaterThan(50);
  });
});

/** The TCP sockets process `pid` listens on (state 0A in /proc/net/tcp and tcp6, matched by inode). */
async function listeningTcpSockets(pid: number): Promise<string[]> {
  const inodes = new Set<string>();
  for (const fd of await readdir(`/proc/${pid}/fd`)) {
    const target = await readlink(`/proc/${pid}/fd/${fd}`).catch(() => '');
    const inode = /^socket:\[(\d+)\]$/.exec(target)?.[1];
    if (inode !== undefined) inodes.add(inode);
  }
  const listening: string[] = [];
  for (const table of ['/proc/net/tcp', '/proc/net/tcp6']) {
    const text = await readFile(table, 'utf8').catch(() => '');
    for (const line of text.split('\n').slice(1)) {
      const fields = line.trim().split(/\s+/);
      if (fields[3] === '0A' && inodes.has(fields[9] ?? '')) listening.push(fields[1] ?? '');
    }
  }
  return listening;
}

describe('SIGTERM', () => {
  it.each(['SIGTERM', 'SIGINT'] as const)(
    '%s when idle: exits 0 promptly and removes its socket',
    async (signal) => {
      harness = await AgentHarness.create({
        registerDevice: true,
        config: { poll: { intervalSeconds: 1, jitterRatio: 0.1, fullResyncSeconds: 600 } },
      });
      const daemon = DaemonProcess.start(harness);
      await daemon.waitForPasses(1, PATIENCE_MS);
      const socketPath = harness.configObject().socketPath as string;
      await waitFor(() => exists(socketPath), PATIENCE_MS, { what: 'the socket' });

      // Stopped by itself within the unit's TimeoutStopSec (the helper SIGKILLs after it, as systemd would).
      const exit = await daemon.stop(signal, STOP_TIMEOUT_MS);
      expect(exit).toMatchObject({ code: 0, signal: null });
      expect(await exists(socketPath)).toBe(false);
      expect(daemon.logsWith('shutdown requested')).toMatchObject([{ signal }]);
      expect(daemon.logsWith('stopped')).toHaveLength(1);
    },
  );

  it(
    'mid-write: exits 0 before TimeoutStopSec, every file on disk whole, no temp file, and the next start completes',
    async () => {
      // Enough files that the pass is still writing when SIGTERM lands, even on a fast tmpfs or when this
      // process gets the CPU late on a busy machine.
      const count = 400;
      const h = await AgentHarness.create({
        fixtures: bulkFixtures('dvc_it_01', count),
        config: { poll: { intervalSeconds: 1, jitterRatio: 0.1, fullResyncSeconds: 600 } },
      });
      harness = h;
      const bulkDir = h.rootPath('bulk');
      const onDisk = async () => (await readdir(bulkDir).catch(() => [])).length;
      // Three interruptions: each lands somewhere in a write (temp file, fsync, rename, directory fsync).
      for (let round = 0; round < 3; round += 1) {
        const daemon = DaemonProcess.start(h);
        const atStart = await onDisk();
        // Stopped as soon as the first new file lands (or, should a pass have finished them all, once it has).
        await waitFor(
          async () => (await onDisk()) > atStart || daemon.passes().some((p) => p.converged),
          // The first write follows a start and a pull of some 7 MB: slow on a busy machine.
          4 * PATIENCE_MS,
          { what: `round ${round}: the pass writing`, intervalMs: 5 },
        );
        const exit = await daemon.stop('SIGTERM', STOP_TIMEOUT_MS);
        expect(exit).toMatchObject({ code: 0, signal: null });
        expect(await findTempFiles(h.rootDir)).toEqual([]);
        expect(await findTempFiles(h.stateDir)).toEqual([]);
      }
      const written = (await readdir(bulkDir)).sort();
      // The passes were abandoned part-way: if this fails, the machine wrote every file before SIGTERM landed.
      expect(written.length).toBeLessThan(count);
      for (const name of written) {
        expect(await readFile(`${bulkDir}/${name}`, 'utf8')).toBe(bulkBytes(Number(name.slice(0, 4))));
      }

      // State and outbox were flushed coherently: a new agent finishes the job and reports each instance once.
      const next = DaemonProcess.start(h);
      // Hundreds of writes and reports: on a busy machine this one pass takes a while.
      await next.waitForPasses(1, 4 * PATIENCE_MS, { predicate: (p) => p.converged });
      expect(await readdir(bulkDir)).toHaveLength(count);
      const reports = await h.reports();
      // Stopping is not a failure of the file being written: no attempt burnt, no error reported to the service.
      expect(
        reports.filter((r) => r.error_status !== 'none'),
        'an abandoned write must not be reported as an instance error',
      ).toEqual([]);
      const deployed = reports
        .filter((r) => r.activity_status === 'deployed')
        .map((r) => r.config_instance_id);
      expect(new Set(deployed).size).toBe(count);
      expect(deployed).toHaveLength(count);
    },
    20 * PATIENCE_MS,
  );

  it('mid-request: a hanging service does not hold the exit back', async () => {
    const h = await AgentHarness.create({ registerDevice: true });
    harness = h;
    await h.writeConfig({ poll: { intervalSeconds: 1, jitterRatio: 0.1, fullResyncSeconds: 600 } });
    await h.createAndDeploy({ relative_filepath: 'a.json', content: { a: 1 } });
    const daemon = DaemonProcess.start(h);
    await daemon.waitForPasses(1, PATIENCE_MS, { predicate: (p) => p.converged });
    await h.fault({ match: LIST_PATH, count: 100, mode: 'hang' });
    // The harness's request timeout is 5 s: wait until a poll is stuck in the hang.
    await waitFor(
      async () => {
        const { data } = (await h.api('GET', '/_admin/faults')) as { data: { remaining: number }[] };
        return (data[0]?.remaining ?? 100) < 100;
      },
      PATIENCE_MS,
      { what: 'a poll hanging' },
    );
    const exit = await daemon.stop('SIGTERM', STOP_TIMEOUT_MS);
    expect(exit).toMatchObject({ code: 0, signal: null });
    expect(await findTempFiles(h.rootDir)).toEqual([]);
  });
});

/**
 * A module preloaded into the agent (NODE_OPTIONS=--import) that raises `body` in a timer on SIGUSR2: the test
 * sends it once the agent has started, so the error always meets the running agent, never the start-up path.
 */
async function crashingPreload(dir: string, body: string): Promise<NodeJS.ProcessEnv> {
  const file = path.join(dir, 'throw.mjs');
  await writeFile(file, `process.on('SIGUSR2', () => setTimeout(() => { ${body} }, 0));\n`);
  return { NODE_OPTIONS: `--import=${pathToFileURL(file).href}` };
}

describe('unhandled errors', () => {
  for (const [what, body, message] of [
    ['an unhandled rejection', "Promise.reject(new Error('boom'));", 'unhandled rejection'],
    ['an uncaught exception', "throw new Error('boom');", 'uncaught exception'],
  ] as const) {
    it(`${what} is logged as fatal and exits 1, so systemd restarts the agent`, async () => {
      const h = await AgentHarness.create({
        registerDevice: true,
        config: { poll: { intervalSeconds: 1, jitterRatio: 0.1, fullResyncSeconds: 600 } },
      });
      harness = h;
      const daemon = DaemonProcess.start(h, await crashingPreload(h.dir, body));
      const started = await daemon.waitForLog(
        (line) => line.msg === 'agent started',
        PATIENCE_MS,
        'the agent started',
      );
      // The journal names the version that runs (after an upgrade: which one), read beside the entry as installed.
      expect(started.version).toBe(PACKAGE_VERSION);
      await daemon.waitForPasses(1, PATIENCE_MS);

      daemon.signal('SIGUSR2');
      const exit = await daemon.waitForExit(PATIENCE_MS);

      expect(exit.signal).toBeNull();
      expect(exit.code).toBe(1);
      const fatal = daemon.logs.filter((line) => line.level === 'fatal');
      expect(fatal).toHaveLength(1);
      expect(fatal[0]?.msg).toContain(message);
      expect(fatal[0]?.err).toMatchObject({ message: 'boom' });
      expect(daemon.logsWith('stopped')).toEqual([]);
    });
  }
});

describe('SIGHUP', () => {
  it('reloads the poll interval and the drift mode', async () => {
    const h = await AgentHarness.create({ registerDevice: true });
    harness = h;
    // No jitter, a long interval and drift off: after the first pass, the agent does nothing on its own.
    await h.writeConfig({
      poll: { intervalSeconds: 60, jitterRatio: 0, fullResyncSeconds: 600 },
      drift: 'off',
    });
    await h.createAndDeploy({ relative_filepath: 'svc.json', content: { v: 1 } });
    const daemon = DaemonProcess.start(h);
    await daemon.waitForPasses(1, PATIENCE_MS, { predicate: (p) => p.converged });
    const bytes = await readFile(h.rootPath('svc.json'), 'utf8');

    await h.writeConfig({
      poll: { intervalSeconds: 1, jitterRatio: 0, fullResyncSeconds: 600 },
      drift: 'restore',
    });
    daemon.signal('SIGHUP');
    await daemon.waitForLog((line) => line.msg === 'configuration reloaded', PATIENCE_MS, 'the reload');
    const reloadedAt = daemon.passes().length;
    // The new interval: polls every second now, where the old one would wait a minute.
    await daemon.waitForPasses(3, PATIENCE_MS, { after: reloadedAt });

    // The new drift mode: the watcher is on, and repairs a changed file without waiting for a full pass.
    await writeFile(h.rootPath('svc.json'), '{"v": "hand edit"}\n');
    await waitFor(async () => (await readFile(h.rootPath('svc.json'), 'utf8')) === bytes, PATIENCE_MS, {
      what: 'the drift repaired under the reloaded mode',
    });
    expect(daemon.alive).toBe(true);
  });

  it('keeps the running configuration when the new file is invalid, and says why', async () => {
    const h = await AgentHarness.create({ registerDevice: true });
    harness = h;
    await h.writeConfig({ poll: { intervalSeconds: 1, jitterRatio: 0.1, fullResyncSeconds: 600 } });
    const daemon = DaemonProcess.start(h);
    await daemon.waitForPasses(1, PATIENCE_MS);

    await writeFile(h.configPath, '{ "deviceId": "dvc_it_01", ');
    daemon.signal('SIGHUP');
    const syntax = await daemon.waitForLog(
      (line) => /reload failed/.test(line.msg),
      PATIENCE_MS,
      'the failed reload',
    );
    expect(syntax).toMatchObject({ level: 'error' });
    expect(String(syntax.reason)).toMatch(/JSON|json/);

    await h.writeConfig({ poll: { intervalSeconds: 0, jitterRatio: 0.1, fullResyncSeconds: 600 } });
    daemon.signal('SIGHUP');
    const schema = await daemon.waitForLog(
      (line) => /reload failed/.test(line.msg) && line !== syntax,
      PATIENCE_MS,
      'the second failed reload',
    );
    expect(String(schema.reason)).toContain('intervalSeconds');

    // Still running, on the old configuration: it keeps polling every second and answers on its socket.
    await daemon.waitForPasses(2, PATIENCE_MS, { after: daemon.passes().length });
    expect(daemon.alive).toBe(true);
    // Over the socket directly: the CLI would first read the (now invalid) file to find the socket.
    const status = await callLocalApi(h.configObject().socketPath as string, 'GET', '/v1/status');
    expect(status).toMatchObject({ status: 200, body: { deviceId: 'dvc_it_01', running: true } });
    const exit = await daemon.stop('SIGTERM');
    expect(exit.code).toBe(0);
  });
});

describe('stdout and stderr gone (journald stopped, the terminal closed)', () => {
  it('keeps syncing, answers on its socket and stops with exit 0 on SIGTERM', async () => {
    const h = await AgentHarness.create({
      registerDevice: true,
      config: { poll: { intervalSeconds: 1, jitterRatio: 0.1, fullResyncSeconds: 600 } },
    });
    harness = h;
    const daemon = DaemonProcess.start(h);
    await daemon.waitForPasses(1, PATIENCE_MS);
    // The reading ends close: every later write of the agent to either fails with EPIPE. Each log line did, the
    // fatal handler logged that, which failed again: a nextTick loop at 100 % CPU that no signal or timer ended.
    daemon.child.stdout?.destroy();
    daemon.child.stderr?.destroy();
    await h.createAndDeploy({ relative_filepath: 'after.json', content: { logs: 'gone' } });

    const answer = await callLocalApi(h.configObject().socketPath as string, 'POST', '/v1/sync');
    expect(answer.status).toBe(200);
    expect(await readFile(h.rootPath('after.json'), 'utf8')).toBe(
      `${JSON.stringify({ logs: 'gone' }, null, 2)}\n`,
    );
    const exit = await daemon.stop('SIGTERM', STOP_TIMEOUT_MS);
    expect(exit).toMatchObject({ code: 0, signal: null });
    expect(await findTempFiles(h.rootDir)).toEqual([]);
  });
});
