// The agent's own files must lie outside rootDir, judged on real paths: symlinks and bind mounts resolved.
import * as nodeFs from 'node:fs/promises';
import path from 'node:path';
import { errnoCode } from '../lib/errors.js';
import { ConfigError, type ConfigIssue } from './errors.js';
import { codeMentions, hookCodeArguments, MAX_WRAPPERS } from './hook-code-args.js';
import { type AgentConfig, stateDirClash } from './schema.js';

/** What the check reads; injected so tests can describe mounts without mounting. */
export interface OwnPathsPort {
  realpath(file: string): Promise<string>;
  /** The target of a symlink; throws (EINVAL) for anything else. */
  readlink(file: string): Promise<string>;
  stat(file: string): Promise<{ dev: number; ino: number }>;
  /** /proc/self/mountinfo, or undefined where there is none. */
  mountinfo(): Promise<string | undefined>;
}

export const nodeOwnPathsPort: OwnPathsPort = {
  realpath: (file) => nodeFs.realpath(file),
  readlink: (file) => nodeFs.readlink(file),
  stat: (file) => nodeFs.stat(file),
  mountinfo: () => nodeFs.readFile('/proc/self/mountinfo', 'utf8').catch(() => undefined),
};

export interface OwnPath {
  /** The config key (or what it is) named in the message. */
  key: string;
  file: string;
}

/**
 * The paths the service must never be able to replace by deploying a file: each would hand it the agent's
 * configuration (hooks run commands), its key, its state, its socket or its code.
 */
export function ownPaths(
  config: AgentConfig,
  configPath: string,
  env: NodeJS.ProcessEnv,
  agentCode: readonly OwnPath[] = agentCodePaths(),
): OwnPath[] {
  const paths: OwnPath[] = [
    { key: 'the config file', file: configPath },
    { key: 'stateDir', file: config.stateDir },
    { key: 'server.apiKeyFile', file: config.server.apiKeyFile },
    { key: 'socketPath', file: config.socketPath },
  ];
  const credentials = env.CREDENTIALS_DIRECTORY;
  if (credentials !== undefined && credentials !== '')
    paths.push({ key: '$CREDENTIALS_DIRECTORY', file: credentials });
  if (config.metrics.textfile !== undefined)
    paths.push({ key: 'metrics.textfile', file: config.metrics.textfile });
  const extraCa = env.NODE_EXTRA_CA_CERTS;
  // A CA planted there would let anyone impersonate the service after the next start.
  if (extraCa !== undefined && extraCa !== '') paths.push({ key: 'NODE_EXTRA_CA_CERTS', file: extraCa });
  let bareProgram = false;
  for (const [i, hook] of config.hooks.entries()) {
    const program = hook.run[0];
    if (path.isAbsolute(program)) paths.push({ key: `hooks[${i}].run[0]`, file: program });
    // A name with a slash is not looked up in PATH but taken from the hook's working directory, rootDir.
    else if (program.includes('/'))
      paths.push({ key: `hooks[${i}].run[0]`, file: path.join(config.rootDir, program) });
    else bareProgram = true;
    // An interpreter runs its script argument as code: a script the service delivers would run as the hook.
    const code = hookCodeArguments(hook.run, config.rootDir);
    for (const { index, file } of [...code.programs, ...code.files])
      paths.push({ key: `hooks[${i}].run[${index}]`, file });
    if (code.barePrograms) bareProgram = true;
  }
  // Unset, PATH is the C library's default (/bin:/usr/bin), never relative.
  if (bareProgram && env.PATH !== undefined) {
    // A bare program name is looked up in PATH: no PATH directory may be one the service writes to. Hooks
    // run with rootDir as their working directory, so a relative entry ("", ".") means rootDir itself.
    for (const entry of env.PATH.split(':')) {
      paths.push({
        key: `PATH entry "${entry}" (hooks look programs up there)`,
        file: path.isAbsolute(entry) ? entry : path.join(config.rootDir, entry),
      });
    }
  }
  return [...paths, ...agentCode];
}

function agentCodePaths(): OwnPath[] {
  return [
    { key: 'the node executable', file: process.execPath },
    { key: "the agent's code", file: path.dirname(new URL('.', import.meta.url).pathname) },
  ];
}

/**
 * Refuses (ConfigError, exit 78) any own path inside rootDir, or rootDir inside stateDir. Paths that do not
 * exist yet are resolved through their deepest existing ancestor, as the file will be created there.
 */
