// A service that leaves out an instance's null expansions (device, config_schema, config_type) has its instances written, not reported failed (adv33).
import { afterEach, describe, expect, it } from 'vitest';
import { createPassWorld, LIST, type PassWorld } from '../../test/helpers/pass-world.js';

/** The mock's null expansions, each left out as a serializer that drops null fields (Go's omitempty) does. */
const LEFT_OUT = [
  { find: '"device":null,', with: '' },
  { find: '"config_schema":null,', with: '' },
  { find: '"config_type":null,', with: '' },
];

describe('a service that leaves out null expansions (adv33)', () => {
  let world: PassWorld | undefined;
  afterEach(async () => {
    await world?.close();
    world = undefined;
  });

  // "null unless expanded", and the agent expands none of them. Each item was invalid: reported `failed` (final:
  // skipped for good, also once the service sent the fields again) and never written.
  it.each([
    ['small items (checked by hand, then by zod)', 1],
    ['items of 300 KB', 300_000],
  ])('%s: written and reported deployed, and the next pass changes nothing', async (_, padding) => {
    world = await createPassWorld({ name: 'adv33-expand' });
    const content = (owner: string) => (padding > 1 ? { owner, pad: 'x'.repeat(padding) } : { owner });
    world.put({ id: 'a', content: content('a') });
    world.put({ id: 'b', relative_filepath: 'etc/b.json', content: content('b') });
    world.fault({ match: LIST, count: 100, mode: 'rewrite', replace: LEFT_OUT });
    await world.pass();
    expect(world.reports().sort()).toEqual(['a deployed/none', 'b deployed/none']);
    expect(JSON.parse(await world.fileAt('a.json'))).toEqual(content('a'));
    expect(JSON.parse(await world.fileAt('etc/b.json'))).toEqual(content('b'));
    await world.pass();
    expect(world.reports()).toHaveLength(2);
  });

  // The merged `status` the agent never acts on: its unknown string values were tolerated, but null, none at all
  // or another type made the item invalid, reported `failed` (final) and never written.
  it.each([
    ['null', '"status":null,'],
    ['left out', ''],
    ['a number', '"status":3,'],
  ])('a merged status that is %s: written and reported deployed', async (_, status) => {
    world = await createPassWorld({ name: 'adv33-status' });
    world.put({ id: 'a' });
    world.fault({
      match: LIST,
      count: 100,
      mode: 'rewrite',
      replace: [{ find: '"status":"queued",', with: status }],
    });
    await world.pass();
    expect(world.reports()).toEqual(['a deployed/none']);
    expect(await world.fileAt('a.json')).toBe('{\n  "owner": "a"\n}\n');
  });

  // An expansion the agent did not ask for, sent in another shape than the spec's (a device whose
  // last_connected_at is null, a config_schema as its bare id): the agent reads none of them. The item was invalid,
  // reported `failed` (final) and never written (lead23).
  it.each([
    ['a device with a null timestamp', '"device":{"object":"device","id":"dvc_1","last_connected_at":null},'],
    ['a config_schema as its id', '"config_schema":"cs_1",'],
    ['a config_type of another object', '"config_type":{"object":"config_schema","id":7},'],
  ])('an unasked expansion, %s: written and reported deployed', async (_, expansion) => {
    world = await createPassWorld({ name: 'lead23-expand' });
    world.put({ id: 'a' });
    world.put({ id: 'b', relative_filepath: 'b.json' });
    const field = expansion.slice(1, expansion.indexOf('"', 1));
    world.fault({
      match: LIST,
      count: 100,
      mode: 'rewrite',
      replace: [{ find: `"${field}":null,`, with: expansion }],
    });
    await world.pass();
    expect(world.reports().sort()).toEqual(['a deployed/none', 'b deployed/none']);
    expect(await world.fileAt('a.json')).toBe('{\n  "owner": "a"\n}\n');
    await world.pass();
    expect(world.reports()).toHaveLength(2);
  });

  it('one of the three left out is enough to have been failed', async () => {
    world = await createPassWorld({ name: 'adv33-expand-one' });
    world.put({ id: 'a' });
    world.fault({ match: LIST, count: 100, mode: 'rewrite', replace: [LEFT_OUT[1]!] });
    await world.pass();
    expect(world.reports()).toEqual(['a deployed/none']);
    expect(await world.fileAt('a.json')).toBe('{\n  "owner": "a"\n}\n');
  });
});
