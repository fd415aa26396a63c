// dist/main.cjs, the packaged program's entry (packaging/bundle.mjs): what it answers itself, what reaches main.js.
import { spawnSync } from 'node:child_process';
import { closeSync, openSync } from 'node:fs';
import { mkdir, mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { frontDoor, installedPackageJson } from '../../packaging/bundle.mjs';

// biome-ignore lint/suspicious/noTemplateCurlyInString: a help text that would break a template literal, on purpose
const HELP = 'config-agent: a stand-in help text\n  with `backquotes`, ${braces}, \\ and "quotes"\n';

let dir: string;
beforeEach(async () => {
  dir = await mkdtemp(path.join(os.tmpdir(), 'config-agent-front-door-'));
  await mkdir(path.join(dir, 'dist'));
  await writeFile(path.join(dir, 'dist', 'main.cjs'), frontDoor(HELP));
  // A stand-in main.js: what runProcess() was given, as main.js would see it.
  await writeFile(
    path.join(dir, 'dist', 'main.js'),
    'export function runProcess() { process.stdout.write(JSON.stringify({ ran: process.argv.slice(2) })); process.exitCode = 3; }\n',
  );
  await writeFile(path.join(dir, 'package.json'), installedPackageJson('9.8.7'));
});
afterEach(async () => {
  await rm(dir, { recursive: true, force: true });
});

function run(args: string[]) {
  const result = spawnSync(process.execPath, [path.join(dir, 'dist', 'main.cjs'), ...args], {
    env: { PATH: process.env.PATH },
    encoding: 'utf8',
    timeout: 30_000,
  });
  return { stdout: result.stdout, stderr: result.stderr, status: result.status };
}

describe('main.cjs', () => {
  it('prints the help text main.js printed at build time for --help, -h and help, and exits 0', () => {
    for (const args of [['--help'], ['-h'], ['help']]) {
      expect(run(args), args.join(' ')).toEqual({ stdout: HELP, stderr: '', status: 0 });
    }
  });

  it('prints the version from ../package.json for --version', () => {
    expect(run(['--version'])).toEqual({ stdout: 'config-agent 9.8.7\n', stderr: '', status: 0 });
  });

  it('hands every other command line to main.js unchanged, and exits with its code', () => {
    for (const args of [
      [],
      ['--once'],
      ['--help', '--once'],
      ['--version', 'x'],
      ['help', 'status'],
      ['--config', '/etc/a b.json'],
      ['--HELP'],
    ]) {
      expect(run(args), args.join(' ')).toEqual({
        stdout: JSON.stringify({ ran: args }),
        stderr: '',
        status: 3,
      });
    }
  });

  it('hands --version to main.js when ../package.json cannot be read, so main.js reports it', async () => {
    await rm(path.join(dir, 'package.json'));
    expect(run(['--version'])).toEqual({
      stdout: JSON.stringify({ ran: ['--version'] }),
      stderr: '',
      status: 3,
    });
  });

  it('exits 1 with the error when main.js cannot be imported (a half-upgraded install)', async () => {
    await rm(path.join(dir, 'dist', 'main.js'));
    const { stdout, stderr, status } = run(['--once']);
    expect({ stdout, status }).toEqual({ stdout: '', status: 1 });
    expect(stderr).toMatch(/^config-agent: unexpected error: .*ERR_MODULE_NOT_FOUND|Cannot find module/s);
  });

  it("opens no inspector on a SIGUSR1 before main.js's own listener is there (while its modules load)", async () => {
    // A stand-in main.js with no listener of its own, as main.ts is until its first line runs: it signals
    // itself and watches for Node's inspector (127.0.0.1:9229, no authentication) for up to 1 s.
    await writeFile(
      path.join(dir, 'dist', 'main.js'),
      [
        "import inspector from 'node:inspector';",
        'export function runProcess() {',
        "  process.kill(process.pid, 'SIGUSR1');",
        '  let turns = 0;',
        '  const timer = setInterval(() => {',
        '    const url = inspector.url();',
        '    if (url === undefined && ++turns < 100) return;',
        '    clearInterval(timer);',
        '    inspector.close();',
        '    process.stdout.write(JSON.stringify({ inspector: url !== undefined }));',
        '  }, 10);',
        '}',
        '',
      ].join('\n'),
    );
    const { stdout, status } = run(['--once']);
    // Before: {"inspector":true} and "Debugger listening on ws://127.0.0.1:9229/..." on stderr.
    expect({ stdout, status }).toEqual({ stdout: JSON.stringify({ inspector: false }), status: 0 });
  });

  it("survives a SIGHUP before main.js's own listener is there for the daemon's command line; the other commands keep Node's default", async () => {
    // A stand-in main.js with no listener of its own, as main.ts is until its first line runs. Before: the
    // daemon died of the SIGHUP, which systemd counts as a clean exit and never restarts (`systemctl restart
    // config-agent && systemctl reload config-agent` left the unit inactive with Result=success).
    await writeFile(
      path.join(dir, 'dist', 'main.js'),
      [
        'export function runProcess() {',
        "  process.kill(process.pid, 'SIGHUP');",
        "  setTimeout(() => process.stdout.write('alive'), 50);",
        '}',
        '',
      ].join('\n'),
    );
    const signalOf = (args: string[]) => {
      const result = spawnSync(process.execPath, [path.join(dir, 'dist', 'main.cjs'), ...args], {
        env: { PATH: process.env.PATH },
        encoding: 'utf8',
        timeout: 30_000,
      });
      return { stdout: result.stdout, status: result.status, signal: result.signal };
    };
    for (const daemon of [[], ['--config', '/etc/config-agent/config.json'], ['-c=x.json']]) {
      expect(signalOf(daemon)).toEqual({ stdout: 'alive', status: 0, signal: null });
    }
    for (const other of [['--once'], ['status'], ['sync', '--config', 'x.json']]) {
      expect(signalOf(other)).toEqual({ stdout: '', status: null, signal: 'SIGHUP' });
    }
  });

  describe('with an agent bundle', () => {
    const AGENT = 'agent-0123456789AB.cjs';
    beforeEach(async () => {
      await writeFile(path.join(dir, 'dist', 'main.cjs'), frontDoor(HELP, AGENT));
      // A stand-in loader: which bundle it was asked to run, for which command line.
      await writeFile(
        path.join(dir, 'dist', 'agent-loader.cjs'),
        "exports.runAgentBundle = (file) => { process.stdout.write(JSON.stringify({ agent: require('node:path').basename(file), ran: process.argv.slice(2) })); process.exitCode = 4; };\n",
      );
    });

    it('runs the command lines with --once through the agent loader', () => {
      for (const args of [['--once'], ['--once', '--dry-run', '--config', '/c.json'], ['--help', '--once']]) {
        expect(run(args), args.join(' ')).toEqual({
          stdout: JSON.stringify({ agent: AGENT, ran: args }),
          stderr: '',
          status: 4,
        });
      }
    });

    it('answers --help and --version itself and hands the other commands, the daemon too, to main.js', () => {
      expect(run(['--help'])).toEqual({ stdout: HELP, stderr: '', status: 0 });
      expect(run(['--version'])).toEqual({ stdout: 'config-agent 9.8.7\n', stderr: '', status: 0 });
      for (const args of [
        ['status'],
        ['sync'],
        ['--config', '/c.json', 'status'],
        ['doctor'],
        ['--version', 'x'],
      ]) {
        expect(run(args), args.join(' ')).toEqual({
          stdout: JSON.stringify({ ran: args }),
          stderr: '',
          status: 3,
        });
      }
    });

    it('exits 1 with the error when the agent loader is missing (a half-upgraded install)', async () => {
      await rm(path.join(dir, 'dist', 'agent-loader.cjs'));
      const { stdout, stderr, status } = run(['--once']);
      expect({ stdout, status }).toEqual({ stdout: '', status: 1 });
      expect(stderr).toMatch(/^config-agent: unexpected error: .*Cannot find module/s);
    });
  });

  describe('output it could not write (as main.js: src/cli/io.ts)', () => {
    function runTo(args: string[], file: string, prefix: string[] = []) {
      const out = openSync(file, 'w');
      try {
        const command = [...prefix, process.execPath, path.join(dir, 'dist', 'main.cjs'), ...args];
        const result = spawnSync(command[0]!, command.slice(1), {
          env: { PATH: process.env.PATH },
          encoding: 'utf8',
          stdio: ['ignore', out, 'pipe'],
          timeout: 30_000,
        });
        return { stderr: result.stderr, status: result.status };
      } finally {
        closeSync(out);
      }
    }

    it('exits 74 with one line on stderr when stdout is a full device, for --help and --version', () => {
      for (const args of [['--help'], ['--version']]) {
        expect(runTo(args, '/dev/full'), args.join(' ')).toEqual({
          stderr:
            'config-agent: could not write the output to standard output: ENOSPC (no space left on device)\n',
          status: 74,
        });
      }
    });

    it('writes what fits and exits 74 when the file size limit cuts the help text short (EFBIG)', async () => {
      const file = path.join(dir, 'help.txt');
      const result = runTo(['--help'], file, ['prlimit', '--fsize=20']);
      expect(result).toEqual({
        stderr: 'config-agent: could not write the output to standard output: EFBIG (file too large)\n',
        status: 74,
      });
      expect(await readFile(file, 'utf8')).toBe(HELP.slice(0, 20));
    });

    it('keeps exit 0 when the reader went away (EPIPE)', () => {
      const main = path.join(dir, 'dist', 'main.cjs');
      // The reader closes its end at once; node takes tens of ms to start, so its write meets EPIPE.
      const result = spawnSync(
        'bash',
        [
          '-c',
          `exec 4>&1; { "$0" "$1" --help 2>&4; echo "rc=$?" >&4; } | { exec 0<&-; }`,
          process.execPath,
          main,
        ],
        { env: { PATH: process.env.PATH }, encoding: 'utf8', timeout: 30_000 },
      );
      expect({ stdout: result.stdout, status: result.status }).toEqual({ stdout: 'rc=0\n', status: 0 });
    });
  });
});
