// Which of a hook's arguments an interpreter (sh, python3, node, ... or env, timeout, sudo... before one) runs as code: pure.
import { builtinModules } from 'node:module';
import path from 'node:path';

/** What an interpreter does with the argument after one of its options. */
interface Grammar {
  /** Options whose next argument is code text (`-c`, `-e`). */
  code: ReadonlySet<string>;
  /** Options whose next argument is a file run as code (`--rcfile`, `--require`). */
  codeFile: ReadonlySet<string>;
  /** Options whose next argument is a plain value (`-o pipefail`). */
  value: ReadonlySet<string>;
  /** A cluster of one-letter flags containing this letter takes code (`sh -ec '...'`). */
  clusterCode?: string;
  /** How the interpreter finds code in its working directory (rootDir), when it does: `codeFromWorkingDirectory`. */
  loads?: 'python' | 'node' | 'perl' | 'php' | 'lua';
  /**
   * How the interpreter reads a cluster of one-letter options (`perl -lne CODE`, `python3 -Sc CODE`) and a value
   * joined to its letter (`python3 -cCODE`, `perl -eCODE`, `perl -Ilib`): letter by letter, the first that takes a
   * value ending the cluster with the rest of it, or with the next argument when nothing is left.
   */
  short?: ShortOptions;
}

/** One-letter options, by what each letter takes (`Grammar.short`); a letter in none of these is a flag. */
interface ShortOptions {
  /** Code text (`-c`, `-e`). */
  code: string;
  /** A file or directory code is loaded from (perl -I, lua -l): resolved against rootDir when relative. */
  files: string;
  /** A library name (ruby -r): judged as a file when it is a path (`./x`, `/x`), else looked up elsewhere. */
  libraries?: string;
  /** A plain value (python -W, perl -M, ruby -C). */
  value: string;
  /** Optional digits only (perl -l0, -0777): the cluster goes on after them. */
  digits?: string;
  /** Flags that keep the working directory out of the module path (python -I, -P). */
  isolating?: string;
}

const SHELL: Grammar = {
  code: new Set(['-c']),
  codeFile: new Set(['--rcfile', '--init-file']),
  value: new Set(['-o', '+o', '-O', '+O']),
  clusterCode: 'c',
};
const PYTHON: Grammar = {
  loads: 'python',
  code: new Set(['-c']),
  codeFile: new Set(),
  value: new Set(['-W', '-X', '-Q']),
  short: { code: 'c', files: '', value: 'WXQ', isolating: 'IP' },
};
const PERL: Grammar = {
  loads: 'perl',
  code: new Set(['-e', '-E']),
  codeFile: new Set(),
  value: new Set(['-I', '-M', '-m']),
  // -i[ext], -x[dir], -C[n], -d[:mod], -D[flags] and -F[pattern] take the rest of the cluster: `perl -pie` is -i "e".
  short: { code: 'eE', files: 'I', value: 'MmixCdDF', digits: 'l0' },
};
const NODE: Grammar = {
  loads: 'node',
  code: new Set(['-e', '--eval', '-p', '--print']),
  codeFile: new Set(['-r', '--require', '--import', '--loader', '--experimental-loader']),
  value: new Set(['--input-type', '--title', '--stack-size']),
};
const RUBY: Grammar = {
  code: new Set(['-e']),
  codeFile: new Set(['-r']),
  value: new Set(['-I', '-E']),
  loads: 'perl',
  short: { code: 'e', files: 'I', libraries: 'r', value: 'ECxFKTW', digits: '0' },
};
/** fish: `-c`/`--command` and `-C`/`--init-command` take code (fish's getopt: `+hPilNnvc:C:p:d:f:D:o:`). */
const FISH: Grammar = {
  code: new Set(['-c', '--command', '-C', '--init-command']),
  codeFile: new Set(),
  value: new Set([
    '-p',
    '--profile',
    '--profile-startup',
    '-d',
    '--debug',
    '-o',
    '--debug-output',
    '-f',
    '--features',
  ]),
  clusterCode: 'c',
};
/** php: `-B`, `-R` and `-E` are code run before, for each line of and after the input, as `-r` is; `-F`: a file so. */
const PHP: Grammar = {
  loads: 'php',
  code: new Set(['-r', '-B', '-R', '-E']),
  codeFile: new Set(['-f', '-F', '-z']),
  value: new Set(['-d', '-c']),
  short: { code: 'rBRE', files: 'fFz', value: 'dcS', digits: '' },
};
const LUA: Grammar = {
  loads: 'lua',
  code: new Set(['-e']),
  codeFile: new Set(['-l']),
  value: new Set(),
  short: { code: 'e', files: 'l', value: '' },
};

