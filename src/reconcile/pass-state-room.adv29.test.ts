// A stateDir filled by the daemon's own content cache still takes state.json and outbox.json: the cache gives way.

import { readdirSync, readFileSync } from 'node:fs';
import path from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { createPassWorld, type PassWorld } from '../../test/helpers/pass-world.js';
import { quotaFs } from '../../test/helpers/write-fault-fs.js';

let world: PassWorld | undefined;
afterEach(async () => {
  await world?.close();
  world = undefined;
});

describe('a stateDir the content cache filled (adv29)', () => {
  it('the daemon (which caches every written file) records and reports what it wrote, pass after pass', async () => {
    world = await createPassWorld({ name: 'state-room', parent: '/dev/shm', open: false });
    const ids = Array.from({ length: 12 }, (_, n) => `cfg_${String(n).padStart(2, '0')}`);
    for (const id of ids)
      world.put({ id, relative_filepath: `big/${id}.json`, content: { blob: id.repeat(1500) } });
    // Room for the state files but not for them beside a copy of every file (each file ~12 KiB, 12 of them).
    await world.open({
      deps: { fs: quotaFs(world.stateDir, 96 * 1024) },
      settings: { cacheWrittenFiles: true },
    });

    const first = await world.pass();
    const second = await world.pass();
    for (const id of ids) expect(await world.fileAt(`big/${id}.json`)).toContain(id.repeat(1500));
    // Recorded as the agent's in state.json, so a retirement removes them, and every report sent.
    const recorded = readFileSync(path.join(world.stateDir, 'state.json'), 'utf8');
    for (const id of ids) expect(recorded).toContain(`big/${id}.json`);
    expect(world.reports().filter((r) => r.endsWith('deployed/none')).length).toBe(ids.length);
    // The first pass already records everything: before, neither did (state.json failed ENOSPC in each).
    expect(first.persistError).toBeUndefined();
    expect(first.converged).toBe(true);
    expect(second.converged).toBe(true);

    // A new version is written too: its declaration (intent.json) finds room.
    world.put({ id: 'cfg_new', relative_filepath: 'big/new.json', content: { blob: 'n'.repeat(12_000) } });
    const third = await world.pass();
    expect(third.converged).toBe(true);
    expect(await world.fileAt('big/new.json')).toContain('n'.repeat(12_000));
    // And its copy was not put: once the disk was found full the daemon keeps no copies (each put would take the
    // room again, and warn once per file, pass after pass).
    const copies = readdirSync(path.join(world.stateDir, 'cache')).filter((name) =>
      /^[0-9a-f]{64}$/.test(name),
    );
    expect(copies).toEqual([]);
  });
});
