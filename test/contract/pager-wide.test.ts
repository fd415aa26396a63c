// Contract: a full pull lists the device once (the `wide` listing) and keeps exactly what its queries would give;
// pages are sized by the bytes of the items seen, so large items cost no run of "too large" answers per query.
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import type { ServiceClient } from '../../src/api/client.js';
import { ResponseTooLargeError } from '../../src/api/errors.js';
import { type PagerOptions, type PullResult, pullConfigInstances } from '../../src/api/pager.js';
import type { ConfigInstanceFilters } from '../../src/api/schemas.js';
import { systemClock } from '../../src/lib/clock.js';
import type { ConfigInstanceRecord } from '../../src/mock-server/state.js';
import { queriesFor } from '../../src/reconcile/pull.js';
import { type Contract, NOW, startContract } from './harness.js';

const DEVICE = 'dvc_wide_01';
const LIST = '^/v1/config_instances$';

let contract: Contract;
beforeEach(async () => {
  contract = await startContract();
});
afterEach(async () => {
  await contract.close();
});

type Status = [target: string, activity: string];

/** Straight into the mock's state: the admin API creates instances in `created` only. */
function seed(
  instances: Record<string, Status>,
  content: () => ConfigInstanceRecord['content'] = () => ({}),
): void {
  for (const [id, [target, activity]] of Object.entries(instances)) {
    contract.server.state.instances.set(id, {
      id,
      device_id: DEVICE,
      relative_filepath: `w/${id}.json`,
      config_schema_id: `sch_${id}`,
      config_type_id: 'typ',
      target_status: target as ConfigInstanceRecord['target_status'],
      activity_status: activity as ConfigInstanceRecord['activity_status'],
      error_status: 'none',
      content: content(),
      created_at: NOW,
      updated_at: NOW,
    });
  }
}

const listRequests = async () => (await contract.admin.stats())['GET /v1/config_instances'] ?? 0;

async function counted(
  queries: readonly ConfigInstanceFilters[],
  options: Partial<PagerOptions> = {},
): Promise<{ result: PullResult; requests: number }> {
  const before = await listRequests();
  const result = await pullConfigInstances(queries, {
    client: contract.client(),
    clock: systemClock,
    ...options,
  });
  return { result, requests: (await listRequests()) - before };
}

const sortedIds = (result: PullResult) => result.instances.map((instance) => instance.id).sort();

/** Every status pair a device's listing can hold: live, changing, removed, history, drafts. */
const MIXED: Record<string, Status> = {
  w_live: ['deployed', 'deployed'],
  w_new: ['deployed', 'queued'],
  w_conflict: ['removed', 'queued'],
  w_remove: ['removed', 'deployed'],
  w_back: ['created', 'deployed'],
  w_never: ['removed', 'validated'],
  w_never2: ['removed', 'validating'],
  w_never3: ['removed', 'created'],
  w_history: ['removed', 'removed'],
  w_draft: ['created', 'created'],
  w_valid: ['validated', 'validated'],
};

