// `config-agent doctor`: checks config, key, directories, the unit, the service and the clock; one line per check.
import { execFile } from 'node:child_process';
import type { Stats } from 'node:fs';
import path from 'node:path';
import { createServiceTransport } from '../api/transport.js';
import type { HookCheckUnanswered } from '../config/hook-programs.js';
import { assertConfigPlaces, loadApiKey, loadConfigFile, resolveConfigPath } from '../config/load.js';
import type { AgentConfig } from '../config/schema.js';
import { errnoCode, errorMessage } from '../lib/errors.js';
import {
  type Check,
  LOCAL_API_ANSWER_MS,
  localApiCheck,
  mountChecks,
  type UnitRunning,
} from './doctor-agent.js';
import { boundedPlaces, notAnswered, notJudgedText, type PlacesBounds } from './doctor-bounds.js';
import { ExitCode } from './exit-codes.js';
import { AGENT_ACCOUNT, agentAccount, type InitEnvironment } from './init.js';
import type { CommandIo } from './io.js';
import { checkService } from './service-check.js';
import { rootDirHiddenFromUnit, textfileHiddenFromUnit } from './unit-sandbox.js';

export interface DoctorCommand {
  configPath?: string;
}

export interface SystemctlResult {
  status: number;
  stdout: string;
}

export interface DoctorEnvironment
  extends Pick<InitEnvironment, 'groupFile' | 'passwdFile' | 'checkTimeoutMs' | 'unitHides'>,
    PlacesBounds {
  /** Runs systemctl with these arguments; a missing systemctl resolves with status 127. */
  systemctl: (args: readonly string[]) => Promise<SystemctlResult>;
  now: () => number;
  unit: string;
  /**
   * Where the unit's StateDirectory=, CacheDirectory=, LogsDirectory= and RuntimeDirectory= names live (systemd's
   * /var/lib, /var/cache, /var/log, /run for a system unit); tests point them at scratch directories.
   */
  unitDirectoryBases?: Readonly<Record<UnitDirectoryKind, string>>;
  /** How long the agent's local API may take to answer `GET /v1/health`: LOCAL_API_ANSWER_MS unless given. */
  localApiAnswerMs?: number;
}

/** A hook program whose check did not answer: not judged, which doctor cannot call ok. */
function unjudgedHook(unanswered: HookCheckUnanswered): Check {
  return {
    name: 'hooks',
    ok: false,
    detail: notJudgedText(unanswered),
  };
}

/** The unit's own directories, writable under ProtectSystem=strict without a ReadWritePaths= line. */
type UnitDirectoryKind = 'StateDirectory' | 'CacheDirectory' | 'LogsDirectory' | 'RuntimeDirectory';
const SYSTEM_UNIT_DIRECTORY_BASES: Readonly<Record<UnitDirectoryKind, string>> = {
  StateDirectory: '/var/lib',
  CacheDirectory: '/var/cache',
  LogsDirectory: '/var/log',
  RuntimeDirectory: '/run',
};

/** More skew than this breaks TLS validity windows and Retry-After dates; NTP keeps devices well within it. */
const MAX_CLOCK_SKEW_MS = 60_000;

/**
 * systemctl looked up on the system's PATH, not the caller's: doctor is run as root, often from `su` or `sudo -E`,
 * whose environment's PATH (a user's ~/bin first) would choose the program run as root (review37; as rootAcl's
 * getfacl, review36). The rest of the environment is kept (SYSTEMD_*, the bus's address).
 */
const SYSTEM_PATH = '/usr/sbin:/usr/bin:/sbin:/bin';

export function runSystemctl(args: readonly string[]): Promise<SystemctlResult> {
  return new Promise((resolve) => {
    const env = { ...process.env, PATH: SYSTEM_PATH };
    execFile('systemctl', [...args], { timeout: 10_000, env }, (error, stdout) => {
      if (error && errnoCode(error) === 'ENOENT') resolve({ status: 127, stdout: '' });
      else resolve({ status: error ? Number((error as { code?: unknown }).code ?? 1) || 1 : 0, stdout });
    });
  });
}

/**
 * Hook arguments inside rootDir that start-up accepts (data for a program that is no interpreter, or for a script
 * outside rootDir): the service decides their bytes, which the program must treat as data, never run as code.
 */
