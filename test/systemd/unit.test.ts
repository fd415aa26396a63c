// The systemd unit and its companions: systemd-analyze verify/security, the directives the agent relies on, and
// sysusers.d/tmpfiles.d applied to a scratch root.
import { spawnSync } from 'node:child_process';
import { mkdirSync, mkdtempSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, describe, expect, it } from 'vitest';
import { ExitCode } from '../../src/cli/exit-codes.js';
import { CREDENTIAL_NAME } from '../../src/config/load.js';
import { CONFIG_DEFAULTS, DEFAULT_CONFIG_PATH } from '../../src/config/schema.js';

const REPO = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../..');
const UNIT_PATH = path.join(REPO, 'systemd/config-agent.service');
const SYSUSERS_PATH = path.join(REPO, 'systemd/config-agent.sysusers');
const TMPFILES_PATH = path.join(REPO, 'systemd/config-agent.tmpfiles');
const EXAMPLE_CONFIG = JSON.parse(readFileSync(path.join(REPO, 'config.example.json'), 'utf8')) as {
  rootDir: string;
  stateDir: string;
  server: { apiKeyFile: string };
};
/** Debian's prometheus-node-exporter reads its textfile collector directory here. */
const NODE_EXPORTER_TEXTFILE_DIR = '/var/lib/prometheus/node-exporter';
const SCRATCH = mkdtempSync(path.join(os.tmpdir(), 'config-agent-systemd-'));

afterAll(() => rmSync(SCRATCH, { recursive: true, force: true }));

function missing(tool: string): boolean {
  return spawnSync(tool, ['--version'], { encoding: 'utf8' }).error !== undefined;
}

function run(tool: string, args: string[], input?: string) {
  const result = spawnSync(tool, args, { encoding: 'utf8', timeout: 10_000, input });
  if (result.error) throw result.error;
  return { status: result.status, stdout: result.stdout, stderr: result.stderr };
}

type Directives = Map<string, string[]>;

/** `[Section]` → `Key=value` lines, in order (repeated keys kept); comments and blank lines dropped. */
function parseUnit(text: string): Map<string, Directives> {
  const sections = new Map<string, Directives>();
  let current: Directives | undefined;
  for (const raw of text.split('\n')) {
    const line = raw.trim();
    if (line === '' || line.startsWith('#') || line.startsWith(';')) continue;
    const section = /^\[(.+)\]$/.exec(line);
    if (section) {
      current = new Map();
      sections.set(section[1]!, current);
      continue;
    }
    const eq = line.indexOf('=');
    if (current === undefined || eq < 1) throw new Error(`unexpected line in the unit: ${line}`);
    const key = line.slice(0, eq).trim();
    current.set(key, [...(current.get(key) ?? []), line.slice(eq + 1).trim()]);
  }
  return sections;
}

const unitText = readFileSync(UNIT_PATH, 'utf8');
const unit = parseUnit(unitText);
const service = unit.get('Service') ?? new Map<string, string[]>();
/** The last assignment wins in systemd, as here. */
const value = (key: string): string | undefined => service.get(key)?.at(-1);

