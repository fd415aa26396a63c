// The built config-agent-node .deb under a real systemd (PID 1 in its own namespaces): install, init, run, reload, stop, switching packages, purge.
import { type ChildProcess, spawn, spawnSync } from 'node:child_process';
import { existsSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { skipWithoutPackages, skipWithoutRoot } from '../helpers/built-packages.js';

const REPO = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../..');
const BOOT = path.join(REPO, 'test/systemd/boot-systemd.sh');
const MOCK = path.join(REPO, 'dist/mock-server/cli.js');
const ARCH = process.arch === 'x64' ? 'amd64' : process.arch;
const SIGRTMIN_PLUS_4 = 38;
/**
 * The machine's root file system: this one's (Debian 12, systemd 252, as CI's), or another distribution's root
 * given in CONFIG_AGENT_SYSTEMD_ROOT (scripts/trixie-systemd-check.sh: a debootstrapped Debian 13, systemd 257).
 */
const LOWER = process.env.CONFIG_AGENT_SYSTEMD_ROOT ?? '/';
const KEY = 'sk_ci_systemd_0123456789abcdef';
const DEVICE = 'dvc_ci_01';
const FIXTURES = {
  devices: [{ id: DEVICE, name: 'ci robot' }],
  config_instances: [
    {
      id: 'cfg_app',
      device_id: DEVICE,
      relative_filepath: 'app/config.json',
      content: { port: 8080, mode: 'ci' },
      target_status: 'deployed',
      activity_status: 'queued',
    },
  ],
};

function findDeb(prefix: string, suffix: string): string | undefined {
  const dir = path.join(REPO, 'dist-pkg');
  if (!existsSync(dir)) return undefined;
  const name = readdirSync(dir).find((file) => file.startsWith(prefix) && file.endsWith(suffix));
  return name === undefined ? undefined : path.join(dir, name);
}

/** Why this machine cannot run the test, or undefined. */
function cannotRun(deb: string | undefined, allDeb: string | undefined): string | undefined {
  if (process.getuid?.() !== 0) return 'needs root (namespaces, mounts, pivot_root)';
  for (const tool of ['unshare', 'nsenter']) {
    if (spawnSync(tool, ['--version']).error !== undefined) return `${tool} is not installed (util-linux)`;
  }
  if (!existsSync(path.join(LOWER, 'lib/systemd/systemd')))
    return `systemd is not installed in ${LOWER} (apt install systemd)`;
  if (deb === undefined)
    return skipWithoutPackages(
      `no dist-pkg/config-agent-node_*_${ARCH}.deb: run npm run package -- --arch ${ARCH}`,
    );
  if (allDeb === undefined)
    return skipWithoutPackages('no dist-pkg/config-agent_*_all.deb: run npm run package');
  if (!existsSync(MOCK)) return 'dist/ is not built (npm run build)';
  return undefined;
}

const DEB = findDeb('config-agent-node_', `_${ARCH}.deb`);
/** The other package of the pair, on the system Node (the machine's, >= 20.19, as CI's). */
const ALL_DEB = findDeb('config-agent_', '_all.deb');
let skipReason = cannotRun(DEB, ALL_DEB);
/** Not /tmp: the machine's tmpfiles would empty it (FIELD-NOTES, pitfall 2). */
const scratch = '/var/tmp';
let workDir = '';
let boot: ChildProcess | undefined;
let bootLog = '';
let systemdPid: number | undefined;
let mock: ChildProcess | undefined;
let mockUrl = '';

interface Run {
  status: number | null;
  stdout: string;
  stderr: string;
}

/** A shell command inside the booted machine (all its namespaces). */
function inside(command: string, input?: string): Run {
  const result = spawnSync('nsenter', ['-t', String(systemdPid), '-a', 'sh', '-c', command], {
    encoding: 'utf8',
    input,
    timeout: 120_000,
  });
  return { status: result.status, stdout: result.stdout ?? '', stderr: result.stderr ?? '' };
}

/** `systemctl show` properties as an object (systemctl prints them in its own order). */
function unitProps(names: string): Record<string, string> {
  const text = inside(`systemctl show -p ${names} config-agent`).stdout;
  return Object.fromEntries(
    text
      .trim()
      .split('\n')
      .map((line) => [line.slice(0, line.indexOf('=')), line.slice(line.indexOf('=') + 1)]),
  );
}

function owner(file: string): string {
  return inside(`stat -c '%a %U:%G' ${file}`).stdout.trim();
}

async function until(what: string, check: () => boolean, timeoutMs: number): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!check()) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((resolve) => setTimeout(resolve, 250));
  }
}