function hookArgumentsInRoot(config: AgentConfig): Check[] {
  const checks: Check[] = [];
  for (const [i, hook] of config.hooks.entries())
    for (const [j, arg] of hook.run.entries()) {
      if (j === 0 || !path.isAbsolute(arg)) continue;
      const relative = path.relative(config.rootDir, arg);
      if (relative.startsWith('..') || path.isAbsolute(relative)) continue;
      checks.push({
        name: 'hooks',
        ok: true,
        warn: true,
        detail:
          `hooks[${i}].run[${j}] ${arg} is inside rootDir, whose files the service writes: ${hook.run[0]} must ` +
          'read it as data only, never run it as code',
      });
    }
  return checks;
}

function modeText(stats: Stats): string {
  return (stats.mode & 0o7777).toString(8).padStart(4, '0');
}

/** The stat of doctor's judgements of configured places: bounded on mounts that may hang (doctor-bounds.ts). */
type PlaceStat = (file: string) => Promise<Stats>;

async function statOrUndefined(stat: PlaceStat, file: string): Promise<Stats | undefined> {
  try {
    return await stat(file);
  } catch (error) {
    if (errnoCode(error) === 'ENOENT') return undefined;
    throw error;
  }
}

/** Owner, group and mode of a path against what the unit and docs expect. */
async function ownership(
  stat: PlaceStat,
  name: string,
  file: string,
  want: { uid: number; gid: number; mode: number; ownerText: string; dir: boolean },
  missing?: string,
): Promise<Check> {
  let stats: Stats | undefined;
  try {
    stats = await statOrUndefined(stat, file);
  } catch (error) {
    // A mount that did not answer within the bound (or two that have not): not judged, the mount named.
    if (notAnswered(error)) return { name, ok: false, detail: `${file} not judged: ${errorMessage(error)}` };
    return { name, ok: false, detail: `${file}: cannot stat: ${errorMessage(error)}` };
  }
  if (stats === undefined) {
    return missing === undefined
      ? { name, ok: false, detail: `${file} does not exist` }
      : { name, ok: true, detail: `${file} ${missing}` };
  }
  const wantText = `${want.mode.toString(8).padStart(4, '0')} ${want.ownerText}`;
  if (want.dir !== stats.isDirectory()) {
    return { name, ok: false, detail: `${file} is not a ${want.dir ? 'directory' : 'regular file'}` };
  }
  const problems: string[] = [];
  if (stats.uid !== want.uid || stats.gid !== want.gid) problems.push(`owner ${stats.uid}:${stats.gid}`);
  if ((stats.mode & 0o7777) !== want.mode) problems.push(`mode ${modeText(stats)}`);
  if (problems.length > 0) {
    return { name, ok: false, detail: `${file}: ${problems.join(', ')}; want ${wantText}` };
  }
  return { name, ok: true, detail: `${file} ${wantText}` };
}

/** `systemctl show` output → property → value. */
function showProperties(stdout: string): Record<string, string> {
  return Object.fromEntries(
    stdout
      .split('\n')
      .filter((line) => line.includes('='))
      .map((line) => [line.slice(0, line.indexOf('=')), line.slice(line.indexOf('=') + 1)]),
  );
}

/**
 * Why the loaded unit cannot write rootDir, or undefined: under ProtectSystem=strict only its ReadWritePaths= (and
 * its own state and runtime directories) are writable, so a rootDir moved in config.json without the drop-in
 * `init` writes (or before `systemctl daemon-reload`) failed every write with EROFS while doctor said all ok.
 */