/** Programs (by base name) that run a file or a string from their arguments as code. */
function grammarOf(program: string): Grammar | undefined {
  const name = path.basename(program);
  // With a version as some install them beside the plain name (ksh93, zsh-5.9); csh and tcsh read -c as sh does.
  if (
    /^(?:sh|bash|rbash|dash|ash|zsh|ksh|mksh|lksh|oksh|loksh|pdksh|yash|posh|csh|tcsh)(?:-?[0-9][0-9.]*)?$/.test(
      name,
    )
  )
    return SHELL;
  if (/^fish$/.test(name)) return FISH;
  if (/^(?:python|pypy)[0-9.]*$/.test(name)) return PYTHON;
  if (/^perl[0-9.]*$/.test(name)) return PERL;
  if (/^(?:node|nodejs)$/.test(name)) return NODE;
  if (/^ruby[0-9.]*$/.test(name)) return RUBY;
  if (/^php[0-9.]*$/.test(name)) return PHP;
  if (/^(?:lua[0-9.]*|luajit)$/.test(name)) return LUA;
  return undefined;
}

/** How a program that starts another one (`env`, `timeout 5`, `sudo -u u`) reads its own arguments first. */
interface Wrapper {
  /** Options whose next argument is a value (`-u NAME`, `-n 5`); `-n5` and `--adjustment=5` carry it inline. */
  value: ReadonlySet<string>;
  /** Operands before the program: timeout's duration, flock's lock file, chrt's priority, taskset's mask. */
  operands: number;
  /** Options whose next argument is a command line a shell runs (`flock -c`, `runuser -c`, `env -S`). */
  code?: ReadonlySet<string>;
  /** NAME=value arguments before the program are environment assignments (env, sudo). */
  assignments?: boolean;
  /** The program is one of its own applets (busybox), not a file looked up in PATH. */
  applet?: boolean;
  /** The first operand is a root directory the program is taken from (chroot): judged as run[0] is. */
  newRoot?: boolean;
  /**
   * Options that make the first operand the program (`runuser -u USER cmd`); without one the operands are a user
   * and the arguments of that user's shell (`runuser USER x.sh` runs `$SHELL x.sh`), read as a shell's.
   */
  userMode?: ReadonlySet<string>;
  /** Options whose value is a program the wrapper runs (`runuser -s SHELL`, `su --shell=SHELL`), judged as run[0]. */
  programs?: ReadonlySet<string>;
}