function childPid(pid: number): number | undefined {
  try {
    const text = readFileSync(`/proc/${pid}/task/${pid}/children`, 'utf8').trim();
    return text === '' ? undefined : Number(text.split(' ')[0]);
  } catch {
    return undefined;
  }
}

/** The pid of the unshare that forks systemd: the innermost unshare of the boot script's chain. */
function findSystemd(): number | undefined {
  let pid = boot?.pid;
  for (let depth = 0; pid !== undefined && depth < 4; depth += 1) {
    let comm: string;
    try {
      comm = readFileSync(`/proc/${pid}/comm`, 'utf8').trim();
    } catch {
      // A child of the boot script's shell (mount, mkdir) that ended in between: look again on the next try.
      return undefined;
    }
    if (comm === 'systemd') return pid;
    pid = childPid(pid);
  }
  return undefined;
}

/** In a PID namespace, systemd's poweroff ends PID 1 with SIGINT, so unshare dies of a signal: no exit code. */
function bootExited(): boolean {
  return boot !== undefined && (boot.exitCode !== null || boot.signalCode !== null);
}

/** kill(2) that accepts the process being gone already. */
function signal(pid: number, sig: NodeJS.Signals | number): void {
  try {
    process.kill(pid, sig);
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code !== 'ESRCH') throw error;
  }
}

beforeAll(async () => {
  if (skipReason !== undefined) return;
  workDir = mkdtempSync(path.join(scratch, 'config-agent-systemd-'));
  boot = spawn(BOOT, [path.join(workDir, 'boot'), DEB as string, ALL_DEB as string], {
    stdio: ['ignore', 'pipe', 'pipe'],
    env: { ...process.env, BOOT_LOWER: LOWER },
  });
  boot.stdout?.on('data', (chunk) => {
    bootLog += String(chunk);
  });
  boot.stderr?.on('data', (chunk) => {
    bootLog += String(chunk);
  });
  try {
    await until(
      'systemd to start',
      () => {
        systemdPid = findSystemd();
        return systemdPid !== undefined || bootExited();
      },
      30_000,
    );
    if (systemdPid === undefined) throw new Error('the boot script exited');
    // --wait needs the bus, which appears a moment after PID 1.
    let running = inside('systemctl is-system-running --wait');
    await until(
      'the system bus',
      () => {
        running = inside('systemctl is-system-running --wait');
        // 252 says "Failed to connect to bus", 257 "Failed to connect to system scope bus". "offline" comes before
        // any bus: systemctl answers it while /run/systemd/system is not there yet (sd_booted()), which a boot at a
        // load of ~25 showed (a CI rehearsal at 455c521).
        return (
          !/Failed to connect to (system scope )?bus/.test(running.stderr) &&
          running.stdout.trim() !== 'offline'
        );
      },
      60_000,
    );
    if (!['running', 'degraded'].includes(running.stdout.trim())) {
      throw new Error(`systemctl is-system-running: ${running.stdout.trim()} ${running.stderr.trim()}`);
    }
  } catch (error) {
    // Under .ci/run as root (systemd installed, cannotRun above) a boot that fails is a failure, not a skip.
    skipReason = skipWithoutRoot(
      `systemd could not boot here (${error instanceof Error ? error.message : String(error)}): ${bootLog.slice(-400)}`,
    );
    return;
  }
  // The mock service in the machine's network namespace (its loopback), run from this checkout.
  const fixtures = path.join(workDir, 'fixtures.json');
  writeFileSync(fixtures, JSON.stringify(FIXTURES));
  mock = spawn(
    'nsenter',
    [
      '-t',
      String(systemdPid),
      '-n',
      process.execPath,
      MOCK,
      '--port',
      '0',
      '--api-key',
      KEY,
      '--fixtures',
      fixtures,
    ],
    { stdio: ['ignore', 'pipe', 'ignore'] },
  );
  let out = '';
  mock.stdout?.on('data', (chunk) => {
    out += String(chunk);
  });
  await until('the mock service', () => /^http:\/\/\S+\n/.test(out), 20_000);
  mockUrl = out.split('\n')[0] as string;
  // A container image's policy-rc.d (exit 101) forbids starting services from maintainer scripts; a real
  // Debian has none.
  inside('rm -f /usr/sbin/policy-rc.d');
}, 120_000);

