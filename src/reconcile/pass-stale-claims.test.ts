// A `deployed` report queued for one version never reaches the service before that version's bytes are on disk.
import * as nodeFs from 'node:fs/promises';
import { readFile } from 'node:fs/promises';
import path from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { createPassWorld, type PassWorld } from '../../test/helpers/pass-world.js';
import type { ServiceClient } from '../api/client.js';
import { serializeContent } from './serialize.js';

let world: PassWorld;
/**
 * Each `deployed` report the service took: whether the file on disk then held the bytes of the content the
 * service then had for the instance (read once the answer came, so the service had recorded it).
 */
let claims: string[];

function claimChecking(client: ServiceClient): ServiceClient {
  return {
    ...client,
    reportConfigInstanceStatus: async (id, report, opts) => {
      const answer = await client.reportConfigInstanceStatus(id, report, opts);
      const record = world.server.state.instances.get(id);
      if (report.activity_status === 'deployed' && record !== undefined) {
        const onDisk = await readFile(path.join(world.rootDir, record.relative_filepath)).catch(
          () => undefined,
        );
        const wanted = serializeContent(record.relative_filepath, record.content);
        claims.push(`${id} ${onDisk?.equals(wanted) === true ? 'true' : 'false'}`);
      }
      return answer;
    },
  };
}

beforeEach(async () => {
  claims = [];
  world = await createPassWorld({ name: 'stale', open: false, wrapClient: claimChecking });
});

afterEach(() => world.close());

describe('a deployed report left queued while the operator changes the instance', () => {
  it('is not sent before the new version is written (a pass that reports at its end)', async () => {
    await world.open();
    world.put({ id: 'cfg_a', content: { v: 1 } });
    // The report of version 1 meets an outage of the status route and stays queued.
    world.server.state.addFault({ match: '^/v1/config_instances/cfg_a$', count: 1 });
    await world.pass();
    expect(world.server.state.reports).toHaveLength(0);
    // Meanwhile the operator deploys version 2.
    world.put({ id: 'cfg_a', content: { v: 2 }, updated_at: '2026-02-01T00:00:00.000Z' });
    const result = await world.pass();

    expect(result.converged).toBe(true);
    expect(await readFile(path.join(world.rootDir, 'cfg_a.json'), 'utf8')).toBe('{\n  "v": 2\n}\n');
    expect(claims).toEqual(['cfg_a true']);
  });

  it('is not sent before the new version is written when the pass reports while it writes', async () => {
    await world.open({ settings: { batchSteps: 4 } });
    world.put({ id: 'zz_changed', content: { v: 1 } });
    world.server.state.addFault({ match: '^/v1/config_instances/zz_changed$', count: 1 });
    await world.pass();
    expect(world.server.state.reports).toHaveLength(0);
    // Version 2, and 40 new instances written before it (plan order is by path): deliveries start on the way.
    world.put({ id: 'zz_changed', content: { v: 2 }, updated_at: '2026-02-01T00:00:00.000Z' });
    for (let i = 0; i < 40; i++) world.put({ id: `cfg_${String(i).padStart(2, '0')}` });
    const result = await world.pass();

    expect(result.converged).toBe(true);
    expect(claims.filter((claim) => claim.endsWith('false'))).toEqual([]);
    expect(claims).toContain('zz_changed true');
  });

  it('a write of the new version that fails replaces it: the service never hears deployed', async () => {
    await world.open();
    world.put({ id: 'cfg_a', content: { v: 1 } });
    world.server.state.addFault({ match: '^/v1/config_instances/cfg_a$', count: 1 });
    await world.pass();
    // Version 2 goes to a path whose directory is taken by a file: its write fails (obstructed).
    await nodeFs.writeFile(path.join(world.rootDir, 'taken'), 'a local file\n');
    world.put({
      id: 'cfg_a',
      relative_filepath: 'taken/cfg_a.json',
      content: { v: 2 },
      updated_at: '2026-02-01T00:00:00.000Z',
    });
    await world.pass();

    expect(claims).toEqual([]);
    expect(world.server.state.instances.get('cfg_a')).toMatchObject({ error_status: 'retrying' });
  });
});

describe('a failed report left queued while the operator deploys a fixed version', () => {
  it('does not land on the fixed version (failed is final: the agent would skip it for good); the fix is written', async () => {
    await world.open();
    // A path no device may write: failed at once.
    world.put({ id: 'cfg_a', relative_filepath: '../outside.json', content: { v: 1 } });
    world.server.state.addFault({ match: '^/v1/config_instances/cfg_a$', count: 1 });
    await world.pass();
    expect(world.server.state.reports).toHaveLength(0);
    // The operator fixes the path and deploys again.
    world.put({
      id: 'cfg_a',
      relative_filepath: 'cfg_a.json',
      content: { v: 2 },
      updated_at: '2026-02-01T00:00:00.000Z',
    });
    await world.pass();

    expect(await readFile(path.join(world.rootDir, 'cfg_a.json'), 'utf8')).toBe('{\n  "v": 2\n}\n');
    expect(world.server.state.instances.get('cfg_a')).toMatchObject({
      activity_status: 'deployed',
      error_status: 'none',
    });
    expect(world.server.state.reports.map((r) => `${r.activity_status}/${r.error_status}`)).toEqual([
      'deployed/none',
    ]);
  });
});
