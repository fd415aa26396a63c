#!/usr/bin/env node
// The shipped CLI as one esbuild bundle: one build, used by the Debian packages and by the bench.
// Usage: node packaging/bundle.mjs <dir>  → <dir>/dist/main.cjs, main.js (+ its chunks), <dir>/package.json and the install's code cache, as installed.
import { spawnSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import { mkdirSync, readdirSync, readFileSync, renameSync, rmSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { ONCE_NODE_FLAGS } from './launcher.mjs';

export const REPO = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');

/**
 * Bundles src/main.ts into `outdir`: main.js, which holds the argument parser, --help and --version, and one
 * chunk per group of modules the commands load with import() (chunk-<content hash>.js). One file would make
 * every start compile all of it (2.4 MB: --help took 1.8× `node -e 0` instead of 1.2×). The hash in each
 * chunk's name keeps versions apart: a process started before an upgrade either finds the chunks of its own
 * main.js or fails to import one (ERR_MODULE_NOT_FOUND); it never runs another version's code. The banner
 * gives bundled CommonJS code require(). Then main.cjs, the entry the launcher runs (frontDoor). Returns the
 * files written, main.cjs and main.js first; throws when esbuild or main.js --help fails. `installCacheDir`: where
 * main.cjs looks for the install's code cache (frontDoor).
 */
export function bundleCli({ outdir, metafile, installCacheDir }) {
  rmSync(outdir, { recursive: true, force: true });
  build(
    {
      entryPoints: ['src/main.ts'],
      bundle: true,
      splitting: true,
      platform: 'node',
      format: 'esm',
      target: 'node20.19',
      outdir,
      entryNames: '[name]',
      chunkNames: 'chunk-[hash]',
      legalComments: 'none',
      logLevel: 'warning',
      banner: {
        js: "import { createRequire as __bundleRequire } from 'node:module'; const require = __bundleRequire(import.meta.url);",
      },
    },
    metafile,
  );
  const agentBundle = agentBundleCli(outdir);
  for (const name of readdirSync(outdir)) asciiComments(path.join(outdir, name));
  const agentName = hashedName(path.join(outdir, agentBundle));
  const help = spawnSync(process.execPath, [path.join(outdir, 'main.js'), '--help'], { encoding: 'utf8' });
  if (help.error) throw help.error;
  if (help.status !== 0 || help.stderr !== '') {
    throw new Error(`main.js --help exited ${help.status}: ${help.stderr}`);
  }
  writeFileSync(path.join(outdir, 'main.cjs'), frontDoor(help.stdout, agentName, installCacheDir));
  const chunks = readdirSync(outdir)
    .filter((name) => name !== 'main.js' && name !== 'main.cjs')
    .sort();
  return ['main.cjs', 'main.js', ...chunks].map((name) => path.join(outdir, name));
}

/**
 * esbuild's build of `options` (its JavaScript API's names) with the bundle's plugin, pino without its transports
 * (packaging/esbuild-build.mjs), in a child process: plugins need the asynchronous API. Writes the metafile when
 * given a path; throws when the build fails.
 */
function build(options, metafile) {
  const result = spawnSync(
    process.execPath,
    [
      path.join(REPO, 'packaging/esbuild-build.mjs'),
      JSON.stringify(options),
      ...(metafile === undefined ? [] : [metafile]),
    ],
    { stdio: 'inherit', cwd: REPO },
  );
  if (result.error) throw result.error;
  if (result.status !== 0) throw new Error(`esbuild exited ${result.status}`);
}

function esbuild(args) {
  const result = spawnSync(path.join(REPO, 'node_modules/.bin/esbuild'), args, {
    stdio: 'inherit',
    cwd: REPO,
  });
  if (result.error) throw result.error;
  if (result.status !== 0) throw new Error(`esbuild exited ${result.status}`);
}

/**
 * `--once` loads one CommonJS bundle of main.ts instead of the ESM chunks: V8 can cache the compiled code of a
 * classic script (vm.Script's cachedData) on Node 20 and 24 alike, and its cache made after a pass holds every
 * function the pass compiled (~1 MB; Node 24's module.enableCompileCache keeps only what compiled at load,
 * ~0.3 MB). agent-loader.cjs finds, checks, uses and writes the cache (src/cli/agent-loader.ts;
 * docs/performance-history.md, "eighth round"). The bundle has no import(): a vm.Script cannot run one. It is
 * built without comments or indentation (esbuild's minifyWhitespace; names and code are left as they are): every
 * `--once` reads the whole source and keeps it in V8's heap, 1.16 MB instead of 1.62 (0.99 of an idle `--once`'s
 * CPU, docs/performance-history.md "First sync and `--once`, fourteenth round"). Returns the bundle's temporary
 * name, agent.cjs; hashedName() names it by content.
 */
function agentBundleCli(outdir) {
  build(
    {
      entryPoints: ['src/main.ts'],
      bundle: true,
      platform: 'node',
      format: 'cjs',
      target: 'node20.19',
      outfile: path.join(outdir, 'agent.cjs'),
      minifyWhitespace: true,
      legalComments: 'none',
      logLevel: 'warning',
      define: { 'import.meta.url': '__agentBundleUrl' },
      banner: { js: "const __agentBundleUrl = require('node:url').pathToFileURL(__filename).href;" },
    },
    path.join(outdir, 'agent.meta.json'),
  );
  const meta = path.join(outdir, 'agent.meta.json');
  const outputs = Object.values(JSON.parse(readFileSync(meta, 'utf8')).outputs);
  rmSync(meta);
  const dynamic = outputs.flatMap((output) => output.imports.filter((i) => i.kind === 'dynamic-import'));
  if (dynamic.length > 0) {
    throw new Error(
      `agent.cjs: import() of ${dynamic.map((i) => i.path)} is left, which a vm.Script cannot run`,
    );
  }
  const file = path.join(outdir, 'agent.cjs');
  writeFileSync(file, readFileSync(file, 'utf8').replace(/^#!.*\n/, ''));
  esbuild([
    'src/cli/agent-loader.ts',
    '--bundle',
    '--platform=node',
    '--format=cjs',
    '--target=node20.19',
    `--outfile=${path.join(outdir, 'agent-loader.cjs')}`,
    '--legal-comments=none',
    '--log-level=warning',
  ]);
  return 'agent.cjs';
}

/** Renames `file` to <stem>-<first 12 hex of its sha256>.cjs: another version's bundle has another name. */
function hashedName(file) {
  const hash = createHash('sha256').update(readFileSync(file)).digest('hex').slice(0, 12).toUpperCase();
  const name = `${path.basename(file, '.cjs')}-${hash}.cjs`;
  renameSync(file, path.join(path.dirname(file), name));
  return name;
}

/**
 * esbuild escapes every non-ASCII character of strings, templates and regular expressions (its default charset)
 * but copies the comments it keeps (those on class members) as written, and one `—` in a comment makes V8 hold
 * the whole chunk's source as a two-byte string: three chunks took 1.25 MiB of the idle daemon's heap instead of
 * 0.63 (docs/performance-history.md, "sixth round (engineer start9)"). Each non-ASCII character is written as `\u{…}`
 * text instead; that only comments changed is checked by comparing esbuild's whitespace-minified output (which
 * drops them) of both texts.
 */
export function asciiComments(file) {
  const text = readFileSync(file, 'utf8');
  const ascii = text.replace(/[^\0-\x7f]/gu, (c) => `\\u{${c.codePointAt(0).toString(16)}}`);
  if (ascii === text) return;
  const stripped = (input) => {
    const run = spawnSync(
      path.join(REPO, 'node_modules/.bin/esbuild'),
      ['--minify-whitespace', '--legal-comments=none', '--format=esm', '--log-level=error'],
      { input, encoding: 'utf8', maxBuffer: 64 * 1024 * 1024 },
    );
    if (run.error) throw run.error;
    if (run.status !== 0) throw new Error(`esbuild exited ${run.status}: ${run.stderr}`);
    return run.stdout;
  };
  if (stripped(ascii) !== stripped(text)) {
    throw new Error(`${path.basename(file)}: a non-ASCII character outside a comment`);
  }
  writeFileSync(file, ascii);
}

/**
 * main.cjs: the program's entry. Node's ESM loader costs ~5 ms before an ES module's first line (a one-line
 * script: 27.6 ms as ESM, 23.2 ms as CommonJS, `node -e 0` 22.2 ms), a fifth of `--help`'s whole start-up, so
 * this CommonJS file answers the exact command lines `--help`, `-h`, `help` and `--version` itself: with main.js's
 * own --help output, captured at build time, and the version read from ../package.json as main.js reads it.
 * A command line with `--once` (as the launcher tells it) goes to `agentBundle` (when given) through
 * agent-loader.cjs, with V8's code cache; every other one (and a version it cannot read) goes to main.js's
 * runProcess(), which parses and answers it as if Node had run main.js. Both builds are the whole of main.ts:
 * which one runs a command line changes its cost, never what it does. The daemon stays on main.js: the one
 * CommonJS bundle held ~1.5 MiB more of idle RSS, for ~120 ms less CPU at its one start (docs/performance.md).
 * `installCacheDir` (absolute; the package's /var/cache/config-agent) is where the loader finds the install's code
 * cache, which `config-agent --once --write-code-cache` writes (the package's postinst; bundleInto for the bench).
 */
export function frontDoor(helpText, agentBundle, installCacheDir) {
  return [
    "// config-agent's entry (packaging/bundle.mjs): answers --help and --version without Node's ESM loader; the rest runs main.js or the agent bundle.",
    "'use strict';",
    "// Node's own answer to SIGUSR1 opens an unauthenticated inspector on 127.0.0.1:9229; main.ts answers it too,",
    '// but only once its modules are loaded: from here on no moment is left open.',
    "process.on('SIGUSR1', () => undefined);",
    `const HELP = ${JSON.stringify(helpText)};`,
    `const AGENT_BUNDLE = ${JSON.stringify(agentBundle ?? null)};`,
    `const INSTALL_CACHE_DIR = ${JSON.stringify(installCacheDir ?? null)};`,
    'const argv = process.argv.slice(2);',
    "// The daemon's command line (no command, no --once): SIGHUP reloads it, and Node's default answer ends the",
    '// process, which systemd counts as a clean exit and never restarts: a `systemctl reload` right after a start,',
    "// before main.js's listener, left the unit inactive. The other commands keep the default (a closed terminal).",
    "const NOT_DAEMON = ['--once', 'status', 'sync', 'init', 'doctor', 'help', '--help', '-h', '--version'];",
    "if (!argv.some((arg) => NOT_DAEMON.includes(arg))) process.on('SIGHUP', () => undefined);",
    'let text;',
    'if (argv.length === 1) {',
    "  if (argv[0] === '--help' || argv[0] === '-h' || argv[0] === 'help') text = HELP;",
    "  else if (argv[0] === '--version') {",
    '    try {',
    "      const file = require('node:path').join(__dirname, '..', 'package.json');",
    "      const { version } = JSON.parse(require('node:fs').readFileSync(file, 'utf8'));",
    "      if (typeof version === 'string') text = 'config-agent ' + version + '\\n';",
    '    } catch {}',
    '  }',
    '}',
    "// --max-semi-space-size back to V8's default, without loading node:v8 (see its one caller).",
    'function resetSemiSpaceFlag() {',
    '  const quiet = process.noDeprecation;',
    '  process.noDeprecation = true;',
    '  try {',
    "    process.binding('v8').setFlagsFromString('--max-semi-space-size=0');",
    '  } catch {',
    "    require('node:v8').setFlagsFromString('--max-semi-space-size=0');",
    '  } finally {',
    '    process.noDeprecation = quiet;',
    '  }',
    '}',
    'function failed(error) {',
    '  const text = error instanceof Error ? error.stack : String(error);',
    "  process.stderr.write('config-agent: unexpected error: ' + text + '\\n');",
    "  process.stdout.write('', () => process.exit(1));",
    '}',
    'if (text !== undefined) {',
    '  // As main.js (src/cli/io.ts): every byte written, a short write continued; a reader gone (EPIPE) keeps exit 0;',
    '  // any other failure (a full disk, /dev/full, EIO, EAGAIN for 10 s) exits 74 (EX_IOERR) with one line on stderr.',
    "  const fs = require('node:fs');",
    '  const data = Buffer.from(text);',
    '  let offset = 0;',
    '  let waited = 0;',
    '  let failure;',
    '  while (offset < data.length) {',
    '    try {',
    '      offset += fs.writeSync(1, data, offset, data.length - offset);',
    '    } catch (error) {',
    "      if (error.code === 'EAGAIN' && waited < 10000) {",
    '        waited += 10;',
    '        Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, 10);',
    '        continue;',
    '      }',
    "      if (error.code !== 'EPIPE' && error.code !== 'ECONNRESET') failure = error;",
    '      break;',
    '    }',
    '  }',
    '  if (failure !== undefined) {',
    "    const meanings = { ENOSPC: 'no space left on device', EDQUOT: 'disk quota exceeded', EFBIG: 'file too large', EIO: 'input/output error', EAGAIN: 'a non-blocking descriptor took nothing for as long as it was waited on' };",
    "    const why = meanings[failure.code] === undefined ? String(failure.message) : failure.code + ' (' + meanings[failure.code] + ')';",
    '    try {',
    "      fs.writeSync(2, 'config-agent: could not write the output to standard output: ' + why + '\\n');",
    '    } catch {}',
    '  }',
    '  process.exitCode = failure === undefined ? 0 : 74;',
    "} else if (AGENT_BUNDLE !== null && argv.includes('--once')) {",
    '  try {',
    "    // V8 11 (Node 20) hashes every flag that differs from its default into the flag hash it checks node's",
    "    // embedded code cache of each builtin module against: with the launcher's --max-semi-space-size=4 every",
    '    // builtin loaded was compiled from source. The heap is sized at start, so setting the flag back to its',
    '    // default (0) keeps the 4 MiB semi-spaces and lets the builtins loaded from here on use their cache',
    '    // (agent-loader.ts, PASS_BUILTINS). V8 13 (Node 24) leaves heap sizes out of the hash. Through the binding',
    '    // node:v8 wraps: loading node:v8 here (with the streams it loads) compiled ~22 builtins from source, and',
    "    // Node 20 warns once (DEP0111) of process.binding('v8'), which this silences; node:v8 if it is gone.",
    "    if (process.versions.v8.startsWith('11.') && process.execArgv.some((arg) => /^--max[-_]semi[-_]space[-_]size=/.test(arg)))",
    '      resetSemiSpaceFlag();',
    "    const join = require('node:path').join;",
    "    const loader = require(join(__dirname, 'agent-loader.cjs'));",
    '    loader.runAgentBundle(join(__dirname, AGENT_BUNDLE), INSTALL_CACHE_DIR ?? undefined);',
    '  } catch (error) {',
    '    failed(error);',
    '  }',
    '} else {',
    "  import('./main.js').then((main) => main.runProcess(), failed);",
    '}',
    '',
  ].join('\n');
}

/**
 * `<dir>/dist/` and the `<dir>/package.json` main.js reads its version from: the installed layout, with the
 * install's code cache in `<dir>/cache/code-cache/` written as the package's postinst writes it (`--once
 * --write-code-cache` with `--once`'s node flags, ONCE_NODE_FLAGS), by this Node: the bench's first syncs start
 * as an installed agent's do.
 */
export function bundleInto(dir) {
  const pkg = JSON.parse(readFileSync(path.join(REPO, 'package.json'), 'utf8'));
  mkdirSync(dir, { recursive: true });
  const installCacheDir = path.join(path.resolve(dir), 'cache');
  rmSync(installCacheDir, { recursive: true, force: true });
  bundleCli({ outdir: path.join(dir, 'dist'), installCacheDir });
  writeFileSync(path.join(dir, 'package.json'), installedPackageJson(pkg.version));
  const main = path.join(dir, 'dist/main.cjs');
  const seed = spawnSync(process.execPath, [...ONCE_NODE_FLAGS, main, '--once', '--write-code-cache'], {
    encoding: 'utf8',
  });
  if (seed.error) throw seed.error;
  if (seed.status !== 0)
    throw new Error(`main.cjs --once --write-code-cache exited ${seed.status}: ${seed.stderr}`);
  return main;
}

/** main.js and main.cjs read the version from ../package.json, as in the repository; "type": "module" makes .js ESM. */
export function installedPackageJson(version) {
  return `${JSON.stringify({ name: 'config-agent', version, type: 'module', private: true }, null, 2)}\n`;
}

if (process.argv[1] !== undefined && import.meta.url === pathToFileURL(path.resolve(process.argv[1])).href) {
  const dir = process.argv[2];
  if (dir === undefined) {
    process.stderr.write('usage: node packaging/bundle.mjs <dir>\n');
    process.exit(2);
  }
  // On stderr: `npm run bench -- --json` runs this first, and its stdout must be the bench's JSON alone.
  process.stderr.write(`${path.relative(process.cwd(), bundleInto(path.resolve(dir)))}\n`);
}
