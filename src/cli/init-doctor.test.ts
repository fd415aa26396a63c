// config-agent init and doctor against the mock service on loopback, in a scratch /etc: files, owners, modes, verdicts.
import { spawnSync } from 'node:child_process';
import {
  chmodSync,
  chownSync,
  existsSync,
  mkdirSync,
  mkdtempSync,
  readFileSync,
  rmSync,
  statSync,
  writeFileSync,
} from 'node:fs';
import { createServer as createHttpServer } from 'node:http';
import { createServer, type Server } from 'node:https';
import type { AddressInfo } from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { Readable } from 'node:stream';
import { afterAll, beforeAll, describe, expect, it, onTestFinished } from 'vitest';
import { textSink } from '../../test/helpers/text-sink.js';
import { type RunningMockServer, startMockServer } from '../mock-server/server.js';
import { type DoctorEnvironment, runDoctor, type SystemctlResult } from './doctor.js';
import { type InitCommand, type InitEnvironment, runInit } from './init.js';

const isRoot = process.getuid?.() === 0;
const KEY = 'sk_test_init_0123456789abcdef';
const DEVICE = 'dvc_init_01';
const UID = 4241;
const GID = 4242;
const BASE = mkdtempSync(path.join(os.tmpdir(), 'config-agent-init-'));

let server: RunningMockServer;
beforeAll(async () => {
  server = await startMockServer({
    port: 0,
    apiKeys: [KEY],
    fixtures: { devices: [{ id: DEVICE, name: 'robot' }] },
  });
});
afterAll(async () => {
  await server.close();
  rmSync(BASE, { recursive: true, force: true });
});

const capture = textSink;

/** A scratch system: its own etc (passwd, group, config dir) and drop-in directory. */
function scratch() {
  const dir = mkdtempSync(path.join(BASE, 'sys-'));
  mkdirSync(path.join(dir, 'etc'));
  const passwd = path.join(dir, 'etc/passwd');
  const group = path.join(dir, 'etc/group');
  spawnSync('sh', [
    '-c',
    `printf 'root:x:0:0::/root:/bin/sh\\nconfig-agent:x:${UID}:${GID}::/var/lib/config-agent:/usr/sbin/nologin\\n' > ${passwd}`,
  ]);
  spawnSync('sh', ['-c', `printf 'root:x:0:\\nconfig-agent:x:${GID}:\\n' > ${group}`]);
  return {
    dir,
    configPath: path.join(dir, 'etc/config-agent/config.json'),
    keyPath: path.join(dir, 'etc/config-agent/api-key'),
    rootDir: path.join(dir, 'srv/config-agent'),
    stateDir: path.join(dir, 'var/lib/config-agent'),
    env: (stdin = ''): InitEnvironment => ({
      stdin: Readable.from([stdin]),
      stdinIsTty: false,
      groupFile: group,
      passwdFile: passwd,
      dropInDir: path.join(dir, 'etc/systemd/system/config-agent.service.d'),
      checkTimeoutMs: 5_000,
      uid: process.getuid?.(),
    }),
  };
}

async function init(command: InitCommand, env: InitEnvironment) {
  const stdout = capture();
  const stderr = capture();
  const code = await runInit(
    command,
    { stdout: stdout.stream, stderr: stderr.stream, env: {}, isTty: false },
    env,
  );
  return { code, stdout: stdout.text(), stderr: stderr.text() };
}

const owner = (file: string) => {
  const stats = statSync(file);
  return `${(stats.mode & 0o7777).toString(8).padStart(4, '0')} ${stats.uid}:${stats.gid}`;
};

