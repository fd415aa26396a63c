// Structured JSON logging (pino) with every known secret scrubbed from the bytes before they leave.
import { Writable } from 'node:stream';
import { type DestinationStream, type Logger, pino } from 'pino';
import { REDACTED, type SecretRegistry } from './secrets.js';

export type { Logger } from 'pino';

export type LogLevel = 'fatal' | 'error' | 'warn' | 'info' | 'debug' | 'trace' | 'silent';

/** A stream that scrubs secrets from each chunk and forwards it to `target`. */
export function scrubbingStream(secrets: SecretRegistry, target: NodeJS.WritableStream): DestinationStream {
  return new Writable({
    write(chunk: Buffer | string, _encoding, callback) {
      target.write(secrets.scrub(chunk.toString()));
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
