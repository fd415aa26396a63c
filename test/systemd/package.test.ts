// The built .deb packages (npm run package): control fields, file list, and the bundle's lazy command modules.
import { spawnSync } from 'node:child_process';
import { existsSync, readdirSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import {
  BUNDLED_RUNTIME_DAEMON_NODE_FLAGS,
  BUNDLED_RUNTIME_NODE_FLAGS,
  DAEMON_NODE_FLAGS,
} from '../../packaging/launcher.mjs';
import { skipWithoutPackages } from '../helpers/built-packages.js';

const REPO = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../..');
const OUT = path.join(REPO, 'dist-pkg');
const debs = existsSync(OUT) ? readdirSync(OUT).filter((name) => name.endsWith('.deb')) : [];
const all = debs.find((name) => name.startsWith('config-agent_'));
const bundled = debs.find((name) => name.startsWith('config-agent-node_'));
const haveDpkg = spawnSync('dpkg-deb', ['--version']).error === undefined;
if (!haveDpkg || all === undefined || bundled === undefined) {
  skipWithoutPackages('dpkg-deb or the dist-pkg .deb packages are missing (npm run package)');
}

/** One file of a package's data, without unpacking the rest (the node package's is ~120 MB). */
function dpkgDebFile(deb: string, file: string): string {
  const result = spawnSync('sh', ['-c', 'dpkg-deb --fsys-tarfile "$1" | tar -xOf - "$2"', 'sh', deb, file], {
    encoding: 'utf8',
  });
  if (result.status !== 0) throw new Error(result.stderr);
  return result.stdout;
}

function dpkgDeb(args: string[]): string {
  const result = spawnSync('dpkg-deb', args, { encoding: 'utf8', maxBuffer: 64 * 1024 * 1024 });
  if (result.status !== 0) throw new Error(result.stderr);
  return result.stdout;
}

const field = (deb: string, name: string) => dpkgDeb(['-f', path.join(OUT, deb), name]).trim();
const files = (deb: string) =>
  dpkgDeb(['-c', path.join(OUT, deb)])
    .split('\n')
    .filter((line) => line !== '')
    .map((line) => line.split(/\s+/).slice(5).join(' ').replace(/^\./, ''));

describe.skipIf(!haveDpkg || all === undefined)(
  'config-agent_all.deb (skipped until npm run package has built it)',
  () => {
    it('depends on Node >= 20.19 and conflicts with config-agent-node', () => {
      const deb = all as string;
      expect(field(deb, 'Architecture')).toBe('all');
      expect(field(deb, 'Depends')).toBe('nodejs (>= 20.19), systemd (>= 252)');
      expect(field(deb, 'Conflicts')).toBe('config-agent-node');
    });

    it('ships the bundled program, the unit and its companions, docs; no node_modules and no mock server', () => {
      const list = files(all as string);
      for (const wanted of [
        '/usr/bin/config-agent',
        '/usr/lib/config-agent/dist/main.cjs',
        '/usr/lib/config-agent/dist/main.js',
        '/usr/lib/config-agent/package.json',
        '/lib/systemd/system/config-agent.service',
        // The unit's ExecStart= wrapper: the watchdog's socket (cit24).
        '/usr/lib/config-agent/config-agent-notify',
        '/usr/lib/sysusers.d/config-agent.conf',
        '/usr/lib/tmpfiles.d/config-agent.conf',
        '/usr/share/doc/config-agent/examples/config.json',
        '/usr/share/doc/config-agent/operations.md',
        '/usr/share/doc/config-agent/copyright',
        '/usr/share/man/man1/config-agent.1.gz',
      ]) {
        expect(list).toContain(wanted);
      }
      expect(list.filter((file) => file.includes('node_modules') || file.includes('mock'))).toEqual([]);
      // main.cjs, main.js and the chunks its commands import, each named by its content hash (packaging/bundle.mjs).
      const dist = list.filter((file) => file.startsWith('/usr/lib/config-agent/dist/'));
      const chunks = dist.filter((file) =>
        /^\/usr\/lib\/config-agent\/dist\/chunk-[A-Z0-9]+\.js$/.test(file),
      );
      expect(chunks.length).toBeGreaterThan(0);
      // And the CommonJS agent bundle the commands that run a pass load with V8's code cache, with its loader.
      const agent = dist.filter((file) =>
        /^\/usr\/lib\/config-agent\/dist\/agent-[0-9A-F]{12}\.cjs$/.test(file),
      );
      expect(agent).toHaveLength(1);
      expect(dist.filter((file) => !chunks.includes(file) && !agent.includes(file)).sort()).toEqual([
        '/usr/lib/config-agent/dist/',
        '/usr/lib/config-agent/dist/agent-loader.cjs',
        '/usr/lib/config-agent/dist/main.cjs',
        '/usr/lib/config-agent/dist/main.js',
      ]);
      // The launcher runs main.cjs.
      const launcher = dpkgDeb(['--fsys-tarfile', path.join(OUT, all as string)]);
      expect(launcher).toContain('/usr/lib/config-agent/dist/main.cjs "$@"');
    });
  },
);

describe.skipIf(!haveDpkg || bundled === undefined)(
  'config-agent-node_<arch>.deb (skipped until npm run package has built it)',
  () => {
    it('carries Node and replaces config-agent', () => {
      const deb = bundled as string;
      expect(field(deb, 'Provides')).toMatch(/^config-agent \(= /);
      expect(field(deb, 'Conflicts')).toBe('config-agent');
      expect(field(deb, 'Replaces')).toBe('config-agent');
      expect(files(deb)).toContain('/usr/lib/config-agent/node/bin/node');
    });

    // Node 24 without Maglev and TurboFan for the daemon alone: ~9 MiB less idle RSS (packaging/launcher.mjs).
    it("runs the daemon with the bundled runtime's daemon flags; config-agent_all's launcher gives its Node none", () => {
      const launcherOf = (deb: string) =>
        dpkgDebFile(path.join(OUT, deb), './usr/bin/config-agent')
          .split('\n')
          .filter((line) => line.includes('exec '));
      const daemonLine = `exec /usr/lib/config-agent/node/bin/node ${[
        ...BUNDLED_RUNTIME_NODE_FLAGS,
        ...DAEMON_NODE_FLAGS,
        ...BUNDLED_RUNTIME_DAEMON_NODE_FLAGS,
      ].join(' ')} /usr/lib/config-agent/dist/main.cjs "$@" ;;`;
      const lines = launcherOf(bundled as string);
      expect(lines.map((line) => line.trim())).toContain(daemonLine);
      // Only the daemon's lines (as it is, and through config-agent-notify when a drop-in left the wrapper out:
      // cit25): --once and the other commands keep the compilers.
      expect(lines.filter((line) => line.includes('--no-opt')).map((line) => line.trim())).toEqual([
        daemonLine.replace('exec ', 'exec /usr/lib/config-agent/config-agent-notify ').replace(' ;;', ''),
        daemonLine,
      ]);
      if (all !== undefined) {
        expect(
          launcherOf(all).filter((line) => line.includes('--no-opt') || line.includes('--no-maglev')),
        ).toEqual([]);
      }
    });
  },
);

const BUNDLE = path.join(OUT, 'build/bundle/main.js');
if (!existsSync(BUNDLE)) skipWithoutPackages(`${BUNDLE} is missing (npm run package)`);

describe.skipIf(!existsSync(BUNDLE))(
  'the esbuild bundle (skipped until npm run package has built it)',
  () => {
    it("keeps each command's modules out of main.js: chunks imported on demand", async () => {
      const { readFile } = await import('node:fs/promises');
      const text = await readFile(BUNDLE, 'utf8');
      // `await import('./cli/compose.js')` and the other commands become imports of hashed chunks.
      expect(text.match(/import\("\.\/chunk-[A-Z0-9]+\.js"\)/g)?.length).toBeGreaterThanOrEqual(4);
      // What only the commands need is not compiled for --help: no zod, no undici, no daemon.
      for (const absent of ['node_modules/zod', 'node_modules/undici', 'src/daemon/', 'src/cli/compose.ts']) {
        expect(text).not.toContain(absent);
      }
    });

    it('is ASCII only, so V8 holds each chunk one byte a character', async () => {
      const { readFile } = await import('node:fs/promises');
      const dir = path.dirname(BUNDLE);
      for (const name of readdirSync(dir)) {
        expect(/[^\0-\x7f]/.test(await readFile(path.join(dir, name), 'utf8')), name).toBe(false);
      }
    });

    it('answers every command line through main.cjs exactly as through main.js', () => {
      const entry = path.join(path.dirname(BUNDLE), 'main.cjs');
      const run = (file: string, args: string[]) => {
        const result = spawnSync(process.execPath, [file, ...args], { encoding: 'utf8', timeout: 60_000 });
        return { stdout: result.stdout, stderr: result.stderr, status: result.status };
      };
      for (const args of [
        ['--help'],
        ['-h'],
        ['help'],
        ['--version'],
        ['--once', '--help'],
        ['--once', '--bogus'],
        ['--bogus'],
      ]) {
        expect(run(entry, args), args.join(' ')).toEqual(run(BUNDLE, args));
      }
      expect(run(entry, ['--help']).stdout).toMatch(/^config-agent: keeps this device's config files/);
    });
  },
);
