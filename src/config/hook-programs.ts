// Hook programs run as the agent's user: refuse one that another local user could change, swap or shadow.
import path from 'node:path';
import type { FsPort } from '../lib/fs-port.js';
import { ConfigError, type ConfigIssue } from './errors.js';
import { type PathChainFs, whoElseCanCreateIn, whoElseCanSwap } from './path-chain.js';
import type { AgentConfig } from './schema.js';

/** Where execvp looks when the hook's environment has no PATH (libuv's default). */
const DEFAULT_PATH = '/usr/bin:/bin';

/**
 * Every hook's program (`run[0]`) must be changeable by root and the agent's user alone: the file (owner, no
 * write for others or a group other than root's), the directories and symlinks on the way to it
 * (whoElseCanSwap), and for a bare name every PATH directory searched before the one that holds it (a file
 * put there first would run instead). Otherwise whoever can change it runs code as the agent (often root)
 * at the next change of a matching file. A relative name with a slash runs from rootDir, which
 * assertOwnPathsOutsideRoot already refuses. ConfigError (exit 78) naming the hook and the fix.
 */
export async function assertHookProgramsTrusted(
  fs: PathChainFs & Pick<FsPort, 'stat'>,
  config: AgentConfig,
  configPath: string,
  env: NodeJS.ProcessEnv,
  euid: number | undefined = process.geteuid?.(),
): Promise<void> {
  if (euid === undefined) return;
  const issues: ConfigIssue[] = [];
  for (const [i, hook] of config.hooks.entries()) {
    const program = hook.run[0];
    const problem = await hookProgramProblem(fs, program, env, euid);
    if (problem !== undefined) issues.push({ path: `hooks[${i}].run[0]`, message: `${program}: ${problem}` });
  }
  if (issues.length > 0) throw new ConfigError(configPath, issues);
}

/**
 * Why another local user could change what `program` runs, or undefined when nobody but root and the agent's
 * user can. Asked at start and reload (assertHookProgramsTrusted), and again by the daemon just before each run:
 * a program (or a directory on the way) made writable by others after start must not run.
 */
export async function hookProgramProblem(
  fs: PathChainFs & Pick<FsPort, 'stat'>,
  program: string,
  env: NodeJS.ProcessEnv,
  euid: number | undefined = process.geteuid?.(),
): Promise<string | undefined> {
  if (euid === undefined) return undefined;
  if (!path.isAbsolute(program) && program.includes('/')) return undefined;
  const candidates = path.isAbsolute(program)
    ? [program]
    : (env.PATH ?? DEFAULT_PATH)
        .split(':')
        .filter((entry) => path.isAbsolute(entry))
        .map((entry) => path.join(entry, program));
  return firstProblem(fs, candidates, euid);
}

/** The first candidate that exists decides; each missing one before it must be a name nobody else can take. */
async function firstProblem(
  fs: PathChainFs & Pick<FsPort, 'stat'>,
  candidates: readonly string[],
  euid: number,
): Promise<string | undefined> {
  for (const file of candidates) {
    const stats = await fs.stat(file).catch(() => undefined);
    if (stats === undefined || !stats.isFile()) {
      const taken = await whoElseCanCreateIn(fs, path.dirname(file), euid);
      if (taken !== undefined) return `${taken} (named ${path.basename(file)}, it would run as the hook)`;
      continue;
    }
    const swappable = await whoElseCanSwap(fs, file, euid);
    if (swappable !== undefined) return swappable;
    const mode = (stats.mode & 0o7777).toString(8).padStart(4, '0');
    if (stats.uid !== 0 && stats.uid !== euid)
      return `${file} is owned by uid ${stats.uid}, neither root nor the agent's user (uid ${euid}): that user could change what the hook runs; make root its owner`;
    if ((stats.mode & 0o002) !== 0)
      return `${file} is writable by others (mode ${mode}): any local user could change what the hook runs; chmod o-w ${file}`;
    if ((stats.mode & 0o020) !== 0 && stats.gid !== 0)
      return `${file} is writable by its group (gid ${stats.gid}, mode ${mode}): every member could change what the hook runs; chmod g-w ${file}`;
    return undefined;
  }
  return undefined;
}
