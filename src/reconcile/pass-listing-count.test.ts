// list21: a listing whose total_count is -1 though asked for (expand[]=total_count) against runPass: no file is
// removed and no record forgotten on its strength; a service that sends the count still has files retired.
import { pino } from 'pino';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { createPassWorld, LIST, type PassWorld } from '../../test/helpers/pass-world.js';

const T0 = '2026-01-01T00:00:00.000Z';
const T1 = '2026-02-01T00:00:00.000Z';
const WITHHELD = 'though asked for it (expand[]=total_count)';

let world: PassWorld;
/** The warnings the agent logged, one JSON line each. */
let warnings: string[];

beforeEach(async () => {
  warnings = [];
  const logger = pino({ level: 'warn' }, { write: (line: string) => void warnings.push(line) });
  world = await createPassWorld({
    name: 'list21',
    deps: { logger },
    maxResponseBytes: 1 << 20,
  });
  pageByFour();
});

afterEach(() => world.close());

/**
 * The service pages by 4 (a `paging` fault with a limit, applying together with each test's own faults), so
 * that 3 instances put the page boundary where 99 did under the agent's page of 100: each page is cut, counted
 * and announced (has_more, total_count) as a page of 100 would be, for 25 times fewer files written.
 */
const PAGE = 4;
function pageByFour(): void {
  world.fault({ match: LIST, count: 100_000, mode: 'paging', limit: PAGE });
}
/** The test's own faults gone, the service still paging by 4. */
function clearFaults(): void {
  world.server.state.clearFaults();
  pageByFour();
}
/** The instances that fill a page up to the one after them. */
function fillers(): void {
  for (let i = 0; i < PAGE - 1; i += 1) world.put({ id: `a_${String(i).padStart(3, '0')}` });
}

const withheldWarnings = () => warnings.filter((line) => line.includes(WITHHELD)).length;

/** 3 instances before b_x (a page of 4 ends on b_x), b_x at moved.json having left shared.json (still there). */
async function movedInstance(): Promise<void> {
  fillers();
  world.put({ id: 'b_x', relative_filepath: 'shared.json', updated_at: T0 });
  world.put({ id: 'z_z' });
  expect((await world.pass()).converged).toBe(true);
  expect(await world.fileAt('shared.json')).toBe('{\n  "owner": "b_x"\n}\n');
  const x = world.server.state.instances.get('b_x')!;
  world.server.state.instances.set('b_x', { ...x, relative_filepath: 'moved.json', updated_at: T1 });
  // The pass that sees the move writes the new path; the old one is retired by the full pass after it.
  await world.pass();
  expect(await world.fileAt('moved.json')).toBe('{\n  "owner": "b_x"\n}\n');
  expect(await world.exists('shared.json')).toBe(true);
}

