#!/usr/bin/env node
// The shipped CLI as one esbuild bundle: one build, used by the Debian packages and by the bench.
// Usage: node packaging/bundle.mjs <dir>  → <dir>/dist/main.js (+ its chunks) and <dir>/package.json, as installed.
import { spawnSync } from 'node:child_process';
import { mkdirSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';

export const REPO = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');

/**
 * Bundles src/main.ts into `outdir`: main.js, which holds the argument parser, --help and --version, and one
 * chunk per group of modules the commands load with import() (chunk-<content hash>.js). One file would make
 * every start compile all of it (2.4 MB: --help took 1.8× `node -e 0` instead of 1.2×). The hash in each
 * chunk's name keeps versions apart: a process started before an upgrade either finds the chunks of its own
 * main.js or fails to import one (ERR_MODULE_NOT_FOUND); it never runs another version's code. The banner
 * gives bundled CommonJS code require(). Returns the files written, main.js first; throws when esbuild fails.
 */
export function bundleCli({ outdir, metafile }) {
  rmSync(outdir, { recursive: true, force: true });
  const result = spawnSync(
    path.join(REPO, 'node_modules/.bin/esbuild'),
    [
      'src/main.ts',
      '--bundle',
      '--splitting',
      '--platform=node',
      '--format=esm',
      '--target=node20.19',
      `--outdir=${outdir}`,
      '--entry-names=[name]',
      '--chunk-names=chunk-[hash]',
      ...(metafile === undefined ? [] : [`--metafile=${metafile}`]),
      '--legal-comments=none',
      '--log-level=warning',
      "--banner:js=import { createRequire as __bundleRequire } from 'node:module'; const require = __bundleRequire(import.meta.url);",
    ],
    { stdio: 'inherit', cwd: REPO },
  );
  if (result.error) throw result.error;
  if (result.status !== 0) throw new Error(`esbuild exited ${result.status}`);
  const chunks = readdirSync(outdir)
    .filter((name) => name !== 'main.js')
    .sort();
  return ['main.js', ...chunks].map((name) => path.join(outdir, name));
}

/** `<dir>/dist/` and the `<dir>/package.json` main.js reads its version from: the installed layout. */
export function bundleInto(dir) {
  const pkg = JSON.parse(readFileSync(path.join(REPO, 'package.json'), 'utf8'));
  mkdirSync(dir, { recursive: true });
  bundleCli({ outdir: path.join(dir, 'dist') });
  writeFileSync(path.join(dir, 'package.json'), installedPackageJson(pkg.version));
  return path.join(dir, 'dist/main.js');
}

/** main.js reads its version from ../package.json, as in the repository; "type": "module" makes .js ESM. */
export function installedPackageJson(version) {
  return `${JSON.stringify({ name: 'config-agent', version, type: 'module', private: true }, null, 2)}\n`;
}

if (process.argv[1] !== undefined && import.meta.url === pathToFileURL(path.resolve(process.argv[1])).href) {
  const dir = process.argv[2];
  if (dir === undefined) {
    process.stderr.write('usage: node packaging/bundle.mjs <dir>\n');
    process.exit(2);
  }
  process.stdout.write(`${path.relative(process.cwd(), bundleInto(path.resolve(dir)))}\n`);
}
