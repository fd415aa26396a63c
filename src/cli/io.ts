// The streams and environment a command runs with (process's in main.ts, buffers in tests), and the check that a
// command's standard output was written whole.
import { fstatSync, write as writeFd, writeSync } from 'node:fs';
import { Writable } from 'node:stream';
import { errnoCode, errorMessage } from '../lib/errors.js';
import { ExitCode } from './exit-codes.js';

export interface CommandIo {
  stdout: NodeJS.WritableStream;
  stderr: NodeJS.WritableStream;
  env: NodeJS.ProcessEnv;
  /** Whether stdout is a terminal (human output) rather than a pipe. */
  isTty: boolean;
  /**
   * Tests only (main.ts never sets it): the first wait of `--once`'s in-pass request retries, in ms, instead of
   * the production 500 ms (reconcile/pass.ts), so that an in-process `--once` against an unreachable service does
   * not hold a test worker its retries' real waits (jittered: ~0.45 s a run measured). Count and doubling unchanged.
   */
  requestRetryBaseMs?: number;
}

/**
 * A reader that went away (`| head -c 100`, a closed socket): it read as much as it wanted, so the command keeps
 * its exit code, as every Unix tool does.
 */
const READER_GONE = new Set(['EPIPE', 'ECONNRESET']);

/** How long a write to a descriptor set non-blocking (`EAGAIN`) is tried again before the output counts as lost. */
const EAGAIN_PATIENCE_MS = 10_000;
const EAGAIN_RETRY_MS = 10;

/** Standard output as a command sees it, and whether what it wrote there was written. */
export interface CheckedOutput {
  stream: NodeJS.WritableStream;
  /** Resolves once everything written so far is with the kernel or has failed; never rejects. */
  flush(): Promise<void>;
  /** Why some output was not written (a reader that went away aside), or undefined. */
  failure(): string | undefined;
}

/**
 * A regular file or a character device that is not a terminal (`/dev/full`, a hung-up terminal): Node writes
 * those with one write(2) per chunk. Pipes, sockets and terminals go through libuv, which writes every byte.
 * `stream`: Node's stream on `fd`, which knows whether it is a terminal (node:tty would load node:net).
 */
export function isFileLike(fd: number, stream?: NodeJS.WritableStream): boolean {
  try {
    const stat = fstatSync(fd);
    return (
      stat.isFile() ||
      (stat.isCharacterDevice() && (stream as { isTTY?: boolean } | undefined)?.isTTY !== true)
    );
  } catch {
    return false;
  }
}

export type FdWriter = (
  fd: number,
  buffer: Buffer,
  offset: number,
  length: number,
  callback: (error: NodeJS.ErrnoException | null, written: number) => void,
) => void;

export interface CheckedOutputOptions {
  /** The descriptor behind `target`: a file-like one is written here. */
  fd?: number;
  /** Whether `fd` is file-like, when known (tests); else asked with `isFileLike`. */
  fileLike?: boolean;
  /** Injected in tests. */
  write?: FdWriter;
  eagainPatienceMs?: number;
}

/**
 * Wraps a command's standard output so that a failed write is known. A file or character device is written here,
 * every byte (Node's own stream makes one write(2) per chunk and drops what a short write left, as on a disk
 * that fills up mid-way: the output was cut short without an error); a pipe, socket or terminal goes through
 * Node's stream, whose errors are recorded.
 */
