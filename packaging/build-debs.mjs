#!/usr/bin/env node
// `npm run package`: bundles the CLI with esbuild and builds the Debian packages in dist-pkg/ with dpkg-deb.
// Usage: node packaging/build-debs.mjs [--arch amd64,arm64] [--no-node] [--no-lintian]
import { spawnSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import {
  chmodSync,
  copyFileSync,
  existsSync,
  mkdirSync,
  readdirSync,
  readFileSync,
  rmSync,
  statSync,
  writeFileSync,
} from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';
import { gzipSync } from 'node:zlib';
import { bundleCli, installedPackageJson } from './bundle.mjs';
import {
  BUNDLED_RUNTIME_DAEMON_NODE_FLAGS,
  BUNDLED_RUNTIME_NODE_FLAGS,
  launcherScript,
} from './launcher.mjs';

const REPO = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');
const OUT = path.join(REPO, 'dist-pkg');
const WORK = path.join(OUT, 'build');
const CACHE = path.join(OUT, 'cache');
const MAINTAINER = 'config-agent maintainers <config-agent@example.com>';
const LIB = 'usr/lib/config-agent';
const DOCS = ['README.md', 'docs/operations.md', 'docs/configuration.md', 'docs/packaging.md'];
const ARCHES = ['amd64', 'arm64'];

const { values: flags } = parseArgs({
  options: {
    arch: { type: 'string', default: ARCHES.join(',') },
    'no-node': { type: 'boolean', default: false },
    'no-lintian': { type: 'boolean', default: false },
  },
});

function fail(message) {
  process.stderr.write(`package: ${message}\n`);
  process.exit(1);
}

function run(command, args, options = {}) {
  const result = spawnSync(command, args, { stdio: 'inherit', cwd: REPO, ...options });
  if (result.error) fail(`${command}: ${result.error.message}`);
  if (result.status !== 0) fail(`${command} ${args.join(' ')} exited ${result.status}`);
  return result;
}

const pkg = JSON.parse(readFileSync(path.join(REPO, 'package.json'), 'utf8'));
// Debian sorts "~" before the release, as semver sorts a pre-release before it.
const debVersion = pkg.version.replace('-', '~');
const runtime = JSON.parse(readFileSync(path.join(REPO, 'packaging/node-runtime.json'), 'utf8'));
const arches = flags.arch.split(',').filter((arch) => arch !== '');
for (const arch of arches) if (!ARCHES.includes(arch)) fail(`unknown --arch ${arch} (known: ${ARCHES})`);

// A clean clone has no node_modules: install exactly the locked dependencies first.
if (!existsSync(path.join(REPO, 'node_modules/.bin/esbuild'))) {
  process.stdout.write('package: node_modules missing, running npm ci\n');
  run('npm', ['ci', '--no-audit', '--no-fund']);
}

rmSync(WORK, { recursive: true, force: true });
mkdirSync(WORK, { recursive: true });
mkdirSync(CACHE, { recursive: true });
for (const name of readdirSync(OUT)) if (name.endsWith('.deb')) rmSync(path.join(OUT, name));

const bundleDir = path.join(WORK, 'bundle');
const metafile = path.join(WORK, 'meta.json');
let bundleFiles;
try {
  // postinst writes the install's code cache there (`config-agent --once --write-code-cache`).
  bundleFiles = bundleCli({ outdir: bundleDir, metafile, installCacheDir: '/var/cache/config-agent' });
} catch (error) {
  fail(`esbuild: ${error.message}`);
}
/** dist/main.cjs, main.js and its chunks, as installed: main.js without the shebang (the wrapper names the runtime). */
const bundle = bundleFiles.map((file) => ({
  name: path.basename(file),
  text: readFileSync(file, 'utf8').replace(/^#!.*\n/, ''),
}));

/** The npm packages inside the bundle, with their licenses, for the copyright file. */
function bundledPackages() {
  const inputs = Object.keys(JSON.parse(readFileSync(metafile, 'utf8')).inputs);
  const names = new Set();
  for (const input of inputs) {
    const match = /node_modules\/((?:@[^/]+\/)?[^/]+)\//.exec(input);
    if (match) names.add(match[1]);
  }
  return [...names].sort().map((name) => {
    const meta = JSON.parse(readFileSync(path.join(REPO, 'node_modules', name, 'package.json'), 'utf8'));
    return { name, version: meta.version, license: meta.license ?? 'see the package' };
  });
}
const packages = bundledPackages();

function copyright(withNode) {
  const lines = [
    'Format: https://www.debian.org/doc/packaging-manuals/copyright-format/1.0/',
    'Upstream-Name: config-agent',
    '',
    'Files: *',
    'Copyright: 2026 config-agent authors',
    'License: Apache-2.0',
    'Comment: /usr/lib/config-agent/dist/ bundles these npm packages, each under its own license:',
    ...packages.map((p) => ` ${p.name} ${p.version}: ${p.license}`),
  ];
  if (withNode) {
    lines.push(
      '',
      'Files: usr/lib/config-agent/node/*',
      'Copyright: Node.js contributors',
      'License: Node.js',
      `Comment: the official Node.js ${runtime.version} binary; its license, and those of the libraries`,
      ' it embeds, are in /usr/lib/config-agent/node/LICENSE.',
    );
  }
  lines.push(
    '',
    'License: Apache-2.0',
    ' On Debian systems, the full text of the Apache License 2.0 is in',
    ' /usr/share/common-licenses/Apache-2.0.',
  );
  if (withNode) {
    lines.push(
      '',
      'License: Node.js',
      ' MIT, with the notices of its embedded libraries: see',
      ' /usr/lib/config-agent/node/LICENSE.',
    );
  }
  return `${lines.join('\n')}\n`;
}

/** npm pack verifies the registry's integrity; the pin in node-runtime.json makes the bytes reproducible. */
function fetchNode(arch) {
  const { name, integrity } = runtime.packages[arch];
  const tarball = path.join(CACHE, `${name}-${runtime.version}.tgz`);
  if (!existsSync(tarball)) {
    run('npm', ['pack', `${name}@${runtime.version}`, '--pack-destination', CACHE, '--silent'], {
      stdio: ['ignore', 'ignore', 'inherit'],
    });
  }
  const actual = `sha512-${createHash('sha512').update(readFileSync(tarball)).digest('base64')}`;
  if (actual !== integrity) {
    rmSync(tarball);
    fail(`${name}@${runtime.version}: integrity ${actual} is not the pinned ${integrity}`);
  }
  const dir = path.join(WORK, `node-${arch}`);
  mkdirSync(dir, { recursive: true });
  run('tar', ['-xzf', tarball, '-C', dir, 'package/bin/node', 'package/LICENSE']);
  return { binary: path.join(dir, 'package/bin/node'), license: path.join(dir, 'package/LICENSE') };
}

function install(from, to, mode) {
  mkdirSync(path.dirname(to), { recursive: true });
  copyFileSync(from, to);
  chmodSync(to, mode);
}

function write(to, text, mode = 0o644) {
  mkdirSync(path.dirname(to), { recursive: true });
  writeFileSync(to, text);
  chmodSync(to, mode);
}

function filesUnder(dir) {
  const out = [];
  for (const entry of readdirSync(dir, { withFileTypes: true, recursive: true })) {
    if (entry.isFile()) out.push(path.join(entry.parentPath, entry.name));
  }
  return out.sort();
}

/** The man page is the CLI's own --help, so the two cannot disagree. */
function manPage() {
  const help = spawnSync(process.execPath, [path.join(bundleDir, 'main.js'), '--help'], { encoding: 'utf8' });
  if (help.status !== 0) fail(`config-agent --help exited ${help.status}: ${help.stderr}`);
  const escaped = help.stdout.replace(/\\/g, '\\e').replace(/^([.'])/gm, '\\&$1');
  return [
    `.TH CONFIG-AGENT 1 "" "config-agent ${pkg.version}" "User Commands"`,
    '.SH NAME',
    "config-agent \\- keep this device's config files in sync with the Device Configuration Delivery Service",
    '.SH DESCRIPTION',
    '.nf',
    escaped.trimEnd(),
    '.fi',
    '.SH SEE ALSO',
    '/usr/share/doc/config-agent/README.md, /usr/share/doc/config-agent/operations.md',
    '',
  ].join('\n');
}

/** Tags that follow from shipping the official Node.js binary unmodified; docs/packaging.md says why. */
function lintianOverrides(name) {
  return [
    '# The official Node.js binary, kept bit-identical to the release (its checksum can be checked against',
    '# nodejs.org SHASUMS256.txt); Node links these libraries statically and is built this way upstream.',
    `${name}: embedded-library zlib [usr/lib/config-agent/node/bin/node]`,
    `${name}: unstripped-binary-or-object [usr/lib/config-agent/node/bin/node]`,
    `${name}: hardening-no-pie [usr/lib/config-agent/node/bin/node]`,
    '',
  ].join('\n');
}

function changelog(name) {
  const date = new Date(Number(process.env.SOURCE_DATE_EPOCH ?? 0) * 1000 || Date.now()).toUTCString();
  const rfc2822 = date.replace(/^(\w{3}), (\d{2}) (\w{3}) (\d{4}) (.*) GMT$/, '$1, $2 $3 $4 $5 +0000');
  return `${name} (${debVersion}) unstable; urgency=medium\n\n  * Built from config-agent ${pkg.version}; see README.md.\n\n -- ${MAINTAINER}  ${rfc2822}\n`;
}

/**
 * xz for the small arch-independent package; gzip for the ones carrying Node's 120 MB binary, which xz takes
 * minutes to compress on a busy CI machine (Debian's dpkg reads zstd, but lintian rejects it).
 */
function compression(arch) {
  return arch === 'all' ? ['-Zxz'] : ['-Zgzip'];
}

function stage({ name, arch, interpreter, depends, relations, node, triggers = false }) {
  const root = path.join(WORK, `${name}_${arch}`);
  for (const file of bundle) write(path.join(root, LIB, 'dist', file.name), file.text);
  write(path.join(root, LIB, 'package.json'), installedPackageJson(pkg.version));
  write(
    path.join(root, 'usr/bin/config-agent'),
    launcherScript({
      interpreter,
      mainJs: `/${LIB}/dist/main.cjs`,
      runtime: node ? 'its own Node.js runtime' : 'the system Node.js',
      runtimeFlags: node ? BUNDLED_RUNTIME_NODE_FLAGS : [],
      daemonRuntimeFlags: node ? BUNDLED_RUNTIME_DAEMON_NODE_FLAGS : [],
      notifyWrapper: `/${LIB}/config-agent-notify`,
    }),
    0o755,
  );
  if (node) {
    install(node.binary, path.join(root, LIB, 'node/bin/node'), 0o755);
    install(node.license, path.join(root, LIB, 'node/LICENSE'), 0o644);
    write(path.join(root, 'usr/share/lintian/overrides', name), lintianOverrides(name));
  }
  write(path.join(root, 'usr/share/man/man1/config-agent.1.gz'), gzipSync(manPage(), { level: 9 }));

  install(
    path.join(REPO, 'systemd/config-agent.service'),
    path.join(root, 'lib/systemd/system/config-agent.service'),
    0o644,
  );
  // The unit's ExecStart= wrapper: the agent's socket to systemd's watchdog (perl-base is Essential).
  install(path.join(REPO, 'systemd/config-agent-notify'), path.join(root, LIB, 'config-agent-notify'), 0o755);
  install(
    path.join(REPO, 'systemd/config-agent.sysusers'),
    path.join(root, 'usr/lib/sysusers.d/config-agent.conf'),
    0o644,
  );
  install(
    path.join(REPO, 'systemd/config-agent.tmpfiles'),
    path.join(root, 'usr/lib/tmpfiles.d/config-agent.conf'),
    0o644,
  );
  const docs = path.join(root, 'usr/share/doc/config-agent');
  for (const doc of DOCS) install(path.join(REPO, doc), path.join(docs, path.basename(doc)), 0o644);
  install(path.join(REPO, 'config.example.json'), path.join(docs, 'examples/config.json'), 0o644);
  const ownDocs = path.join(root, 'usr/share/doc', name);
  write(path.join(ownDocs, 'copyright'), copyright(node !== undefined));
  write(path.join(ownDocs, 'changelog.gz'), gzipSync(changelog(name), { level: 9 }));

  const control = path.join(root, 'DEBIAN');
  for (const script of ['postinst', 'prerm', 'postrm']) {
    install(path.join(REPO, 'packaging/debian', script), path.join(control, script), 0o755);
  }
  // The system Node's upgrade reruns postinst (`triggered`) to make the install's code cache for the new binary;
  // config-agent-node's own Node is upgraded with the package itself.
  if (triggers) install(path.join(REPO, 'packaging/debian/triggers'), path.join(control, 'triggers'), 0o644);
  const payload = filesUnder(root).filter((file) => !file.startsWith(`${control}/`));
  write(
    path.join(control, 'md5sums'),
    payload
      .map(
        (file) =>
          `${createHash('md5').update(readFileSync(file)).digest('hex')}  ${path.relative(root, file)}`,
      )
      .join('\n')
      .concat('\n'),
  );
  const installedKiB = Math.ceil(payload.reduce((sum, file) => sum + statSync(file).size, 0) / 1024);
  write(
    path.join(control, 'control'),
    [
      `Package: ${name}`,
      `Version: ${debVersion}`,
      `Architecture: ${arch}`,
      `Maintainer: ${MAINTAINER}`,
      `Installed-Size: ${installedKiB}`,
      `Depends: ${depends}`,
      ...relations,
      'Section: admin',
      'Priority: optional',
      `Description: ${pkg.description.split(':')[0]}`,
      ' config-agent polls the Device Configuration Delivery Service for the config',
      ' instances of this device, writes them durably under its root directory and',
      ' reports their statuses back. It runs as the hardened systemd service',
      ' config-agent.service; `config-agent init` configures it.',
      ...(node
        ? [' .', ` This package carries its own Node.js ${runtime.version} runtime in /usr/lib/config-agent.`]
        : [' .', ' This package uses the system Node.js (20.19 or newer).']),
      '',
    ].join('\n'),
  );

  const deb = path.join(OUT, `${name}_${debVersion}_${arch}.deb`);
  run('dpkg-deb', ['--root-owner-group', ...compression(arch), '--build', root, deb], {
    stdio: ['ignore', 'ignore', 'inherit'],
  });
  return deb;
}

const debs = [
  stage({
    name: 'config-agent',
    arch: 'all',
    interpreter: '/usr/bin/node',
    depends: 'nodejs (>= 20.19), systemd (>= 252)',
    relations: ['Conflicts: config-agent-node', 'Replaces: config-agent-node'],
    triggers: true,
  }),
];
if (!flags['no-node']) {
  for (const arch of arches) {
    debs.push(
      stage({
        name: 'config-agent-node',
        arch,
        interpreter: `/${LIB}/node/bin/node`,
        depends: 'libc6 (>= 2.28), libgcc-s1 (>= 3.0), libstdc++6 (>= 5.2), systemd (>= 252)',
        relations: [
          `Provides: config-agent (= ${debVersion})`,
          'Conflicts: config-agent',
          'Replaces: config-agent',
        ],
        node: fetchNode(arch),
      }),
    );
  }
}

const haveLintian = spawnSync('lintian', ['--version'], { stdio: 'ignore' }).status === 0;
if (flags['no-lintian']) process.stdout.write('package: lintian skipped (--no-lintian)\n');
else if (!haveLintian)
  process.stdout.write('package: lintian not installed, skipped (apt install lintian)\n');
else {
  // Errors and warnings fail the build. The tags accepted for the bundled Node binary are overridden inside
  // config-agent-node (usr/share/lintian/overrides) and explained in docs/packaging.md.
  const args = ['--fail-on', 'error,warning', ...debs];
  run('lintian', args);
}
for (const deb of debs) process.stdout.write(`${path.relative(REPO, deb)}\n`);