const set = (...names: string[]): ReadonlySet<string> => new Set(names);
/** The common exec-wrappers (coreutils, util-linux, sudo, findutils, systemd, busybox), by base name. */
const WRAPPERS: ReadonlyMap<string, Wrapper> = new Map<string, Wrapper>([
  [
    'env',
    {
      value: set('-u', '--unset', '-C', '--chdir'),
      operands: 0,
      code: set('-S', '--split-string'),
      assignments: true,
    },
  ],
  ['timeout', { value: set('-s', '--signal', '-k', '--kill-after'), operands: 1 }],
  ['nice', { value: set('-n', '--adjustment'), operands: 0 }],
  [
    'ionice',
    {
      value: set('-c', '--class', '-n', '--classdata', '-p', '--pid', '-P', '--pgid', '-u', '--uid'),
      operands: 0,
    },
  ],
  ['nohup', { value: set(), operands: 0 }],
  ['setsid', { value: set(), operands: 0 }],
  ['stdbuf', { value: set('-i', '--input', '-o', '--output', '-e', '--error'), operands: 0 }],
  [
    'chrt',
    { value: set('-T', '--sched-runtime', '-P', '--sched-period', '-D', '--sched-deadline'), operands: 1 },
  ],
  ['taskset', { value: set(), operands: 1 }],
  [
    'flock',
    {
      value: set('-w', '--timeout', '-E', '--conflict-exit-code'),
      operands: 1,
      code: set('-c', '--command'),
    },
  ],
  [
    'sudo',
    {
      value: set(
        '-u',
        '--user',
        '-g',
        '--group',
        '-C',
        '--close-from',
        '-D',
        '--chdir',
        '-p',
        '--prompt',
        '-r',
        '--role',
        '-t',
        '--type',
        '-T',
        '--command-timeout',
        '-U',
        '--other-user',
        '-R',
        '--chroot',
      ),
      operands: 0,
      assignments: true,
    },
  ],
  ['doas', { value: set('-u', '-C'), operands: 0 }],
  [
    'runuser',
    {
      value: set(
        '-u',
        '--user',
        '-g',
        '--group',
        '-G',
        '--supp-group',
        '-s',
        '--shell',
        '-w',
        '--whitelist-environment',
      ),
      operands: 0,
      code: set('-c', '--command', '--session-command'),
      userMode: set('-u', '--user'),
      programs: set('-s', '--shell'),
    },
  ],
  [
    // util-linux su: `su [options] [-] [USER [ARG...]]`, the ARGs given to USER's shell (or -s's), as runuser's.
    'su',
    {
      value: set('-g', '--group', '-G', '--supp-group', '-s', '--shell', '-w', '--whitelist-environment'),
      operands: 0,
      code: set('-c', '--command', '-C', '--session-command'),
      userMode: set(),
      programs: set('-s', '--shell'),
    },
  ],
  [
    'setpriv',
    {
      value: set(
        '--reuid',
        '--regid',
        '--ruid',
        '--rgid',
        '--euid',
        '--egid',
        '--groups',
        '--inh-caps',
        '--ambient-caps',
        '--bounding-set',
        '--securebits',
        '--pdeathsig',
        '--selinux-label',
        '--apparmor-profile',
        '--landlock-access',
        '--landlock-rule',
      ),
      operands: 0,
    },
  ],
  [
    'xargs',
    {
      value: set(
        '-a',
        '--arg-file',
        '-d',
        '--delimiter',
        '-E',
        '-I',
        '-L',
        '--max-lines',
        '-n',
        '--max-args',
        '-P',
        '--max-procs',
        '-s',
        '--max-chars',
        '--process-slot-var',
      ),
      operands: 0,
    },
  ],
  [
    'systemd-run',
    {
      value: set(
        '-u',
        '--unit',
        '-p',
        '--property',
        '-E',
        '--setenv',
        '-H',
        '--host',
        '-M',
        '--machine',
        '-s',
        '--service-type',
        '--description',
        '--slice',
        '--uid',
        '--gid',
        '--nice',
        '--working-directory',
        '--on-active',
        '--on-boot',
        '--on-startup',
        '--on-unit-active',
        '--on-unit-inactive',
        '--on-calendar',
        '--timer-property',
        '--path-property',
        '--socket-property',
      ),
      operands: 0,
    },
  ],
  [
    'unshare',
    {
      value: set(
        '-S',
        '--setuid',
        '-G',
        '--setgid',
        '-R',
        '--root',
        '-w',
        '--wd',
        '--map-user',
        '--map-group',
        '--map-users',
        '--map-groups',
        '--propagation',
        '--setgroups',
      ),
      operands: 0,
    },
  ],
  // util-linux nsenter: its namespace options take a file only joined (`--mount=FILE`, `-mFILE`), never the next
  // argument; the program after them runs in those namespaces.
  [
    'nsenter',
    { value: set('-t', '--target', '-S', '--setuid', '-G', '--setgid', '-W', '--wdns'), operands: 0 },
  ],
  [
    'strace',
    {
      value: set(
        '-a',
        '--columns',
        '-b',
        '--detach-on',
        '-e',
        '-E',
        '--env',
        '-I',
        '--interruptible',
        '-o',
        '--output',
        '-O',
        '-p',
        '--attach',
        '-P',
        '--trace-path',
        '-s',
        '--string-limit',
        '-S',
        '--summary-sort-by',
        '-u',
        '--user',
        '-U',
        '--summary-columns',
        '-X',
        '--const-print-style',
        '--trace',
        '--signal',
        '--status',
        '--fault',
        '--inject',
        '--read',
        '--write',
        '--kvm',
      ),
      operands: 0,
    },
  ],
  ['chroot', { value: set(), operands: 1, newRoot: true }],
  ['prlimit', { value: set('-p', '--pid'), operands: 0 }],
  ['cgexec', { value: set('-g'), operands: 0 }],
  ['time', { value: set('-f', '--format', '-o', '--output'), operands: 0 }],
  ['busybox', { value: set(), operands: 0, applet: true }],
  ['exec', { value: set('-a'), operands: 0 }],
]);

