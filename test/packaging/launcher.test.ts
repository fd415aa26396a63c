// /usr/bin/config-agent, the packages' shell launcher: what of the caller's environment reaches Node.
import { spawnSync } from 'node:child_process';
import { existsSync } from 'node:fs';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import {
  BUNDLED_RUNTIME_DAEMON_NODE_FLAGS,
  BUNDLED_RUNTIME_NODE_FLAGS,
  DAEMON_MALLOC_ARENA_MAX,
  DAEMON_MALLOC_MMAP_THRESHOLD,
  DAEMON_NODE_FLAGS,
  launcherScript,
  NOTIFY_FD_VARIABLE,
  ONCE_MALLOC_ENV,
  ONCE_NODE_FLAGS,
} from '../../packaging/launcher.mjs';
import { NOTIFY_FD_VARIABLE as AGENT_NOTIFY_FD_VARIABLE } from '../../src/daemon/watchdog.js';
import { skipWithoutPackages } from '../helpers/built-packages.js';

const REPO = path.resolve(import.meta.dirname, '../..');
/** The bundled runtime (Node 24) as `npm run package` unpacks it; .ci/run packages before it tests. */
const UNPACKED_NODE = path.join(
  REPO,
  `dist-pkg/build/node-${process.arch === 'x64' ? 'amd64' : process.arch}/package/bin/node`,
);
let dir: string;
beforeEach(async () => {
  dir = await mkdtemp(path.join(os.tmpdir(), 'config-agent-launcher-'));
});
afterEach(async () => {
  await rm(dir, { recursive: true, force: true });
});

/** The launcher on a stand-in main.js that prints its argv and the variables Node and the agent read. */
async function launch(
  env: NodeJS.ProcessEnv,
  args: string[] = [],
  shell = '/bin/sh',
  runtime: {
    interpreter: string;
    runtimeFlags: string[];
    daemonRuntimeFlags?: string[];
    notifyWrapper?: string;
  } = {
    interpreter: process.execPath,
    runtimeFlags: [],
  },
) {
  const mainJs = path.join(dir, 'main.mjs');
  await writeFile(
    mainJs,
    'const env = Object.fromEntries(Object.entries(process.env).filter(([k]) => /^(NODE_|OPENSSL_|SSL_|MALLOC_|CONFIG_AGENT_|CREDENTIALS_|HTTPS?_PROXY|NO_PROXY)/.test(k)));\n' +
      'const out = { argv: process.argv.slice(2), execArgv: process.execArgv, env };\n' +
      // With CHURN: objects kept alive while many more are made (what grows V8's young generation to its limit),
      // then the new space's size.
      "if (process.env.CHURN) { const v8 = await import('node:v8'); const kept = []; for (let i = 0; i < 2e6; i++) { kept.push({ i, s: 'x' + i }); if (kept.length > 2e5) kept.splice(0, 1e5); }\n" +
      "out.newSpace = v8.getHeapSpaceStatistics().find((space) => space.space_name === 'new_space').space_size; }\n" +
      // With SIGUSR1: the signal Node answers by opening its inspector, sent before any listener of the program's.
      // With OPTIMIZE: whether V8 optimises a function it is told to (kOptimized, bit 4 of its status).
      "if (process.env.OPTIMIZE) { (await import('node:v8')).setFlagsFromString('--allow-natives-syntax');\n" +
      "out.optimized = (new Function('function add(a, b) { return a + b; } %PrepareFunctionForOptimization(add); add(1, 2); add(3, 4); %OptimizeFunctionOnNextCall(add); add(5, 6); return %GetOptimizationStatus(add);')() & 16) !== 0; }\n" +
      // With RTSIGNALS: every real-time signal (34–64), whose default action ends the process, sent to itself.
      'if (process.env.RTSIGNALS) { for (let s = 34; s <= 64; s++) process.kill(process.pid, s); await new Promise((r) => setTimeout(r, 50)); out.survived = true; }\n' +
      "if (process.env.SIGUSR1) { process.kill(process.pid, 'SIGUSR1'); await new Promise((r) => setTimeout(r, 200)); out.inspector = (await import('node:inspector')).url() ?? null; }\n" +
      'process.stdout.write(JSON.stringify(out));\n',
  );
  const launcher = path.join(dir, 'config-agent');
  await writeFile(launcher, launcherScript({ ...runtime, mainJs, runtime: 'a test' }), { mode: 0o755 });
  // A clean environment but for PATH (which the launcher does not need) and what the case sets.
  const result = spawnSync(shell, [launcher, ...args], {
    env: { PATH: process.env.PATH, ...env },
    encoding: 'utf8',
    timeout: 30_000,
  });
  expect(result.stderr).toBe('');
  return JSON.parse(result.stdout) as {
    argv: string[];
    execArgv: string[];
    env: Record<string, string>;
    newSpace?: number;
    inspector?: string | null;
    optimized?: boolean;
    survived?: boolean;
  };
}