describe.skipIf(!isRoot)('config-agent init (skipped unless root: it chowns to config-agent)', () => {
  it('writes config and key with their owners and modes from flags and stdin, checks the device, prints the next command', async () => {
    const sys = scratch();
    const result = await init(
      {
        configPath: sys.configPath,
        deviceId: DEVICE,
        baseUrl: server.url,
        rootDir: sys.rootDir,
        apiKeyFile: '-',
      },
      sys.env(`${KEY}\n`),
    );
    expect(result.stderr).toBe('');
    expect(result.code).toBe(0);
    expect(owner(path.dirname(sys.configPath))).toBe(`0750 0:${GID}`);
    expect(owner(sys.configPath)).toBe(`0640 0:${GID}`);
    expect(owner(sys.keyPath)).toBe('0600 0:0');
    expect(owner(sys.rootDir)).toBe(`0755 ${UID}:${GID}`);
    expect(readFileSync(sys.keyPath, 'utf8')).toBe(`${KEY}\n`);
    expect(JSON.parse(readFileSync(sys.configPath, 'utf8'))).toEqual({
      deviceId: DEVICE,
      server: { baseUrl: server.url, apiKeyFile: sys.keyPath },
      rootDir: sys.rootDir,
      stateDir: '/var/lib/config-agent',
    });
    // Not the default root: the unit needs a drop-in to write there.
    const dropIn = path.join(sys.dir, 'etc/systemd/system/config-agent.service.d/50-root-dir.conf');
    expect(readFileSync(dropIn, 'utf8')).toContain(`ReadWritePaths=${sys.rootDir}\n`);
    expect(result.stdout).toContain(`check: device ${DEVICE} ("robot") found at ${server.url}`);
    expect(result.stdout).toContain(
      'next: sudo systemctl daemon-reload && sudo systemctl restart config-agent && config-agent status',
    );
    expect(result.stdout).not.toContain(KEY);
  });

  it('re-run with one flag changes that setting and keeps the key', async () => {
    const sys = scratch();
    const first = await init(
      {
        configPath: sys.configPath,
        deviceId: 'dvc_wrong',
        baseUrl: server.url,
        rootDir: sys.rootDir,
        apiKeyFile: '-',
      },
      sys.env(KEY),
    );
    expect(first.code).toBe(78);
    expect(first.stdout).toContain('HTTP 404');
    expect(first.stdout).toContain('no device dvc_wrong there (check the device id');
    const second = await init({ configPath: sys.configPath, deviceId: DEVICE }, sys.env());
    expect(second.code).toBe(0);
    expect(second.stdout).toContain(`kept ${sys.keyPath}`);
    expect(JSON.parse(readFileSync(sys.configPath, 'utf8')).deviceId).toBe(DEVICE);
  });

  it('names the rejected key (exit 3) and the unreachable service (exit 3)', async () => {
    const sys = scratch();
    const keyFile = path.join(sys.dir, 'downloaded-key');
    spawnSync('sh', ['-c', `printf 'sk_wrong_key_000\\n' > ${keyFile}`]);
    const rejected = await init(
      {
        configPath: sys.configPath,
        deviceId: DEVICE,
        baseUrl: server.url,
        rootDir: sys.rootDir,
        apiKeyFile: keyFile,
      },
      sys.env(),
    );
    expect(rejected.code).toBe(3);
    expect(rejected.stdout).toContain('HTTP 401');
    expect(rejected.stdout).toContain('the service rejected the API key');
    expect(rejected.stdout).not.toContain('sk_wrong_key_000');

    const closed = await startMockServer({ port: 0, apiKeys: [KEY] });
    const url = closed.url;
    await closed.close();
    const unreachable = await init(
      { configPath: sys.configPath, baseUrl: url, apiKeyFile: '-' },
      sys.env(KEY),
    );
    expect(unreachable.code).toBe(3);
    expect(unreachable.stdout).toContain(
      `unreachable: cannot reach ${url} (ECONNREFUSED): nothing listens there`,
    );
  });

  it.skipIf(spawnSync('openssl', ['version']).error !== undefined)(
    'names an untrusted certificate as a TLS problem (skipped without openssl)',
    async () => {
      const sys = scratch();
      const keyPem = path.join(sys.dir, 'tls.key');
      const certPem = path.join(sys.dir, 'tls.crt');
      const made = spawnSync('openssl', [
        'req',
        '-x509',
        '-newkey',
        'ec',
        '-pkeyopt',
        'ec_paramgen_curve:P-256',
        '-nodes',
        '-days',
        '1',
        '-subj',
        '/CN=127.0.0.1',
        '-keyout',
        keyPem,
        '-out',
        certPem,
      ]);
      expect(made.status).toBe(0);
      const tls: Server = createServer({ key: readFileSync(keyPem), cert: readFileSync(certPem) }, (_q, s) =>
        s.end('{}'),
      );
      await new Promise<void>((resolve) => tls.listen(0, '127.0.0.1', resolve));
      try {
        const url = `https://127.0.0.1:${(tls.address() as AddressInfo).port}`;
        const result = await init(
          {
            configPath: sys.configPath,
            deviceId: DEVICE,
            baseUrl: url,
            rootDir: sys.rootDir,
            apiKeyFile: '-',
          },
          sys.env(KEY),
        );
        expect(result.code).toBe(3);
        expect(result.stdout).toContain(
          `TLS: the certificate of ${url} is not trusted (DEPTH_ZERO_SELF_SIGNED_CERT`,
        );
      } finally {
        tls.closeAllConnections();
        await new Promise((resolve) => tls.close(resolve));
      }
    },
  );

  it('without a terminal, refuses to guess missing settings and writes nothing (exit 2)', async () => {
    const sys = scratch();
    const result = await init({ configPath: sys.configPath, baseUrl: server.url }, sys.env());
    expect(result.code).toBe(2);
    expect(result.stderr).toContain('missing --device-id, --api-key-file (no terminal to ask on)');
    expect(existsSync(sys.configPath)).toBe(false);
  });

  // The drop-in's line was `ReadWritePaths=<rootDir>` verbatim: a space split it into two paths (one ignored as
  // relative), a `'` made systemd ignore it, a `%d` named the credentials directory: the unit could not write rootDir.
  it('writes a rootDir holding a space, a quote and a % as one path systemd reads back; refuses a " (exit 78)', async () => {
    const sys = scratch();
    const rootDir = path.join(sys.dir, "srv/bob's configs 100%d");
    const result = await init(
      { configPath: sys.configPath, deviceId: DEVICE, baseUrl: server.url, rootDir, apiKeyFile: '-' },
      sys.env(`${KEY}\n`),
    );
    expect(result.code).toBe(0);
    const dropIn = path.join(sys.dir, 'etc/systemd/system/config-agent.service.d/50-root-dir.conf');
    const line = `ReadWritePaths="${rootDir.replaceAll('%', '%%')}"`;
    expect(readFileSync(dropIn, 'utf8')).toContain(`\n${line}\n`);
    // Where systemd is installed, it parses the line without a warning (CI installs it: .ci/run).
    const unit = path.join(sys.dir, 'probe.service');
    writeFileSync(unit, `[Service]\nExecStart=/bin/true\n${line}\n`);
    const verify = spawnSync('systemd-analyze', ['verify', unit], { encoding: 'utf8' });
    if (verify.error === undefined) expect(verify.stderr).not.toContain('ReadWritePaths');

    const quoted = scratch();
    const refused = await init(
      {
        configPath: quoted.configPath,
        deviceId: DEVICE,
        baseUrl: server.url,
        rootDir: path.join(quoted.dir, 'srv/"x"'),
        apiKeyFile: '-',
      },
      quoted.env(`${KEY}\n`),
    );
    expect(refused.code).toBe(78);
    expect(refused.stderr).toContain('a ReadWritePaths= line of the unit cannot carry');
    expect(existsSync(quoted.configPath)).toBe(false);
  });

  it('refuses an invalid setting before writing anything (exit 78)', async () => {
    const sys = scratch();
    const result = await init(
      {
        configPath: sys.configPath,
        deviceId: DEVICE,
        baseUrl: 'http://configs.example.com',
        apiKeyFile: '-',
      },
      sys.env(KEY),
    );
    expect(result.code).toBe(78);
    expect(result.stderr).toContain(
      'server.baseUrl: must use https (http is allowed only for a loopback host)',
    );
    expect(existsSync(sys.configPath)).toBe(false);
    expect(existsSync(sys.keyPath)).toBe(false);
  });
});