describe('a listing whose total_count is -1 though asked for it', () => {
  // The service ends the listing after its first page and withholds the count that would tell it: the file of
  // c_w (on the page never sent, deployed at the service) was deleted, since b_x (retired, its removal not yet
  // recorded by the service) was still listed at its path and the listing looked complete.
  it('removes no file on the strength of it', async () => {
    fillers();
    world.put({ id: 'b_x', relative_filepath: 'shared.json', config_schema_id: 'sch_x', updated_at: T0 });
    expect((await world.pass()).converged).toBe(true);
    world.put({ id: 'c_w', relative_filepath: 'shared.json', config_schema_id: 'sch_w', updated_at: T1 });
    const x = world.server.state.instances.get('b_x')!;
    world.server.state.instances.set('b_x', { ...x, target_status: 'removed', activity_status: 'deployed' });
    await world.pass();
    expect(await world.fileAt('shared.json')).toBe('{\n  "owner": "c_w"\n}\n');
    const x2 = world.server.state.instances.get('b_x')!;
    world.server.state.instances.set('b_x', { ...x2, activity_status: 'deployed', error_status: 'none' });
    expect(world.server.state.instances.get('c_w')!.activity_status).toBe('deployed');
    const before = world.reports().length;
    const warnedBefore = withheldWarnings();
    world.fault({
      match: LIST,
      count: 1000,
      mode: 'rewrite',
      replace: [
        { find: '"has_more":true', with: '"has_more":false' },
        { find: '"total_count":5', with: '"total_count":-1' },
      ],
    });
    await world.pass();
    expect(await world.fileAt('shared.json')).toBe('{\n  "owner": "c_w"\n}\n');
    // What was listed is still used and reported.
    expect(world.reports().slice(before)).toEqual(['b_x removed/none']);
    expect(await world.fileAt('a_000.json')).toBe('{\n  "owner": "a_000"\n}\n');
    // One warning for the pass, naming the service's fault.
    expect(withheldWarnings() - warnedBefore).toBe(1);
  });

  // The record of an instance the listing did not show (a path conflict's loser, whose `retrying` report moved
  // its updated_at past the winner's) was forgotten, with the echo of that report: it then won the path.
  it('forgets no record of an instance it did not show', async () => {
    fillers();
    world.put({ id: 'b_x', relative_filepath: 'shared.json', config_schema_id: 'sch_x', updated_at: T1 });
    world.put({ id: 'c_y', relative_filepath: 'shared.json', config_schema_id: 'sch_y', updated_at: T0 });
    await world.pass();
    expect(await world.fileAt('shared.json')).toBe('{\n  "owner": "b_x"\n}\n');
    expect(world.reports().filter((r) => r.startsWith('c_y'))).toEqual(['c_y queued/retrying']);
    world.fault({
      match: LIST,
      count: 1000,
      mode: 'rewrite',
      replace: [
        { find: '"has_more":true', with: '"has_more":false' },
        { find: '"total_count":5', with: '"total_count":-1' },
      ],
    });
    await world.pass();
    clearFaults();
    await world.pass();
    await world.pass();
    expect(await world.fileAt('shared.json')).toBe('{\n  "owner": "b_x"\n}\n');
    expect(world.reports().filter((r) => r.startsWith('c_y'))).toEqual(['c_y queued/retrying']);
  });

  it('retires no old path of a moved instance, until the service sends its count again', async () => {
    await movedInstance();
    // A whole listing (every page), each page with total_count -1.
    world.fault({
      match: LIST,
      count: 1000,
      mode: 'rewrite',
      replace: [{ find: '"total_count":5', with: '"total_count":-1' }],
    });
    await world.pass();
    expect(await world.fileAt('moved.json')).toBe('{\n  "owner": "b_x"\n}\n');
    expect(await world.exists('shared.json')).toBe(true);
    expect(withheldWarnings()).toBe(1);
    // A conformant service (the count sent as asked) has the old path retired.
    clearFaults();
    expect((await world.pass()).converged).toBe(true);
    expect(await world.exists('shared.json')).toBe(false);
    expect(await world.fileAt('moved.json')).toBe('{\n  "owner": "b_x"\n}\n');
    expect(withheldWarnings()).toBe(1);
  });

  it('on one page only is not proof either', async () => {
    await movedInstance();
    // The first page counts 5, the second (offset 3: b_x, z_z) says -1.
    world.fault({
      match: LIST,
      skip: 1,
      count: 1,
      mode: 'rewrite',
      replace: [{ find: '"total_count":5', with: '"total_count":-1' }],
    });
    await world.pass();
    expect(await world.fileAt('moved.json')).toBe('{\n  "owner": "b_x"\n}\n');
    expect(await world.exists('shared.json')).toBe(true);
    expect(withheldWarnings()).toBe(1);
    await world.pass();
    expect(await world.exists('shared.json')).toBe(false);
  });

  it('missing or not an integer of -1 or more, fails the pull: nothing is removed', async () => {
    await movedInstance();
    for (const replacement of ['', '"total_count":"5",', '"total_count":1.5,', '"total_count":-2,']) {
      clearFaults();
      world.fault({
        match: LIST,
        count: 1000,
        mode: 'rewrite',
        replace: [{ find: '"total_count":5,', with: replacement }],
      });
      expect((await world.pass()).error, replacement).toBeDefined();
      expect(await world.exists('shared.json'), replacement).toBe(true);
    }
    clearFaults();
    await world.pass();
    expect(await world.exists('shared.json')).toBe(false);
  });

  it('a count that changes between pages is listed again; changing in every try, the pull fails', async () => {
    await movedInstance();
    // Page 2 of each of the 3 tries (requests 2, 4 and 6) counts one more than page 1.
    for (const skip of [1, 3, 5]) {
      world.fault({
        match: LIST,
        skip,
        count: 1,
        mode: 'rewrite',
        replace: [{ find: '"total_count":5', with: '"total_count":6' }],
      });
    }
    expect((await world.pass()).error).toMatchObject({ code: 'listing_unstable' });
    expect(await world.exists('shared.json')).toBe(true);
    // From page 2 on, for good: the second try counts 6 throughout and ends after 5, a listing cut short.
    world.fault({
      match: LIST,
      skip: 1,
      count: 1000,
      mode: 'rewrite',
      replace: [{ find: '"total_count":5', with: '"total_count":6' }],
    });
    expect((await world.pass()).error).toBeUndefined();
    expect(await world.fileAt('moved.json')).toBe('{\n  "owner": "b_x"\n}\n');
    expect(await world.exists('shared.json')).toBe(true);
  });
});