export function checkedOutput(
  target: NodeJS.WritableStream,
  options: CheckedOutputOptions = {},
): CheckedOutput {
  let failure: string | undefined;
  const record = (error: unknown): void => {
    const code = errnoCode(error);
    if (code !== undefined && READER_GONE.has(code)) return;
    failure ??= describeWriteError(error);
  };

  const fd = options.fd;
  if (fd !== undefined && (options.fileLike ?? isFileLike(fd, target))) {
    const write = options.write ?? writeFd;
    const patience = options.eagainPatienceMs ?? EAGAIN_PATIENCE_MS;
    const stream = new Writable({
      write(chunk: Buffer, _encoding, callback) {
        if (failure !== undefined) {
          callback();
          return;
        }
        let offset = 0;
        let waited = 0;
        const next = (): void => {
          if (offset >= chunk.length) {
            callback();
            return;
          }
          write(fd, chunk, offset, chunk.length - offset, (error, written) => {
            if (error === null && written === 0) {
              // A write that takes no bytes (a FUSE filesystem may answer 0): retried, it looped for good.
              record(Object.assign(new Error('write took no bytes'), { code: 'EIO' }));
              callback();
            } else if (error === null) {
              offset += written;
              next();
            } else if (errnoCode(error) === 'EAGAIN' && waited < patience) {
              waited += EAGAIN_RETRY_MS;
              setTimeout(next, EAGAIN_RETRY_MS);
            } else {
              record(error);
              // Later chunks are dropped, not tried: the output is already incomplete.
              callback();
            }
          });
        };
        next();
      },
    });
    return {
      stream,
      flush: () => new Promise((resolve) => stream.write('', () => resolve())),
      failure: () => failure,
    };
  }

  target.on('error', record);
  return {
    stream: target,
    flush: () =>
      new Promise((resolve) => {
        target.write('', (error?: Error | null) => {
          if (error) record(error);
          resolve();
        });
      }),
    failure: () => failure,
  };
}

/**
 * stderr (the logs) when it is a file or character device: every byte of each line written, synchronously as
 * Node's own stream does (the last lines before an exit are not lost). A write that fails (a full disk) drops
 * the rest of that line and the agent goes on; the next line then starts on a line of its own. With Node's
 * stream a short write at a disk filling up left a line cut, and the next line was glued to it once space came
 * back: two lines no JSON reader could read. A pipe, socket or terminal is returned as it is.
 */
export function wholeLinesOutput(
  target: NodeJS.WritableStream,
  fd: number,
  options: {
    fileLike?: boolean;
    writeSync?: (fd: number, buffer: Buffer, offset: number, length: number) => number;
  } = {},
): NodeJS.WritableStream {
  if (!(options.fileLike ?? isFileLike(fd, target))) return target;
  const write = options.writeSync ?? writeSync;
  let cut = false;
  return new Writable({
    write(chunk: Buffer, _encoding, callback) {
      const data = cut ? Buffer.concat([Buffer.from('\n'), chunk]) : chunk;
      let offset = 0;
      try {
        while (offset < data.length) {
          const n = write(fd, data, offset, data.length - offset);
          // A write that takes no bytes (a FUSE filesystem may answer 0) would loop for good, the event loop held.
          if (n === 0) break;
          offset += n;
        }
      } catch {
        // Best effort, as every log write: the line is lost, later ones are tried.
      }
      cut = offset > 0 && offset < data.length ? data[offset - 1] !== 0x0a : cut && offset === 0;
      callback();
    },
  });
}

function describeWriteError(error: unknown): string {
  const code = errnoCode(error);
  const meanings: Record<string, string> = {
    ENOSPC: 'no space left on device',
    EDQUOT: 'disk quota exceeded',
    EFBIG: 'file too large',
    EIO: 'input/output error',
    EAGAIN: 'a non-blocking descriptor took nothing for as long as it was waited on',
  };
  const meaning = code === undefined ? undefined : meanings[code];
  return meaning === undefined ? errorMessage(error) : `${code} (${meaning})`;
}

/**
 * The exit code once the output is flushed: a command that would exit 0 but could not write its output exits
 * 74 (`ExitCode.OutputFailed`) and says why on stderr; any other code stays (it already tells that something is
 * wrong, and what). A reader that went away (EPIPE) changes nothing.
 */
export async function finishOutput(
  code: number,
  output: CheckedOutput,
  stderr: NodeJS.WritableStream,
): Promise<number> {
  await output.flush();
  const failure = output.failure();
  if (failure === undefined) return code;
  stderr.write(`config-agent: could not write the output to standard output: ${failure}\n`);
  return code === ExitCode.Converged ? ExitCode.OutputFailed : code;
}
