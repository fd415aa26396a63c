// The directories the shipped unit hides from the agent (ProtectHome=, PrivateTmp=, ...) or loses at boot: no rootDir (nor textfile) there.
import path from 'node:path';

/** What the check reads: node:fs/promises's realpath, or a test's. */
export interface RealpathFs {
  realpath?: (file: string) => Promise<string>;
}

/** A directory the unit replaces in the agent's view, and the directive that does it; or why else it cannot be used. */
export interface HiddenDir {
  dir: string;
  directive: string;
  /** Why the unit cannot use a rootDir there, when it is not hidden but fails otherwise. */
  reason?: string;
}

/**
 * systemd/config-agent.service: ProtectHome=yes makes /home, /root and /run/user inaccessible; PrivateTmp=yes gives
 * the agent its own empty /tmp and /var/tmp; PrivateDevices=yes its own /dev (with its own /dev/shm). A rootDir
 * below one of them is never the directory the operator and the applications see: the start fails (exit 78 with
 * EACCES under ProtectHome=, 226/NAMESPACE restarting every 30 s for the private ones, as ReadWritePaths= names a
 * directory that is not there).
 */
export const UNIT_HIDDEN_DIRS: readonly HiddenDir[] = [
  { dir: '/home', directive: 'ProtectHome=yes' },
  { dir: '/root', directive: 'ProtectHome=yes' },
  { dir: '/run/user', directive: 'ProtectHome=yes' },
  { dir: '/tmp', directive: 'PrivateTmp=yes' },
  { dir: '/var/tmp', directive: 'PrivateTmp=yes' },
  { dir: '/dev', directive: 'PrivateDevices=yes' },
  // Last: /run/user above is hidden. A tmpfs emptied at every boot, so init's drop-in names a missing directory.
  {
    dir: '/run',
    directive: 'ReadWritePaths=',
    reason:
      'is emptied at every boot: the directory init makes is gone after the next reboot, and the unit cannot ' +
      'start while a ReadWritePaths= directory is missing (226/NAMESPACE, every 30 s)',
  },
];

function inside(dir: string, parent: string): boolean {
  return dir === parent || dir.startsWith(`${parent}/`);
}

/** Why the unit cannot use `dir` as rootDir (on its path as written), or undefined. */
export function hiddenFromUnit(
  dir: string,
  hidden: readonly HiddenDir[] = UNIT_HIDDEN_DIRS,
): HiddenDir | undefined {
  return hidden.find((entry) => inside(dir, entry.dir));
}

/** `dir` with its longest existing part resolved (symlinks followed), or undefined without a realpath. */
async function resolvedPath(fs: RealpathFs, dir: string): Promise<string | undefined> {
  const realpath = fs.realpath?.bind(fs);
  if (realpath === undefined) return undefined;
  const rest: string[] = [];
  let current = dir;
  for (;;) {
    try {
      return path.join(await realpath(current), ...rest);
    } catch {
      const parent = path.dirname(current);
      if (parent === current) return undefined;
      rest.unshift(path.basename(current));
      current = parent;
    }
  }
}

/**
 * The message refusing a rootDir the unit hides, on its path as written or where its symlinks lead, or undefined.
 */
export async function rootDirHiddenFromUnit(
  fs: RealpathFs,
  rootDir: string,
  hidden: readonly HiddenDir[] = UNIT_HIDDEN_DIRS,
): Promise<string | undefined> {
  const entry = await hiddenPath(fs, rootDir, hidden);
  if (entry === undefined) return undefined;
  const why =
    entry.reason ??
    `the unit hides from the agent (${entry.directive}): the service would not see the directory you see, ` +
      'and could not start';
  return (
    `rootDir ${rootDir}${entry.where} is inside ${entry.dir}, which ${why}; choose a rootDir elsewhere ` +
    '(under /srv, /var/lib, /opt or a data partition)'
  );
}

/**
 * The message refusing a `metrics.textfile` the unit hides (the same directories as rootDir's but /run, where a
 * node_exporter's own directory, made again at boot, may be given a drop-in's `ReadWritePaths=-`), or undefined.
 */
export async function textfileHiddenFromUnit(
  fs: RealpathFs,
  textfile: string,
  hidden: readonly HiddenDir[] = UNIT_HIDDEN_DIRS,
): Promise<string | undefined> {
  const entry = await hiddenPath(
    fs,
    textfile,
    hidden.filter((each) => each.reason === undefined),
  );
  if (entry === undefined) return undefined;
  return (
    `metrics.textfile ${textfile}${entry.where} is inside ${entry.dir}, which the unit hides from the agent ` +
    `(${entry.directive}): the service would write it where node_exporter never looks; choose node_exporter's ` +
    'textfile directory (/var/lib/prometheus/node-exporter)'
  );
}

/** The hidden directory `file` is inside, on its path as written or where its symlinks lead (`where` says). */
async function hiddenPath(
  fs: RealpathFs,
  file: string,
  hidden: readonly HiddenDir[],
): Promise<(HiddenDir & { where: string }) | undefined> {
  const real = await resolvedPath(fs, file);
  for (const candidate of real === undefined || real === file ? [file] : [file, real]) {
    const entry = hiddenFromUnit(candidate, hidden);
    if (entry !== undefined)
      return { ...entry, where: candidate === file ? '' : ` (it leads to ${candidate})` };
  }
  return undefined;
}
