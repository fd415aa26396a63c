// Runs `--once` from the CommonJS agent bundle through vm.Script with V8's code cache (stateDir's, or the install's) (built as dist/agent-loader.cjs).
import { EventEmitter } from 'node:events';
import { chmodSync, lstatSync, mkdirSync, readFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import path from 'node:path';
import { Writable } from 'node:stream';
import { setFlagsFromString } from 'node:v8';
import { Script } from 'node:vm';
import { errnoCode } from '../lib/errors.js';
import {
  type CodeCacheDirectory,
  type CodeCacheKey,
  codeCacheDirectory,
  codeCacheKey,
  configPathOf,
  peekConfig,
  readCodeCache,
  writeCodeCache,
} from './code-cache.js';
import type { CommandIo } from './io.js';
import { syncV8Flags } from './v8-flags.js';

/** ExitCode.Config (exit-codes.ts), not imported: the loader stays free of the agent's modules. */
const CONFIG_EXIT_CODE = 78;

const DEBUG_LEVELS = new Set(['debug', 'trace']);

/**
 * The V8 flags the agent sets on itself while it runs (`syncV8Flags` in main.ts, `--expose-gc` in
 * lib/release-memory.ts), set here before the bundle compiles: V8 accepts a cache only under the flags it was
 * made with, and the cache is made at exit, when they are all set. Setting them earlier changes nothing else
 * (`--expose-gc` after start exposes no global `gc`).
 */
function agentV8Flags(): string[] {
  return ['--expose-gc', ...syncV8Flags(Number.parseInt(process.versions.v8, 10), process.execArgv)];
}

/**
 * node's builtin modules a `--once` loads that the loader itself does not (a pass, a first sync; `_http_common`
 * and `_http_incoming` for the socket lane's llhttp), loaded before agentV8Flags are set. node compiles a builtin
 * from the code cache it embeds only while V8's flags hash as node's defaults: any flag set (the loader's, or
 * `--max-semi-space-size` on Node 20's command line, which main.cjs sets back to its default) makes V8 reject
 * every builtin's cache, and node compiled these ~45 modules from source in every `--once` (docs/performance.md
 * "`--once` with nothing to do"). One missing here is only compiled from source, as before; a name this runtime
 * does not have is skipped.
 */
export const PASS_BUILTINS: readonly string[] = [
  'node:crypto',
  'node:net',
  'node:os',
  'node:fs/promises',
  'node:perf_hooks',
  'node:diagnostics_channel',
  '_http_common',
  '_http_incoming',
  // rootDir's lock listens on an abstract socket (store/lock.ts), and net's first listen loads cluster, which
  // loads child_process, dgram and eight internal modules.
  'node:cluster',
];

/** Loads PASS_BUILTINS, and `util.parseArgs` (main.ts's argument parser; node:util loads it on first use). */
function loadPassBuiltins(): void {
  for (const name of PASS_BUILTINS) {
    try {
      process.getBuiltinModule(name);
    } catch {
      // Not a builtin of this runtime: the agent does without it, or loads it itself.
    }
  }
  void process.getBuiltinModule('node:util').parseArgs;
}

/**
 * The command line the package's postinst runs (through the launcher, so with `--once`'s node flags) to write
 * the install's code cache (`writeInstallCodeCache`). Exactly these words: any other goes to main.ts, which
 * refuses `--write-code-cache` as an unknown option.
 */
export const WRITE_INSTALL_CACHE_ARGV: readonly string[] = ['--once', '--write-code-cache'];

/**
 * Compiles `bundleFile` (a CommonJS bundle of main.ts) with its code cache when there is a trusted one, runs
 * it and calls its runProcess(). The cache is stateDir's own when there is one; else the install's in
 * `installCacheDir`/code-cache (when given: the package's /var/cache/config-agent, written at install by
 * `writeInstallCodeCache`, root's or this user's), which holds what every `--once` compiles before its pass.
 * When stateDir's own was not used and a pass (`runsAPass`: not a dry run, not `--help`) ends the process with
 * exit code 0 — its result known and told — the cache V8 made of everything compiled so far is written into
 * stateDir for the next run. Every problem with a cache is logged at debug (when the configuration's log.level is
 * debug or trace) and costs only the cache: the agent runs the same without it.
 */
export function runAgentBundle(bundleFile: string, installCacheDir?: string): void {
  const argv = process.argv.slice(2);
  const flags = agentV8Flags();
  loadPassBuiltins();
  try {
    for (const flag of flags) setFlagsFromString(flag);
  } catch {
    // The agent runs the same at V8's defaults; main.ts sets them again.
  }
  const euid = process.geteuid?.();
  const key = codeCacheKey(path.basename(bundleFile), flags);
  if (
    installCacheDir !== undefined &&
    argv.length === WRITE_INSTALL_CACHE_ARGV.length &&
    argv.every((arg, i) => arg === WRITE_INSTALL_CACHE_ARGV[i])
  ) {
    writeInstallCodeCache(bundleFile, installCacheDir, key, euid);
    return;
  }
  const { stateDir, logLevel } = peekConfig(configPathOf(argv, process.env));
  const debug = debugLog(logLevel !== undefined && DEBUG_LEVELS.has(logLevel));
  let dir: string | undefined;
  let cachedData: Buffer | undefined;
  if (stateDir === undefined || euid === undefined) {
    debug('code cache not used: no stateDir known', {});
  } else {
    try {
      // Created only when a cache is written (at exit), not for a run that writes none.
      const found = codeCacheDirectory(stateDir, euid, false);
      if ('unusable' in found) debug('code cache not used', { reason: found.unusable });
      else {
        dir = found.dir;
        const read = readCodeCache(dir, key, euid);
        if ('found' in read) cachedData = read.found;
        else if ('ignored' in read) debug('code cache ignored', { reason: read.ignored });
      }
    } catch (error) {
      debug('code cache not used', { reason: String(error) });
    }
  }
  let fromInstall: Buffer | undefined;
  if (cachedData === undefined && installCacheDir !== undefined && euid !== undefined) {
    fromInstall = readInstallCodeCache(installCacheDir, key, euid, debug);
  }
  const script = compileBundle(bundleFile, cachedData ?? fromInstall);
  const accepted = (cachedData !== undefined || fromInstall !== undefined) && !script.cachedDataRejected;
  const used = cachedData !== undefined && accepted;
  if (accepted) {
    debug('code cache used', {
      bytes: (cachedData ?? fromInstall)?.length,
      ...(used ? {} : { from: 'install' }),
    });
  } else if (cachedData !== undefined || fromInstall !== undefined) {
    debug('code cache ignored', { reason: 'rejected by V8', ...(used ? {} : { from: 'install' }) });
  }
  const exports = runBundle(script, bundleFile);
  if (stateDir !== undefined && euid !== undefined && !used) {
    if (exports.runsAPass?.(argv) !== true) debug('code cache not written', { reason: 'no pass' });
    else {
      // A first run finds no stateDir yet (the agent creates it): the directory is looked for again at exit.
      const at = stateDir;
      saveAtExit(
        script,
        () => (dir === undefined ? codeCacheDirectory(at, euid, true) : { dir }),
        key,
        debug,
      );
    }
  }
  exports.runProcess();
}

interface BundleExports {
  runProcess: () => void;
  runsAPass?: (argv: string[]) => boolean;
  main?: (argv: readonly string[], io: CommandIo, events: EventEmitter) => Promise<number>;
}

/** The bundle as one classic script (a CommonJS module's wrapper), with `cachedData` when given. */
function compileBundle(bundleFile: string, cachedData: Buffer | undefined): Script {
  const source = readFileSync(bundleFile, 'utf8');
  return new Script(`(function (exports, require, module, __filename, __dirname) { ${source}\n})`, {
    filename: bundleFile,
    ...(cachedData === undefined ? {} : { cachedData }),
  });
}

/** Runs the compiled bundle's module code: its exports (main.ts's). */
function runBundle(script: Script, bundleFile: string): BundleExports {
  const wrapper = script.runInThisContext() as (...args: unknown[]) => void;
  const module = { exports: {} as Partial<BundleExports> };
  wrapper.call(
    module.exports,
    module.exports,
    createRequire(bundleFile),
    module,
    bundleFile,
    path.dirname(bundleFile),
  );
  if (typeof module.exports.runProcess !== 'function') throw new Error(`${bundleFile}: no runProcess()`);
  return module.exports as BundleExports;
}

/** The install's cache for `key`: from `installCacheDir`/code-cache, a directory and file of root's or this user's. */
function readInstallCodeCache(
  installCacheDir: string,
  key: CodeCacheKey,
  euid: number,
  debug: DebugLog,
): Buffer | undefined {
  try {
    const found = codeCacheDirectory(installCacheDir, euid, false, 'own-or-root');
    if ('unusable' in found) {
      debug('code cache not used', { reason: found.unusable, from: 'install' });
      return undefined;
    }
    const read = readCodeCache(found.dir, key, euid, 'own-or-root');
    if ('found' in read) return read.found;
    debug('code cache not used', { reason: 'ignored' in read ? read.ignored : 'absent', from: 'install' });
  } catch (error) {
    debug('code cache not used', { reason: String(error), from: 'install' });
  }
  return undefined;
}

/**
 * `config-agent --once --write-code-cache` (the package's postinst, as root): writes into
 * `installCacheDir`/code-cache (0755; the file 0644: the agent's own user reads it) V8's cache of what every
 * `--once` compiles before its pass: the bundle's module code and every module `--once` loads, then the
 * configuration's load, up to a configuration file that does not exist (exit 78, no pass, nothing read or
 * written but the cache). A first sync, or a `--once` whose stateDir has no cache of its own (root's, on the
 * service's stateDir), compiles only what the pass needs. Exit 0 when written, 1 with one line on stderr if not.
 */
function writeInstallCodeCache(
  bundleFile: string,
  installCacheDir: string,
  key: CodeCacheKey,
  euid: number | undefined,
): void {
  const failed = (why: string): void => {
    process.stderr.write(`config-agent: no code cache written into ${installCacheDir}: ${why}\n`);
    process.exitCode = 1;
  };
  compileForInstall(bundleFile, installCacheDir, key, euid).then(
    (why) => {
      if (why !== undefined) failed(why);
    },
    (error: unknown) => failed(errnoCode(error) ?? String(error)),
  );
}

/** writeInstallCodeCache's work: undefined when the cache is written, else why not. */
async function compileForInstall(
  bundleFile: string,
  installCacheDir: string,
  key: CodeCacheKey,
  euid: number | undefined,
): Promise<string | undefined> {
  if (euid === undefined) return 'no user id on this platform';
  try {
    mkdirSync(installCacheDir, { mode: 0o755 });
    chmodSync(installCacheDir, 0o755); // whatever the umask: the agent's own user reads below it
  } catch (error) {
    if (errnoCode(error) !== 'EEXIST') return errnoCode(error) ?? String(error);
  }
  const found = codeCacheDirectory(installCacheDir, euid, true, 'own-or-root');
  if ('unusable' in found) return found.unusable;
  // A configuration that cannot exist: inside the cache directory (root's, or this user's, and no one else
  // may write it), under a name the cache never uses. Checked absent: the run must stop at reading it.
  const noConfig = path.join(found.dir, '.no-config', 'config.json');
  try {
    lstatSync(path.dirname(noConfig));
    return `${path.dirname(noConfig)} exists`;
  } catch (error) {
    if (errnoCode(error) !== 'ENOENT') return errnoCode(error) ?? String(error);
  }
  const script = compileBundle(bundleFile, undefined);
  const { main } = runBundle(script, bundleFile);
  if (main === undefined) return `${bundleFile}: no main()`;
  const discard = new Writable({ write: (_chunk, _encoding, done) => done() });
  const io = { stdout: discard, stderr: discard, env: {}, isTty: false };
  const code = await main(['--once', '--config', noConfig], io, new EventEmitter());
  if (code !== CONFIG_EXIT_CODE) return `the compiling run exited ${code}, not ${CONFIG_EXIT_CODE}`;
  const bytes = writeCodeCache(found.dir, key, script.createCachedData(), undefined, undefined, 0o644);
  process.stdout.write(`config-agent: code cache written into ${found.dir} (${bytes} bytes)\n`);
  return undefined;
}

function saveAtExit(
  script: Script,
  directory: () => CodeCacheDirectory,
  key: CodeCacheKey,
  debug: DebugLog,
): void {
  process.once('exit', (code) => {
    if (code !== 0) {
      debug('code cache not written', { reason: `exit code ${code}` });
      return;
    }
    try {
      const found = directory();
      if ('unusable' in found) {
        debug('code cache not written', { reason: found.unusable });
        return;
      }
      const bytes = writeCodeCache(found.dir, key, script.createCachedData());
      debug('code cache written', { bytes });
    } catch (error) {
      debug('code cache not written', { reason: errnoCode(error) ?? String(error) });
    }
  });
}

type DebugLog = (msg: string, fields: Record<string, unknown>) => void;

/** Lines in the agent's log format (lib/logger.ts) on stderr, before the agent's logger exists. */
function debugLog(enabled: boolean): DebugLog {
  if (!enabled) return () => undefined;
  return (msg, fields) => {
    const line = {
      level: 'debug',
      time: new Date().toISOString(),
      pid: process.pid,
      component: 'code-cache',
      ...fields,
      msg,
    };
    try {
      process.stderr.write(`${JSON.stringify(line)}\n`);
    } catch {}
  };
}