afterAll(async () => {
  if (mock?.pid !== undefined && mock.exitCode === null) mock.kill('SIGTERM');
  if (systemdPid !== undefined && !bootExited()) {
    // SIGRTMIN+4 (38 on Linux; Node has no name for it): systemd's poweroff.
    signal(systemdPid, SIGRTMIN_PLUS_4);
    try {
      await until('systemd to power off', () => bootExited(), 60_000);
    } catch {
      process.stderr.write(
        `systemd did not power off within 60 s; killing it. Its console:\n${bootLog.slice(-2000)}\n`,
      );
      signal(systemdPid, 'SIGKILL');
    }
  }
  if (boot?.pid !== undefined) {
    // The cgroup the boot script made for the machine outlives it: remove it, deepest first.
    spawnSync('unshare', [
      '--mount',
      '--propagation',
      'private',
      'sh',
      '-c',
      `mkdir -p ${workDir}/cg && mount -t cgroup2 cgroup2 ${workDir}/cg && ` +
        `find ${workDir}/cg/config-agent-ci-${boot.pid} -depth -type d -exec rmdir {} + ; umount ${workDir}/cg`,
    ]);
  }
  if (workDir !== '') rmSync(workDir, { recursive: true, force: true });
}, 120_000);

/** A test that needs the booted systemd: skipped, with the reason, where it could not boot (or cannot run here). */
function underSystemd(name: string, fn: () => void | Promise<void>, timeoutMs?: number): void {
  it(
    name,
    async (ctx) => {
      if (skipReason !== undefined) ctx.skip(skipReason);
      await fn();
    },
    timeoutMs,
  );
}

