#!/usr/bin/env node
// The shipped CLI as one esbuild bundle: one build, used by the Debian packages and by the bench.
// Usage: node packaging/bundle.mjs <dir>  → <dir>/dist/main.js and <dir>/package.json, as installed.
import { spawnSync } from 'node:child_process';
import { mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';

export const REPO = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');

/**
 * Bundles src/main.ts into `outfile`; throws when esbuild fails. One file, ESM. No code splitting: the dynamic
 * import()s of the composition root stay lazy anyway (esbuild wraps each dynamically imported module in an
 * init function that runs at the import), and one file cannot be half-replaced under a running agent during
 * an upgrade. The banner gives bundled CommonJS code require().
 */
export function bundleCli({ outfile, metafile }) {
  const result = spawnSync(
    path.join(REPO, 'node_modules/.bin/esbuild'),
    [
      'src/main.ts',
      '--bundle',
      '--platform=node',
      '--format=esm',
      '--target=node20.19',
      `--outfile=${outfile}`,
      ...(metafile === undefined ? [] : [`--metafile=${metafile}`]),
      '--legal-comments=none',
      '--log-level=warning',
      "--banner:js=import { createRequire as __bundleRequire } from 'node:module'; const require = __bundleRequire(import.meta.url);",
    ],
    { stdio: 'inherit', cwd: REPO },
  );
  if (result.error) throw result.error;
  if (result.status !== 0) throw new Error(`esbuild exited ${result.status}`);
}

/** `<dir>/dist/main.js` and the `<dir>/package.json` it reads its version from: the installed layout. */
export function bundleInto(dir) {
  const pkg = JSON.parse(readFileSync(path.join(REPO, 'package.json'), 'utf8'));
  mkdirSync(path.join(dir, 'dist'), { recursive: true });
  bundleCli({ outfile: path.join(dir, 'dist/main.js') });
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
