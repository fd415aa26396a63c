#!/usr/bin/env node
// esbuild's build with the bundle's plugin (pino without its transports), run as a child so bundle.mjs stays synchronous.
// Usage: node packaging/esbuild-build.mjs '<esbuild build options as JSON>' [<metafile path>]
import { readFileSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';

/** Thrown by the bundle's stand-in for pino's `transport()`: the agent logs through its own stream (src/lib/logger.ts). */
export const TRANSPORT_LEFT_OUT =
  "pino's transports (worker threads) are left out of config-agent's bundle (packaging/esbuild-build.mjs): log through a stream";

const TRANSPORT_STAND_IN = `'use strict'
module.exports = function transport () {
  throw new Error(${JSON.stringify(TRANSPORT_LEFT_OUT)})
}
`;

/**
 * pino's lib/tools.js, text replaced: each `[from, to]` must occur exactly once, or the build fails (a pino upgrade
 * that moved them is then looked at, never shipped half-changed). sonic-boom (and the `assert` it loads) and
 * `worker_threads` are loaded on first use instead of at load: only a destination pino opens itself (a file
 * name, a descriptor, or none given) uses them, and the agent always hands pino a stream. `instanceof SonicBoom`
 * is false for every value until sonic-boom is loaded, which only the stand-in does.
 */
const TOOLS_REPLACEMENTS = [
  [
    "const SonicBoom = require('sonic-boom')",
    [
      'let LoadedSonicBoom',
      "const loadSonicBoom = () => (LoadedSonicBoom ??= require('sonic-boom'))",
      'function SonicBoom (opts) { return new (loadSonicBoom())(opts) }',
      'Object.defineProperty(SonicBoom, Symbol.hasInstance, {',
      '  value: (value) => LoadedSonicBoom !== undefined && value instanceof LoadedSonicBoom',
      '})',
    ].join('\n'),
  ],
  [
    "const { isMainThread } = require('worker_threads')",
    "const isMainThreadNow = () => require('worker_threads').isMainThread",
  ],
  ['if (!opts.sync && isMainThread) {', 'if (!opts.sync && isMainThreadNow()) {'],
];

const PINO_LIB = String.raw`[\\/]node_modules[\\/]pino[\\/]lib[\\/]`;

/**
 * The shipped bundle's pino without its transport code: lib/transport.js (thread-stream, a worker per transport)
 * is replaced by a function that throws TRANSPORT_LEFT_OUT, and lib/tools.js loads sonic-boom and worker_threads
 * on first use (TOOLS_REPLACEMENTS). The daemon then loads 15 builtin modules fewer (`worker_threads`, `assert`
 * and theirs) and compiles ~60 KB less (docs/performance-history.md, "Idle daemon, eleventh round").
 */
export const pinoWithoutTransports = {
  name: 'pino-without-transports',
  setup(build) {
    build.onLoad({ filter: new RegExp(`${PINO_LIB}transport\\.js$`) }, () => ({
      contents: TRANSPORT_STAND_IN,
      loader: 'js',
    }));
    build.onLoad({ filter: new RegExp(`${PINO_LIB}tools\\.js$`) }, (args) => ({
      contents: replaceEachOnce(readFileSync(args.path, 'utf8'), TOOLS_REPLACEMENTS, args.path),
      loader: 'js',
    }));
  },
};

/** `text` with each `[from, to]` replaced; throws unless each `from` occurs exactly once. */
export function replaceEachOnce(text, replacements, name) {
  let out = text;
  for (const [from, to] of replacements) {
    const at = out.indexOf(from);
    if (at === -1 || out.indexOf(from, at + from.length) !== -1) {
      throw new Error(`${name}: expected exactly one ${JSON.stringify(from)}`);
    }
    out = out.slice(0, at) + to + out.slice(at + from.length);
  }
  return out;
}

if (process.argv[1] !== undefined && import.meta.url === pathToFileURL(path.resolve(process.argv[1])).href) {
  const [optionsJson, metafile] = process.argv.slice(2);
  const repo = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');
  const { build } = await import(pathToFileURL(path.join(repo, 'node_modules/esbuild/lib/main.js')).href);
  const result = await build({
    ...JSON.parse(optionsJson),
    absWorkingDir: repo,
    metafile: metafile !== undefined,
    plugins: [pinoWithoutTransports],
  });
  if (metafile !== undefined) writeFileSync(metafile, JSON.stringify(result.metafile));
}
