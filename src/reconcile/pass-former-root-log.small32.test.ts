// A retired instance whose file stays in a former rootDir (a true move) is told at warn once, then at debug.
import { mkdir, rm } from 'node:fs/promises';
import path from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { createPassWorld, type PassWorld } from '../../test/helpers/pass-world.js';
import { textSink } from '../../test/helpers/text-sink.js';
import { movingClock } from '../../test/helpers/write-fault-fs.js';
import { createLogger } from '../lib/logger.js';
import { createSecretRegistry } from '../lib/secrets.js';

let world: PassWorld | undefined;
afterEach(async () => {
  await world?.close();
  world = undefined;
});

describe('the log of a file left in a former rootDir (small32)', () => {
  it('at warn once while it stays, then at debug; the report is sent once', async () => {
    world = await createPassWorld({ name: 'former-log', parent: '/dev/shm', open: false });
    world.put({ id: 'cfg_a' });
    await world.runOnce();
    const moved = path.join(world.dir, 'elsewhere');
    await mkdir(moved);
    world.put({ id: 'cfg_a', target_status: 'removed', activity_status: 'deployed' });
    const clock = movingClock();
    const sink = textSink();
    const logger = createLogger({
      level: 'debug',
      secrets: createSecretRegistry(),
      destination: sink.stream,
    });
    await world.open({ settings: { rootDir: moved }, deps: { clock, logger } });
    const lines = () =>
      sink
        .text()
        .split('\n')
        .filter((line) => line.includes('"file left in place outside rootDir: '))
        .map((line) => JSON.parse(line) as { level: string; instanceId: string });

    // Ten passes, 30 s apart, the old root's file in place all along: one warning (before: ten).
    for (let n = 0; n < 10; n += 1) {
      await world.pass();
      clock.advance(30_000);
    }
    expect(lines().map((l) => `${l.level} ${l.instanceId}`)).toEqual([
      'warn cfg_a',
      ...Array.from({ length: 9 }, () => 'debug cfg_a'),
    ]);
    // The report behaviour is unchanged: retrying, sent once.
    expect(
      world
        .reports()
        .filter((r) => r.startsWith('cfg_a '))
        .slice(1),
    ).toEqual(['cfg_a deployed/retrying']);

    // Gone by hand: removed, and nothing more said of it.
    await rm(path.join(world.rootDir, 'cfg_a.json'));
    const before = lines().length;
    await world.pass();
    expect(world.reports().at(-1)).toBe('cfg_a removed/none');
    expect(lines().length).toBe(before);
  });
});
