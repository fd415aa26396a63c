// `config-agent doctor`'s localApi and mounts lines: what the running agent's socket answers, and each mount at or
// below rootDir the agent keeps as gone, with what to do; read only, bounded, no key shown.
import { linkSync, mkdirSync, mkdtempSync, readFileSync, realpathSync, rmSync, writeFileSync } from 'node:fs';
import { createServer as createHttpServer, type RequestListener } from 'node:http';
import { createServer as createNetServer, type Server, type Socket } from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { deadBelow } from '../../test/helpers/dead-below-fs.js';
import { doctorEnvironment, doctorOutput, writeDoctorConfig } from '../../test/helpers/doctor-config.js';
import type { DoctorEnvironment } from './doctor.js';
import { ExitCode } from './exit-codes.js';

const KEY = 'sk-doctor28-canary-key-0123456789';
const ACTIVE =
  'LoadState=loaded\nActiveState=active\nSubState=running\nUnitFileState=enabled\nResult=success\n';
const STOPPED =
  'LoadState=loaded\nActiveState=failed\nSubState=failed\nUnitFileState=enabled\nResult=exit-code\n';

const dirs: string[] = [];
const servers: Server[] = [];
const sockets: Socket[] = [];
afterEach(async () => {
  for (const socket of sockets.splice(0)) socket.destroy();
  for (const server of servers.splice(0)) {
    await new Promise((resolve) => server.close(resolve));
  }
  for (const dir of dirs.splice(0)) rmSync(dir, { recursive: true, force: true });
});

function scratch(): string {
  // Real: the mount table's paths are the kernel's.
  const dir = realpathSync(mkdtempSync(path.join(os.tmpdir(), 'config-agent-doctor28-')));
  dirs.push(dir);
  return dir;
}

/** doctor on a config in `dir` (socket dir/agent.sock, rootDir dir/root, stateDir dir/state); its lines by name. */
async function doctorIn(
  dir: string,
  unit: string,
  overrides: Partial<DoctorEnvironment> = {},
  fields: Record<string, unknown> = {},
) {
  const configPath = writeDoctorConfig(
    dir,
    { deviceId: 'dvc_doctor28', key: `${KEY}\n` },
    { rootDir: path.join(dir, 'root'), stateDir: path.join(dir, 'state'), ...fields },
  );
  const { code, out } = await doctorOutput(
    configPath,
    doctorEnvironment(dir, {
      systemctl: async () => ({ status: 0, stdout: unit }),
      // Far past any answer on a loaded machine: only the case of an agent that never answers shortens it.
      localApiAnswerMs: 10_000,
      ...overrides,
    }),
  );
  expect(out).not.toContain(KEY);
  const lines = (name: string) => out.split('\n').filter((line) => line.slice(6).startsWith(`${name} `));
  const failed = Number(/^(\d+) check\(s\) failed$/m.exec(out)?.[1] ?? 0);
  return { code, out, lines, line: (name: string) => lines(name)[0] ?? '', failed };
}

async function serveHttp(socketPath: string, handler: RequestListener): Promise<void> {
  const server = createHttpServer(handler);
  server.on('connection', (socket) => sockets.push(socket));
  servers.push(server);
  await new Promise<void>((resolve) => server.listen(socketPath, resolve));
}