/** How many wrappers deep a hook's program is looked for (`sudo timeout 5 nice env sh`); deeper is refused. */
export const MAX_WRAPPERS = 8;

export interface HookCodeArguments {
  /** Arguments run as code files: absolute, or relative to the hook's working directory (rootDir). */
  files: { index: number; file: string }[];
  /** Arguments that are code text (`sh -c`, `env -S`): judged by what they mention. */
  code: { index: number; text: string }[];
  /** Arguments run as programs after `env`: judged as run[0] is. */
  programs: { index: number; file: string }[];
  /** Whether a wrapper runs a bare program name (looked up in PATH). */
  barePrograms: boolean;
  /** The index of a wrapper nested deeper than MAX_WRAPPERS: not looked through, so refused. */
  tooDeep?: number;
  /** Arguments that make the interpreter load code from its working directory, rootDir (`python3 -m`). */
  workingDirectory: { index: number; why: string }[];
}

/**
 * Splits `run` (a hook's argv) into what an interpreter would run as code. Any argument that is an absolute path
 * given to an interpreter counts as a code file (the interpreter could run it: `sh /x.sh`, `node -r /x.js`); the
 * script operand (the first argument that is not an option) is resolved against rootDir when relative, as the
 * hook runs there. Programs that are not interpreters are not judged here: their arguments are data.
 */