describe('the launcher', () => {
  it.each(['/bin/sh', 'bash'])(
    'runs the daemon and --once with their V8 flags, every other command with none; every argument reaches the agent (%s)',
    async (shell) => {
      if (shell === 'bash' && spawnSync('bash', ['-c', 'true']).error !== undefined) return;
      expect(DAEMON_NODE_FLAGS).toEqual(['--max-semi-space-size=1', '--bytecode-old-age=1', '--expose-gc']);
      expect(ONCE_NODE_FLAGS).toEqual(['--max-semi-space-size=4']);
      // The other commands allocate little, and a bounded young generation cost --help ~7 ms of start-up.
      const cases: [string[], string[]][] = [
        ...[[], ['--config', '/etc/a b.json'], ['--config=/etc/config.json']].map(
          (args): [string[], string[]] => [args, DAEMON_NODE_FLAGS],
        ),
        ...[
          ['--once'],
          ['--once', '--config', '/etc/config.json'],
          ['--config', '/etc/config.json', '--once'],
          ['--config', '/etc/config.json', '--once', '--dry-run'],
        ].map((args): [string[], string[]] => [args, ONCE_NODE_FLAGS]),
        ...[
          ['status'],
          ['sync', '--config', '/etc/config.json'],
          ['--help'],
          ['--version'],
          ['init', '--device-id', 'dvc_1'],
          ['doctor'],
          ['--config'],
          ['--config', '/etc/once.json', 'status'],
        ].map((args): [string[], string[]] => [args, []]),
      ];
      for (const [args, flags] of cases) {
        const run = await launch({}, args, shell);
        expect(run.execArgv, args.join(' ')).toEqual(flags);
        expect(run.argv).toEqual(args);
        // glibc's malloc arenas and mmap threshold: the daemon's and --once's alone.
        const daemonOrOnce = flags === DAEMON_NODE_FLAGS || flags === ONCE_NODE_FLAGS;
        expect(run.env, args.join(' ')).toEqual(
          daemonOrOnce ? { MALLOC_ARENA_MAX: '1', MALLOC_MMAP_THRESHOLD_: '32768' } : {},
        );
      }
    },
  );

  it("puts the runtime flags first on every command line, the runtime's daemon flags last on the daemon's", async () => {
    // Flags every supported Node takes, standing for BUNDLED_RUNTIME_NODE_FLAGS and BUNDLED_RUNTIME_DAEMON_NODE_FLAGS.
    const runtime = {
      interpreter: process.execPath,
      runtimeFlags: ['--no-deprecation'],
      daemonRuntimeFlags: ['--no-warnings'],
    };
    for (const [args, flags] of [
      [[], [...DAEMON_NODE_FLAGS, '--no-warnings']],
      [
        ['--config', '/etc/c.json'],
        [...DAEMON_NODE_FLAGS, '--no-warnings'],
      ],
      [['--once'], ONCE_NODE_FLAGS],
      [['status'], []],
    ] as const) {
      expect((await launch({}, [...args], '/bin/sh', runtime)).execArgv).toEqual([
        '--no-deprecation',
        ...flags,
      ]);
    }
  });

  // Maglev's and TurboFan's code was ~8 MiB of the bundled Node 24's pages that the idle daemon kept resident
  // (docs/performance-history.md "Idle daemon, ninth round"). An unknown flag would stop the daemon before its first line:
  // this runs them on the runtime the package ships, unpacked by `npm run package` (.ci/run runs it first).
  it('runs the daemon on the bundled runtime without optimising compilers, and every other command with them', async (ctx) => {
    expect(BUNDLED_RUNTIME_DAEMON_NODE_FLAGS).toEqual(['--no-maglev', '--no-opt']);
    if (!existsSync(UNPACKED_NODE)) {
      ctx.skip(
        skipWithoutPackages(`the bundled runtime is not unpacked (${UNPACKED_NODE}: run npm run package)`),
      );
      return;
    }
    const runtime = {
      interpreter: UNPACKED_NODE,
      runtimeFlags: BUNDLED_RUNTIME_NODE_FLAGS,
      daemonRuntimeFlags: BUNDLED_RUNTIME_DAEMON_NODE_FLAGS,
    };
    const daemon = await launch({ OPTIMIZE: '1' }, ['--config', '/etc/c.json'], '/bin/sh', runtime);
    expect(daemon.execArgv).toEqual([
      ...BUNDLED_RUNTIME_NODE_FLAGS,
      ...DAEMON_NODE_FLAGS,
      ...BUNDLED_RUNTIME_DAEMON_NODE_FLAGS,
    ]);
    expect(daemon.optimized).toBe(false);
    const once = await launch({ OPTIMIZE: '1' }, ['--once'], '/bin/sh', runtime);
    expect(once.execArgv).toEqual([...BUNDLED_RUNTIME_NODE_FLAGS, ...ONCE_NODE_FLAGS]);
    expect(once.optimized).toBe(true);
  });

  // Node answers SIGUSR1 by opening its inspector (127.0.0.1:9229, no authentication) unless told not to:
  // main.ts's listener comes ~0.1 s into the start. The bundled runtime (Node 24, which CI unpacks into dist-pkg
  // with `npm run package`, or this process's when it is 22.14+) closes it from the first instruction.
  it('keeps the bundled runtime from opening its inspector on a SIGUSR1 before the program listens', async (ctx) => {
    expect(BUNDLED_RUNTIME_NODE_FLAGS).toEqual(['--disable-sigusr1']);
    const unpacked = UNPACKED_NODE;
    const interpreter = process.allowedNodeEnvironmentFlags.has('--disable-sigusr1')
      ? process.execPath
      : unpacked;
    // Node 20 refuses the flag; the bundled Node 24 is unpacked by `npm run package`, which .ci/run runs first.
    if (!existsSync(interpreter)) {
      ctx.skip(
        skipWithoutPackages(`no Node that takes --disable-sigusr1 here (${unpacked}: run npm run package)`),
      );
      return;
    }
    const closed = await launch({ SIGUSR1: '1' }, ['--once'], '/bin/sh', {
      interpreter,
      runtimeFlags: BUNDLED_RUNTIME_NODE_FLAGS,
    });
    expect(closed.inspector).toBeNull();
    expect(closed.execArgv).toEqual([...BUNDLED_RUNTIME_NODE_FLAGS, ...ONCE_NODE_FLAGS]);
  });

  // Node cannot listen to them (no names) nor ignore them (no sigaction); a disposition of SIG_IGN set before the
  // exec survives it, and Node's start-up sets back only signals 1-31 (packaging/launcher.mjs REAL_TIME_SIGNALS).
  it.each(['/bin/sh', 'bash'])(
    'starts the daemon with the real-time signals ignored: kill -RTMIN ... -RTMAX no longer ends it (%s)',
    async (shell) => {
      if (shell === 'bash' && spawnSync('bash', ['-c', 'true']).error !== undefined) return;
      for (const args of [[], ['--config', '/etc/config.json']]) {
        expect((await launch({ RTSIGNALS: '1' }, args, shell)).survived).toBe(true);
      }
    },
  );

  it("gives the daemon and --once one malloc arena and a 32 KiB mmap threshold unless the caller chose; passes the caller's to every command", async () => {
    expect(DAEMON_MALLOC_ARENA_MAX).toBe('1');
    expect(DAEMON_MALLOC_MMAP_THRESHOLD).toBe('32768');
    expect(ONCE_MALLOC_ENV).toEqual({ MALLOC_ARENA_MAX: '1', MALLOC_MMAP_THRESHOLD_: '32768' });
    expect(
      (await launch({ MALLOC_ARENA_MAX: '4', MALLOC_MMAP_THRESHOLD_: '131072' }, ['--config', '/etc/c.json']))
        .env,
    ).toEqual({ MALLOC_ARENA_MAX: '4', MALLOC_MMAP_THRESHOLD_: '131072' });
    expect((await launch({ MALLOC_ARENA_MAX: '4' }, ['--config', '/etc/c.json'])).env).toEqual({
      MALLOC_ARENA_MAX: '4',
      MALLOC_MMAP_THRESHOLD_: '32768',
    });
    expect((await launch({ MALLOC_ARENA_MAX: '4' }, ['--once'])).env).toEqual({
      MALLOC_ARENA_MAX: '4',
      MALLOC_MMAP_THRESHOLD_: '32768',
    });
    expect((await launch({}, ['--config', '/etc/c.json', '--once'])).env).toEqual(ONCE_MALLOC_ENV);
    expect((await launch({ MALLOC_ARENA_MAX: '4' }, ['status'])).env).toEqual({ MALLOC_ARENA_MAX: '4' });
    expect((await launch({}, [])).env).toEqual({ MALLOC_ARENA_MAX: '1', MALLOC_MMAP_THRESHOLD_: '32768' });
  });

  // Node 20 lets it grow to two semi-spaces of 16 MiB: ~20 MiB more RSS at the peak of a first sync of 10,000.
  it("runs --once with V8's young generation bounded to two semi-spaces of 4 MiB", async () => {
    const { execArgv, newSpace, argv } = await launch({ CHURN: '1' }, ['--once']);
    expect(execArgv).toEqual(['--max-semi-space-size=4']);
    expect(newSpace).toBeLessThanOrEqual(8 * 1024 * 1024);
    expect(argv).toEqual(['--once']);
  });

  // `su` (without -) keeps the user's environment, `sudo -E` the caller's: a NODE_OPTIONS=--require there ran
  // the user's code as root before the agent's first line; --inspect opened a debugger onto the API key.
  it.each(['/bin/sh', 'bash'])(
    'drops NODE_OPTIONS and every other NODE_* and OpenSSL variable (%s)',
    async (shell) => {
      if (shell === 'bash' && spawnSync('bash', ['-c', 'true']).error !== undefined) return;
      const marker = path.join(dir, 'ran');
      const evil = path.join(dir, 'evil.cjs');
      await writeFile(evil, `require('node:fs').writeFileSync(${JSON.stringify(marker)}, 'ran');\n`);
      const { argv, env } = await launch(
        {
          NODE_OPTIONS: `--require ${evil}`,
          NODE_PATH: dir,
          NODE_REDIRECT_WARNINGS: path.join(dir, 'warnings'),
          NODE_V8_COVERAGE: path.join(dir, 'coverage'),
          NODE_COMPILE_CACHE: path.join(dir, 'cache'),
          NODE_UNIQUE_ID: '1',
          OPENSSL_CONF: path.join(dir, 'openssl.cnf'),
          OPENSSL_MODULES: dir,
          SSL_CERT_FILE: path.join(dir, 'ca.pem'),
          // A value whose lines look like other variables can only drop more, never keep one.
          X_FORGED: 'a\nNODE_EXTRA_CA_CERTS=x\nNODE_OPTIONS=y',
          NODE_EXTRA_CA_CERTS: '/etc/ssl/certs/ca-certificates.crt',
          NODE_TLS_REJECT_UNAUTHORIZED: '1',
          CONFIG_AGENT_API_KEY: 'k',
          CONFIG_AGENT_CONFIG: '/etc/config-agent/config.json',
          CREDENTIALS_DIRECTORY: '/run/credentials/config-agent.service',
          HTTPS_PROXY: 'http://proxy:3128',
          NO_PROXY: 'localhost',
        },
        ['--once', 'a b', "c'd", '$HOME', '*'],
        shell,
      );
      expect(existsSync(marker)).toBe(false);
      expect(argv).toEqual(['--once', 'a b', "c'd", '$HOME', '*']);
      // What is left: the agent's own variables, the two Node variables the agent itself judges, and the
      // malloc settings the launcher gives --once.
      expect(env).toEqual({
        ...ONCE_MALLOC_ENV,
        NODE_EXTRA_CA_CERTS: '/etc/ssl/certs/ca-certificates.crt',
        NODE_TLS_REJECT_UNAUTHORIZED: '1',
        CONFIG_AGENT_API_KEY: 'k',
        CONFIG_AGENT_CONFIG: '/etc/config-agent/config.json',
        CREDENTIALS_DIRECTORY: '/run/credentials/config-agent.service',
        HTTPS_PROXY: 'http://proxy:3128',
        NO_PROXY: 'localhost',
      });
      expect(existsSync(path.join(dir, 'coverage'))).toBe(false);
    },
  );
  it.each(['/bin/sh', 'bash'])(
    "runs the daemon through the notify wrapper under systemd's watchdog when nothing in front did (cit25, %s)",
    async (shell) => {
      if (shell === 'bash' && spawnSync('bash', ['-c', 'true']).error !== undefined) return;
      expect(NOTIFY_FD_VARIABLE).toBe(AGENT_NOTIFY_FD_VARIABLE);
      // A stand-in for config-agent-notify: names a descriptor, as the real one does once connected.
      const wrapper = path.join(dir, 'notify');
      await writeFile(wrapper, `#!/bin/sh\nexport ${NOTIFY_FD_VARIABLE}=wrapped\nexec "$@"\n`, {
        mode: 0o755,
      });
      const runtime = { interpreter: process.execPath, runtimeFlags: [], notifyWrapper: wrapper };
      const watchdog = { WATCHDOG_USEC: '120000000', NOTIFY_SOCKET: '/run/systemd/notify' };
      const config = ['--config', '/etc/a b.json'];
      // An ExecStart= drop-in naming the launcher alone: wrapped, the daemon's flags and arguments intact.
      for (const args of [[], config, ['--config=/etc/a.json']]) {
        const out = await launch(watchdog, args, shell, runtime);
        expect(out.env[NOTIFY_FD_VARIABLE]).toBe('wrapped');
        expect(out.execArgv).toEqual(DAEMON_NODE_FLAGS);
        expect(out.argv).toEqual(args);
      }
      // The unit's ExecStart= (the wrapper already ran, connected or not), no watchdog, no notify socket,
      // another command, or no wrapper installed: run as before.
      const kept = [
        [{ ...watchdog, [NOTIFY_FD_VARIABLE]: '3' }, config, '3'],
        [{ ...watchdog, [NOTIFY_FD_VARIABLE]: '' }, config, ''],
        [{ NOTIFY_SOCKET: watchdog.NOTIFY_SOCKET }, config, undefined],
        [{ WATCHDOG_USEC: watchdog.WATCHDOG_USEC }, config, undefined],
        [watchdog, ['--once'], undefined],
        [watchdog, ['status'], undefined],
      ] as const;
      for (const [env, args, fd] of kept) {
        const out = await launch(env, [...args], shell, runtime);
        expect(out.env[NOTIFY_FD_VARIABLE]).toBe(fd);
        expect(out.argv).toEqual(args);
      }
      const missing = await launch(watchdog, config, shell, {
        ...runtime,
        notifyWrapper: path.join(dir, 'absent'),
      });
      expect(missing.env[NOTIFY_FD_VARIABLE]).toBeUndefined();
      expect(missing.execArgv).toEqual(DAEMON_NODE_FLAGS);
    },
  );
});