describe('config-agent-node .deb under a real systemd (skipped with the reason where systemd cannot boot)', () => {
  underSystemd('installs: user, directories, unit enabled, but refuses to start unconfigured', () => {
    const installed = inside(`apt-get install -y /opt/ci/${path.basename(DEB as string)}`);
    expect(installed.status, installed.stdout + installed.stderr).toBe(0);
    expect(inside('id -u config-agent').status).toBe(0);
    expect(owner('/etc/config-agent')).toBe('750 root:config-agent');
    expect(owner('/srv/config-agent')).toBe('755 config-agent:config-agent');
    expect(inside('systemctl is-enabled config-agent').stdout.trim()).toBe('enabled');
    // Unconfigured: a start is skipped by ConditionPathExists=, not failed, and nothing runs.
    expect(inside('systemctl start config-agent').status).toBe(0);
    expect(unitProps('ActiveState,ConditionResult')).toEqual({
      ActiveState: 'inactive',
      ConditionResult: 'no',
    });
    expect(inside('/usr/lib/config-agent/node/bin/node --version').stdout).toMatch(/^v24\./);
    // The install's code cache, root's, readable by the agent's user.
    expect(owner('/var/cache/config-agent/code-cache')).toBe('755 root:root');
    const cached = inside('ls /var/cache/config-agent/code-cache').stdout.trim().split('\n');
    expect(cached).toHaveLength(1);
    expect(cached[0]).toMatch(/^agent-[0-9A-F]{12}\.[0-9a-f]{16}\.v8cache$/);
    expect(owner(`/var/cache/config-agent/code-cache/${cached[0]}`)).toBe('644 root:root');
  });

  underSystemd(
    'config-agent init writes config and key with their owners and modes and checks the device',
    () => {
      const init = inside(
        `config-agent init --device-id ${DEVICE} --base-url ${mockUrl} --api-key-file -`,
        `${KEY}\n`,
      );
      expect(init.stderr).toBe('');
      expect(init.stdout).toContain(`check: device ${DEVICE} ("ci robot") found at ${mockUrl}`);
      expect(init.stdout).toContain('next: sudo systemctl restart config-agent && config-agent status');
      expect(init.status).toBe(0);
      expect(owner('/etc/config-agent/config.json')).toBe('640 root:config-agent');
      expect(owner('/etc/config-agent/api-key')).toBe('600 root:root');
    },
  );

  underSystemd('starts, writes the files as config-agent, and answers status, sync and doctor', async () => {
    // The command init prints, exactly: the unit is started once its socket answers (ExecStartPost=), so status
    // finds the agent. Under Type=exec alone it exited 3 ("no agent is running") about one time in three (ux23).
    for (let i = 0; i < 3; i += 1) {
      const printed = inside('systemctl restart config-agent && config-agent status');
      expect(printed.stderr).toBe('');
      expect(printed.stdout).toContain(`Device:             ${DEVICE}`);
    }
    // The first pass waits a random part of the poll interval; sync runs one now.
    let sync = inside('config-agent sync');
    await until(
      'config-agent sync to converge',
      () => {
        sync = inside('config-agent sync');
        return sync.status === 0;
      },
      60_000,
    );
    const written = inside('cat /srv/config-agent/app/config.json');
    const why = () =>
      `sync: ${sync.stdout}${sync.stderr}\n${inside('config-agent status; journalctl -u config-agent -o cat | tail -n 30').stdout}`;
    expect(written.status, why()).toBe(0);
    expect(JSON.parse(written.stdout)).toEqual({ port: 8080, mode: 'ci' });
    expect(owner('/srv/config-agent/app/config.json')).toBe('644 config-agent:config-agent');
    expect(owner('/var/lib/config-agent')).toBe('700 config-agent:config-agent');
    const status = inside('config-agent status --json');
    expect(JSON.parse(status.stdout)).toMatchObject({ deviceId: DEVICE, pendingReports: 0 });
    expect(inside('config-agent status').status).toBe(0);
    const doctor = inside('config-agent doctor');
    expect(doctor.stdout).toContain('all checks passed');
    expect(doctor.status).toBe(0);
  });

  underSystemd(
    'the watchdog: a healthy agent is pinged and kept, a stopped one (SIGSTOP) is restarted (cit24)',
    async () => {
      // The shipped WatchdogSec=2min shortened to 3 s, and the 30 s before a restart to 1 s, so this takes seconds.
      const dropIn = '/etc/systemd/system/config-agent.service.d/60-cit24-watchdog.conf';
      const setUp = inside(
        `mkdir -p ${path.dirname(dropIn)} && ` +
          `printf '[Service]\\nWatchdogSec=3s\\nRestartSec=1s\\nTimeoutStopSec=3s\\n' > ${dropIn} && ` +
          'systemctl daemon-reload && systemctl restart config-agent',
      );
      expect(setUp.status, setUp.stdout + setUp.stderr).toBe(0);
      const watched = () => unitProps('MainPID,NRestarts,ActiveState,WatchdogTimestampMonotonic');
      const first = watched();
      expect(first.ActiveState).toBe('active');
      expect(unitProps('NotifyAccess,WatchdogUSec')).toEqual({ NotifyAccess: 'main', WatchdogUSec: '3s' });
      // Healthy: its pings (from its own pid, through config-agent-notify's socket) reach systemd across more than
      // two watchdog periods, and the same process runs on.
      let now = first;
      await until(
        'pings across two watchdog periods',
        () => {
          now = watched();
          return (
            Number(now.WatchdogTimestampMonotonic) - Number(first.WatchdogTimestampMonotonic) > 6_000_000
          );
        },
        30_000,
      );
      expect(now.MainPID).toBe(first.MainPID);
      expect(now.NRestarts).toBe(first.NRestarts);
      // Stopped: no more pings; systemd kills it and Restart=on-failure starts another.
      expect(inside(`kill -STOP ${first.MainPID}`).status).toBe(0);
      await until(
        'the watchdog to restart the stopped agent',
        () => {
          now = watched();
          return now.MainPID !== first.MainPID && now.MainPID !== '0' && now.ActiveState === 'active';
        },
        60_000,
      );
      expect(Number(now.NRestarts)).toBe(Number(first.NRestarts) + 1);
      const tornDown = inside(`rm -f ${dropIn} && systemctl daemon-reload && systemctl restart config-agent`);
      expect(tornDown.status, tornDown.stdout + tornDown.stderr).toBe(0);
      expect(unitProps('WatchdogUSec')).toEqual({ WatchdogUSec: '2min' });
    },
    120_000,
  );

  underSystemd(
    'an ExecStart= drop-in naming the launcher alone is still pinged; one naming Node says at error how to fix it (cit25)',
    async () => {
      const dropIn = '/etc/systemd/system/config-agent.service.d/60-cit25-execstart.conf';
      const run = (execStart: string) =>
        inside(
          `mkdir -p ${path.dirname(dropIn)} && ` +
            `printf '[Service]\\nExecStart=\\nExecStart=%s\\nWatchdogSec=3s\\nRestartSec=1s\\nTimeoutStopSec=3s\\n' '${execStart}' > ${dropIn} && ` +
            'systemctl daemon-reload && systemctl restart config-agent',
        );
      const watched = () => unitProps('MainPID,NRestarts,ActiveState,WatchdogTimestampMonotonic');
      // The launcher alone: it runs the daemon through config-agent-notify itself (before, restarted every 3 s here).
      const setUp = run('/usr/bin/config-agent --config /etc/config-agent/config.json');
      expect(setUp.status, setUp.stdout + setUp.stderr).toBe(0);
      const first = watched();
      expect(first.ActiveState).toBe('active');
      let now = first;
      await until(
        'pings across two watchdog periods',
        () => {
          now = watched();
          return (
            Number(now.WatchdogTimestampMonotonic) - Number(first.WatchdogTimestampMonotonic) > 6_000_000 ||
            now.MainPID !== first.MainPID
          );
        },
        30_000,
      );
      expect(now.MainPID).toBe(first.MainPID);
      expect(now.NRestarts).toBe(first.NRestarts);
      // Node named in ExecStart=: nothing can give it a socket; one error line names both fixes.
      const since = inside('date +%s').stdout.trim();
      const naked = run(
        '/usr/lib/config-agent/node/bin/node /usr/lib/config-agent/dist/main.cjs --config /etc/config-agent/config.json',
      );
      expect(naked.status, naked.stdout + naked.stderr).toBe(0);
      const errors = () =>
        inside(`journalctl -u config-agent -o cat --since @${since}`)
          .stdout.split('\n')
          .filter((line) => line.includes('no socket to ping it on'));
      await until('the error line', () => errors().length > 0, 30_000);
      expect(errors()[0]).toContain('WatchdogSec=0');
      expect(errors()[0]).toContain('config-agent-notify first in ExecStart=');
      const tornDown = inside(`rm -f ${dropIn} && systemctl daemon-reload && systemctl restart config-agent`);
      expect(tornDown.status, tornDown.stdout + tornDown.stderr).toBe(0);
      expect(inside('systemctl is-active config-agent').stdout.trim()).toBe('active');
    },
    120_000,
  );

  underSystemd(
    "a files.rules group is given to the file under the shipped unit's sandbox (adv21: SystemCallFilter= took fchown)",
    async () => {
      // The documented way: a group the agent joins with a SupplementaryGroups= drop-in, a rule naming it. Before
      // e6efd22 the unit's SystemCallFilter=~@privileged denied fchown: every write with a rule failed EPERM.
      const dropIn = '/etc/systemd/system/config-agent.service.d/60-fix21-group.conf';
      const syncs = async (what: string, check: () => boolean) => {
        let sync = inside('config-agent sync');
        await until(
          what,
          () => {
            sync = inside('config-agent sync');
            return sync.status === 0 && check();
          },
          60_000,
        ).catch((error: unknown) => {
          const journal = inside(
            "stat -c '%a %U:%G %u:%g inode %i %y' /srv/config-agent/app/config.json; journalctl -u config-agent -o cat | tail -n 8",
          ).stdout;
          throw new Error(`${String(error)}: sync ${sync.status} ${sync.stdout}${sync.stderr}\n${journal}`);
        });
      };
      const before = inside('cat /etc/config-agent/config.json').stdout;
      const setUp = inside(
        `groupadd --system fix21app && mkdir -p ${path.dirname(dropIn)} && ` +
          `printf '[Service]\\nSupplementaryGroups=fix21app\\n' > ${dropIn} && ` +
          'sed -i \'s/"deviceId"/"files": {"rules": [{"match": "app\\/**", "mode": "0640", "group": "fix21app"}]},\\n  "deviceId"/\' /etc/config-agent/config.json && ' +
          'systemctl daemon-reload && systemctl restart config-agent',
      );
      expect(setUp.status, setUp.stdout + setUp.stderr).toBe(0);
      await syncs(
        'the rule applied',
        () => owner('/srv/config-agent/app/config.json') === '640 config-agent:fix21app',
      );
      expect(JSON.parse(inside('cat /srv/config-agent/app/config.json').stdout)).toEqual({
        port: 8080,
        mode: 'ci',
      });
      expect(inside('systemctl is-active config-agent').stdout.trim()).toBe('active');

      // Taken back through a mode-only rule for the file (its group is then the agent's own: fchown again), then
      // the configuration and unit as the suite found them. Without any rule the agent wants no group, so removing
      // the last rule at once would leave the file with the removed rule's group (docs/operations.md says so).
      const modeOnly = inside(
        'sed -i \'s/"mode": "0640", "group": "fix21app"/"mode": "0644"/\' /etc/config-agent/config.json && ' +
          'systemctl restart config-agent',
      );
      expect(modeOnly.status, modeOnly.stdout + modeOnly.stderr).toBe(0);
      await syncs(
        'the group set back',
        () => owner('/srv/config-agent/app/config.json') === '644 config-agent:config-agent',
      );
      const tornDown = inside(
        `cat > /etc/config-agent/config.json && rm -f ${dropIn} && systemctl daemon-reload && ` +
          'systemctl restart config-agent && groupdel fix21app',
        before,
      );
      expect(tornDown.status, tornDown.stdout + tornDown.stderr).toBe(0);
      await syncs(
        'the rule gone',
        () => owner('/srv/config-agent/app/config.json') === '644 config-agent:config-agent',
      );
      expect(owner('/etc/config-agent/config.json')).toBe('640 root:config-agent');
    },
    150_000,
  );

  underSystemd('reloads on systemctl reload without restarting, and stops cleanly', async () => {
    // Without procps (/bin/kill), as a minimal Debian 13: the reload is the shell's own kill (cit25; before,
    // systemctl reload failed 203/EXEC there). The machine's root is an overlay: nothing of the host's goes.
    expect(inside('rm -f /usr/bin/kill /bin/kill && test ! -e /usr/bin/kill').status).toBe(0);
    const pidBefore = inside('systemctl show -p MainPID --value config-agent').stdout.trim();
    expect(
      inside(
        'sed -i \'s/"deviceId"/"log": {"level": "debug"},\\n  "deviceId"/\' /etc/config-agent/config.json',
      ).status,
    ).toBe(0);
    expect(inside('systemctl reload config-agent').status).toBe(0);
    await until(
      'the reload in the journal',
      () => inside('journalctl -u config-agent -o cat').stdout.includes('configuration reloaded'),
      30_000,
    );
    expect(inside('systemctl show -p MainPID --value config-agent').stdout.trim()).toBe(pidBefore);
    expect(inside('systemctl is-active config-agent').stdout.trim()).toBe('active');

    expect(inside('systemctl stop config-agent').status).toBe(0);
    expect(unitProps('ActiveState,Result,ExecMainStatus')).toEqual({
      ActiveState: 'inactive',
      Result: 'success',
      ExecMainStatus: '0',
    });
    expect(inside('config-agent status').status).toBe(3);
  });

  underSystemd('a configuration the agent refuses fails systemctl restart at once, naming exit 78', () => {
    const good = inside('cat /etc/config-agent/config.json').stdout;
    const broken = inside(
      'sed -i \'s/"deviceId"/"poll": {"intervalSeconds": "ten"},\\n  "deviceId"/\' /etc/config-agent/config.json && ' +
        'systemctl restart config-agent',
    );
    // Type=exec alone reported the start a success and the agent failed a moment later (ux23).
    expect(broken.status).not.toBe(0);
    expect(unitProps('ActiveState,ExecMainStatus')).toEqual({ ActiveState: 'failed', ExecMainStatus: '78' });
    expect(inside('journalctl -u config-agent -o cat -n 20').stdout).toContain(
      'poll.intervalSeconds: expected a number, got string',
    );
    const fixed = inside('cat > /etc/config-agent/config.json && systemctl restart config-agent', good);
    expect(fixed.status, fixed.stderr).toBe(0);
    expect(inside('systemctl is-active config-agent').stdout.trim()).toBe('active');
  });

  underSystemd(
    'a storm of 15 restarts in a row leaves it running: the unit has no start limit to hit',
    () => {
      // Under the old limit (10 starts in 10 minutes) the 11th restart was refused and the unit stayed failed
      // (Result=start-limit-hit) with nothing to restart it.
      for (let i = 0; i < 15; i += 1) expect(inside('systemctl restart config-agent').status).toBe(0);
      expect(inside('systemctl is-active config-agent').stdout.trim()).toBe('active');
      expect(inside('systemctl stop config-agent').status).toBe(0);
      expect(unitProps('ActiveState,Result').Result).toBe('success');
    },
  );

  underSystemd(
    "--once as the agent's user starts from the install's code cache, then makes and uses its own in /var/lib/config-agent; root's --once writes none",
    () => {
      // The key is root's (the unit hands it over with LoadCredential=): given here through the environment.
      const asAgent =
        'k=$(cat /etc/config-agent/api-key); CONFIG_AGENT_API_KEY="$k" runuser -u config-agent -- config-agent --once';
      const cacheLines = (text: string) =>
        text
          .split('\n')
          .filter((line) => line.includes('"component":"code-cache"'))
          .map((line) => (JSON.parse(line) as { msg: string }).msg);
      const first = inside(`${asAgent} 2>&1`);
      expect(first.status, first.stdout).toBe(0);
      // No cache of its own yet: root's install cache (postinst) is used, and its own written at exit.
      expect(cacheLines(first.stdout)).toEqual([
        'code cache not used',
        'code cache used',
        'code cache written',
      ]);
      expect(owner('/var/lib/config-agent/code-cache')).toBe('700 config-agent:config-agent');
      const files = inside('ls /var/lib/config-agent/code-cache').stdout.trim().split('\n');
      expect(files).toHaveLength(1);
      expect(files[0]).toMatch(/^agent-[0-9A-F]{12}\.[0-9a-f]{16}\.v8cache$/);
      expect(owner(`/var/lib/config-agent/code-cache/${files[0]}`)).toBe('600 config-agent:config-agent');
      const second = inside(`${asAgent} 2>&1`);
      expect(second.status, second.stdout).toBe(0);
      expect(cacheLines(second.stdout)).toEqual(['code cache used']);
      // Root on the service's stateDir: refused (exit 78), and neither reads nor writes the agent's cache (it
      // starts from the install's, its own user's).
      const root = inside('config-agent --once 2>&1');
      expect(root.status, root.stdout).toBe(78);
      expect(cacheLines(root.stdout)).toEqual([
        'code cache not used',
        'code cache used',
        'code cache not written',
      ]);
      expect(inside('ls /var/lib/config-agent/code-cache').stdout.trim()).toBe(files[0]);
      expect(owner(`/var/lib/config-agent/code-cache/${files[0]}`)).toBe('600 config-agent:config-agent');
    },
  );

  underSystemd(
    "switching between config-agent-node and config-agent keeps the agent running, and purging the one left in config-files state keeps the other's configuration, key and state",
    async () => {
      const node = `/opt/ci/${path.basename(DEB as string)}`;
      const all = `/opt/ci/${path.basename(ALL_DEB as string)}`;
      const kept = () =>
        inside(
          'cat /etc/config-agent/api-key /etc/config-agent/config.json /var/lib/config-agent/state.json >/dev/null && ' +
            'systemctl is-enabled config-agent',
        );
      const converges = async (what: string) => {
        await until(
          `config-agent sync to converge ${what}`,
          () => inside('config-agent sync').status === 0,
          60_000,
        );
      };
      expect(inside('systemctl start config-agent').status).toBe(0);

      // To the package on the system Node: apt removes config-agent-node (config-files left) and starts the agent.
      const toAll = inside(`apt-get install -y ${all}`);
      expect(toAll.status, toAll.stdout + toAll.stderr).toBe(0);
      expect(inside("dpkg-query -s config-agent-node | sed -n 's/^Status: //p'").stdout.trim()).toBe(
        'deinstall ok config-files',
      );
      expect(inside('systemctl is-active config-agent').stdout.trim()).toBe('active');
      // Purging config-agent-node's leftovers deleted /etc/config-agent and /var/lib/config-agent of the running
      // config-agent and disabled its unit: after the next restart or boot it was skipped, unconfigured.
      const purgeNode = inside('dpkg --purge config-agent-node');
      expect(purgeNode.status, purgeNode.stdout + purgeNode.stderr).toBe(0);
      const afterPurgeNode = kept();
      expect(afterPurgeNode.status, afterPurgeNode.stderr).toBe(0);
      expect(afterPurgeNode.stdout.trim()).toBe('enabled');
      expect(inside('systemctl restart config-agent').status).toBe(0);
      await converges('on config-agent');

      // And back: config-agent is left in config-files state; purging it keeps config-agent-node's.
      const toNode = inside(`apt-get install -y ${node}`);
      expect(toNode.status, toNode.stdout + toNode.stderr).toBe(0);
      expect(inside('systemctl is-active config-agent').stdout.trim()).toBe('active');
      const purgeAll = inside('dpkg --purge config-agent');
      expect(purgeAll.status, purgeAll.stdout + purgeAll.stderr).toBe(0);
      expect(purgeAll.stderr).toContain('another config-agent package is installed');
      expect(kept().stdout.trim()).toBe('enabled');

      // Installed again after a remove (config-files kept, so postinst is told the old version, as on an upgrade):
      // the agent prerm stopped because the package went away is started again. It stayed stopped until a reboot.
      const removed = inside('apt-get remove -y config-agent-node');
      expect(removed.status, removed.stdout + removed.stderr).toBe(0);
      expect(inside('systemctl is-active config-agent').stdout.trim()).toBe('inactive');
      const again = inside(`apt-get install -y ${node}`);
      expect(again.status, again.stdout + again.stderr).toBe(0);
      expect(inside('systemctl is-active config-agent').stdout.trim()).toBe('active');
      expect(inside('systemctl is-enabled config-agent').stdout.trim()).toBe('enabled');
      await converges('after the reinstall');
    },
    240_000,
  );

  underSystemd('purge removes configuration and state but never the managed files', () => {
    const purged = inside('apt-get purge -y config-agent-node');
    expect(purged.status, purged.stdout + purged.stderr).toBe(0);
    expect(inside('test -e /etc/config-agent').status).toBe(1);
    expect(inside('test -e /var/lib/config-agent').status).toBe(1);
    expect(inside('test -e /var/cache/config-agent').status).toBe(1);
    expect(inside('test -e /usr/bin/config-agent').status).toBe(1);
    expect(JSON.parse(inside('cat /srv/config-agent/app/config.json').stdout)).toEqual({
      port: 8080,
      mode: 'ci',
    });
  });

  underSystemd(
    "on the system Node, an upgrade of Node (a package installing /usr/bin/node anew) makes the install's code cache for the new binary, which a first --once starts from; purge removes it",
    () => {
      const all = `/opt/ci/${path.basename(ALL_DEB as string)}`;
      const installed = inside(`apt-get install -y ${all}`);
      expect(installed.status, installed.stdout + installed.stderr).toBe(0);
      const init = inside(
        `config-agent init --device-id ${DEVICE} --base-url ${mockUrl} --api-key-file - && ` +
          'sed -i \'s/"deviceId"/"log": {"level": "debug"},\\n  "deviceId"/\' /etc/config-agent/config.json',
        `${KEY}\n`,
      );
      expect(init.status, init.stdout + init.stderr).toBe(0);
      const listCache = () => inside('ls /var/cache/config-agent/code-cache').stdout.trim().split('\n');
      const before = listCache();
      expect(before).toHaveLength(1);

      // The upgrade: a package that takes over /usr/bin/node (Replaces: nodejs) with a copy of it, a new inode as
      // a new nodejs's would be. dpkg then runs config-agent's postinst `triggered` (its interest in the path).
      const upgrade = inside(
        'set -e; d=/var/tmp/ci-node-upgrade; mkdir -p $d/DEBIAN $d/usr/bin; cp /usr/bin/node $d/usr/bin/node; ' +
          'printf "Package: ci-node-upgrade\\nVersion: 1\\nArchitecture: all\\nMaintainer: CI <ci@example.invalid>\\n' +
          'Replaces: nodejs\\nDescription: a new /usr/bin/node\\n" >$d/DEBIAN/control; ' +
          'dpkg-deb -Znone --root-owner-group --build $d /var/tmp/ci-node-upgrade.deb >/dev/null; rm -rf $d; ' +
          'dpkg -i /var/tmp/ci-node-upgrade.deb; rm /var/tmp/ci-node-upgrade.deb',
      );
      expect(upgrade.status, upgrade.stdout + upgrade.stderr).toBe(0);
      expect(upgrade.stdout).toContain('Processing triggers for config-agent');
      const after = listCache();
      const made = after.filter((file) => !before.includes(file));
      expect(made, after.join(' ')).toHaveLength(1);
      expect(made[0]).toMatch(/^agent-[0-9A-F]{12}\.[0-9a-f]{16}\.v8cache$/);
      expect(owner(`/var/cache/config-agent/code-cache/${made[0]}`)).toBe('644 root:root');

      // The agent's first --once (no cache of its own; its stateDir made as the unit's StateDirectory= makes it):
      // the one made for the new node is used. Before the trigger, only the old one was there, made for another
      // binary, and this --once compiled from source.
      const first = inside(
        'install -d -o config-agent -g config-agent -m 0700 /var/lib/config-agent && ' +
          'k=$(cat /etc/config-agent/api-key); CONFIG_AGENT_API_KEY="$k" runuser -u config-agent -- config-agent --once 2>&1',
      );
      expect(first.status, first.stdout).toBe(0);
      const cacheLines = first.stdout
        .split('\n')
        .filter((line) => line.includes('"component":"code-cache"'))
        .map((line) => (JSON.parse(line) as { msg: string }).msg);
      expect(cacheLines).toEqual(['code cache not used', 'code cache used', 'code cache written']);

      const purged = inside('apt-get purge -y config-agent');
      expect(purged.status, purged.stdout + purged.stderr).toBe(0);
      expect(inside('test -e /var/cache/config-agent').status).toBe(1);
      expect(inside('test -e /var/lib/config-agent').status).toBe(1);
    },
    240_000,
  );
});