const ACTIVE =
  'LoadState=loaded\nActiveState=active\nSubState=running\nUnitFileState=enabled\nResult=success\n';

async function doctor(sys: ReturnType<typeof scratch>, systemctlOut: string, skewMs = 0) {
  const stdout = capture();
  const env: DoctorEnvironment = {
    ...sys.env(),
    systemctl: async (): Promise<SystemctlResult> => ({ status: 0, stdout: systemctlOut }),
    now: () => Date.now() + skewMs,
    unit: 'config-agent.service',
  };
  const code = await runDoctor(
    { configPath: sys.configPath },
    { stdout: stdout.stream, stderr: capture().stream, env: {}, isTty: false },
    env,
  );
  return { code, lines: stdout.text().trimEnd().split('\n') };
}

describe.skipIf(!isRoot)('config-agent doctor (skipped unless root)', () => {
  it('on a device never configured (the package installed, init not run) says init writes the config, once (ux23)', async () => {
    const sys = scratch();
    mkdirSync(path.dirname(sys.configPath), { recursive: true, mode: 0o750 });
    chownSync(path.dirname(sys.configPath), 0, GID);
    const skipped = await doctor(
      sys,
      'LoadState=loaded\nActiveState=inactive\nSubState=dead\nUnitFileState=enabled\nConditionResult=no\nResult=success\n',
    );
    const init = 'sudo config-agent init --device-id <id> --base-url <url> --api-key-file <file> writes it';
    // Before: the missing file twice ("cannot read the file: ... (ENOENT)", "does not exist") and a unit line
    // whose fix was `sudo systemctl restart config-agent`, which is skipped again until init has run.
    expect(skipped.lines.filter((line) => line.startsWith('FAIL'))).toEqual([
      `FAIL  config    ${sys.configPath} does not exist: ${init}`,
      `FAIL  unit      config-agent.service inactive/dead, enabled; a start condition failed: ${sys.configPath} does not exist (${init}, then sudo systemctl restart config-agent)`,
    ]);
    expect(skipped.lines.at(-1)).toBe('2 check(s) failed');
    expect(skipped.code).toBe(1);
  });

  it('passes every check on a configured device, one line each, and fails the ones that break', async () => {
    const sys = scratch();
    const made = await init(
      {
        configPath: sys.configPath,
        deviceId: DEVICE,
        baseUrl: server.url,
        rootDir: sys.rootDir,
        apiKeyFile: '-',
      },
      sys.env(KEY),
    );
    expect(made.code).toBe(0);
    // stateDir of the written config is /var/lib/config-agent; point it into the scratch tree.
    spawnSync('sh', ['-c', `sed -i 's#"/var/lib/config-agent"#"${sys.stateDir}"#' ${sys.configPath}`]);
    // The running agent's local API, in the scratch tree: a stand-in answering /v1/health as the agent does.
    const socketPath = path.join(sys.dir, 'agent.sock');
    const edited = JSON.parse(readFileSync(sys.configPath, 'utf8')) as Record<string, unknown>;
    writeFileSync(sys.configPath, JSON.stringify({ ...edited, socketPath }));
    const agent = createHttpServer((_request, response) => {
      response.setHeader('content-type', 'application/json');
      response.end(JSON.stringify({ healthy: true, lastLoopAt: null }));
    });
    await new Promise<void>((resolve) => agent.listen(socketPath, resolve));
    onTestFinished(() => new Promise<void>((resolve) => agent.close(() => resolve())));

    const fresh = await doctor(sys, ACTIVE);
    expect(fresh.lines.map((line) => line.slice(0, 16))).toEqual([
      'ok    config    ',
      'ok    account   ',
      'ok    confdir   ',
      'ok    config    ',
      'ok    key       ',
      'ok    rootDir   ',
      'ok    stateDir  ',
      'ok    unit      ',
      'ok    localApi  ',
      'ok    service   ',
      'ok    clock     ',
      'all checks passe',
    ]);
    expect(fresh.lines[6]).toContain('does not exist yet (the unit creates it at its first start)');
    expect(fresh.code).toBe(0);

    mkdirSync(sys.stateDir, { recursive: true, mode: 0o755 });
    chownSync(sys.stateDir, UID, GID);
    chmodSync(sys.keyPath, 0o644);
    const broken = await doctor(
      sys,
      'LoadState=loaded\nActiveState=inactive\nSubState=dead\nUnitFileState=enabled\nConditionResult=no\nResult=success\n',
      5 * 60_000,
    );
    const failing = broken.lines.filter((line) => line.startsWith('FAIL'));
    expect(failing).toEqual([
      `FAIL  key       ${sys.keyPath}: mode 0644; want 0600 root:root`,
      `FAIL  stateDir  ${sys.stateDir}: mode 0755; want 0700 config-agent:config-agent`,
      'FAIL  unit      config-agent.service inactive/dead, enabled; a start condition failed: config.json or the key was missing at the last start (sudo systemctl restart config-agent)',
      expect.stringMatching(
        /^FAIL {2}service {3}not checked: the API key file .* is accessible by group or others/,
      ),
    ]);
    expect(broken.lines.at(-1)).toBe('4 check(s) failed');
    expect(broken.code).toBe(1);

    chmodSync(sys.keyPath, 0o600);
    const skewed = await doctor(sys, ACTIVE, 5 * 60_000);
    expect(skewed.lines.find((line) => line.startsWith('FAIL  clock'))).toMatch(
      /^FAIL {2}clock {5}this device is 30\d s ahead of the service .*: enable NTP/,
    );
    expect(skewed.code).toBe(1);
  });
});