export function hookCodeArguments(run: readonly string[], rootDir: string): HookCodeArguments {
  const out: HookCodeArguments = {
    files: [],
    code: [],
    programs: [],
    barePrograms: false,
    workingDirectory: [],
  };
  let start = 1;
  let grammar = grammarOf(run[0] ?? '');
  let wrapper = WRAPPERS.get(path.basename(run[0] ?? ''));
  for (let depth = 0; grammar === undefined && wrapper !== undefined; depth++) {
    if (depth === MAX_WRAPPERS) {
      out.tooDeep = start - 1;
      return out;
    }
    const selected = { program: false };
    let i = skipWrapperArguments(run, start, wrapper, rootDir, out, selected);
    if (wrapper.userMode !== undefined && !selected.program) {
      // su's form: [-] USER [shell arguments]; the shell is the user's login shell, outside the hook's config.
      if (run[i] === '-') i++;
      grammar = SHELL;
      start = i + 1;
      break;
    }
    const program = run[i];
    if (program === undefined) return out;
    if (wrapper.applet === true) {
      // busybox's applet is its own code, not a file; a path runs the applet of its base name.
    } else if (path.isAbsolute(program)) out.programs.push({ index: i, file: program });
    else if (program.includes('/')) out.programs.push({ index: i, file: path.join(rootDir, program) });
    else out.barePrograms = true;
    grammar = grammarOf(program);
    wrapper = WRAPPERS.get(path.basename(program));
    start = i + 1;
  }
  if (grammar === undefined) return out;
  let scriptSeen = false;
  // python3 -I or -P (3.11) does not put the working directory first in sys.path.
  let isolated = false;
  for (let i = start; i < run.length; i++) {
    const arg = run[i] ?? '';
    const relative = (file: string) => (path.isAbsolute(file) ? file : path.join(rootDir, file));
    if (!scriptSeen && grammar.loads === 'python' && /^-[A-Za-z]/.test(arg)) {
      const flags = /^-[bBdEhiIOPqRsSuvx]*[IP]/.test(arg);
      if (flags) isolated = true;
      const m = /^-[bBdEhiIOPqRsSuvx]*m(.*)$/.exec(arg);
      if (m !== null) {
        const module = m[1] !== '' ? m[1] : run[i + 1];
        const index = m[1] !== '' ? i : i + 1;
        if (!isolated && module !== undefined)
          out.workingDirectory.push({
            index,
            why: `python -m ${module} looks the module up in its working directory first (add -I or -P)`,
          });
        scriptSeen = true;
        if (m[1] === '') i++;
        continue;
      }
    }
    if (!scriptSeen && grammar.loads === 'perl' && arg.startsWith('-I')) {
      // perl -Ilib, ruby -I lib: a relative directory in @INC / $LOAD_PATH is one in rootDir.
      const dir = arg.length > 2 ? arg.slice(2) : run[i + 1];
      const index = arg.length > 2 ? i : i + 1;
      if (dir !== undefined) out.files.push({ index, file: relative(dir) });
      if (arg.length === 2) i++;
      continue;
    }
    const short = grammar.short;
    if (
      !scriptSeen &&
      short !== undefined &&
      /^-[^-]./.test(arg) &&
      !grammar.code.has(arg) &&
      !grammar.codeFile.has(arg) &&
      !grammar.value.has(arg)
    ) {
      // A cluster, or a letter with its value joined (`-lne`, `-cCODE`, `-Ilib`), read letter by letter.
      for (let k = 1; k < arg.length; k++) {
        const letter = arg[k] ?? '';
        if (short.isolating?.includes(letter) === true) isolated = true;
        if (short.digits?.includes(letter) === true) {
          while (/[0-9]/.test(arg[k + 1] ?? '')) k++;
          continue;
        }
        const takes = short.code.includes(letter)
          ? 'code'
          : short.files.includes(letter)
            ? 'file'
            : short.libraries?.includes(letter) === true
              ? 'library'
              : short.value.includes(letter)
                ? 'value'
                : undefined;
        if (takes === undefined) continue;
        const joined = k + 1 < arg.length ? arg.slice(k + 1) : undefined;
        const index = joined === undefined ? i + 1 : i;
        const given = joined ?? run[i + 1];
        if (joined === undefined) i++;
        if (given !== undefined && takes === 'code') {
          out.code.push({ index, text: given });
          const why = codeFromWorkingDirectory(grammar, given, isolated);
          if (why !== undefined) out.workingDirectory.push({ index, why });
        } else if (given !== undefined && takes === 'file') out.files.push({ index, file: relative(given) });
        else if (given !== undefined && takes === 'library' && (given.startsWith('.') || given.includes('/')))
          out.files.push({ index, file: relative(given) });
        else if (given !== undefined && grammar === PERL && (letter === 'M' || letter === 'm'))
          perlUseLib(given, index, relative, out);
        // What follows code is its positional arguments (sys.argv, @ARGV): data.
        if (takes === 'code') scriptSeen = true;
        break;
      }
      continue;
    }
    if (!scriptSeen && arg.startsWith('-') && arg !== '-' && arg !== '--') {
      const eq = arg.indexOf('=');
      const name = eq > 0 ? arg.slice(0, eq) : arg;
      const inline = eq > 0 ? arg.slice(eq + 1) : undefined;
      const cluster =
        grammar.clusterCode !== undefined && /^[-+][A-Za-z]+$/.test(arg) && arg.includes(grammar.clusterCode);
      if (grammar.code.has(name) || cluster) {
        const index = inline !== undefined ? i : i + 1;
        const text = inline ?? run[i + 1];
        if (text !== undefined) {
          out.code.push({ index, text });
          const why = codeFromWorkingDirectory(grammar, text, isolated);
          if (why !== undefined) out.workingDirectory.push({ index, why });
        }
        // What follows the code is its positional arguments ($0, $1, sys.argv): data.
        scriptSeen = true;
        i++;
        continue;
      }
      if (grammar.codeFile.has(name)) {
        const file = inline ?? run[i + 1];
        // A library name (ruby -r json) is looked up in the load path, not the working directory: judged if a path.
        const library = name.length === 2 && grammar.short?.libraries?.includes(name[1] ?? '') === true;
        if (file !== undefined && (!library || file.startsWith('.') || file.includes('/')))
          out.files.push({ index: inline === undefined ? i + 1 : i, file: relative(file) });
        if (inline === undefined) i++;
        continue;
      }
      if (grammar.value.has(name) && inline === undefined) i++;
      if (inline !== undefined && path.isAbsolute(inline)) out.files.push({ index: i, file: inline });
      continue;
    }
    if (!scriptSeen && (arg === '-' || arg === '--')) {
      // `-` is the standard input: no file; after `--` the next argument is the script.
      scriptSeen = arg === '-';
      continue;
    }
    if (!scriptSeen) {
      scriptSeen = true;
      out.files.push({ index: i, file: relative(arg) });
      continue;
    }
    if (path.isAbsolute(arg)) out.files.push({ index: i, file: arg });
  }
  return out;
}

