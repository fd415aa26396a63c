// adv35: an instance larger by itself than server.maxResponseBytes, listed on every poll: what the log says of it.
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { createPassWorld, type PassWorld } from '../../test/helpers/pass-world.js';
import { textSink } from '../../test/helpers/text-sink.js';
import { createLogger } from '../lib/logger.js';
import { createSecretRegistry } from '../lib/secrets.js';

let world: PassWorld;
let log: ReturnType<typeof textSink>;

beforeEach(async () => {
  log = textSink();
  const logger = createLogger({ level: 'info', secrets: createSecretRegistry(), destination: log.stream });
  world = await createPassWorld({ name: 'adv35-too-large', maxResponseBytes: 64 * 1024, deps: { logger } });
});

afterEach(() => world.close());

const lines = () =>
  log
    .text()
    .split('\n')
    .filter((line) => line !== '')
    .map((line) => JSON.parse(line) as { level: string; msg: string; instanceId?: string; problem?: string });

describe('an instance too large to fetch, listed on every poll', () => {
  it('is told once at error, naming the limit, and the other instances are delivered', async () => {
    world.put({ id: 'cfg_mine', relative_filepath: 'mine.json' });
    world.put({ id: 'cfg_big', relative_filepath: 'big.json', content: { s: 'x'.repeat(100_000) } });
    await world.pass();
    // It stays queued at the service: every poll lists it again.
    for (let poll = 0; poll < 3; poll += 1) await world.pass({ mode: 'incremental' });
    // Before: 7 lines a poll at warn and error (six 'page too large', one 'too large to fetch'), 28 here.
    const said = lines().map((line) => `${line.level} ${line.msg}`);
    expect(said).toEqual(['error the service sent an instance this agent cannot accept']);
    expect(lines()[0]).toMatchObject({ instanceId: 'cfg_big' });
    expect(lines()[0]?.problem).toContain('server.maxResponseBytes');
    expect(await world.fileAt('mine.json')).toBe('{\n  "owner": "cfg_mine"\n}\n');
    expect(await world.exists('big.json')).toBe(false);
    expect(world.reports()).toEqual(['cfg_mine deployed/none', 'cfg_big queued/retrying']);
  });
});
