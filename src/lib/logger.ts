// Structured JSON logging (pino) with every known secret scrubbed from the bytes before they leave.
import { Writable } from 'node:stream';
import { type DestinationStream, type Logger, pino } from 'pino';

export type { Logger } from 'pino';

export type LogLevel = 'fatal' | 'error' | 'warn' | 'info' | 'debug' | 'trace' | 'silent';

export interface SecretRegistry {
  add(secret: string): void;
  scrub(text: string): string;
}

/** Secrets shorter than this are not scrubbed: replacing "a" everywhere would shred the log. */
const MIN_SECRET_LENGTH = 4;
export const REDACTED = '[REDACTED]';

export function createSecretRegistry(): SecretRegistry {
  const secrets = new Set<string>();
  return {
    add(secret) {
      if (secret.length >= MIN_SECRET_LENGTH) secrets.add(secret);
    },
    scrub(text) {
      let out = text;
      for (const secret of secrets) {
        if (out.includes(secret)) out = out.split(secret).join(REDACTED);
        // The key can also appear JSON-escaped or percent-encoded inside a logged string.
        const escaped = JSON.stringify(secret).slice(1, -1);
        if (escaped !== secret && out.includes(escaped)) out = out.split(escaped).join(REDACTED);
        const encoded = encodeURIComponent(secret);
        if (encoded !== secret && out.includes(encoded)) out = out.split(encoded).join(REDACTED);
      }
      return out;
    },
  };
}

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
