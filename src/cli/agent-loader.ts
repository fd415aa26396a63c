// Runs `--once` from the CommonJS agent bundle through vm.Script with V8's code cache in stateDir/code-cache (built as dist/agent-loader.cjs).
import { readFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import path from 'node:path';
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
import { syncV8Flags } from './v8-flags.js';

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
 * Compiles `bundleFile` (a CommonJS bundle of main.ts) with its code cache when there is a trusted one, runs
 * it and calls its runProcess(). When no cache was used and a pass (`runsAPass`: not a dry run, not `--help`)
 * ends the process with exit code 0 — its result known and told — the cache V8 made of everything compiled so
 * far is written for the next run. Every problem with the cache is logged at debug (when the configuration's log.level is debug
 * or trace) and costs only the cache: the agent runs the same without it.
 */
export function runAgentBundle(bundleFile: string): void {
  const argv = process.argv.slice(2);
  const flags = agentV8Flags();
  try {
    for (const flag of flags) setFlagsFromString(flag);
  } catch {
    // The agent runs the same at V8's defaults; main.ts sets them again.
  }
  const { stateDir, logLevel } = peekConfig(configPathOf(argv, process.env));
  const debug = debugLog(logLevel !== undefined && DEBUG_LEVELS.has(logLevel));
  const euid = process.geteuid?.();
  const key = codeCacheKey(path.basename(bundleFile), flags);
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
  const source = readFileSync(bundleFile, 'utf8');
  const script = new Script(`(function (exports, require, module, __filename, __dirname) { ${source}\n})`, {
    filename: bundleFile,
    ...(cachedData === undefined ? {} : { cachedData }),
  });
  const used = cachedData !== undefined && !script.cachedDataRejected;
  if (used) debug('code cache used', { bytes: cachedData?.length });
  else if (cachedData !== undefined) debug('code cache ignored', { reason: 'rejected by V8' });
  const wrapper = script.runInThisContext() as (...args: unknown[]) => void;
  const module = { exports: {} as { runProcess?: () => void; runsAPass?: (argv: string[]) => boolean } };
  wrapper.call(
    module.exports,
    module.exports,
    createRequire(bundleFile),
    module,
    bundleFile,
    path.dirname(bundleFile),
  );
  if (typeof module.exports.runProcess !== 'function') throw new Error(`${bundleFile}: no runProcess()`);
  if (stateDir !== undefined && euid !== undefined && !used) {
    if (module.exports.runsAPass?.(argv) !== true) debug('code cache not written', { reason: 'no pass' });
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
  module.exports.runProcess();
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
