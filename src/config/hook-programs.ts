// Hook programs run as the agent's user: refuse one that another local user could change, swap or shadow.
import path from 'node:path';
import { errnoCode, errorMessage } from '../lib/errors.js';
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
): Promise<HookCheckUnanswered[]> {
  if (euid === undefined) return [];
  const issues: ConfigIssue[] = [];
  const unanswered: HookCheckUnanswered[] = [];
  for (const [i, hook] of config.hooks.entries()) {
    const program = hook.run[0];
    const late: unknown[] = [];
    const problem = await hookProgramProblem(noticingTimeouts(fs, late), program, env, euid);
    if (problem !== undefined) issues.push({ path: `hooks[${i}].run[0]`, message: `${program}: ${problem}` });
    else if (late.length > 0)
      unanswered.push({ hook: `hooks[${i}].run[0]`, program, why: errorMessage(late[0]) });
  }
  if (issues.length > 0) throw new ConfigError(configPath, issues);
  return unanswered;
}

/**
 * A hook whose program check at start or reload did not answer: a call on its way hit a mount that does not answer
 * (the start-up port's gate, cli/mount-gate.ts, fails such a call after its bound with `ETIMEDOUT`). The check
 * treats an entry it cannot read as missing, so it found no problem without having judged the program: the
 * configuration is taken (a hung NFS share holding one hook's script must not keep the agent from delivering
 * config, nor leave it down at exit 78), the caller says so naming the hook, and each run is checked again just
 * before it starts (the daemon's vetProgram, bounded: refused while it does not answer).
 */
export interface HookCheckUnanswered {
  /** `hooks[<i>].run[0]` */
  hook: string;
  program: string;
  /** The first call that did not answer, as its error says it (the mount and the bound). */
  why: string;
}

/** `fs` that records in `late` each call failing with ETIMEDOUT (a mount that did not answer), then fails it as before. */
function noticingTimeouts(
  fs: PathChainFs & Pick<FsPort, 'stat'>,
  late: unknown[],
): PathChainFs & Pick<FsPort, 'stat'> {
  const notice = (error: unknown): never => {
    if (errnoCode(error) === 'ETIMEDOUT') late.push(error);
    throw error;
  };
  return {
    lstat: ((file: string) => fs.lstat(file).catch(notice)) as FsPort['lstat'],
    stat: ((file: string) => fs.stat(file).catch(notice)) as FsPort['stat'],
    readlink: (file: string) => fs.readlink(file).catch(notice),
  };
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