describe('doctor: the local API (doctor28)', () => {
  it('fails when the running agent has no socket, naming the gauge, the log and the retry', async () => {
    const dir = scratch();
    const { line, code } = await doctorIn(dir, ACTIVE);
    expect(line('localApi')).toBe(
      `FAIL  localApi  no socket at ${dir}/agent.sock: config-agent.service runs without its local API, which ` +
        'could not start (status, sync and /v1/health cannot reach it; config_agent_local_api_up 0): ' +
        "journalctl -u config-agent.service -g 'local API' says why; the agent tries again every poll interval " +
        '(30 s), sudo systemctl reload config-agent at once',
    );
    expect(code).toBe(ExitCode.NotConverged);
  });

  it('passes when the agent answers healthy, counting what it says is degraded', async () => {
    const dir = scratch();
    await serveHttp(path.join(dir, 'agent.sock'), (_request, response) => {
      response.end(
        JSON.stringify({ healthy: true, degraded: ['hook a: its process ...'], lastLoopAt: null }),
      );
    });
    const { line, lines } = await doctorIn(dir, ACTIVE);
    expect(line('localApi')).toBe(
      `ok    localApi  ${dir}/agent.sock answers: healthy, degraded (1: config-agent status names each)`,
    );
    // No mount at or below rootDir was ever recorded: no mounts line.
    expect(lines('mounts')).toEqual([]);
  });

  it('fails a stalled agent (503) with its reason, and one that does not answer within the bound', async () => {
    const stalled = scratch();
    await serveHttp(path.join(stalled, 'agent.sock'), (_request, response) => {
      response.statusCode = 503;
      response.end(
        JSON.stringify({ healthy: false, reason: 'a reconcile pass has been running far too long' }),
      );
    });
    expect((await doctorIn(stalled, ACTIVE)).line('localApi')).toMatch(
      /^FAIL {2}localApi {2}\S+ answers: not healthy \(a reconcile pass has been running far too long\): systemd's watchdog restarts it/,
    );

    const silent = scratch();
    // Takes the connection and never answers, as an agent stopped by SIGSTOP (the kernel accepts for it).
    const server = createNetServer((socket) => sockets.push(socket));
    servers.push(server);
    await new Promise<void>((resolve) => server.listen(path.join(silent, 'agent.sock'), resolve));
    expect((await doctorIn(silent, ACTIVE, { localApiAnswerMs: 50 })).line('localApi')).toMatch(
      /^FAIL {2}localApi {2}\S+ took the connection but gave no whole answer within 0\.05 s: the agent is stopped \(SIGSTOP\)/,
    );
  });

  it('names what takes socketPath: a file, or a socket nobody listens on; leaves both as they are', async () => {
    const taken = scratch();
    writeFileSync(path.join(taken, 'agent.sock'), 'not a socket\n');
    expect((await doctorIn(taken, ACTIVE)).line('localApi')).toMatch(
      /^FAIL {2}localApi {2}\S+agent\.sock is a regular file, not the agent's socket: the agent cannot listen there .*Move it away/,
    );
    expect(readFileSync(path.join(taken, 'agent.sock'), 'utf8')).toBe('not a socket\n');

    const stale = scratch();
    const socketPath = path.join(stale, 'agent.sock');
    // A socket left by a listener that is gone: a second name of it kept while the first is closed (and unlinked).
    const gone = createNetServer();
    await new Promise<void>((resolve) => gone.listen(path.join(stale, 'gone.sock'), resolve));
    linkSync(path.join(stale, 'gone.sock'), socketPath);
    await new Promise((resolve) => gone.close(resolve));
    const { line } = await doctorIn(stale, ACTIVE);
    expect(line('localApi')).toMatch(
      /^FAIL {2}localApi {2}\S+agent\.sock is a socket nobody listens on .*runs without its local API.*remove it/,
    );
  });

  it('does not ask while the unit is not running (a warn line, not counted), nor on a mount that does not answer', async () => {
    const dir = scratch();
    const stopped = await doctorIn(dir, STOPPED);
    expect(stopped.line('localApi')).toBe(
      `warn  localApi  ${dir}/agent.sock not asked: config-agent.service is not running`,
    );
    // A warn line is not counted: the same failures as with no such line.
    expect(stopped.failed).toBe(stopped.out.split('\n').filter((each) => each.startsWith('FAIL')).length);

    const hung = scratch();
    const dead = path.join(hung, 'run');
    mkdirSync(dead);
    const { fs, calls, ask, asks } = deadBelow([dead]);
    const result = await doctorIn(
      hung,
      ACTIVE,
      {
        placesFs: fs,
        mountTable: { mountinfo: async () => `90 27 0:60 / ${dead} rw - fuse dead rw` },
        mountAnswerMs: 50,
        askElsewhere: ask,
      },
      { socketPath: path.join(dead, 'agent.sock') },
    );
    expect(result.line('localApi')).toBe(
      `FAIL  localApi  ${dead}/agent.sock not judged: ETIMEDOUT: the mount at ${dead} did not answer within 0.1 s ` +
        '(a dead NFS server, a wedged FUSE daemon?): its files wait until it answers',
    );
    expect(asks.get(dead)).toBe(1);
    expect(calls.has(dead)).toBe(false);
  });
});