async function unitCannotWrite(
  env: DoctorEnvironment,
  realpath: (file: string) => Promise<string>,
  rootDir: string,
  remedy = `sudo config-agent init --root-dir ${rootDir} writes the drop-in`,
): Promise<string | undefined> {
  const bases = env.unitDirectoryBases ?? SYSTEM_UNIT_DIRECTORY_BASES;
  const kinds = Object.keys(bases) as UnitDirectoryKind[];
  const shown = await env.systemctl([
    'show',
    env.unit,
    `--property=LoadState,ProtectSystem,ReadWritePaths,${kinds.join(',')}`,
  ]);
  if (shown.status !== 0) return undefined;
  const props = showProperties(shown.stdout);
  // A path with a space is shown quoted by systemctl: not judged.
  if (props.LoadState !== 'loaded' || props.ProtectSystem !== 'strict' || /\s/.test(rootDir))
    return undefined;
  const entries = (value: string | undefined) => (value ?? '').split(/\s+/).filter((entry) => entry !== '');
  const writable = [
    ...entries(props.ReadWritePaths).map((entry) => entry.replace(/^[-+]+/, '')),
    // StateDirectory=config-agent is /var/lib/config-agent, writable for the unit (a `name:link` entry names a
    // symlink systemd makes to it: the directory is the part before the colon).
    ...kinds.flatMap((kind) =>
      entries(props[kind]).map((entry) => path.join(bases[kind], entry.split(':')[0] ?? entry)),
    ),
  ];
  let real = rootDir;
  try {
    real = await realpath(rootDir);
  } catch (error) {
    // Bounded (doctor-bounds.ts): a dead mount on the way is said, not waited on for good nor taken as covered.
    if (notAnswered(error)) return `${rootDir} not judged: ${errorMessage(error)}`;
  }
  const covered = (dir: string) => writable.some((entry) => dir === entry || dir.startsWith(`${entry}/`));
  if (covered(rootDir) || covered(real)) return undefined;
  return (
    `${rootDir} is read-only for ${env.unit} (ProtectSystem=strict, and no ReadWritePaths= of the loaded unit ` +
    `covers it: every write fails with EROFS); ${remedy}, then sudo systemctl daemon-reload && ` +
    'sudo systemctl restart config-agent'
  );
}

/** What a device that was never configured needs: the command that writes config.json and the key. */
const INIT_COMMAND =
  'sudo config-agent init --device-id <id> --base-url <url> --api-key-file <file> writes it';

/** Whether `file` exists; an error other than ENOENT (EACCES) counts as there, for the check that reads it. */
async function exists(stat: PlaceStat, file: string): Promise<boolean> {
  return stat(file).then(
    () => true,
    (error: unknown) => errnoCode(error) !== 'ENOENT',
  );
}

/** `missing`: config.json or the key, absent now (the unit's ConditionPathExists= files), if one is. */
async function unitCheck(
  env: DoctorEnvironment,
  missing: string | undefined,
): Promise<Check & { running: UnitRunning }> {
  const name = 'unit';
  const running: UnitRunning = 'unknown';
  const shown = await env.systemctl([
    'show',
    env.unit,
    '--property=LoadState,ActiveState,SubState,UnitFileState,ConditionResult,Result',
  ]);
  if (shown.status === 127)
    return { name, ok: false, running, detail: 'systemctl not found: is this a systemd system?' };
  const props = showProperties(shown.stdout);
  if (props.LoadState !== 'loaded') {
    return {
      name,
      ok: false,
      running,
      detail: `${env.unit} is ${props.LoadState ?? 'unknown'}: is the package installed?`,
    };
  }
  const state = `${props.ActiveState}/${props.SubState}, ${props.UnitFileState}`;
  if (props.ActiveState === 'active' && props.SubState === 'running') {
    return {
      name,
      ok: props.UnitFileState === 'enabled',
      running: 'running',
      detail:
        props.UnitFileState === 'enabled'
          ? `${env.unit} ${state}`
          : `${env.unit} ${state}: it will not start at boot (sudo systemctl enable config-agent)`,
    };
  }
  const why =
    props.ConditionResult === 'no' && missing !== undefined
      ? `a start condition failed: ${missing} does not exist (${INIT_COMMAND}, then sudo systemctl restart config-agent)`
      : props.ConditionResult === 'no'
        ? 'a start condition failed: config.json or the key was missing at the last start (sudo systemctl restart config-agent)'
        : `last result ${props.Result}: see journalctl -u ${env.unit} -o cat -n 20`;
  // Starting (activating) or reloading: the agent may answer; inactive or failed: it does not run.
  const stopped = props.ActiveState === 'inactive' || props.ActiveState === 'failed';
  return {
    name,
    ok: false,
    running: stopped ? 'stopped' : 'unknown',
    detail: `${env.unit} ${state}; ${why}`,
  };
}

