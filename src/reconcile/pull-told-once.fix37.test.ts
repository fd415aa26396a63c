// A service that withholds total_count (-1) or whose has_more runs past it on every poll is told once per process.
import { pino } from 'pino';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { createPassWorld, LIST, type PassWorld } from '../../test/helpers/pass-world.js';

let world: PassWorld;
/** The lines at warn and above, one JSON text each. */
let warnings: string[];

beforeEach(async () => {
  warnings = [];
  const logger = pino({ level: 'warn' }, { write: (line: string) => void warnings.push(line) });
  world = await createPassWorld({ name: 'fix37-told', deps: { logger } });
  for (const id of ['cfg_a', 'cfg_b', 'cfg_c']) world.put({ id });
});

afterEach(() => world.close());

const saying = (text: string) => warnings.filter((line) => line.includes(text)).length;
const WITHHELD = 'though asked for it (expand[]=total_count)';
const PAST = 'has_more is true past total_count';

describe('warnings about how the service answers its listings (fix37)', () => {
  it('a count withheld on every poll is told once per process, then at debug', async () => {
    world.fault({
      match: LIST,
      count: 1000,
      mode: 'rewrite',
      replace: [{ find: '"total_count":3', with: '"total_count":-1' }],
    });
    await world.pass({ mode: 'full' });
    for (let poll = 0; poll < 3; poll += 1) await world.pass({ mode: 'incremental' });
    await world.pass({ mode: 'full' });
    // Before: one warning each pass whose listing had such a page, for as long as the service withholds the count.
    expect(saying(WITHHELD)).toBe(1);
    expect(await world.fileAt('cfg_b.json')).toBe('{\n  "owner": "cfg_b"\n}\n');
    expect(world.reports()).toEqual(['cfg_a deployed/none', 'cfg_b deployed/none', 'cfg_c deployed/none']);
  });

  it('has_more true past the count on every poll is told once; every instance still synced', async () => {
    world.fault({
      match: LIST,
      count: 1000,
      mode: 'rewrite',
      replace: [{ find: '"has_more":false', with: '"has_more":true' }],
    });
    await world.pass({ mode: 'full' });
    for (let poll = 0; poll < 3; poll += 1) await world.pass({ mode: 'incremental' });
    await world.pass({ mode: 'full' });
    // Before: one warning each listing of each pass.
    expect(saying(PAST)).toBe(1);
    for (const id of ['cfg_a', 'cfg_b', 'cfg_c'])
      expect(await world.fileAt(`${id}.json`)).toBe(`{\n  "owner": "${id}"\n}\n`);
    expect(world.reports()).toEqual(['cfg_a deployed/none', 'cfg_b deployed/none', 'cfg_c deployed/none']);
  });
});
