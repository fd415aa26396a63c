// adv35: a service that ignores the listing's device filter (the fleet's whole listing): what the agent logs of the
// other devices' instances, pass after pass, and that it acts on none of them.
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { createPassWorld, type PassWorld } from '../../test/helpers/pass-world.js';
import { textSink } from '../../test/helpers/text-sink.js';
import type { ServiceClient } from '../api/client.js';
import { createLogger } from '../lib/logger.js';
import { createSecretRegistry } from '../lib/secrets.js';

let world: PassWorld;
let log: ReturnType<typeof textSink>;

/** The device filter dropped from every page the pager asks for, as a service with a broken filter would. */
const leaky = (client: ServiceClient): ServiceClient => ({
  ...client,
  listConfigInstancePage: ({ device_id: _ignored, ...filters } = {}, page) =>
    client.listConfigInstancePage(filters, page),
});

beforeEach(async () => {
  log = textSink();
  const logger = createLogger({ level: 'info', secrets: createSecretRegistry(), destination: log.stream });
  world = await createPassWorld({ name: 'adv35-foreign', deps: { logger }, wrapClient: leaky });
});

afterEach(() => world.close());

/** The log lines (info and above) about other devices' instances. */
const foreignLines = () =>
  log
    .text()
    .split('\n')
    .filter((line) => line.includes('of another device'))
    .map((line) => JSON.parse(line) as { level: string; count: number; instanceIds: string[]; msg: string });

describe('a listing of the whole fleet', () => {
  it('is told in one line, once, and nothing of another device is written or reported', async () => {
    world.put({ id: 'cfg_mine', relative_filepath: 'mine.json' });
    for (let i = 0; i < 30; i += 1) {
      world.put({
        id: `cfg_o${String(i).padStart(2, '0')}`,
        device_id: 'dvc_other',
        relative_filepath: `o${i}.json`,
      });
    }
    // A poll lists its queries one by one (a full pull's one wide listing keeps only what its queries match).
    for (let poll = 0; poll < 3; poll += 1) await world.pass({ mode: 'incremental' });
    // Before: 30 error lines a poll (one per instance), 90 here, for as long as the service lists them.
    const lines = foreignLines();
    expect(lines).toHaveLength(1);
    expect(lines[0]).toMatchObject({ level: 'error', count: 30 });
    expect(lines[0]?.msg).toBe('service returned 30 instance(s) of another device: ignored');
    expect(lines[0]?.instanceIds).toHaveLength(10);
    expect(await world.fileAt('mine.json')).toBe('{\n  "owner": "cfg_mine"\n}\n');
    expect(await world.exists('o0.json')).toBe(false);
    expect(world.reports()).toEqual(['cfg_mine deployed/none']);
  });

  it('is told again when what the service sends of other devices changes', async () => {
    world.put({ id: 'cfg_mine', relative_filepath: 'mine.json' });
    world.put({ id: 'cfg_o1', device_id: 'dvc_other', relative_filepath: 'o1.json' });
    await world.pass({ mode: 'incremental' });
    await world.pass({ mode: 'incremental' });
    world.put({ id: 'cfg_o2', device_id: 'dvc_other', relative_filepath: 'o2.json' });
    await world.pass({ mode: 'incremental' });
    expect(foreignLines().map((line) => `${line.level} ${line.count}`)).toEqual(['error 1', 'error 2']);
    expect(world.reports()).toEqual(['cfg_mine deployed/none']);
  });
});