/**
 * Skips a wrapper's options and operands from `start`, collecting the command lines it gives a shell (`flock -c`)
 * and chroot's root; returns the index of the program it runs (run.length when none). Options are read up to the
 * first operand, as getopt with a leading `+` (POSIXLY_CORRECT) does; an unknown option is taken as a flag.
 */
function skipWrapperArguments(
  run: readonly string[],
  start: number,
  wrapper: Wrapper,
  rootDir: string,
  out: HookCodeArguments,
  selected: { program: boolean },
): number {
  const operands = wrapper.operands;
  let i = start;
  for (; i < run.length; i++) {
    const arg = run[i] ?? '';
    if (arg === '--')
      return operands === 0 ? i + 1 : skipOperands(run, i + 1, operands, wrapper, rootDir, out);
    if (arg.startsWith('--')) {
      const eq = arg.indexOf('=');
      const name = eq > 0 ? arg.slice(0, eq) : arg;
      const inline = eq > 0 ? arg.slice(eq + 1) : undefined;
      if (wrapper.userMode?.has(name) === true) selected.program = true;
      if (wrapper.programs?.has(name) === true) {
        const program = inline ?? run[i + 1];
        if (program !== undefined) judgeProgram(program, inline === undefined ? i + 1 : i, rootDir, out);
      }
      if (wrapper.code?.has(name) === true) {
        out.code.push(
          inline === undefined ? { index: i + 1, text: run[i + 1] ?? '' } : { index: i, text: inline },
        );
        if (inline === undefined) i++;
      } else if (wrapper.value.has(name) && inline === undefined) i++;
      continue;
    }
    if (arg.startsWith('-') && arg !== '-') {
      // A cluster of one-letter options as getopt reads it: the first that takes a value ends it (`-oL`, `-nu u`).
      for (let k = 1; k < arg.length; k++) {
        const name = `-${arg[k]}`;
        const rest = k + 1 < arg.length ? arg.slice(k + 1) : undefined;
        const isCode = wrapper.code?.has(name) === true;
        if (wrapper.userMode?.has(name) === true) selected.program = true;
        if (!isCode && !wrapper.value.has(name)) continue;
        if (wrapper.programs?.has(name) === true) {
          const program = rest ?? run[i + 1];
          if (program !== undefined) judgeProgram(program, rest === undefined ? i + 1 : i, rootDir, out);
        }
        if (isCode)
          out.code.push(
            rest === undefined ? { index: i + 1, text: run[i + 1] ?? '' } : { index: i, text: rest },
          );
        if (rest === undefined) i++;
        break;
      }
      continue;
    }
    if (wrapper.assignments === true && /^[^=/]+=/.test(arg)) continue;
    if (operands === 0) return i;
    return skipOperands(run, i, operands, wrapper, rootDir, out);
  }
  return i;
}

