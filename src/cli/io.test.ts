// A command's standard output that fails (a full disk, an I/O error, short writes, EAGAIN): never exit 0 for output not written.
import { closeSync, mkdtempSync, openSync, rmSync, writeFileSync } from 'node:fs';
import { createServer, type Server } from 'node:http';
import os from 'node:os';
import path from 'node:path';
import { PassThrough, Writable } from 'node:stream';
import { afterEach, describe, expect, it } from 'vitest';
import { main } from '../main.js';
import { ExitCode } from './exit-codes.js';
import {
  type CheckedOutput,
  type CommandIo,
  checkedOutput,
  type FdWriter,
  finishOutput,
  isFileLike,
  wholeLinesOutput,
} from './io.js';

const errno = (code: string) => Object.assign(new Error(`write ${code}`), { code });

/** A descriptor writer that takes at most `takes(call)` bytes per call, or fails as `takes` says. */
function fakeFd(takes: (call: number) => number | string): {
  write: FdWriter;
  written: () => string;
} {
  let text = '';
  let calls = 0;
  return {
    write: (_fd, buffer, offset, length, callback) => {
      const outcome = takes(calls++);
      setImmediate(() => {
        if (typeof outcome === 'string') return callback(errno(outcome), 0);
        const n = Math.min(outcome, length);
        text += buffer.subarray(offset, offset + n).toString();
        callback(null, n);
      });
    },
    written: () => text,
  };
}

function stderrBuffer(): { stream: PassThrough; text: () => string } {
  const stream = new PassThrough();
  let text = '';
  stream.on('data', (chunk: Buffer) => {
    text += chunk.toString();
  });
  return { stream, text: () => text };
}

const dirs: string[] = [];
const fds: number[] = [];
let server: Server | undefined;
afterEach(async () => {
  for (const fd of fds.splice(0)) closeSync(fd);
  for (const dir of dirs.splice(0)) rmSync(dir, { recursive: true, force: true });
  await new Promise((resolve) => (server === undefined ? resolve(undefined) : server.close(resolve)));
  server = undefined;
});

describe('checkedOutput of a file or character device', () => {
  const text = `${'{"a":1}'.repeat(50)}\n`;

  it('writes every byte across short writes (a disk filling up writes part of a chunk), and exits with the command’s code', async () => {
    const fd = fakeFd(() => 7);
    const output = checkedOutput(new PassThrough(), { fd: 99, fileLike: true, write: fd.write });
    output.stream.write(text);
    output.stream.write('second\n');
    const err = stderrBuffer();
    expect(await finishOutput(0, output, err.stream)).toBe(0);
    expect(fd.written()).toBe(`${text}second\n`);
    expect(err.text()).toBe('');
  });

  it('exits 74 instead of 0 when a write fails after part of the output (ENOSPC), and keeps a non-zero code', async () => {
    for (const [code, expected] of [
      [ExitCode.Converged, ExitCode.OutputFailed],
      [ExitCode.NotConverged, ExitCode.NotConverged],
      [ExitCode.Unreachable, ExitCode.Unreachable],
    ] as const) {
      const fd = fakeFd((call) => (call === 0 ? 100 : 'ENOSPC'));
      const output = checkedOutput(new PassThrough(), { fd: 99, fileLike: true, write: fd.write });
      output.stream.write(text);
      output.stream.write('more\n');
      const err = stderrBuffer();
      expect(await finishOutput(code, output, err.stream)).toBe(expected);
      expect(fd.written()).toBe(text.slice(0, 100));
      expect(err.text()).toBe(
        'config-agent: could not write the output to standard output: ENOSPC (no space left on device)\n',
      );
    }
  });

  it('exits 74 naming EIO when a write takes no bytes (0 written), instead of writing again for good', async () => {
    const fd = fakeFd((call) => (call > 1_000 ? 'ESPUN' : 0));
    const output = checkedOutput(new PassThrough(), { fd: 99, fileLike: true, write: fd.write });
    output.stream.write(text);
    const err = stderrBuffer();
    expect(await finishOutput(0, output, err.stream)).toBe(ExitCode.OutputFailed);
    expect(err.text()).toMatch(/^config-agent: could not write the output to standard output: EIO/);
  });

  it('waits out EAGAIN (a descriptor set non-blocking), and gives up after its patience instead of hanging', async () => {
    const busy = fakeFd((call) => (call < 3 ? 'EAGAIN' : 1000));
    const passes = checkedOutput(new PassThrough(), { fd: 99, fileLike: true, write: busy.write });
    passes.stream.write(text);
    expect(await finishOutput(0, passes, stderrBuffer().stream)).toBe(0);
    expect(busy.written()).toBe(text);

    const stuck = fakeFd(() => 'EAGAIN');
    const fails = checkedOutput(new PassThrough(), {
      fd: 99,
      fileLike: true,
      write: stuck.write,
      eagainPatienceMs: 50,
    });
    fails.stream.write(text);
    const err = stderrBuffer();
    expect(await finishOutput(0, fails, err.stream)).toBe(ExitCode.OutputFailed);
    expect(err.text()).toContain('EAGAIN');
  });

  it('tells a file and /dev/full from a pipe', () => {
    const dir = mkdtempSync(path.join(os.tmpdir(), 'config-agent-io-'));
    dirs.push(dir);
    const file = openSync(path.join(dir, 'out'), 'w');
    const full = openSync('/dev/full', 'w');
    fds.push(file, full);
    expect([isFileLike(file), isFileLike(full)]).toEqual([true, true]);
  });
});

