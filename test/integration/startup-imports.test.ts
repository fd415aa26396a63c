// Startup cost: each command of the built binary loads only the modules it needs (a module-resolve hook lists them).
import { spawnSync } from 'node:child_process';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { pathToFileURL } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { AGENT_BIN, AgentHarness, REPO_ROOT } from '../helpers/harness.js';

// writeSync, not process.stderr: hooks run on their own thread, and from Node 22 on what that thread writes to
// process.stderr is lost when the main thread exits soon after (as a refused --once does).
const HOOKS = `import { writeSync } from 'node:fs';
export async function resolve(specifier, context, next) {
  const resolved = await next(specifier, context);
  if (!resolved.url.startsWith('node:')) writeSync(2, 'LOADED ' + resolved.url + '\\n');
  return resolved;
}
`;
const REGISTER = `import { register } from 'node:module';
register('./hooks.mjs', import.meta.url);
`;

let dir: string;

beforeAll(async () => {
  dir = await mkdtemp(path.join(os.tmpdir(), 'config-agent-imports-'));
  await writeFile(path.join(dir, 'hooks.mjs'), HOOKS);
  await writeFile(path.join(dir, 'register.mjs'), REGISTER);
});

afterAll(async () => {
  await rm(dir, { recursive: true, force: true });
});

/** The packages (node_modules) and the agent's own modules (relative to dist/) one command line loads. */
function loadedBy(args: string[]): { code: number | null; packages: Set<string>; modules: Set<string> } {
  const run = spawnSync(
    process.execPath,
    ['--import', pathToFileURL(path.join(dir, 'register.mjs')).href, AGENT_BIN, ...args],
    { encoding: 'utf8', env: { PATH: process.env.PATH ?? '' }, timeout: 30_000 },
  );
  return { code: run.status, ...loadedIn(run.stderr) };
}

/** What the resolve hook saw loaded, from a run's stderr. */
function loadedIn(stderr: string): { packages: Set<string>; modules: Set<string> } {
  const packages = new Set<string>();
  const modules = new Set<string>();
  const dist = `${pathToFileURL(path.join(REPO_ROOT, 'dist')).href}/`;
  for (const line of stderr.split('\n')) {
    const url = /^LOADED (.*)$/.exec(line)?.[1];
    if (url === undefined) continue;
    const pkg = /\/node_modules\/((?:@[^/]+\/)?[^/]+)\//.exec(url)?.[1];
    if (pkg !== undefined) packages.add(pkg);
    else if (url.startsWith(dist)) modules.add(url.slice(dist.length));
  }
  return { packages, modules };
}

const DAEMON_PACKAGES = ['prom-client', '@hono/node-server', 'hono'];