export async function assertOwnPathsOutsideRoot(
  config: AgentConfig,
  configPath: string,
  paths: readonly OwnPath[],
  port: OwnPathsPort = nodeOwnPathsPort,
): Promise<void> {
  const mounts = parseMountinfo((await port.mountinfo()) ?? '');
  const root = await realLocation(port, config.rootDir, mounts);
  const issues: ConfigIssue[] = [];
  kernelFilesystemIssue(issues, 'rootDir', config.rootDir, root);
  // stateDir is among `paths` at start-up; judged here too, so a caller's own list cannot leave it out.
  if (!paths.some((own) => own.key === 'stateDir'))
    kernelFilesystemIssue(
      issues,
      'stateDir',
      config.stateDir,
      await realLocation(port, config.stateDir, mounts),
    );
  const state = await realLocation(port, config.stateDir, mounts);
  for (const own of paths) {
    const where = await realLocation(port, own.file, mounts);
    if (own.key === 'stateDir') kernelFilesystemIssue(issues, own.key, own.file, where);
    // The schema's lexical rule on real paths: a symlink on the way may still lead onto a state file (adv30).
    const clash = CLASHING_KEYS.has(own.key) ? stateDirClash(where.real, state.real) : undefined;
    if (clash !== undefined) {
      const really = where.real === own.file ? '' : ` (really ${where.real})`;
      const stateReally =
        state.real === config.stateDir ? '' : ` (stateDir ${config.stateDir} is really ${state.real})`;
      issues.push({ path: own.key, message: `${own.file}${really}${stateReally} ${clash}` });
    }
    const inside =
      isInside(where, root) ||
      (own.key === 'stateDir' && isInside(root, where)) ||
      (await crossesRoot(port, where.real, root));
    if (!inside) continue;
    const shown = where.real === own.file ? '' : ` (really ${where.real})`;
    issues.push({
      path: own.key,
      message:
        `${own.file}${shown} is inside rootDir ${config.rootDir}` +
        `${root.real === config.rootDir ? '' : ` (really ${root.real})`}, ` +
        'where the service decides what is written: move it out of rootDir',
    });
  }
  for (const [i, hook] of config.hooks.entries()) {
    const code = hookCodeArguments(hook.run, config.rootDir);
    if (code.tooDeep !== undefined)
      issues.push({
        path: `hooks[${i}].run[${code.tooDeep}]`,
        message: `more than ${MAX_WRAPPERS} wrappers (env, timeout, sudo, ...) in a row: what they run cannot be judged`,
      });
    for (const { index, why } of code.workingDirectory)
      issues.push({
        path: `hooks[${i}].run[${index}]`,
        message:
          `${why}: hooks run with rootDir ${config.rootDir} as their working directory, where the service ` +
          'decides what is written: a file it delivers there would run as the hook',
      });
    for (const { index, text } of code.code) {
      const named = codeMentions(text, [config.rootDir, root.real]);
      if (named === undefined) continue;
      issues.push({
        path: `hooks[${i}].run[${index}]`,
        message:
          `code given to an interpreter names ${named} (rootDir ${config.rootDir}), where the service decides ` +
          'what is written: a file it delivers there would run as the hook; move the script out of rootDir',
      });
    }
  }
  if (issues.length > 0) throw new ConfigError(configPath, issues);
}

/** The own paths that may not take a name the agent keeps in stateDir (schema.ts `stateDirClash`). */
const CLASHING_KEYS: ReadonlySet<string> = new Set(['socketPath', 'metrics.textfile', 'server.apiKeyFile']);

interface Location {
  /** The path with every symlink resolved. */
  real: string;
  /** The filesystem (major:minor) and the path inside it, when mountinfo is known: bind mounts resolved. */
  device?: string;
  inFs?: string;
  /** The type of that filesystem (`ext4`, `proc`), when mountinfo is known. */
  type?: string;
}

/**
 * Kernel filesystems whose entries are the kernel's own objects (processes, devices, control groups, tracing and
 * security knobs), never anyone's files. rootDir or stateDir there is a slip (`/proc`, a symlink into `/sys`):
 * the start-up sweep walked all of `/proc`, every call went through a mount lane (not a local filesystem: it may
 * hang), and as root each directory the service named was made there (in cgroup2, a control group; in
 * devtmpfs, beside the device nodes) while every file failed `retrying`. Refused at start and reload instead.
 */
export const KERNEL_FILESYSTEMS: ReadonlySet<string> = new Set([
  'proc',
  'sysfs',
  'devtmpfs',
  'devpts',
  'cgroup',
  'cgroup2',
  'mqueue',
  'securityfs',
  'debugfs',
  'tracefs',
  'pstore',
  'bpf',
  'configfs',
  'hugetlbfs',
  'binfmt_misc',
  'fusectl',
  'efivarfs',
  'nsfs',
]);

