// Structured JSON logging (pino) with every known secret scrubbed from the bytes before they leave.
import { Writable } from 'node:stream';
import { type DestinationStream, type Logger, pino } from 'pino';
import { REDACTED, type SecretRegistry } from './secrets.js';

export type { Logger } from 'pino';

export type LogLevel = 'fatal' | 'error' | 'warn' | 'info' | 'debug' | 'trace' | 'silent';

/**
 * What may wait in the process for a log reader that stopped reading (journald stalled, a paused `| less`):
 * Node queues a pipe's or socket's writes without bound, and an error storm would grow the agent's memory with
 * it. Past this many queued bytes lines are dropped and counted; the count is logged once the reader drains.
 */
export const MAX_QUEUED_LOG_BYTES = 4 * 1024 * 1024;

/**
 * A stream that scrubs secrets from each chunk and forwards it to `target`, dropping lines while more than
 * `maxQueuedBytes` wait in `target` for their reader.
 */
export function scrubbingStream(
  secrets: SecretRegistry,
  target: NodeJS.WritableStream,
  maxQueuedBytes = MAX_QUEUED_LOG_BYTES,
): DestinationStream {
  const queued = (): number => (target as Partial<Writable>).writableLength ?? 0;
  let dropped = 0;
  let awaitingDrain = false;
  const reportDropped = (): void => {
    if (dropped === 0 || queued() > maxQueuedBytes) return;
    const line = {
      level: 'warn',
      time: new Date().toISOString(),
      pid: process.pid,
      name: 'config-agent',
      msg: 'log lines dropped while the log reader was not reading',
      droppedLines: dropped,
    };
    dropped = 0;
    target.write(`${JSON.stringify(line)}\n`);
  };
  return new Writable({
    write(chunk: Buffer | string, _encoding, callback) {
      if (queued() > maxQueuedBytes) {
        if (!awaitingDrain) {
          awaitingDrain = true;
          target.once('drain', () => {
            awaitingDrain = false;
            reportDropped();
          });
        }
        dropped += 1;
      } else {
        reportDropped();
        target.write(secrets.scrub(chunk.toString()));
      }
      callback();
    },
  });
}

export interface LoggerOptions {
  level: LogLevel;
  secrets: SecretRegistry;
  /** Defaults to stderr: stdout carries only a command's own output. */
  destination?: NodeJS.WritableStream;
  name?: string;
}

export function createLogger(options: LoggerOptions): Logger {
  return pino(
    {
      name: options.name ?? 'config-agent',
      level: options.level,
      base: { pid: process.pid },
      timestamp: pino.stdTimeFunctions.isoTime,
      redact: {
        paths: [
          'apiKey',
          '*.apiKey',
          'headers["x-api-key"]',
          'headers["X-API-Key"]',
          '*.headers["x-api-key"]',
          '*.headers["X-API-Key"]',
        ],
        censor: REDACTED,
      },
      formatters: { level: (label) => ({ level: label }) },
    },
    scrubbingStream(options.secrets, options.destination ?? process.stderr),
  );
}

export function silentLogger(): Logger {
  return pino({ level: 'silent' });
}