/** A mountinfo line of an ext4 filesystem of its own at `mountPoint` (as a data disk shows). */
const disk = (id: number, mountPoint: string) =>
  `${id} 1 8:${id} / ${mountPoint} rw,relatime - ext4 /dev/sd${id} rw`;

/** Writes stateDir/root-mount.json as the agent does; its text, to compare after doctor. */
function record(dir: string, fields: Record<string, unknown>): string {
  mkdirSync(path.join(dir, 'state'), { recursive: true, mode: 0o700 });
  const text = JSON.stringify({ rootDir: path.join(dir, 'root'), ...fields });
  writeFileSync(path.join(dir, 'state/root-mount.json'), text, { mode: 0o600 });
  return text;
}

describe('doctor: mounts at and below rootDir the agent keeps as gone (doctor28)', () => {
  it('fails each mount below rootDir kept as gone, saying what waits and what to do; the record unchanged', async () => {
    const dir = scratch();
    const root = path.join(dir, 'root');
    for (const sub of ['data', 'sd']) mkdirSync(path.join(root, sub), { recursive: true });
    const before = record(dir, { mountPoint: false, below: ['data', 'sd', 'usb'] });
    const { lines, code } = await doctorIn(dir, STOPPED, {
      // data is mounted (the table lists it), sd left its bare directory, usb is not there at all.
      mountTable: { mountinfo: async () => disk(91, `${root}/data`) },
    });
    const file = `${dir}/state/root-mount.json`;
    expect(lines('mounts')).toEqual([
      `FAIL  mounts    ${root}/sd is no mount point any more (it was one: ${file}) and its bare directory is left: ` +
        'the agent keeps it as gone, so every file under it waits (retrying), a new instance placed there too, ' +
        `until it is mounted again. Mount it again (mount ${root}/sd), or, to keep those files on rootDir's own ` +
        `filesystem, give it up: delete "sd" from "below" in ${file}, then sudo systemctl restart config-agent`,
      `FAIL  mounts    ${root}/usb was a mount point below rootDir and is not there at all now: files the agent ` +
        'manages under it wait (retrying); if it holds none, the agent forgets it at its next full pass. Mount it ' +
        `again, or give it up: delete "usb" from "below" in ${file}, then sudo systemctl restart config-agent`,
    ]);
    expect(code).toBe(ExitCode.NotConverged);
    expect(readFileSync(file, 'utf8')).toBe(before);
  });

  it('passes when every recorded mount is mounted, and says nothing when none was ever recorded', async () => {
    const dir = scratch();
    const root = path.join(dir, 'root');
    for (const sub of ['data', 'sd']) mkdirSync(path.join(root, sub), { recursive: true });
    record(dir, { mountPoint: false, below: ['data', 'sd'] });
    const mounted = await doctorIn(dir, STOPPED, {
      mountTable: { mountinfo: async () => [disk(91, `${root}/data`), disk(92, `${root}/sd`)].join('\n') },
    });
    expect(mounted.lines('mounts')).toEqual([
      'ok    mounts    the 2 mount point(s) below rootDir the agent watches are mounted (data, sd)',
    ]);

    const none = scratch();
    mkdirSync(path.join(none, 'root'));
    expect((await doctorIn(none, STOPPED)).lines('mounts')).toEqual([]);
  });

  it("fails rootDir's own mount kept as gone: every file waits", async () => {
    const dir = scratch();
    mkdirSync(path.join(dir, 'root'));
    record(dir, { mountPoint: true, ownMount: true });
    const { lines } = await doctorIn(dir, STOPPED, { mountTable: { mountinfo: async () => '' } });
    const file = `${dir}/state/root-mount.json`;
    expect(lines('mounts')).toEqual([
      `FAIL  mounts    rootDir ${dir}/root is no mount point, and was one when the agent last saw it (${file}): ` +
        'mount it again, or remove that file to use the directory as it is. Every file under rootDir waits ' +
        `(retrying) meanwhile; after removing ${file}: sudo systemctl restart config-agent`,
    ]);
  });
});
