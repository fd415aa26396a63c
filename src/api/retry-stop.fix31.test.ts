// fix31: a stop (SIGINT, SIGTERM: compose aborts with the signal's name as the reason) met by a request of the retry
// layer goes up unchanged: never wrapped as `TypeError: non-error thrown: SIGINT` and logged as a failure.
import { afterEach, expect, it } from 'vitest';
import { createPassWorld, type PassWorld } from '../../test/helpers/pass-world.js';
import { textSink } from '../../test/helpers/text-sink.js';
import { createLogger } from '../lib/logger.js';
import { createSecretRegistry } from '../lib/secrets.js';
import { withRequestRetry } from './retry.js';

let world: PassWorld | undefined;

afterEach(async () => {
  await world?.close();
  world = undefined;
});

function capturedLogger() {
  const sink = textSink();
  return {
    logger: createLogger({ level: 'debug', secrets: createSecretRegistry(), destination: sink.stream }),
    sink,
  };
}

it('withRequestRetry rethrows the stop’s own reason when the request fails with it', async () => {
  const stop = new AbortController();
  const { logger, sink } = capturedLogger();
  const thrown = await withRequestRetry(
    'list',
    async () => {
      stop.abort('SIGINT');
      throw stop.signal.reason;
    },
    {
      retries: 2,
      baseDelayMs: 1,
      maxDelayMs: 1,
      clock: { now: () => 0, monotonic: () => 0, sleep: async () => undefined },
      random: () => 0.5,
      logger,
      signal: stop.signal,
    },
  ).catch((error: unknown) => error);
  expect(thrown).toBe('SIGINT');
  expect(sink.text()).not.toContain('non-error thrown');
});

it.each(['list', 'report'] as const)(
  'a pass whose %s request meets SIGINT ends with the stop; nothing logged as an error thrown',
  async (where) => {
    const stop = new AbortController();
    const { logger, sink } = capturedLogger();
    world = await createPassWorld({ name: 'fix31-stop', parent: '/dev/shm', open: false });
    world.put({ id: 'cfg_a' });
    await world.open({
      deps: { logger },
      settings: { requestRetries: 2 },
      wrapClient: (client) => ({
        ...client,
        listConfigInstances: async (...args) => {
          if (where !== 'list') return client.listConfigInstances(...args);
          stop.abort('SIGINT');
          throw stop.signal.reason;
        },
        reportConfigInstanceStatus: async () => {
          stop.abort('SIGINT');
          throw stop.signal.reason;
        },
      }),
    });
    const ended = await world.pass({ signal: stop.signal }).then(
      () => 'converged',
      (error: unknown) => error,
    );
    expect(ended).toBe('SIGINT');
    // The stop is said (info), never warned of as a failure: no warn or error line at all.
    expect(sink.text()).not.toMatch(/"level":"(warn|error|fatal)"/);
    expect(sink.text()).toContain('"stop":"SIGINT"');
    expect(sink.text()).not.toContain('non-error thrown');
    expect(where === 'list' || (await world.exists('cfg_a.json'))).toBe(true);
  },
);