describe('modules loaded per command', () => {
  it('--help and --version load no package at all, and only the argument parser of the agent', () => {
    for (const flag of ['--help', '--version']) {
      const { code, packages, modules } = loadedBy([flag]);
      expect(code, flag).toBe(0);
      expect([...packages], flag).toEqual([]);
      // cli/io: the check that their output was written (exit 74 when not); cli/stray-signals: the signals every
      // command ignores from its start (main.ts, ee83783), a list with no import of its own; cli/process-exit: how
      // every command's process ends (endProcess, imports only node:os); cli/once-early-signals: --once's signals
      // from its first line (adv33, af0a9af), importing only exit-codes and stray-signals.
      expect(
        [...modules].filter(
          (module) =>
            !/^(main|cli\/(args|exit-codes|io|stray-signals|once-early-signals|process-exit)|lib\/\w+|api\/http-status)\.js$/.test(
              module,
            ),
        ),
        flag,
      ).toEqual([]);
    }
  });

  it('--once never loads the daemon: no prom-client, drift watcher, hooks or local API', () => {
    const { code, packages, modules } = loadedBy(['--once', '--config', path.join(dir, 'missing.json')]);
    expect(code).toBe(78);
    // The configuration is read before anything else is built: zod is all it took to refuse it.
    for (const pkg of DAEMON_PACKAGES) expect(packages.has(pkg), pkg).toBe(false);
    expect([...modules].filter((module) => /^(daemon\/|cli\/daemon\.js)/.test(module))).toEqual([]);
    expect(modules.has('cli/compose.js')).toBe(true);
  });

  it('--once against a service reached without a proxy never loads undici: the socket lane carries the requests', async () => {
    const harness = await AgentHarness.create({ registerDevice: true });
    try {
      await harness.createAndDeploy({ relative_filepath: 'etc/app.json', content: { level: 1 } });
      // HTTPS_PROXY is set, but the loopback service is http://: never proxied (api/proxy.ts).
      const run = await harness.runOnce([], {
        NODE_OPTIONS: `--import ${pathToFileURL(path.join(dir, 'register.mjs')).href}`,
        HTTPS_PROXY: 'http://127.0.0.1:9',
      });
      expect(run.code, run.stderr).toBe(0);
      expect(await harness.reports()).toHaveLength(1);
      const { packages, modules } = loadedIn(run.stderr);
      expect(packages.has('zod')).toBe(true);
      expect(packages.has('undici')).toBe(false);
      expect(modules.has('api/http-transport.js')).toBe(true);
      expect(modules.has('api/undici-transport.js')).toBe(false);
    } finally {
      await harness.close();
    }
  });

  it('--once against a loopback service never loads node:http: its requests go on the socket lane', async () => {
    const preload = path.join(dir, 'http-loaded.cjs');
    await writeFile(
      preload,
      "process.on('exit', () => require('node:fs').writeSync(2, 'HTTP ' + process.moduleLoadList.includes('NativeModule http') + '\\n'));\n",
    );
    const harness = await AgentHarness.create({ registerDevice: true });
    try {
      await harness.createAndDeploy({ relative_filepath: 'etc/app.json', content: { level: 1 } });
      const run = await harness.runOnce([], { NODE_OPTIONS: `--require ${preload}` });
      expect(run.code, run.stderr).toBe(0);
      // Pages pulled and the status delivered, and node:http's modules never compiled (http-transport.ts).
      expect(await harness.reports()).toHaveLength(1);
      expect(/^HTTP (true|false)$/m.exec(run.stderr)?.[1]).toBe('false');
    } finally {
      await harness.close();
    }
  });

  it('a service reached through a proxy: undici is loaded as the transport is built, before any request', () => {
    // createServiceTransport's proxied transport is eager (api/transport.ts): a first request minutes later must
    // not be the one to load the undici chunk, which an upgrade may have replaced by then. No request is made
    // here; the process ends once what it started loading is loaded.
    const transport = pathToFileURL(path.join(REPO_ROOT, 'dist', 'api', 'transport.js')).href;
    const build = (baseUrl: string) =>
      `import { createServiceTransport } from ${JSON.stringify(transport)};\n` +
      `createServiceTransport({ timeoutMs: 1000, maxResponseBytes: 1024, baseUrl: ${JSON.stringify(baseUrl)},` +
      ` proxy: { url: 'http://127.0.0.1:9', env: {} } });\n`;
    const loadedBuilding = (baseUrl: string) => {
      const run = spawnSync(
        process.execPath,
        [
          '--import',
          pathToFileURL(path.join(dir, 'register.mjs')).href,
          '--input-type=module',
          '-e',
          build(baseUrl),
        ],
        { encoding: 'utf8', env: { PATH: process.env.PATH ?? '' }, timeout: 30_000 },
      );
      expect(run.status, run.stderr).toBe(0);
      return loadedIn(run.stderr);
    };
    const proxied = loadedBuilding('https://service.example');
    expect(proxied.modules.has('api/undici-transport.js')).toBe(true);
    expect(proxied.packages.has('undici')).toBe(true);
    // The same call for a loopback service goes direct: node:http, undici never loaded.
    const direct = loadedBuilding('http://127.0.0.1:8443');
    expect(direct.modules.has('api/undici-transport.js')).toBe(false);
    expect(direct.packages.has('undici')).toBe(false);
  });

  it('status loads neither the service client nor the reconciler', () => {
    const { code, packages, modules } = loadedBy(['status', '--config', path.join(dir, 'missing.json')]);
    expect(code).toBe(78);
    for (const pkg of ['undici', 'pino', ...DAEMON_PACKAGES]) expect(packages.has(pkg), pkg).toBe(false);
    expect([...modules].filter((module) => /^(reconcile|daemon|store)\//.test(module))).toEqual([]);
  });

  it('--help and --version never load node:v8 (the commands that sync load it to raise the tier-up budget)', async () => {
    const preload = path.join(dir, 'builtins.cjs');
    await writeFile(
      preload,
      "process.on('exit', () => require('node:fs').writeSync(2, 'V8 ' + process.moduleLoadList.includes('NativeModule v8') + '\\n'));\n",
    );
    const loadsV8 = (args: string[]) => {
      const run = spawnSync(process.execPath, ['--require', preload, AGENT_BIN, ...args], {
        encoding: 'utf8',
        env: { PATH: process.env.PATH ?? '' },
        timeout: 30_000,
      });
      return /^V8 (true|false)$/m.exec(run.stderr)?.[1];
    };
    expect(loadsV8(['--help'])).toBe('false');
    expect(loadsV8(['--version'])).toBe('false');
  });
});
