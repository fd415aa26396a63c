// Hooks with real child processes: matching, env, timeouts (process group), failures, spawn errors, abort (integration tier: real kill timeouts).
import { existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { Writable } from 'node:stream';
import { afterAll, afterEach, describe, expect, it } from 'vitest';
import { strayPidsEachTest } from '../../test/helpers/stray-pids.js';
import { PATIENCE_MS } from '../../test/helpers/wait-for.js';
import { createLogger, type Logger, silentLogger } from '../lib/logger.js';
import { createSecretRegistry } from '../lib/secrets.js';
import type { ProcessEntry, ProcessTable } from './hook-processes.js';
import {
  CHANGED_ENV,
  CHANGED_TRUNCATED_ENV,
  type HookSpec,
  hookFailed,
  matchingPaths,
  runHooks,
  STDERR_TAIL_BYTES,
} from './hooks.js';

const BASE = mkdtempSync(path.join(os.tmpdir(), 'config-agent-hooks-'));
const ROOT = path.join(BASE, 'root');
const OUT = path.join(BASE, 'out');
const node = process.execPath;
let counter = 0;
const strays = strayPidsEachTest();

afterAll(() => {
  rmSync(BASE, { recursive: true, force: true });
});

function outFile(name: string): string {
  counter += 1;
  return path.join(OUT, `${counter}-${name}`);
}

function setup(): void {
  rmSync(ROOT, { recursive: true, force: true });
  rmSync(OUT, { recursive: true, force: true });
  for (const dir of [ROOT, OUT]) mkdirSync(dir, { recursive: true });
}

/** A hook that appends one JSON line {cwd, changed} per run to `file`. */
function recordingHook(match: string, file: string): HookSpec {
  const script = `require('node:fs').appendFileSync(process.argv[1], JSON.stringify({ cwd: process.cwd(), changed: process.env.${CHANGED_ENV} }) + '\\n')`;
  return { match, run: [node, '-e', script, file], timeoutSeconds: 10 };
}

function runs(file: string): { cwd: string; changed: string }[] {
  if (!existsSync(file)) return [];
  return readFileSync(file, 'utf8')
    .trim()
    .split('\n')
    .map((line) => JSON.parse(line) as { cwd: string; changed: string });
}

/** Alive and not a zombie: in a container PID 1 may never reap an orphan, so kill(pid, 0) is not enough. */
function isAlive(pid: number): boolean {
  if (existsSync('/proc/self/stat')) {
    try {
      const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
      const state = stat.slice(stat.lastIndexOf(')') + 2, stat.lastIndexOf(')') + 3);
      return state !== 'Z' && state !== 'X';
    } catch {
      return false;
    }
  }
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
}

async function waitFor(condition: () => boolean, timeoutMs: number): Promise<boolean> {
  const deadline = Date.now() + timeoutMs;
  while (Date.now() < deadline) {
    if (condition()) return true;
    await new Promise((resolve) => setTimeout(resolve, 20));
  }
  return condition();
}

function capturingLogger(): { logger: Logger; lines: () => Record<string, unknown>[] } {
  let text = '';
  const destination = new Writable({
    write(chunk: Buffer, _encoding, callback) {
      text += chunk.toString();
      callback();
    },
  });
  const logger = createLogger({ level: 'debug', secrets: createSecretRegistry(), destination });
  return {
    logger,
    lines: () =>
      text
        .split('\n')
        .filter((line) => line !== '')
        .map((line) => JSON.parse(line) as Record<string, unknown>),
  };
}

const options = (extra: Partial<Parameters<typeof runHooks>[2]> = {}) => ({
  cwd: ROOT,
  env: { PATH: process.env.PATH ?? '/usr/bin:/bin' },
  logger: silentLogger(),
  ...extra,
});

/** A script that starts a long-lived grandchild, writes its pid to argv[1], then waits forever. */
const SPAWNS_GRANDCHILD = `
const { spawn } = require('node:child_process');
const grandchild = spawn(process.execPath, ['-e', 'setInterval(() => {}, 1000)'], { stdio: 'ignore' });
require('node:fs').writeFileSync(process.argv[1], String(grandchild.pid));
setInterval(() => {}, 1000);
`;

describe('matchingPaths', () => {
  const hook = (match: string): HookSpec => ({ match, run: ['true'], timeoutSeconds: 1 });

  it('matches globs relative to rootDir, dot files included, each path once in input order', () => {
    const changed = ['nginx/nginx.conf', 'app/.env', 'nginx/sites/.hidden.conf', 'nginx/nginx.conf', 'x.txt'];
    expect(matchingPaths(hook('nginx/**'), changed)).toEqual([
      'nginx/nginx.conf',
      'nginx/sites/.hidden.conf',
    ]);
    expect(matchingPaths(hook('**/.env'), changed)).toEqual(['app/.env']);
    expect(matchingPaths(hook('*.txt'), changed)).toEqual(['x.txt']);
    expect(matchingPaths(hook('*.conf'), changed)).toEqual([]);
  });
});

describe('runHooks', () => {
  it('runs each matching hook once per pass in rootDir, with only its matching paths in CONFIG_AGENT_CHANGED', async () => {
    setup();
    const nginxLog = outFile('nginx');
    const jsonLog = outFile('json');
    const unmatchedLog = outFile('unmatched');
    const hooks = [
      recordingHook('nginx/**', nginxLog),
      recordingHook('**/*.json', jsonLog),
      recordingHook('nothing/**', unmatchedLog),
    ];
    const changed = [
      'nginx/nginx.conf',
      'app/settings.json',
      'nginx/sites/.a.conf',
      '.hidden/x.json',
      'a.txt',
    ];

    const results = await runHooks(hooks, changed, options());

    expect(runs(nginxLog)).toEqual([{ cwd: ROOT, changed: 'nginx/nginx.conf\nnginx/sites/.a.conf' }]);
    expect(runs(jsonLog)).toEqual([{ cwd: ROOT, changed: 'app/settings.json\n.hidden/x.json' }]);
    expect(existsSync(unmatchedLog)).toBe(false);
    expect(results.map((r) => [r.match, r.exitCode, r.signal, r.timedOut, r.error])).toEqual([
      ['nginx/**', 0, null, false, undefined],
      ['**/*.json', 0, null, false, undefined],
    ]);
    expect(results[0]!.changedPaths).toEqual(['nginx/nginx.conf', 'nginx/sites/.a.conf']);

    // A second pass runs the hook again, once.
    await runHooks(hooks, ['nginx/other.conf'], options());
    expect(runs(nginxLog).map((r) => r.changed)).toEqual([
      'nginx/nginx.conf\nnginx/sites/.a.conf',
      'nginx/other.conf',
    ]);
    expect(runs(jsonLog)).toHaveLength(1);
  });

  it('runs nothing when no changed path matches', async () => {
    setup();
    const log = outFile('none');
    const results = await runHooks([recordingHook('nginx/**', log)], ['app/a.conf'], options());
    expect(results).toEqual([]);
    expect(existsSync(log)).toBe(false);
    expect(await runHooks([recordingHook('**', log)], [], options())).toEqual([]);
    expect(existsSync(log)).toBe(false);
  });

  it('never passes the API key or the credentials directory to a hook', async () => {
    setup();
    const envFile = outFile('env');
    const secret = 'sk_live_secret_value_123';
    const script = `require('node:fs').writeFileSync(process.argv[1], JSON.stringify(process.env))`;
    const env = {
      PATH: process.env.PATH ?? '/usr/bin:/bin',
      CONFIG_AGENT_API_KEY: secret,
      OTHER_API_KEY: secret,
      my_apikey: secret,
      CREDENTIALS_DIRECTORY: '/run/credentials/config-agent.service',
      KEEP_ME: 'yes',
      [CHANGED_ENV]: 'stale value from the agent environment',
    };
    const [result] = await runHooks(
      [{ match: '**', run: [node, '-e', script, envFile], timeoutSeconds: 10 }],
      ['a.conf'],
      options({ env }),
    );
    expect(result?.exitCode).toBe(0);
    const seen = JSON.parse(readFileSync(envFile, 'utf8')) as Record<string, string>;
    expect(seen.KEEP_ME).toBe('yes');
    expect(seen[CHANGED_ENV]).toBe('a.conf');
    for (const name of ['CONFIG_AGENT_API_KEY', 'OTHER_API_KEY', 'my_apikey', 'CREDENTIALS_DIRECTORY']) {
      expect(seen).not.toHaveProperty(name);
    }
    expect(readFileSync(envFile, 'utf8')).not.toContain(secret);
    expect(env.CONFIG_AGENT_API_KEY).toBe(secret);
  });

  it('runs when the changed paths are too many for one environment variable, told the list is cut short', async () => {
    setup();
    const envFile = outFile('env');
    const script = `require('node:fs').writeFileSync(process.argv[1], JSON.stringify(process.env))`;
    // 3,000 paths of 100 bytes: 300 KB, over Linux's 128 KiB for one NAME=value (exec failed with E2BIG).
    const changed = Array.from(
      { length: 3000 },
      (_, i) => `app/${String(i).padStart(4, '0')}-${'x'.repeat(90)}.json`,
    );
    const [result] = await runHooks(
      [{ match: '**', run: [node, '-e', script, envFile], timeoutSeconds: 10 }],
      changed,
      options({ env: { PATH: process.env.PATH ?? '/usr/bin:/bin', [CHANGED_TRUNCATED_ENV]: 'stale' } }),
    );
    expect(result?.error).toBeUndefined();
    expect(result?.exitCode).toBe(0);
    expect(result?.changedPaths).toHaveLength(3000);
    const seen = JSON.parse(readFileSync(envFile, 'utf8')) as Record<string, string>;
    const listed = seen[CHANGED_ENV]?.split('\n') ?? [];
    // Whole paths, in order, as many as fit.
    expect(listed).toEqual(changed.slice(0, listed.length));
    expect(listed.length).toBeGreaterThan(1200);
    expect(seen[CHANGED_TRUNCATED_ENV]).toBe('1');

    // A list that fits is whole, and not said to be cut short (an inherited value is not passed on).
    const [small] = await runHooks(
      [{ match: '**', run: [node, '-e', script, envFile], timeoutSeconds: 10 }],
      changed.slice(0, 10),
      options({ env: { PATH: process.env.PATH ?? '/usr/bin:/bin', [CHANGED_TRUNCATED_ENV]: '1' } }),
    );
    expect(small?.exitCode).toBe(0);
    const again = JSON.parse(readFileSync(envFile, 'utf8')) as Record<string, string>;
    expect(again[CHANGED_ENV]).toBe(changed.slice(0, 10).join('\n'));
    expect(again).not.toHaveProperty(CHANGED_TRUNCATED_ENV);
  });

  it('kills a hook and its grandchildren after timeoutSeconds', async () => {
    setup();
    const pidFile = outFile('grandchild-pid');
    // sh, not node: it has spawned the grandchild and written its pid within a millisecond or two, long before
    // the timeout even on a busy machine (a node hook could still be starting when it was killed).
    const script = `sleep 1000 & echo $! > "$1"; wait`;
    const [result] = await runHooks(
      [{ match: '**', run: ['sh', '-c', script, 'hook', pidFile], timeoutSeconds: 1 }],
      ['a.conf'],
      options({ killGraceMs: 500 }),
    );
    const grandchild = Number(readFileSync(pidFile, 'utf8'));
    strays.push(grandchild);
    // No upper bound on a wall clock: the verdict says the timeout, not the hook, ended it.
    expect(result).toMatchObject({ timedOut: true, exitCode: null, signal: 'SIGTERM' });
    expect(result!.durationMs).toBeGreaterThanOrEqual(950);
    expect(await waitFor(() => !isAlive(grandchild), PATIENCE_MS)).toBe(true);
  });

  it('escalates to SIGKILL when a hook ignores SIGTERM', async () => {
    setup();
    // sh ignores SIGTERM from its first millisecond (a node hook could be killed by it while still starting).
    const script = `trap '' TERM; while :; do sleep 1; done`;
    const [result] = await runHooks(
      [{ match: '**', run: ['sh', '-c', script], timeoutSeconds: 1 }],
      ['a.conf'],
      options({ killGraceMs: 300 }),
    );
    expect(result).toMatchObject({ timedOut: true, exitCode: null, signal: 'SIGKILL' });
  });

  it('reports a non-zero exit with the stderr tail, logs it, and still runs the next hook', async () => {
    setup();
    const nextLog = outFile('next');
    const script = `process.stderr.write('x'.repeat(10000) + 'é' + 'reload failed: bad config\\n', () => process.exit(3))`;
    const { logger, lines } = capturingLogger();
    const results = await runHooks(
      [{ match: '**', run: [node, '-e', script], timeoutSeconds: 10 }, recordingHook('**', nextLog)],
      ['a.conf'],
      options({ logger }),
    );
    expect(results[0]).toMatchObject({ exitCode: 3, signal: null, timedOut: false });
    expect(results[0]!.error).toBeUndefined();
    const tail = results[0]!.stderrTail;
    expect(tail.endsWith('reload failed: bad config\n')).toBe(true);
    expect(Buffer.byteLength(tail)).toBeLessThanOrEqual(STDERR_TAIL_BYTES);
    expect(Buffer.byteLength(tail)).toBeGreaterThan(STDERR_TAIL_BYTES - 4);
    expect(results[1]!.exitCode).toBe(0);
    expect(runs(nextLog)).toHaveLength(1);

    const failure = lines().find((line) => line.level === 'warn');
    expect(failure).toMatchObject({ hook: '**', exitCode: 3, signal: null, timedOut: false });
    expect(String(failure?.stderrTail)).toContain('reload failed: bad config');
    expect(lines().filter((line) => line.msg === 'hook ran')).toHaveLength(1);
  });

  it('starts a stderr tail cut inside a line at the next line, so no part of a secret printed there is kept', async () => {
    setup();
    // The last 4,096 bytes begin 10 bytes into the token: 22 of its bytes, a newline, then 4,073 bytes of lines.
    const token = 'Zm9vYmFyOnNlY3JldC1wYXNzd29yZA==';
    const filler = `${'f'.repeat(99)}\n`.repeat(40) + `${'g'.repeat(72)}\n`;
    const printed = `${'x'.repeat(5000)}\nProxy-Authorization: Basic ${token}\n${filler}`;
    // Read from a file: the logged argv must not carry the token either.
    const file = outFile('printed');
    writeFileSync(file, printed);
    const script = `process.stderr.write(require('node:fs').readFileSync(process.argv[1]), () => process.exit(1))`;
    const { logger, lines } = capturingLogger();
    const [result] = await runHooks(
      [{ match: '**', run: [node, '-e', script, file], timeoutSeconds: 10 }],
      ['a.conf'],
      options({ logger }),
    );
    expect(result?.exitCode).toBe(1);
    expect(result?.stderrTail).toBe(filler);
    const logged = JSON.stringify(lines());
    expect(logged).toContain('g'.repeat(72));
    for (let at = 0; at + 8 <= token.length; at++) expect(logged).not.toContain(token.slice(at, at + 8));
  });

  it('reports a command that does not exist, and still runs the next hook', async () => {
    setup();
    const nextLog = outFile('next');
    const missing = path.join(BASE, 'no-such-command');
    const results = await runHooks(
      [{ match: '**', run: [missing, '--flag'], timeoutSeconds: 10 }, recordingHook('**', nextLog)],
      ['a.conf'],
      options(),
    );
    // The shell that enters rootDir execs it (spawnThroughShell): its exit 127, its reason in the stderr tail.
    expect(results[0]).toMatchObject({
      exitCode: 127,
      signal: null,
      timedOut: false,
      argv: [missing, '--flag'],
    });
    expect(results[0]!.stderrTail).toBe(`config-agent-hook: 1: exec: ${missing}: not found\n`);
    expect(hookFailed(results[0]!)).toBe(true);
    expect(results[1]!.exitCode).toBe(0);
    expect(runs(nextLog)).toHaveLength(1);
  });

  it('does not start a hook whose program fails its check (or whose check throws), and still runs the next', async () => {
    setup();
    const refusedLog = outFile('refused');
    const thrownLog = outFile('thrown');
    const nextLog = outFile('next');
    const [refusedHook, thrownHook, nextHook] = [
      recordingHook('**', refusedLog),
      recordingHook('*.conf', thrownLog),
      recordingHook('a.*', nextLog),
    ];
    let asked = 0;
    const results = await runHooks([refusedHook, thrownHook, nextHook], ['a.conf'], {
      ...options(),
      vetProgram: async () => {
        asked += 1;
        if (asked === 1) return 'writable by others';
        if (asked === 2) throw new Error('EIO');
        return undefined;
      },
    });
    expect(results.map((result) => result.error)).toEqual([
      `not run: ${refusedHook.run[0]}: writable by others`,
      `not run: ${thrownHook.run[0]}: its check failed: EIO`,
      undefined,
    ]);
    expect(results.map(hookFailed)).toEqual([true, true, false]);
    expect(runs(refusedLog)).toHaveLength(0);
    expect(runs(thrownLog)).toHaveLength(0);
    expect(runs(nextLog)).toHaveLength(1);
  });

  it('kills the running hook (and its group) on abort, and skips the hooks not yet started', async () => {
    setup();
    const pidFile = outFile('grandchild-pid');
    const skippedLog = outFile('skipped');
    const controller = new AbortController();
    const pending = runHooks(
      [
        { match: '**', run: [node, '-e', SPAWNS_GRANDCHILD, pidFile], timeoutSeconds: 60 },
        recordingHook('**', skippedLog),
      ],
      ['a.conf'],
      options({ signal: controller.signal, killGraceMs: 500 }),
    );
    expect(
      await waitFor(() => existsSync(pidFile) && readFileSync(pidFile, 'utf8') !== '', PATIENCE_MS),
    ).toBe(true);
    const grandchild = Number(readFileSync(pidFile, 'utf8'));
    strays.push(grandchild);
    controller.abort();
    const results = await pending;

    expect(results).toHaveLength(1);
    expect(results[0]).toMatchObject({ timedOut: false, exitCode: null, signal: 'SIGTERM' });
    expect(results[0]!.error).toMatch(/abort/);
    expect(results[0]!.durationMs).toBeLessThan(10_000);
    expect(existsSync(skippedLog)).toBe(false);
    expect(await waitFor(() => !isAlive(grandchild), PATIENCE_MS)).toBe(true);
  });

  it('does not wait for a background process that keeps the hook pipes open after the hook exits', async () => {
    setup();
    const pidFile = outFile('daemon-pid');
    const script = `
const { spawn } = require('node:child_process');
const bg = spawn(process.execPath, ['-e', 'setInterval(() => {}, 1000)'], { stdio: 'inherit', detached: true });
require('node:fs').writeFileSync(process.argv[1], String(bg.pid));
bg.unref();
`;
    const started = Date.now();
    const [result] = await runHooks(
      [{ match: '**', run: [node, '-e', script, pidFile], timeoutSeconds: 30 }],
      ['a.conf'],
      options(),
    );
    strays.push(Number(readFileSync(pidFile, 'utf8')));
    expect(result).toMatchObject({ exitCode: 0, signal: null, timedOut: false });
    expect(Date.now() - started).toBeLessThan(5000);
  });
});

/** The pids written to `files`, once every file holds one (each process writes its own when it is ready). */
async function pidsFrom(files: readonly string[]): Promise<number[]> {
  expect(
    await waitFor(
      () => files.every((file) => existsSync(file) && /^\d+\s*$/.test(readFileSync(file, 'utf8'))),
      PATIENCE_MS,
    ),
  ).toBe(true);
  const pids = files.map((file) => Number(readFileSync(file, 'utf8')));
  strays.push(...pids);
  return pids;
}

/** A process table the test makes up, seen through `list`/`get`; `kill` acts on it as the kernel would. */
function madeUpProcesses(world: Map<number, ProcessEntry & { ignoresTerm?: boolean }>): ProcessTable {
  const hit = (entry: ProcessEntry & { ignoresTerm?: boolean }, signal: NodeJS.Signals) => {
    if (signal === 'SIGKILL' || (signal === 'SIGTERM' && entry.ignoresTerm !== true)) world.delete(entry.pid);
  };
  return {
    list: () => [...world.values()],
    get: (pid) => world.get(pid),
    environ: () => undefined,
    kill: (pid, signal) => {
      const targets = pid < 0 ? [...world.values()].filter((entry) => entry.pgrp === -pid) : [world.get(pid)];
      const found = targets.filter((entry) => entry !== undefined);
      if (found.length === 0) throw Object.assign(new Error('kill ESRCH'), { code: 'ESRCH' });
      for (const entry of found) hit(entry, signal);
    },
  };
}

describe('processes a hook leaves running', () => {
  it('ends what a hook that exited 0 left running: a background child, one that ignores SIGTERM, one in a group of its own', async () => {
    setup();
    const [plain, deaf, regrouped] = [outFile('plain'), outFile('deaf'), outFile('regrouped')];
    // Each writes its own pid once it is what it claims to be (SIGTERM ignored, its own process group), and
    // the hook exits 0 only then.
    const script = [
      'sleep 1000 & echo $! > "$1"',
      `sh -c 'trap "" TERM; echo $$ > "$1"; exec sleep 1000' ignores-term "$2" &`,
      `perl -e 'setpgrp(0, 0); open(my $f, ">", $ARGV[0]); print $f $$; close($f); sleep 1000' "$3" &`,
      'while [ ! -s "$2" ] || [ ! -s "$3" ]; do sleep 0.01; done',
    ].join('\n');
    const { logger, lines } = capturingLogger();
    const [result] = await runHooks(
      [{ match: '**', run: ['sh', '-c', script, 'hook', plain, deaf, regrouped], timeoutSeconds: 30 }],
      ['a.conf'],
      options({ logger, killGraceMs: 300 }),
    );
    const pids = await pidsFrom([plain, deaf, regrouped]);
    expect(result).toMatchObject({ exitCode: 0, signal: null, timedOut: false });
    expect(hookFailed(result!)).toBe(false);
    expect(result!.leftovers.map((leftover) => leftover.pid).sort()).toEqual([...pids].sort());
    for (const pid of pids) expect(await waitFor(() => !isAlive(pid), PATIENCE_MS)).toBe(true);
    const warning = lines().find((line) => String(line.msg).startsWith('hook left 3 process(es) running'));
    expect(warning).toMatchObject({ level: 'warn', hook: '**' });
  });

  it('ends, when it stops a running hook, a child that called setsid while the hook was still running', async () => {
    setup();
    const escaped = outFile('setsid');
    const script = `setsid sh -c 'echo $$ > "$1"; exec sleep 1000' escaped "$1" & while :; do sleep 1; done`;
    const controller = new AbortController();
    // Stopped by an abort once the child has left the session (a timeout stops it the same way, but could come
    // before that on a busy machine).
    const pending = runHooks(
      [{ match: '**', run: ['sh', '-c', script, 'hook', escaped], timeoutSeconds: 60 }],
      ['a.conf'],
      options({ killGraceMs: 300, signal: controller.signal }),
    );
    const [pid] = await pidsFrom([escaped]);
    controller.abort();
    const [result] = await pending;
    expect(result).toMatchObject({ exitCode: null, signal: 'SIGTERM' });
    expect(await waitFor(() => !isAlive(pid!), PATIENCE_MS)).toBe(true);
  });

  it('ends a daemon the hook double-forked into a session of its own, orphaned before the hook exited', async () => {
    setup();
    const daemonized = outFile('daemonized');
    // The subshell starts the daemon in a new session and exits at once: the daemon's parent is gone before the
    // hook ends, so neither its session, its group nor its parentage ties it to the hook.
    const script = `(setsid sh -c 'echo $$ > "$1"; exec sleep 1000' daemon "$1" &); while [ ! -s "$1" ]; do sleep 0.01; done`;
    const [result] = await runHooks(
      [{ match: '**', run: ['sh', '-c', script, 'hook', daemonized], timeoutSeconds: 30 }],
      ['a.conf'],
      options({ killGraceMs: 300 }),
    );
    const [pid] = await pidsFrom([daemonized]);
    expect(result).toMatchObject({ exitCode: 0, leftovers: [{ pid }] });
    expect(await waitFor(() => !isAlive(pid!), PATIENCE_MS)).toBe(true);
  });

  it('a pid of the hook handed to another of its processes before the hook ended: that one is ended too', async () => {
    setup();
    const leaderFile = outFile('leader');
    const world = new Map<number, ProcessEntry & { ignoresTerm?: boolean }>();
    const table = madeUpProcesses(world);
    let leader = 0;
    const stopped = new AbortController();
    const processes: ProcessTable = {
      ...table,
      list: () => {
        leader ||= Number(readFileSync(leaderFile, 'utf8'));
        return table.list();
      },
      kill: (pid, signal) => {
        // The real hook gets the signals sent to its group; the made-up processes get them too.
        if (pid === -leader) {
          try {
            process.kill(pid, signal);
          } catch {
            // Gone already.
          }
        }
        try {
          table.kill(pid, signal);
        } catch {
          // Nothing made up there.
        }
      },
    };
    const pending = runHooks(
      [
        {
          match: '**',
          run: ['sh', '-c', 'echo $$ > "$1"; while :; do sleep 1; done', 'hook', leaderFile],
          timeoutSeconds: 60,
        },
      ],
      ['a.conf'],
      options({ killGraceMs: 200, processes, signal: stopped.signal }),
    );
    expect(
      await waitFor(() => existsSync(leaderFile) && readFileSync(leaderFile, 'utf8') !== '', PATIENCE_MS),
    ).toBe(true);
    leader = Number(readFileSync(leaderFile, 'utf8'));
    // Seen when the hook is stopped: one of its processes in a group of its own, which then exits; its pid goes
    // to another of the hook's processes (same session), which ignores SIGTERM.
    world.set(900002, {
      pid: 900002,
      ppid: leader,
      pgrp: 900002,
      session: leader,
      startTime: '100',
      comm: 'first',
      exited: false,
    });
    const realKill = processes.kill;
    let handedOver = false;
    processes.kill = (pid, signal) => {
      realKill(pid, signal);
      if (!handedOver) {
        handedOver = true;
        world.set(900002, {
          pid: 900002,
          ppid: 1,
          pgrp: 900002,
          session: leader,
          startTime: '200',
          comm: 'second',
          exited: false,
          ignoresTerm: true,
        });
      }
    };
    stopped.abort();
    const [result] = await pending;
    expect(result!.leftovers).toEqual([{ pid: 900002, command: 'second' }]);
    expect(world.has(900002)).toBe(false);
  });

  it('never signals a process group or pid handed out again after the hook and its leftovers were gone', async () => {
    setup();
    const leaderFile = outFile('leader');
    const world = new Map<number, ProcessEntry & { ignoresTerm?: boolean }>();
    let leader = 0;
    const table = madeUpProcesses(world);
    const processes: ProcessTable = {
      ...table,
      list: () => {
        // First look, right at the hook's exit: one child of its group left, ignoring SIGTERM.
        if (leader === 0) {
          leader = Number(readFileSync(leaderFile, 'utf8'));
          world.set(900001, {
            pid: 900001,
            ppid: 1,
            pgrp: leader,
            session: leader,
            startTime: '100',
            comm: 'deaf',
            exited: false,
            ignoresTerm: true,
          });
        }
        return table.list();
      },
      kill: (pid, signal) => {
        // Then, in the next turn of the event loop after the first SIGTERM: it died, and both its pid and the
        // hook's were handed to unrelated processes, one of which made a session (and group) under the hook's id.
        if (signal === 'SIGTERM' && world.get(900001)?.startTime === '100') {
          setImmediate(() => {
            world.clear();
            world.set(leader, {
              pid: leader,
              ppid: 1,
              pgrp: leader,
              session: leader,
              startTime: '300',
              comm: 'other',
              exited: false,
            });
            world.set(900001, {
              pid: 900001,
              ppid: 1,
              pgrp: 5,
              session: 5,
              startTime: '301',
              comm: 'another',
              exited: false,
            });
          });
        }
        table.kill(pid, signal);
      },
    };
    const [result] = await runHooks(
      [{ match: '**', run: ['sh', '-c', 'echo $$ > "$1"', 'hook', leaderFile], timeoutSeconds: 30 }],
      ['a.conf'],
      options({ killGraceMs: 200, processes }),
    );
    expect(result).toMatchObject({ exitCode: 0, leftovers: [{ pid: 900001, command: 'deaf' }] });
    expect([...world.values()].map((entry) => entry.comm).sort()).toEqual(['another', 'other']);
  });
});
