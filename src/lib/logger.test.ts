// The logger never lets a registered secret out: raw, JSON-escaped, percent-encoded, in errors and under known keys.
import { Writable } from 'node:stream';
import { pino } from 'pino';
import { describe, expect, it } from 'vitest';
import { AgentError } from './errors.js';
import { createLogger, type Logger, scrubbingStream } from './logger.js';
import { createSecretRegistry, REDACTED, type SecretRegistry } from './secrets.js';

const API_KEY = 'sk_live_logger_test_5f1c9a0b7e';
/** A key with characters that JSON escapes (`"` and `\`) and that a URL percent-encodes (`/`, `+`, `=`, space). */
const AWKWARD_KEY = 'k"ey\\with/odd+chars= and space';

/** Every form in which a secret could leave inside a JSON log line. */
function leakedForms(secret: string): string[] {
  return [
    secret,
    JSON.stringify(secret).slice(1, -1),
    encodeURIComponent(secret),
    // A percent-encoded key logged inside a JSON string: `%` needs no escaping, so the same bytes.
    JSON.stringify(encodeURIComponent(secret)).slice(1, -1),
  ];
}

/** A logger whose output is collected in memory; `lines()` parses each JSON line written so far. */
function capture(secrets: SecretRegistry): { logger: Logger; text: () => string; lines: () => unknown[] } {
  const chunks: string[] = [];
  const destination = new Writable({
    write(chunk: Buffer | string, _encoding, callback) {
      chunks.push(chunk.toString());
      callback();
    },
  });
  const logger = createLogger({ level: 'trace', secrets, destination });
  const text = () => chunks.join('');
  return {
    logger,
    text,
    lines: () =>
      text()
        .split('\n')
        .filter((line) => line !== '')
        .map((line) => JSON.parse(line) as unknown),
  };
}

function registryWith(...secrets: string[]): SecretRegistry {
  const registry = createSecretRegistry();
  for (const secret of secrets) registry.add(secret);
  return registry;
}

function expectNoLeak(output: string, secret: string): void {
  for (const form of leakedForms(secret)) expect(output).not.toContain(form);
}

describe('createLogger: secrets are scrubbed from every line', () => {
  it('in the message, the merge object (nested) and arrays', () => {
    const { logger, text, lines } = capture(registryWith(API_KEY));
    logger.info(`calling the service with key ${API_KEY}`);
    logger.warn({ request: { auth: { token: API_KEY }, list: ['a', API_KEY] } }, 'nested');
    logger.child({ component: 'client', key: API_KEY }).error('from a child logger');

    expectNoLeak(text(), API_KEY);
    const [message, nested, child] = lines() as Record<string, unknown>[];
    expect(message?.msg).toBe(`calling the service with key ${REDACTED}`);
    expect(nested).toMatchObject({ request: { auth: { token: REDACTED }, list: ['a', REDACTED] } });
    expect(child).toMatchObject({ component: 'client', key: REDACTED, msg: 'from a child logger' });
  });

  it("in an error's message and stack, and in its cause", () => {
    const { logger, text, lines } = capture(registryWith(API_KEY));
    const cause = new Error(`socket for ${API_KEY} closed`);
    const error = new Error(`request with X-API-Key ${API_KEY} failed`, { cause });
    expect(error.stack).toContain(API_KEY);
    logger.error({ err: error }, 'pull failed');
    logger.error(error);

    expectNoLeak(text(), API_KEY);
    const [withErr, bare] = lines() as Array<{ err?: { message: string; stack: string }; msg: string }>;
    // pino's error serializer appends the cause's message: both are scrubbed.
    expect(withErr?.err?.message).toBe(
      `request with X-API-Key ${REDACTED} failed: socket for ${REDACTED} closed`,
    );
    expect(withErr?.err?.stack).toContain(`X-API-Key ${REDACTED} failed`);
    expect(bare?.msg).toContain(REDACTED);
    expect(text()).toContain(`socket for ${REDACTED} closed`);
  });

  it('JSON-escaped: a key holding `"` and `\\` is caught in the escaped form the JSON line carries', () => {
    const { logger, text, lines } = capture(registryWith(AWKWARD_KEY));
    // Logged as a value the key is written escaped (`k\"ey\\with...`): the raw bytes never occur in the line.
    logger.info({ header: AWKWARD_KEY }, `message ${AWKWARD_KEY}`);
    logger.info({ wrapped: `prefix-${AWKWARD_KEY}-suffix` }, 'inside a longer string');

    expectNoLeak(text(), AWKWARD_KEY);
    const [first, second] = lines() as Record<string, unknown>[];
    expect(first).toMatchObject({ header: REDACTED, msg: `message ${REDACTED}` });
    expect(second).toMatchObject({ wrapped: `prefix-${REDACTED}-suffix` });
  });

  it('percent-encoded in a URL', () => {
    const { logger, text, lines } = capture(registryWith(AWKWARD_KEY));
    const url = `https://configs.example.com/v1/config_instances?api_key=${encodeURIComponent(AWKWARD_KEY)}&x=1`;
    expect(url).not.toContain(AWKWARD_KEY);
    logger.info({ url }, `GET ${url}`);

    expectNoLeak(text(), AWKWARD_KEY);
    const [line] = lines() as Record<string, unknown>[];
    expect(line?.url).toBe(`https://configs.example.com/v1/config_instances?api_key=${REDACTED}&x=1`);
  });

  it("under headers['x-api-key'] and apiKey, even a value the registry does not know", () => {
    const unregistered = 'sk_never_registered_0123456789';
    const { logger, text, lines } = capture(registryWith(API_KEY));
    logger.info({ headers: { 'x-api-key': unregistered, accept: 'application/json' } }, 'top level');
    logger.info({ req: { headers: { 'X-API-Key': unregistered } } }, 'one level down');
    logger.info({ apiKey: unregistered, config: { apiKey: unregistered } }, 'config');
    logger.info({ headers: { 'x-api-key': API_KEY } }, 'registered too');

    expectNoLeak(text(), unregistered);
    expectNoLeak(text(), API_KEY);
    const [top, nested, config, registered] = lines() as Record<string, unknown>[];
    expect(top).toMatchObject({ headers: { 'x-api-key': REDACTED, accept: 'application/json' } });
    expect(nested).toMatchObject({ req: { headers: { 'X-API-Key': REDACTED } } });
    expect(config).toMatchObject({ apiKey: REDACTED, config: { apiKey: REDACTED } });
    expect(registered).toMatchObject({ headers: { 'x-api-key': REDACTED } });
  });

  it('every secret of the registry, including one added after the logger was created', () => {
    const registry = registryWith(API_KEY);
    const { logger, text } = capture(registry);
    const rotated = 'sk_rotated_after_reload_42';
    registry.add(rotated);
    logger.info(`old ${API_KEY} new ${rotated}`);
    expectNoLeak(text(), API_KEY);
    expectNoLeak(text(), rotated);
    expect(text()).toContain(`old ${REDACTED} new ${REDACTED}`);
  });
});

