// The streams and environment a command runs with (process's in main.ts, buffers in tests), and the check that a
// command's standard output was written whole.
import { fstatSync, write as writeFd } from 'node:fs';
import { Writable } from 'node:stream';
import { isatty } from 'node:tty';
import { errnoCode, errorMessage } from '../lib/errors.js';
import { ExitCode } from './exit-codes.js';

export interface CommandIo {
  stdout: NodeJS.WritableStream;
  stderr: NodeJS.WritableStream;
  env: NodeJS.ProcessEnv;
  /** Whether stdout is a terminal (human output) rather than a pipe. */
  isTty: boolean;
}

/**
 * A reader that went away (`| head -c 100`, a closed socket): it read as much as it wanted, so the command keeps
 * its exit code, as every Unix tool does.
 */
const READER_GONE = new Set(['EPIPE', 'ECONNRESET']);

/** How long a write to a descriptor set non-blocking (`EAGAIN`) is tried again before the output counts as lost. */
export const EAGAIN_PATIENCE_MS = 10_000;
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
 */
export function isFileLike(fd: number): boolean {
  try {
    const stat = fstatSync(fd);
    return stat.isFile() || (stat.isCharacterDevice() && !isatty(fd));
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
  if (fd !== undefined && (options.fileLike ?? isFileLike(fd))) {
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
            if (error === null) {
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