function kernelFilesystemIssue(issues: ConfigIssue[], key: string, dir: string, where: Location): void {
  if (where.type === undefined || !KERNEL_FILESYSTEMS.has(where.type)) return;
  const shown = where.real === dir ? '' : ` (really ${where.real})`;
  issues.push({
    path: key,
    message:
      `${dir}${shown} is on ${where.type}, a kernel filesystem whose entries are the kernel's objects, ` +
      'not a place for files: choose a directory on a disk or a tmpfs',
  });
}

function isInside(inner: Location, outer: Location): boolean {
  if (isSameOrInside(inner.real, outer.real)) return true;
  if (inner.device === undefined || inner.device !== outer.device) return false;
  return isSameOrInside(inner.inFs ?? '', outer.inFs ?? '');
}

function isSameOrInside(inner: string, outer: string): boolean {
  return outer === '/' || inner === outer || inner.startsWith(`${outer}/`);
}

/**
 * The real path of `file`: its deepest existing ancestor resolved, the rest appended as it will be created.
 * A dangling symlink is followed too: the directory it names may be created later — by the service, in rootDir.
 */
async function realLocation(port: OwnPathsPort, file: string, mounts: readonly Mount[]): Promise<Location> {
  const missing: string[] = [];
  let pending = path.resolve(file);
  for (let hops = 0; hops < MAX_HOPS; hops += 1) {
    try {
      const real = path.join(await port.realpath(pending), ...missing);
      return { real, ...fsLocation(real, mounts) };
    } catch (error) {
      const code = errnoCode(error);
      // Not ours to resolve (EACCES on a parent): judge the path as written, the schema's lexical rule.
      if ((code !== 'ENOENT' && code !== 'ENOTDIR') || pending === '/') break;
    }
    const target = await port.readlink(pending).catch(() => undefined);
    if (target !== undefined) {
      pending = path.resolve(path.dirname(pending), target);
      continue;
    }
    missing.unshift(path.basename(pending));
    pending = path.dirname(pending);
  }
  return { real: path.resolve(file) };
}

/** Symlinks followed plus components walked up (a 4095-byte path has at most 2048), before giving up. */
const MAX_HOPS = 5000;

/** Whether an existing ancestor of `real` is rootDir itself, mounted elsewhere (same device and inode). */
async function crossesRoot(port: OwnPathsPort, real: string, root: Location): Promise<boolean> {
  let rootStat: { dev: number; ino: number };
  try {
    rootStat = await port.stat(root.real);
  } catch {
    return false;
  }
  for (let dir = real; ; dir = path.dirname(dir)) {
    const stats = await port.stat(dir).catch(() => undefined);
    if (stats !== undefined && stats.dev === rootStat.dev && stats.ino === rootStat.ino) return true;
    if (dir === '/') return false;
  }
}

export interface Mount {
  device: string;
  /** The mounted directory's path inside its filesystem. */
  root: string;
  mountPoint: string;
  /** The filesystem's type, after the ` - ` separator (`ext4`, `proc`); '' when the line has none. */
  type: string;
}

/** /proc/self/mountinfo lines: `id parent major:minor root mountpoint options ... - type source superoptions`. */
export function parseMountinfo(text: string): Mount[] {
  const mounts: Mount[] = [];
  for (const line of text.split('\n')) {
    const fields = line.split(' ');
    const [, , device, root, mountPoint] = fields;
    if (device === undefined || root === undefined || mountPoint === undefined) continue;
    const dash = fields.indexOf('-', 6);
    const type = (dash === -1 ? undefined : fields[dash + 1]) ?? '';
    mounts.push({ device, root: unescapeMountPath(root), mountPoint: unescapeMountPath(mountPoint), type });
  }
  return mounts;
}

function unescapeMountPath(value: string): string {
  return value.replace(/\\([0-7]{3})/g, (_all, octal: string) =>
    String.fromCharCode(Number.parseInt(octal, 8)),
  );
}

/** The filesystem holding `real` and the path inside it; the last mount on a mount point is the visible one. */
function fsLocation(
  real: string,
  mounts: readonly Mount[],
): { device?: string; inFs?: string; type?: string } {
  let best: Mount | undefined;
  for (const mount of mounts) {
    if (!isSameOrInside(real, mount.mountPoint)) continue;
    if (best === undefined || mount.mountPoint.length >= best.mountPoint.length) best = mount;
  }
  if (best === undefined) return {};
  const relative = best.mountPoint === '/' ? real.slice(1) : real.slice(best.mountPoint.length + 1);
  return { device: best.device, inFs: path.posix.join(best.root, relative), type: best.type };
}
