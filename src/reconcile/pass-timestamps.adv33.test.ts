// Instances whose timestamps a service writes in another ISO 8601 form than RFC 3339's strict one are written and ordered, not reported failed (adv33).
import { afterEach, describe, expect, it } from 'vitest';
import { createPassWorld, LIST, type PassWorld } from '../../test/helpers/pass-world.js';

const MOCK_TIME = '2026-01-01T00:00:00.000Z';

describe('a service writing its timestamps in another ISO 8601 form (adv33)', () => {
  let world: PassWorld | undefined;
  afterEach(async () => {
    await world?.close();
    world = undefined;
  });

  // The interface promises "date-time format (ISO 8601)". Each of these was invalid: the instance was reported
  // `failed` (final: skipped for good, also once the service wrote its times otherwise) and never written.
  it.each([
    ['no offset (Python isoformat of a naive time)', '2026-01-01T00:00:00.000'],
    ["PostgreSQL's text", '2026-01-01 00:00:00+00'],
    ['an offset without a colon', '2026-01-01T00:00:00.000+0000'],
    ['lower-case t and z', '2026-01-01t00:00:00.000z'],
  ])('%s: written and reported deployed', async (_, form) => {
    world = await createPassWorld({ name: 'adv33-ts' });
    world.put({ id: 'a' });
    world.fault({ match: LIST, count: 100, mode: 'rewrite', replace: [{ find: MOCK_TIME, with: form }] });
    await world.pass();
    expect(world.reports()).toEqual(['a deployed/none']);
    expect(await world.fileAt('a.json')).toBe('{\n  "owner": "a"\n}\n');
  });

  it('two instances at one path: the one updated last wins, by the instant its time names', async () => {
    world = await createPassWorld({ name: 'adv33-ts-order' });
    // As text the older one sorts last; as instants `early` is 09:00Z and `late` 10:00Z.
    world.put({ id: 'early', relative_filepath: 'app.json', updated_at: '2026-01-01T11:00:00.000Z' });
    world.put({ id: 'late', relative_filepath: 'app.json', updated_at: '2026-01-01T10:00:00.000Z' });
    world.fault({
      match: LIST,
      count: 100,
      mode: 'rewrite',
      replace: [
        { find: '2026-01-01T11:00:00.000Z', with: '2026-01-01 11:00:00+02' },
        { find: '2026-01-01T10:00:00.000Z', with: '2026-01-01T10:00:00.000' },
      ],
    });
    await world.pass();
    expect(await world.fileAt('app.json')).toBe('{\n  "owner": "late"\n}\n');
    expect(world.reports().sort()).toEqual(['early queued/retrying', 'late deployed/none']);
  });

  it("a time that names no date is still the item's fault", async () => {
    world = await createPassWorld({ name: 'adv33-ts-bad' });
    world.put({ id: 'a' });
    world.fault({
      match: LIST,
      count: 100,
      mode: 'rewrite',
      replace: [{ find: MOCK_TIME, with: '2026-02-30T00:00:00Z' }],
    });
    await world.pass();
    expect(world.reports()).toEqual(['a queued/failed']);
    expect(await world.exists('a.json')).toBe(false);
  });
});