describe('systemd/config-agent.service: directives the agent and the docs rely on', () => {
  it('runs the installed binary as the dedicated user, with the default config path', () => {
    // Through the watchdog's wrapper (systemd/config-agent-notify, installed beside dist/ by build-debs.mjs).
    expect(value('ExecStart')).toBe(
      `/usr/lib/config-agent/config-agent-notify /usr/bin/config-agent --config ${DEFAULT_CONFIG_PATH}`,
    );
    // exec: a program that cannot be started (missing binary, user, credential) fails `systemctl start`.
    expect(value('Type')).toBe('exec');
    expect(value('User')).toBe('config-agent');
    expect(value('Group')).toBe('config-agent');
    // A dynamic user gets a new uid per start and would lose ownership of the files it wrote.
    expect(service.has('DynamicUser')).toBe(false);
    // The shell's builtin kill: /bin/kill is procps's, not Essential, and a minimal Debian 13 has none (cit25).
    expect(value('ExecReload')).toBe(`/bin/sh -c 'kill -HUP "$$MAINPID"'`);
  });

  it('hands the key over as the credential the config loader looks for, from the documented file', () => {
    expect(service.get('LoadCredential')).toEqual([`${CREDENTIAL_NAME}:${EXAMPLE_CONFIG.server.apiKeyFile}`]);
    expect(service.has('Environment')).toBe(false);
  });

  it('provides the state, runtime (socket) and root directories of config.example.json', () => {
    expect(value('StateDirectory')).toBe('config-agent');
    expect(value('StateDirectoryMode')).toBe('0700');
    expect(EXAMPLE_CONFIG.stateDir).toBe(`/var/lib/${value('StateDirectory')}`);
    expect(value('RuntimeDirectory')).toBe('config-agent');
    expect(value('RuntimeDirectoryMode')).toBe('0750');
    expect(path.dirname(CONFIG_DEFAULTS.socketPath)).toBe(`/run/${value('RuntimeDirectory')}`);
    // Readiness (ux23): `systemctl start` returns once the default socket is there, or the agent has exited.
    expect(value('ExecStartPost')).toContain(`[ ! -S ${CONFIG_DEFAULTS.socketPath} ]`);
    expect(value('ExecStartPost')).toContain('kill -0 "$$MAINPID"');
    const writable = service.get('ReadWritePaths') ?? [];
    expect(writable).toContain(EXAMPLE_CONFIG.rootDir);
    // Optional ("-"): a device without node_exporter must still start.
    expect(writable).toContain(`-${NODE_EXPORTER_TEXTFILE_DIR}`);
  });

  it('is skipped, not failed, until config.json and the key exist (config-agent init writes both)', () => {
    expect(unit.get('Unit')?.get('ConditionPathExists')).toEqual([
      DEFAULT_CONFIG_PATH,
      EXAMPLE_CONFIG.server.apiKeyFile,
    ]);
  });

  it('restarts on failure after a delay, never giving up (no start limit), but not after an invalid configuration', () => {
    expect(value('Restart')).toBe('on-failure');
    expect(value('RestartSec')).toBe('30s');
    expect(value('RestartPreventExitStatus')).toBe(`${ExitCode.Usage} ${ExitCode.Config}`);
    expect(ExitCode.Config).toBe(78);
    // A SIGHUP (systemctl reload) that lands in Node's start-up, before the agent's first line, ends the process;
    // systemd counts that as a clean exit and on-failure alone left the unit inactive (1 restart+reload in 16).
    expect(value('RestartForceExitStatus')).toBe('SIGHUP');
    // A start limit left the unit failed for good after 10 starts in 10 minutes: a crash loop, an OOM-kill loop
    // or 15 manual restarts in a row (seen under systemd 252) left the device unmanaged until a reboot.
    expect(unit.get('Unit')?.get('StartLimitIntervalSec')).toEqual(['0']);
    expect(unit.get('Unit')?.get('StartLimitBurst')).toBeUndefined();
    // The agent exits within 10 s of SIGTERM; systemd must wait longer than that before SIGKILL.
    expect(value('KillMode')).toBe('mixed');
    expect(Number(value('TimeoutStopSec'))).toBeGreaterThan(10);
  });

  it('carries the hardening set of FIELD-NOTES, without MemoryDenyWriteExecute (it kills V8)', () => {
    expect(unitText).not.toMatch(/^\s*MemoryDenyWriteExecute\s*=/m);
    expect(Object.fromEntries([...service].map(([key, values]) => [key, values.at(-1)]))).toMatchObject({
      NoNewPrivileges: 'yes',
      ProtectSystem: 'strict',
      PrivateTmp: 'yes',
      PrivateDevices: 'yes',
      ProtectKernelTunables: 'yes',
      ProtectKernelModules: 'yes',
      ProtectKernelLogs: 'yes',
      ProtectControlGroups: 'yes',
      ProtectProc: 'invisible',
      RestrictAddressFamilies: 'AF_UNIX AF_INET AF_INET6',
      CapabilityBoundingSet: '',
      UMask: '0077',
    });
    expect(service.get('SystemCallFilter')?.[0]).toBe('@system-service');
  });

  it('a watchdog the agent pings from its own pid: WatchdogSec= set, NotifyAccess= left at main (cit24)', () => {
    expect(value('WatchdogSec')).toBe('2min');
    // all would let any hook send READY=1, STOPPING=1 or MAINPID= for the agent (and cost 0.2 of exposure).
    expect(service.has('NotifyAccess')).toBe(false);
    expect(statSync(path.join(REPO, 'systemd/config-agent-notify')).mode & 0o111).toBe(0o111);
  });

  it('is enabled by multi-user.target', () => {
    expect(unit.get('Install')?.get('WantedBy')).toEqual(['multi-user.target']);
  });
});

const analyzeMissing = missing('systemd-analyze');