/** A program a wrapper's option names (`runuser -s SHELL`), judged as run[0] is: by path, or looked up in PATH. */
function judgeProgram(program: string, index: number, rootDir: string, out: HookCodeArguments): void {
  if (path.isAbsolute(program)) out.programs.push({ index, file: program });
  else if (program.includes('/')) out.programs.push({ index, file: path.join(rootDir, program) });
  else out.barePrograms = true;
}

/** Skips a wrapper's operands (timeout's duration, flock's file) and returns the program's index. */
function skipOperands(
  run: readonly string[],
  at: number,
  operands: number,
  wrapper: Wrapper,
  rootDir: string,
  out: HookCodeArguments,
): number {
  const first = run[at];
  if (wrapper.newRoot === true && first !== undefined)
    out.programs.push({ index: at, file: path.isAbsolute(first) ? first : path.join(rootDir, first) });
  let i = at + operands;
  // `flock FILE -c CMD` (util-linux): options may follow the lock file.
  const next = run[i];
  if (next !== undefined && wrapper.code?.has(next) === true) {
    out.code.push({ index: i + 1, text: run[i + 1] ?? '' });
    i = run.length;
  }
  return i;
}

/**
 * perl's `-Mlib=DIR,...` (`use lib split(/,/, q{DIR,...})`): each directory joins @INC as `-IDIR` does, so each is
 * judged as a file (relative ones in rootDir, the working directory). `-M'lib "."'` is `use lib "."`, read as code
 * text. Other modules are looked up in @INC, which holds no relative directory unless told to.
 */
function perlUseLib(
  module: string,
  index: number,
  relative: (file: string) => string,
  out: HookCodeArguments,
): void {
  const listed = /^lib=(.*)$/s.exec(module);
  if (listed !== null) {
    for (const dir of (listed[1] ?? '').split(',')) out.files.push({ index, file: relative(dir) });
    return;
  }
  if (!/^lib\s/.test(module)) return;
  const why = codeFromWorkingDirectory(PERL, `use ${module};`, false);
  if (why !== undefined) out.workingDirectory.push({ index, why });
}

/** Lua's own library, which `require` finds preloaded before any search. */
const LUA_LIBRARIES: ReadonlySet<string> = new Set([
  '_G',
  'coroutine',
  'debug',
  'io',
  'math',
  'os',
  'package',
  'string',
  'table',
  'utf8',
  'bit32',
]);

/** Node's own modules, which `require('fs')` loads before any node_modules directory. */
const NODE_BUILTINS: ReadonlySet<string> = new Set(builtinModules);