describe('the launcher with standard output closed', () => {
  // Node puts /dev/null (read-write) at a closed standard descriptor before the agent runs a line: `config-agent
  // status >&-` printed into it and exited 0. The launcher puts /dev/null read-only there instead.
  it.each(['/bin/sh', 'bash'])(
    'a command that prints exits 74 and says why; with it open, or redirected to /dev/null, 0 (%s)',
    async (shell) => {
      if (shell === 'bash' && spawnSync('bash', ['-c', 'true']).error !== undefined) return;
      const launcher = path.join(dir, 'config-agent');
      const mainJs = path.join(REPO, 'dist/main.js');
      await writeFile(
        launcher,
        launcherScript({ interpreter: process.execPath, mainJs, runtime: 'a test' }),
        {
          mode: 0o755,
        },
      );
      const run = (redirect: string) =>
        spawnSync(shell, ['-c', `"$0" "$1" --version ${redirect}`, shell, launcher], {
          env: { PATH: process.env.PATH },
          encoding: 'utf8',
          timeout: 30_000,
        });
      const closed = run('>&-');
      expect(closed.status).toBe(74);
      expect(closed.stderr).toMatch(/could not write the output to standard output: EBADF/);
      expect(run('').status).toBe(0);
      expect(run('').stdout).toMatch(/^config-agent \d/);
      const devNull = run('>/dev/null');
      expect(devNull.status).toBe(0);
      // (bash run with a socket as its stdin may read ~/.bashrc, whose complaints are not the agent's.)
      expect(devNull.stderr).not.toMatch(/config-agent/);
    },
  );
});