describe('systemd-analyze on the unit', () => {
  it.skipIf(analyzeMissing)(
    'verify prints nothing on stderr (skipped where systemd-analyze is not installed; CI installs it)',
    () => {
      // verify fails while /usr/bin/config-agent is not installed ("Command ... is not executable"), which would
      // make this test depend on the machine. The copy differs from the unit in that one path only: ExecStart
      // runs this very node binary, which exists; its arguments, the file name (so the unit name), and every
      // other line are the unit's own, so a misspelt key, a bad value or a broken dependency still shows up.
      const dir = mkdtempSync(path.join(SCRATCH, 'verify-'));
      const copy = path.join(dir, 'config-agent.service');
      const rewritten = unitText.replace(
        /^ExecStart=\/usr\/lib\/config-agent\/config-agent-notify \/usr\/bin\/config-agent /m,
        `ExecStart=${process.execPath} `,
      );
      expect(rewritten).not.toBe(unitText);
      writeFileSync(copy, rewritten);
      const result = run('systemd-analyze', ['verify', copy]);
      expect(result.stderr).toBe('');
      expect(result.status).toBe(0);
    },
  );

  it.skipIf(analyzeMissing)(
    'security --offline=yes --threshold=15 passes (skipped where systemd-analyze is not installed)',
    () => {
      const result = run('systemd-analyze', ['security', '--offline=yes', '--threshold=15', UNIT_PATH]);
      const verdict = /Overall exposure level for config-agent\.service: (\d+\.\d)/.exec(result.stdout);
      expect(verdict?.[1], result.stdout.slice(-400)).toBeDefined();
      expect(Number(verdict?.[1])).toBeLessThanOrEqual(1.5);
      expect(result.status).toBe(0);
    },
  );
});

/** Runs a sysusers.d/tmpfiles.d tool on a scratch root; the file goes in on stdin, as --root reads paths inside. */
function applyToRoot(tool: string, root: string, file: string, extra: string[] = []) {
  return run(tool, [`--root=${root}`, ...extra, '-'], readFileSync(file, 'utf8'));
}

function modeOf(file: string): string {
  return (statSync(file).mode & 0o7777).toString(8).padStart(4, '0');
}

describe('systemd/config-agent.sysusers and .tmpfiles on a scratch root', () => {
  const sysusersMissing = missing('systemd-sysusers');
  const tmpfilesMissing = missing('systemd-tmpfiles');
  const isRoot = process.getuid?.() === 0;

  it.skipIf(sysusersMissing || tmpfilesMissing)(
    'create the user, the group, the directories and the modes the unit and the docs expect ' +
      '(skipped where systemd-sysusers or systemd-tmpfiles is not installed)',
    () => {
      const root = mkdtempSync(path.join(SCRATCH, 'root-'));
      mkdirSync(path.join(root, 'etc/config-agent'), { recursive: true });
      const users = applyToRoot('systemd-sysusers', root, SYSUSERS_PATH);
      expect(users.stderr).not.toMatch(/invalid|failed|ignoring/i);
      expect(users.status).toBe(0);
      const passwd = readFileSync(path.join(root, 'etc/passwd'), 'utf8');
      const user = /^config-agent:x:(\d+):(\d+):[^:]*:\/var\/lib\/config-agent:\/usr\/sbin\/nologin$/m.exec(
        passwd,
      );
      expect(user, passwd).not.toBeNull();
      const group = readFileSync(path.join(root, 'etc/group'), 'utf8');
      const gid = /^config-agent:x:(\d+):/m.exec(group)?.[1];
      expect(gid).toBe(user?.[2]);

      // Installed by hand with the wrong modes: tmpfiles must put them right (z lines).
      const key = path.join(root, 'etc/config-agent/api-key');
      const config = path.join(root, 'etc/config-agent/config.json');
      writeFileSync(key, 'k\n', { mode: 0o644 });
      writeFileSync(config, '{}\n', { mode: 0o600 });
      const dirs = applyToRoot('systemd-tmpfiles', root, TMPFILES_PATH, ['--create']);
      // Unknown names or bad lines would be reported here. Without root, only the chown to config-agent fails.
      const complaints = dirs.stderr.split('\n').filter((line) => line !== '');
      if (isRoot) {
        expect(complaints).toEqual([]);
        expect(dirs.status).toBe(0);
      } else {
        for (const line of complaints)
          expect(line).toMatch(/fchownat\(\) of .* failed: Operation not permitted/);
      }

      expect(modeOf(path.join(root, 'etc/config-agent'))).toBe('0750');
      expect(modeOf(key)).toBe('0600');
      expect(modeOf(config)).toBe('0640');
      expect(modeOf(path.join(root, EXAMPLE_CONFIG.rootDir))).toBe('0755');
      if (isRoot) {
        const owner = (file: string) => `${statSync(file).uid}:${statSync(file).gid}`;
        expect(owner(path.join(root, 'etc/config-agent'))).toBe(`0:${gid}`);
        expect(owner(key)).toBe('0:0');
        expect(owner(config)).toBe(`0:${gid}`);
        expect(owner(path.join(root, EXAMPLE_CONFIG.rootDir))).toBe(`${user?.[1]}:${gid}`);
      }
    },
  );
});