/**
 * Why code text given to an interpreter would load code from its working directory (rootDir), or undefined. What is
 * looked for, on the text as written: python's `import` (sys.path[0] is the working directory for -c, unless -I or
 * -P); a require()/import() or `from`/`import` specifier in node code that is relative (`./x`) or a package that is
 * not node's own (looked up in rootDir/node_modules first); perl's and ruby's require/do/load/`use lib` of a
 * `./` or `../` path. Not looked for: code built at run time (string concatenation, eval of a variable), a chdir
 * before the load, python's imp/runpy given a computed name.
 */
function codeFromWorkingDirectory(grammar: Grammar, text: string, isolated: boolean): string | undefined {
  if (grammar.loads === 'python') {
    if (isolated || !/\bimport\b|__import__|import_module|runpy/.test(text)) return undefined;
    return 'python -c code that imports looks modules up in its working directory first (add -I or -P)';
  }
  if (grammar.loads === 'node') {
    const specifiers = /\b(?:require|import)\s*\(\s*(['"`])([^'"`]+)\1|\b(?:from|import)\s*(['"])([^'"]+)\3/g;
    for (const match of text.matchAll(specifiers)) {
      const specifier = match[2] ?? match[4] ?? '';
      if (specifier.startsWith('node:') || NODE_BUILTINS.has(specifier) || path.isAbsolute(specifier))
        continue;
      return specifier.startsWith('.')
        ? `node code loads ${specifier} from its working directory`
        : `node code loads ${specifier}, looked up in its working directory's node_modules first`;
    }
    return undefined;
  }
  if (grammar.loads === 'perl') {
    // require "./x.pl", do '../x', load './x.rb'; use lib '.', use lib qw(. lib), push @INC, '.'.
    const relativeFile = /\b(?:require|do|load)\s*\(?\s*['"]\.\.?\//;
    const relativeDir = /\b(?:use\s+lib|@INC|\$LOAD_PATH|\$:)[^;]*?[\s'"(,]\.\.?(?:\/|[\s'"),;]|$)/;
    const relative = { test: (code: string) => relativeFile.test(code) || relativeDir.test(code) };
    if (relative.test(text)) return 'code loads a ./ or ../ path from its working directory';
  }
  if (grammar.loads === 'php') {
    // include_path is `.` first (then the system's): a relative include of -r/-B/-R/-E code is looked up in rootDir.
    if (/\b(?:include|require)(?:_once)?\s*\(?\s*['"](?!\/)/.test(text))
      return 'php code includes a relative path, looked up in its working directory first (include_path .)';
    return undefined;
  }
  if (grammar.loads === 'lua') {
    // package.path ends in ./?.lua, searched before any C module (package.cpath): a module not of Lua's own library
    // is loaded from rootDir when no system directory has a .lua of its name. dofile/loadfile of a relative path.
    for (const match of text.matchAll(/\brequire\s*\(?\s*(['"])([^'"]+)\1/g)) {
      const module = match[2] ?? '';
      if (!LUA_LIBRARIES.has(module))
        return `lua code requires ${module}, looked up in its working directory (./?.lua)`;
    }
    if (/\b(?:dofile|loadfile)\s*\(?\s*['"](?!\/)/.test(text))
      return 'lua code loads a relative path from its working directory';
  }
  return undefined;
}

/** Whether code text names rootDir (as written, or its real path) as a path or a path's start. */
export function codeMentions(text: string, dirs: readonly string[]): string | undefined {
  for (const dir of dirs) {
    const trimmed = dir.length > 1 ? dir.replace(/\/+$/, '') : dir;
    if (trimmed === '/') continue;
    // Every mention, not only the first: `cp <rootDir>.bak/x /tmp; sh <rootDir>/x.sh` names rootDir second.
    for (let at = text.indexOf(trimmed); at >= 0; at = text.indexOf(trimmed, at + 1)) {
      const after = text[at + trimmed.length];
      if (after === undefined || !/[A-Za-z0-9_.-]/.test(after)) return trimmed;
    }
  }
  return undefined;
}