describe('a full pull lists the device once', () => {
  it('one request instead of seven, keeping exactly what the seven queries keep', async () => {
    seed(MIXED);
    const queries = queriesFor('full', DEVICE);
    const byQueries = await counted(queries);
    const wide = await counted(queries, { wide: { device_id: DEVICE } });
    expect(byQueries.requests).toBe(7);
    expect(wide.requests).toBe(1);
    expect(sortedIds(wide.result)).toEqual(sortedIds(byQueries.result));
    expect(sortedIds(wide.result)).toEqual(
      ['w_back', 'w_conflict', 'w_live', 'w_never', 'w_never2', 'w_never3', 'w_new', 'w_remove'].sort(),
    );
  });

  it('a status value the agent does not know keeps the item (skipped), as the query that matched it did', async () => {
    seed({ w_live: ['deployed', 'deployed'], w_history: ['removed', 'removed'] });
    await contract.admin.addFault({
      match: LIST,
      count: 100,
      mode: 'rewrite',
      replace: [
        { find: '"id":"w_live","target_status":"deployed"', with: '"id":"w_live","target_status":"pinned"' },
      ],
    });
    const wide = await counted(queriesFor('full', DEVICE), { wide: { device_id: DEVICE } });
    expect(wide.result.skipped.map((item) => item.id)).toEqual(['w_live']);
    expect(wide.result.instances).toEqual([]);
  });

  it('a listing that is mostly history is given up after its first page for the queries', async () => {
    const history = Object.fromEntries(
      Array.from({ length: 12 }, (_, i) => [
        `w_h${String(i).padStart(2, '0')}`,
        ['removed', 'removed'] as Status,
      ]),
    );
    seed({ ...history, w_x1: ['deployed', 'deployed'], w_x2: ['deployed', 'queued'] });
    const queries = queriesFor('full', DEVICE);
    const byQueries = await counted(queries, { pageLimit: 4 });
    const wide = await counted(queries, { pageLimit: 4, wide: { device_id: DEVICE } });
    expect(sortedIds(wide.result)).toEqual(['w_x1', 'w_x2']);
    expect(sortedIds(byQueries.result)).toEqual(['w_x1', 'w_x2']);
    // One page of the device listing (4 items of history), then the seven queries.
    expect(wide.requests).toBe(1 + byQueries.requests);
  });

  it('a first sync lists each instance once, not once per query that matches it', async () => {
    const queued = Object.fromEntries(
      Array.from({ length: 30 }, (_, i) => [
        `w_q${String(i).padStart(2, '0')}`,
        ['deployed', 'queued'] as Status,
      ]),
    );
    seed(queued);
    const queries = queriesFor('full', DEVICE);
    const byQueries = await counted(queries, { pageLimit: 10 });
    const wide = await counted(queries, { pageLimit: 10, wide: { device_id: DEVICE } });
    expect(sortedIds(wide.result)).toEqual(sortedIds(byQueries.result));
    expect(wide.result.instances).toHaveLength(30);
    // Pages of 10 overlapping by one: 4 pages for 30 items; the queries list them twice, plus five empty lists.
    expect(wide.requests).toBe(4);
    expect(byQueries.requests).toBe(4 + 4 + 5);
  });
});

describe('pages sized by bytes', () => {
  it('after the first page that fits, no page is answered "too large", in this query or the next', async () => {
    const instances = Object.fromEntries(
      Array.from({ length: 12 }, (_, i) => [
        `w_b${String(i).padStart(2, '0')}`,
        ['deployed', 'queued'] as Status,
      ]),
    );
    seed(instances, () => ({ blob: 'x'.repeat(2_000) }));
    const cap = 20_000;
    const client = contract.client({ maxResponseBytes: cap });
    const answers: { limit: number; tooLarge: boolean }[] = [];
    const recording: Pick<ServiceClient, 'listConfigInstancePage'> = {
      async listConfigInstancePage(filters, page) {
        try {
          const result = await client.listConfigInstancePage(filters, page);
          answers.push({ limit: page?.limit ?? 0, tooLarge: false });
          return result;
        } catch (error) {
          answers.push({ limit: page?.limit ?? 0, tooLarge: error instanceof ResponseTooLargeError });
          throw error;
        }
      },
    };
    const result = await pullConfigInstances(
      [
        { device_id: DEVICE, target_status: 'deployed' },
        { device_id: DEVICE, activity_status: 'queued' },
      ],
      { client: recording, clock: systemClock, maxResponseBytes: cap },
    );
    expect(result.instances).toHaveLength(12);
    const firstFit = answers.findIndex((answer) => !answer.tooLarge);
    expect(answers.slice(0, firstFit).every((answer) => answer.tooLarge)).toBe(true);
    expect(answers.slice(firstFit).filter((answer) => answer.tooLarge)).toEqual([]);
    // Each page aims at half the cap: ~2 KiB items, pages of at most 4.
    expect(Math.max(...answers.slice(firstFit + 1).map((answer) => answer.limit))).toBeLessThanOrEqual(4);
  });
});
