// Which of a hook's arguments an interpreter (sh, python3, node, ... or `env` before one) runs as code: pure.
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
}

const SHELL: Grammar = {
  code: new Set(['-c']),
  codeFile: new Set(['--rcfile', '--init-file']),
  value: new Set(['-o', '+o', '-O', '+O']),
  clusterCode: 'c',
};
const PYTHON: Grammar = {
  code: new Set(['-c']),
  codeFile: new Set(),
  value: new Set(['-W', '-X', '-Q']),
};
const PERL: Grammar = {
  code: new Set(['-e', '-E']),
  codeFile: new Set(),
  value: new Set(['-I', '-M', '-m']),
};
const NODE: Grammar = {
  code: new Set(['-e', '--eval', '-p', '--print']),
  codeFile: new Set(['-r', '--require', '--import', '--loader', '--experimental-loader']),
  value: new Set(['--input-type', '--title', '--stack-size']),
};
const RUBY: Grammar = { code: new Set(['-e']), codeFile: new Set(['-r']), value: new Set(['-I', '-E']) };
const PHP: Grammar = { code: new Set(['-r']), codeFile: new Set(['-f']), value: new Set(['-d', '-c']) };
const LUA: Grammar = { code: new Set(['-e']), codeFile: new Set(['-l']), value: new Set() };

/** Programs (by base name) that run a file or a string from their arguments as code. */
function grammarOf(program: string): Grammar | undefined {
  const name = path.basename(program);
  if (/^(?:sh|bash|dash|ash|zsh|ksh|mksh|pdksh|yash|posh|busybox)$/.test(name)) return SHELL;
  if (/^(?:python|pypy)[0-9.]*$/.test(name)) return PYTHON;
  if (/^perl[0-9.]*$/.test(name)) return PERL;
  if (/^(?:node|nodejs)$/.test(name)) return NODE;
  if (/^ruby[0-9.]*$/.test(name)) return RUBY;
  if (/^php[0-9.]*$/.test(name)) return PHP;
  if (/^(?:lua[0-9.]*|luajit)$/.test(name)) return LUA;
  return undefined;
}

/** `env`'s options whose next argument is a value (`-u NAME`, `-C DIR`); `-S` takes a command line. */
const ENV_VALUE = new Set(['-u', '--unset', '-C', '--chdir']);
const ENV_SPLIT = new Set(['-S', '--split-string']);

export interface HookCodeArguments {
  /** Arguments run as code files: absolute, or relative to the hook's working directory (rootDir). */
  files: { index: number; file: string }[];
  /** Arguments that are code text (`sh -c`, `env -S`): judged by what they mention. */
  code: { index: number; text: string }[];
  /** Arguments run as programs after `env`: judged as run[0] is. */
  programs: { index: number; file: string }[];
  /** Whether `env` runs a bare program name (looked up in PATH). */
  barePrograms: boolean;
}

/**
 * Splits `run` (a hook's argv) into what an interpreter would run as code. Any argument that is an absolute path
 * given to an interpreter counts as a code file (the interpreter could run it: `sh /x.sh`, `node -r /x.js`); the
 * script operand (the first argument that is not an option) is resolved against rootDir when relative, as the
 * hook runs there. Programs that are not interpreters are not judged here: their arguments are data.
 */
export function hookCodeArguments(run: readonly string[], rootDir: string): HookCodeArguments {
  const out: HookCodeArguments = { files: [], code: [], programs: [], barePrograms: false };
  let start = 1;
  let grammar = grammarOf(run[0] ?? '');
  if (grammar === undefined && path.basename(run[0] ?? '') === 'env') {
    let i = 1;
    for (; i < run.length; i++) {
      const arg = run[i] ?? '';
      if (arg === '--') {
        i++;
        break;
      }
      if (ENV_VALUE.has(arg)) i++;
      else if (ENV_SPLIT.has(arg)) {
        out.code.push({ index: i + 1, text: run[i + 1] ?? '' });
        i++;
      } else if (arg.startsWith('-S') || arg.startsWith('--split-string='))
        out.code.push({ index: i, text: arg });
      else if (!arg.startsWith('-') && !/^[^=/]+=/.test(arg)) break;
    }
    const program = run[i];
    if (program === undefined) return out;
    if (path.isAbsolute(program)) out.programs.push({ index: i, file: program });
    else if (program.includes('/')) out.programs.push({ index: i, file: path.join(rootDir, program) });
    else out.barePrograms = true;
    grammar = grammarOf(program);
    start = i + 1;
  }
  if (grammar === undefined) return out;
  let scriptSeen = false;
  for (let i = start; i < run.length; i++) {
    const arg = run[i] ?? '';
    const relative = (file: string) => (path.isAbsolute(file) ? file : path.join(rootDir, file));
    if (!scriptSeen && arg.startsWith('-') && arg !== '-' && arg !== '--') {
      const eq = arg.indexOf('=');
      const name = eq > 0 ? arg.slice(0, eq) : arg;
      const inline = eq > 0 ? arg.slice(eq + 1) : undefined;
      const cluster =
        grammar.clusterCode !== undefined && /^[-+][A-Za-z]+$/.test(arg) && arg.includes(grammar.clusterCode);
      if (grammar.code.has(name) || cluster) {
        if (inline !== undefined) out.code.push({ index: i, text: inline });
        else if (i + 1 < run.length) out.code.push({ index: i + 1, text: run[i + 1] ?? '' });
        // What follows the code is its positional arguments ($0, $1, sys.argv): data.
        scriptSeen = true;
        i++;
        continue;
      }
      if (grammar.codeFile.has(name)) {
        const file = inline ?? run[i + 1];
        if (file !== undefined)
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

/** Whether code text names rootDir (as written, or its real path) as a path or a path's start. */
export function codeMentions(text: string, dirs: readonly string[]): string | undefined {
  for (const dir of dirs) {
    const trimmed = dir.length > 1 ? dir.replace(/\/+$/, '') : dir;
    if (trimmed === '/') continue;
    const at = text.indexOf(trimmed);
    if (at < 0) continue;
    const after = text[at + trimmed.length];
    if (after === undefined || !/[A-Za-z0-9_.-]/.test(after)) return trimmed;
  }
  return undefined;
}