describe('createSecretRegistry', () => {
  // Secrets under 4 characters are not registered (MIN_SECRET_LENGTH in logger.ts): scrubbing "on" from every
  // line would shred unrelated words, numbers and JSON keys, and the [REDACTED] marks would point at every spot
  // those characters occur. A key that short is guessable anyway, so hiding it would protect nothing.
  it('ignores secrets shorter than 4 characters; 4 is enough', () => {
    const registry = registryWith('', 'a', 'ab', 'abc', 'wxyz');
    expect(registry.scrub('a ab abc cab wxyz')).toBe(`a ab abc cab ${REDACTED}`);

    const { logger, text } = capture(registryWith('on'));
    logger.info({ status: 'online' }, 'connection on');
    expect(text()).toContain('"msg":"connection on"');
    expect(text()).toContain('"status":"online"');
  });

  it('scrubs every occurrence, and leaves text without a secret unchanged', () => {
    const registry = registryWith(API_KEY);
    expect(registry.scrub(`${API_KEY}${API_KEY} and ${API_KEY}`)).toBe(
      `${REDACTED}${REDACTED} and ${REDACTED}`,
    );
    expect(registry.scrub('nothing to hide here')).toBe('nothing to hide here');
  });
});

describe('scrubbingStream: a reader that stops reading', () => {
  /** A destination that takes nothing until `resume()`: what the agent's stderr is while journald stalls. */
  function stalledReader() {
    const taken: string[] = [];
    const pending: Array<() => void> = [];
    let reading = false;
    const destination = new Writable({
      highWaterMark: 1024,
      write(chunk: Buffer | string, _encoding, callback) {
        taken.push(chunk.toString());
        if (reading) callback();
        else pending.push(callback);
      },
    });
    const resume = () => {
      reading = true;
      for (const callback of pending.splice(0)) callback();
    };
    return { destination, taken, resume };
  }

  it('holds at most about the cap, drops the rest, and says how many once the reader is back', async () => {
    const { destination, taken, resume } = stalledReader();
    const cap = 64 * 1024;
    const stream = scrubbingStream(registryWith(API_KEY), destination, cap);
    const logger = pino({ level: 'info' }, stream);
    const line = 'x'.repeat(1000);
    for (let i = 0; i < 1000; i += 1) logger.info({ i }, line);
    await new Promise((resolve) => setImmediate(resolve));
    // Writable queues behind the first pending write; what it holds is what the reader has not taken.
    expect(destination.writableLength).toBeGreaterThan(cap);
    expect(destination.writableLength).toBeLessThan(cap + 2 * 1100);
    const kept = destination.writableLength;
    resume();
    await new Promise((resolve) => setImmediate(resolve));
    const lines = taken
      .join('')
      .split('\n')
      .filter((text) => text !== '')
      .map((text) => JSON.parse(text) as { i?: number; droppedLines?: number });
    const written = lines.filter((entry) => entry.i !== undefined);
    const notice = lines.find((entry) => entry.droppedLines !== undefined);
    expect(written.length + (notice?.droppedLines ?? 0)).toBe(1000);
    expect(notice?.droppedLines).toBeGreaterThan(900);
    expect(kept).toBeGreaterThan(0);
    // The lines after the notice are logged again as usual.
    logger.info({ i: 1000 }, 'after');
    await new Promise((resolve) => setImmediate(resolve));
    expect(taken.join('')).toContain('"i":1000');
  });

  it('drops nothing while the reader keeps up', async () => {
    const { destination, taken, resume } = stalledReader();
    resume();
    const logger = pino({ level: 'info' }, scrubbingStream(registryWith(API_KEY), destination, 4096));
    for (let i = 0; i < 500; i += 1) logger.info({ i }, 'x'.repeat(200));
    await new Promise((resolve) => setImmediate(resolve));
    expect(
      taken
        .join('')
        .split('\n')
        .filter((text) => text !== ''),
    ).toHaveLength(500);
    expect(taken.join('')).not.toContain('droppedLines');
  });
});