export async function runDoctor(
  command: DoctorCommand,
  io: CommandIo,
  env: DoctorEnvironment,
): Promise<number> {
  // Every place judged through start-up's bounds: a dead NFS or unserved FUSE mount under rootDir, stateDir, the key
  // or the config held doctor for good in node:fs (hook28, hook29). Each such mount is asked from another process
  // first (doctor28), and those still asking at the end are given up.
  const places = await boundedPlaces(env);
  try {
    return await doctorChecks(command, io, env, places);
  } finally {
    places.close();
  }
}

async function doctorChecks(
  command: DoctorCommand,
  io: CommandIo,
  env: DoctorEnvironment,
  places: Awaited<ReturnType<typeof boundedPlaces>>,
): Promise<number> {
  const checks: Check[] = [];
  const report = (check: Check) => {
    checks.push(check);
    const label = check.warn === true ? 'warn' : check.ok ? 'ok  ' : 'FAIL';
    io.stdout.write(`${label}  ${check.name.padEnd(9)} ${check.detail}\n`);
  };

  const configPath = resolveConfigPath(command.configPath, io.env);
  let config: AgentConfig | undefined;
  let unjudged: HookCheckUnanswered[] = [];
  // Never configured (the package installed, init not run yet): one line saying so and what writes it.
  const stat: PlaceStat = (file) => places.fs.stat(file);
  const realpath = (file: string) => places.ownPathsPort.realpath(file);
  const configMissing = !(await exists(stat, configPath));
  if (configMissing)
    report({ name: 'config', ok: false, detail: `${configPath} does not exist: ${INIT_COMMAND}` });
  else
    try {
      config = await loadConfigFile(places.fs, configPath);
      // The rest of start-up's judgement (exit 78): the places, for the agent's user when it exists.
      const agentUid = await agentAccount(env).then(
        (found) => found.uid,
        () => process.geteuid?.(),
      );
      // Bounded as start-up's checks: a hook program on a dead mount held doctor for good (hook28).
      unjudged = await assertConfigPlaces(
        places.fs,
        config,
        configPath,
        io.env,
        agentUid,
        places.ownPathsPort,
      );
      report({ name: 'config', ok: true, detail: `${configPath} valid (device ${config.deviceId})` });
      for (const check of hookArgumentsInRoot(config)) report(check);
    } catch (error) {
      report({ name: 'config', ok: false, detail: errorMessage(error) });
    }
  for (const unanswered of unjudged) report(unjudgedHook(unanswered));

  let account: { uid: number; gid: number } | undefined;
  try {
    account = await agentAccount(env);
    report({
      name: 'account',
      ok: true,
      detail: `user and group ${AGENT_ACCOUNT} (${account.uid}:${account.gid})`,
    });
  } catch (error) {
    report({ name: 'account', ok: false, detail: errorMessage(error) });
  }

  if (account !== undefined) {
    const { uid, gid } = account;
    const group = `root:${AGENT_ACCOUNT}`;
    report(
      await ownership(stat, 'confdir', path.dirname(configPath), {
        uid: 0,
        gid,
        mode: 0o750,
        ownerText: group,
        dir: true,
      }),
    );
    if (!configMissing)
      report(
        await ownership(stat, 'config', configPath, {
          uid: 0,
          gid,
          mode: 0o640,
          ownerText: group,
          dir: false,
        }),
      );
    if (config !== undefined) {
      const keyFile = config.server.apiKeyFile;
      report(
        await ownership(stat, 'key', keyFile, {
          uid: 0,
          gid: 0,
          mode: 0o600,
          ownerText: 'root:root',
          dir: false,
        }),
      );
      const agent = `${AGENT_ACCOUNT}:${AGENT_ACCOUNT}`;
      const hidden =
        (env.unitHides === undefined
          ? undefined
          : await rootDirHiddenFromUnit({ realpath }, config.rootDir, env.unitHides)) ??
        (await unitCannotWrite(env, realpath, config.rootDir));
      report(
        hidden !== undefined
          ? { name: 'rootDir', ok: false, detail: hidden }
          : await ownership(stat, 'rootDir', config.rootDir, {
              uid,
              gid,
              mode: config.files.dirMode,
              ownerText: agent,
              dir: true,
            }),
      );
      report(
        await ownership(
          stat,
          'stateDir',
          config.stateDir,
          { uid, gid, mode: 0o700, ownerText: agent, dir: true },
          'does not exist yet (the unit creates it at its first start)',
        ),
      );
      // metrics.textfile: judged as rootDir is (hidden by the unit, or read-only for it), by its directory.
      const textfile = config.metrics.textfile;
      if (textfile !== undefined) {
        const dir = path.dirname(textfile);
        const problem =
          (env.unitHides === undefined
            ? undefined
            : await textfileHiddenFromUnit({ realpath }, textfile, env.unitHides)) ??
          (await unitCannotWrite(
            env,
            realpath,
            dir,
            `a drop-in with ReadWritePaths=-${dir} lets it write there`,
          ));
        report(
          problem !== undefined
            ? { name: 'metrics', ok: false, detail: `metrics.textfile: ${problem}` }
            : { name: 'metrics', ok: true, detail: `${textfile}: its directory is one the unit may write` },
        );
      }
    }
  }

  const keyFile = config?.server.apiKeyFile ?? path.join(path.dirname(configPath), 'api-key');
  const { running, ...unit } = await unitCheck(
    env,
    configMissing ? configPath : (await exists(stat, keyFile)) ? undefined : keyFile,
  );
  report(unit);
  if (config !== undefined) {
    // The running agent as applications and operators reach it (its socket), and the mounts it keeps as gone.
    report(
      await localApiCheck(
        places.fs,
        config,
        { name: env.unit, running },
        env.localApiAnswerMs ?? LOCAL_API_ANSWER_MS,
      ),
    );
    for (const check of await mountChecks(places.fs, places.ownPathsPort, config)) report(check);
  }

  if (config !== undefined) {
    let apiKey: string | undefined;
    try {
      // The unit's view: the key file (the credential systemd copies from it), not this shell's environment.
      apiKey = (await loadApiKey(places.fs, config, {})).apiKey;
    } catch (error) {
      report({ name: 'service', ok: false, detail: `not checked: ${errorMessage(error)}` });
    }
    if (apiKey !== undefined) {
      const transport = createServiceTransport({
        timeoutMs: env.checkTimeoutMs,
        maxResponseBytes: 1024 * 1024,
        baseUrl: config.server.baseUrl,
        // The agent's own way to the service: server.proxy, else HTTPS_PROXY/NO_PROXY of this environment.
        proxy: { ...(config.server.proxy === undefined ? {} : { url: config.server.proxy }), env: io.env },
      });
      const before = env.now();
      try {
        const result = await checkService({
          baseUrl: config.server.baseUrl,
          apiVersion: config.server.apiVersion,
          apiKey,
          deviceId: config.deviceId,
          timeoutMs: env.checkTimeoutMs,
          transport,
        });
        const after = env.now();
        report({ name: 'service', ok: result.ok, detail: result.message });
        if (result.serverDate === undefined) {
          report({
            name: 'clock',
            ok: false,
            detail:
              result.ok || result.kind === 'auth' || result.kind === 'not_found' || result.kind === 'http'
                ? 'the service sent no Date header: cannot compare clocks'
                : 'not checked: the service was not reached',
          });
        } else {
          // The Date header has one-second resolution and was stamped somewhere between send and receipt.
          const skew = result.serverDate.getTime() - (before + after) / 2;
          const slack = 1000 + (after - before) / 2;
          const off = Math.abs(skew) <= slack ? 0 : Math.abs(skew) - slack;
          report({
            name: 'clock',
            ok: off <= MAX_CLOCK_SKEW_MS,
            detail:
              off <= MAX_CLOCK_SKEW_MS
                ? `within ${Math.round(slack / 1000)} s of the service's Date (${result.serverDate.toISOString()})`
                : `this device is ${Math.round(Math.abs(skew) / 1000)} s ${skew > 0 ? 'behind' : 'ahead of'} the service (Date ${result.serverDate.toISOString()}): enable NTP (timedatectl set-ntp true)`,
          });
        }
      } finally {
        await transport.close().catch(() => undefined);
      }
    }
  }

  const failed = checks.filter((check) => !check.ok).length;
  io.stdout.write(failed === 0 ? 'all checks passed\n' : `${failed} check(s) failed\n`);
  return failed === 0 ? ExitCode.Converged : ExitCode.NotConverged;
}