describe('checkedOutput of a pipe, socket or terminal (Node’s stream)', () => {
  function failingStream(code: string): Writable {
    return new Writable({
      write(_chunk, _encoding, callback) {
        callback(errno(code));
      },
    });
  }

  it('exits 74 for an I/O error (a hung-up terminal: EIO), keeps the code for a reader that went away (EPIPE, ECONNRESET)', async () => {
    for (const [code, expected] of [
      ['EIO', ExitCode.OutputFailed],
      ['EPIPE', ExitCode.Converged],
      ['ECONNRESET', ExitCode.Converged],
    ] as const) {
      const output = checkedOutput(failingStream(code));
      output.stream.write('summary\n');
      const err = stderrBuffer();
      expect(await finishOutput(0, output, err.stream)).toBe(expected);
      expect(err.text() === '').toBe(expected === ExitCode.Converged);
    }
  });
});

describe('commands whose stdout is /dev/full (ENOSPC on every write)', () => {
  async function runWithFullStdout(argv: string[]): Promise<{ code: number; stderr: string }> {
    const fd = openSync('/dev/full', 'w');
    fds.push(fd);
    const output: CheckedOutput = checkedOutput(new PassThrough(), { fd });
    const err = stderrBuffer();
    const io: CommandIo = { stdout: output.stream, stderr: err.stream, env: {}, isTty: false };
    const code = await finishOutput(await main(argv, io, new PassThrough()), output, err.stream);
    return { code, stderr: err.text() };
  }

  it('--version, --help and status exit 74 and say why, without a stack trace', async () => {
    const dir = mkdtempSync(path.join(os.tmpdir(), 'config-agent-io-'));
    dirs.push(dir);
    const socketPath = path.join(dir, 'agent.sock');
    server = createServer((_request, response) => {
      response.writeHead(200, { 'content-type': 'application/json' });
      response.end(JSON.stringify({ deviceId: 'dvc_1', pendingReports: 0, managedFiles: [], errors: [] }));
    });
    await new Promise<void>((resolve) => server?.listen(socketPath, resolve));
    const configPath = path.join(dir, 'config.json');
    writeFileSync(
      configPath,
      JSON.stringify({
        deviceId: 'dvc_1',
        server: { baseUrl: 'https://configs.example.com' },
        rootDir: path.join(dir, 'root'),
        stateDir: path.join(dir, 'state'),
        socketPath,
      }),
    );
    for (const argv of [['--version'], ['--help'], ['status', '--json', '--config', configPath]]) {
      const { code, stderr } = await runWithFullStdout(argv);
      expect({ argv, code }).toEqual({ argv, code: ExitCode.OutputFailed });
      expect(stderr).toBe(
        'config-agent: could not write the output to standard output: ENOSPC (no space left on device)\n',
      );
    }
  });
});

describe('wholeLinesOutput (the logs on stderr, when it is a file)', () => {
  it('at a disk filling up: a line cut by it is ended before the next one, so every later line reads whole', () => {
    let file = '';
    let room = 10;
    const output = wholeLinesOutput(new PassThrough(), 2, {
      fileLike: true,
      writeSync: (_fd, buffer, offset, length) => {
        if (room === 0) throw errno('ENOSPC');
        const n = Math.min(room, length);
        file += buffer.subarray(offset, offset + n).toString();
        room -= n;
        return n;
      },
    });
    output.write('{"n":1}\n');
    output.write('{"n":2,"pad":"xxxx"}\n'); // cut after 2 bytes
    output.write('{"n":3}\n'); // lost: the disk is full
    room = 1000;
    output.write('{"n":4}\n');
    output.write('{"n":5}\n');
    const lines = file.split('\n');
    expect(lines).toEqual(['{"n":1}', '{"', '{"n":4}', '{"n":5}', '']);
  });

  it('a write that takes no bytes (0 written) drops that line instead of looping for good; later lines are whole', () => {
    let file = '';
    let zeroes = 0;
    const output = wholeLinesOutput(new PassThrough(), 2, {
      fileLike: true,
      writeSync: (_fd, buffer, offset, length) => {
        if (buffer.includes('"n":2')) {
          // Past 1,000 calls the loop is taken for one that never ends.
          if (++zeroes > 1_000) throw errno('ESPUN');
          return 0;
        }
        file += buffer.subarray(offset, offset + length).toString();
        return length;
      },
    });
    output.write('{"n":1}\n');
    output.write('{"n":2}\n');
    output.write('{"n":3}\n');
    expect(zeroes).toBe(1);
    expect(file.split('\n')).toEqual(['{"n":1}', '{"n":3}', '']);
  });

  it('leaves a pipe, socket or terminal to Node’s stream', () => {
    const target = new PassThrough();
    expect(wholeLinesOutput(target, 2, { fileLike: false })).toBe(target);
  });
});