describe('scrubbingStream: a line longer than journald takes', () => {
  it('leaves out strings over 4,200 characters and arrays over 64 items, keeps the rest, scrubs the key', () => {
    const { logger, text, lines } = capture(registryWith(API_KEY));
    const status = `${'s'.repeat(1_000_000)}${API_KEY}`;
    const path = `app/${'p'.repeat(4_000)}.json`;
    const paths = Array.from({ length: 1_000 }, (_, n) => `dir/${n}.json`);
    logger.warn(
      { instanceId: 'cfg_1', path, target_status: status, paths },
      `instance skipped: its target_status ${JSON.stringify(status)} is not a value this agent knows`,
    );
    logger.info({ path }, 'an ordinary line');
    const written = text()
      .split('\n')
      .filter((line) => line !== '');
    expect(written).toHaveLength(2);
    for (const line of written) expect(line.length).toBeLessThanOrEqual(32 * 1024);
    const [bounded, ordinary] = lines() as Record<string, unknown>[];
    expect(bounded).toMatchObject({
      level: 'warn',
      instanceId: 'cfg_1',
      path,
      target_status: '(1000030 characters left out)',
      msg: '(1000100 characters left out)',
    });
    const shownPaths = (bounded?.paths ?? []) as unknown[];
    expect(shownPaths.length).toBe(65);
    expect(shownPaths[64]).toBe('(936 more items left out)');
    expect(bounded?.truncatedLine).toContain('was made shorter');
    expect(ordinary).toMatchObject({ level: 'info', path, msg: 'an ordinary line' });
    expect(ordinary?.truncatedLine).toBeUndefined();
    expectNoLeak(text(), API_KEY);
  });

  it('a line that does not fit even so keeps its level, time and a note', () => {
    const { logger, lines } = capture(registryWith(API_KEY));
    // Ten fields of 4,000 characters: each kept by the first rule, the line still over the cap.
    const fields = Object.fromEntries(Array.from({ length: 10 }, (_, n) => [`f${n}`, 'v'.repeat(4_000)]));
    logger.error(fields, 'many long fields');
    const [line] = lines() as Record<string, unknown>[];
    expect(line).toMatchObject({ level: 'error', name: 'config-agent' });
    expect(typeof line?.time).toBe('string');
    expect(line?.msg).toContain('was made shorter');
    expect(line?.f0).toBeUndefined();
  });
});

describe("createLogger: the agent's own errors carry no stack below debug (ux23: a 401 logged 12 lines of chunk names per pass)", () => {
  const logged = (level: 'info' | 'debug', error: Error) => {
    const chunks: string[] = [];
    const destination = new Writable({
      write(chunk: Buffer | string, _encoding, callback) {
        chunks.push(chunk.toString());
        callback();
      },
    });
    createLogger({ level, secrets: createSecretRegistry(), destination }).warn({ err: error }, 'failed');
    return (JSON.parse(chunks.join('')) as { err: Record<string, unknown> }).err;
  };
  const typed = () =>
    new AgentError('network_error', 'GET /v1/config_instances failed: network error (ECONNREFUSED)', {
      retryable: true,
    });

  it('an AgentError at info: type, message, code and retryable, no stack', () => {
    const err = logged('info', typed());
    expect(err).toEqual({
      type: 'AgentError',
      message: 'GET /v1/config_instances failed: network error (ECONNREFUSED)',
      code: 'network_error',
      retryable: true,
      name: 'AgentError',
    });
  });

  it('the same at debug keeps its stack; an unexpected error (no code and retryable) keeps it at info', () => {
    expect(logged('debug', typed()).stack).toMatch(/^AgentError: GET \/v1\/config_instances failed/);
    expect(logged('info', new TypeError('x is undefined')).stack).toMatch(
      /^TypeError: x is undefined\n {4}at /,
    );
  });
});
