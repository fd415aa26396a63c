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
const MAX_QUEUED_LOG_BYTES = 4 * 1024 * 1024;

/**
 * The longest log line written as it is: under journald's own cut (`LineMax=`, 48 KiB by default), past which a
 * line is split and no longer JSON. Text from the service reaches log lines (paths, status values, messages,
 * ids): a hostile service sending a status value of a megabyte had each pass log two lines of a megabyte.
 */
const MAX_LOG_LINE_CHARS = 32 * 1024;
/** In a line over MAX_LOG_LINE_CHARS: the longest string kept (a path of 4,095 bytes fits) and array kept. */
const SHOWN_LOG_STRING_CHARS = 4200;
const SHOWN_LOG_ARRAY_ITEMS = 64;
const SHOWN_LOG_DEPTH = 8;

/**
 * A line (without its newline) over MAX_LOG_LINE_CHARS made to fit: every string longer than SHOWN_LOG_STRING_CHARS is replaced by its
 * length, arrays keep their first SHOWN_LOG_ARRAY_ITEMS items, objects nested deeper than SHOWN_LOG_DEPTH are left
 * out; a line still too long (or not JSON) keeps only its level, time, pid, name and a note. Strings are left out
 * whole, never cut: a cut could leave part of a secret that the scrub of whole secrets would not catch.
 */
function boundLogLine(line: string): string {
  if (line.length <= MAX_LOG_LINE_CHARS) return line;
  let parsed: unknown;
  try {
    parsed = JSON.parse(line);
  } catch {
    parsed = undefined;
  }
  const note = `a log line of ${line.length} characters was made shorter (strings over ${SHOWN_LOG_STRING_CHARS} characters and arrays over ${SHOWN_LOG_ARRAY_ITEMS} items left out)`;
  if (typeof parsed === 'object' && parsed !== null && !Array.isArray(parsed)) {
    const bounded = { ...(shrinkLogValue(parsed, 0) as Record<string, unknown>), truncatedLine: note };
    const text = JSON.stringify(bounded);
    if (text.length <= MAX_LOG_LINE_CHARS) return text;
  }
  const record = (typeof parsed === 'object' && parsed !== null ? parsed : {}) as Record<string, unknown>;
  const kept: Record<string, unknown> = {};
  for (const field of ['level', 'time', 'pid', 'name', 'component']) {
    const value = record[field];
    if (typeof value === 'number' || (typeof value === 'string' && value.length <= 64)) kept[field] = value;
  }
  return JSON.stringify({ ...kept, msg: note });
}

function shrinkLogValue(value: unknown, depth: number): unknown {
  if (typeof value === 'string') {
    return value.length > SHOWN_LOG_STRING_CHARS ? `(${value.length} characters left out)` : value;
  }
  if (typeof value !== 'object' || value === null) return value;
  if (depth >= SHOWN_LOG_DEPTH) return '(nested too deep, left out)';
  if (Array.isArray(value)) {
    const shown = value.slice(0, SHOWN_LOG_ARRAY_ITEMS).map((item) => shrinkLogValue(item, depth + 1));
    if (value.length > SHOWN_LOG_ARRAY_ITEMS)
      shown.push(`(${value.length - SHOWN_LOG_ARRAY_ITEMS} more items left out)`);
    return shown;
  }
  const out: Record<string, unknown> = {};
  for (const [name, item] of Object.entries(value)) {
    const key = name.length > SHOWN_LOG_STRING_CHARS ? `(a key of ${name.length} characters)` : name;
    out[key] = shrinkLogValue(item, depth + 1);
  }
  return out;
}

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
        target.write(secrets.scrub(boundLines(chunk.toString())));
      }
      callback();
    },
  });
}

/** Each line of a chunk (pino writes one per call) bounded by boundLogLine. */
function boundLines(text: string): string {
  if (text.length <= MAX_LOG_LINE_CHARS) return text;
  return text
    .split(/(?<=\n)/)
    .map((line) => (line.endsWith('\n') ? `${boundLogLine(line.slice(0, -1))}\n` : boundLogLine(line)))
    .join('');
}

/**
 * One of the agent's own errors: a stable string `code` and a `retryable` flag (docs/architecture.md). They name
 * conditions an operator meets (a rejected key, an unreachable service, a full disk), whose stack, a dozen lines
 * of bundled chunk names in every journal line, says nothing to the operator.
 */
function isTypedError(value: unknown): boolean {
  if (typeof value !== 'object' || value === null) return false;
  const { code, retryable } = value as { code?: unknown; retryable?: unknown };
  return typeof code === 'string' && typeof retryable === 'boolean';
}

/** pino's `err` serializer, without the stack of the agent's own errors unless the level is debug or trace. */
function errSerializer(level: LogLevel): (error: unknown) => unknown {
  const withStacks = level === 'debug' || level === 'trace';
  return (error) => {
    const serialized: unknown = pino.stdSerializers.err(error as Error);
    if (withStacks || !isTypedError(error) || typeof serialized !== 'object' || serialized === null)
      return serialized;
    const { stack: _stack, ...rest } = serialized as Record<string, unknown>;
    return rest;
  };
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
      serializers: { err: errSerializer(options.level) },
    },
    scrubbingStream(options.secrets, options.destination ?? process.stderr),
  );
}

export function silentLogger(): Logger {
  return pino({ level: 'silent' });
}
