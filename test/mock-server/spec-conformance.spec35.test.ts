// The mock against spec/interface.md where it disagreed (spec35): each case is a statement of the spec.
import { describe, expect, it } from 'vitest';
import { compareInstants, instantSortKey } from '../../src/api/instant.js';
import { ConfigInstanceList } from '../../src/api/schemas.js';
import { createMockService } from '../../src/mock-server/app.js';
import { API_KEY, demoFixtures } from './helpers.js';

const { app } = createMockService({ apiKeys: [API_KEY], fixtures: demoFixtures() });

async function get(path: string): Promise<{ status: number; body: unknown }> {
  const response = await app.request(path, { headers: { 'X-API-Key': API_KEY } });
  return { status: response.status, body: await response.json() };
}

describe('spec: out-of-range offsets are clamped, never an error (Errors 1, Pagination 4)', () => {
  it.each([
    ['99999999999999999999', Number.MAX_SAFE_INTEGER],
    ['9007199254740993', Number.MAX_SAFE_INTEGER],
    ['9007199254740991', Number.MAX_SAFE_INTEGER],
  ])('offset=%s: 200, an empty last page at offset %i', async (offset, echoed) => {
    const { status, body } = await get(`/v1/config_instances?offset=${offset}&expand[]=total_count`);
    expect(status).toBe(200);
    const page = ConfigInstanceList.parse(body);
    expect(page).toMatchObject({ offset: echoed, limit: 10, has_more: false, total_count: 20, data: [] });
  });

  it('a limit beyond any integer is clamped to 100', async () => {
    const { status, body } = await get(
      '/v1/releases?limit=99999999999999999999&offset=-99999999999999999999',
    );
    expect(status).toBe(200);
    expect(body).toMatchObject({ limit: 100, offset: 0, has_more: false });
  });
});

describe('spec: created_at orders by the instant each timestamp names (Sorting rules 3-5)', () => {
  // Forms the wire's Timestamp accepts: Date.parse read `+00` and a leap second as NaN (an order that depended
  // on the items' places) and dropped every digit past the millisecond (a tie broken by id instead). One
  // instant written two ways (cfg_2, cfg_7) is a tie, broken by id ascending in both directions (rule 4).
  const instance = (id: string, created_at: string) => ({
    id,
    device_id: 'dvc_1',
    relative_filepath: `${id}.json`,
    content: {},
    created_at,
  });
  const { app: sorted } = createMockService({
    apiKeys: [API_KEY],
    fixtures: {
      devices: [{ id: 'dvc_1' }],
      releases: [],
      config_instances: [
        instance('cfg_1', '2025-01-01T00:00:00.0002Z'),
        instance('cfg_2', '2025-01-01T00:00:00.0001Z'),
        instance('cfg_3', '2025-01-02T00:00:00+00'),
        instance('cfg_4', '2025-01-01T12:00:00Z'),
        instance('cfg_5', '2025-01-01T01:00:00+02:00'),
        instance('cfg_6', '2024-12-31T23:59:60Z'),
        instance('cfg_7', '2025-01-01T00:00:00.000100Z'),
      ],
      deployments: [],
    },
  });

  it.each([
    ['created_at:asc', 'cfg_5 cfg_6 cfg_2 cfg_7 cfg_1 cfg_4 cfg_3'],
    ['created_at:desc', 'cfg_3 cfg_4 cfg_1 cfg_2 cfg_7 cfg_6 cfg_5'],
  ])('order_by=%s: %s', async (order, ids) => {
    const response = await sorted.request(`/v1/config_instances?order_by=${order}`, {
      headers: { 'X-API-Key': API_KEY },
    });
    expect(response.status).toBe(200);
    const page = ConfigInstanceList.parse(await response.json());
    expect(page.data.map((i) => i.id).join(' ')).toBe(ids);
  });
});

it('instantSortKey orders as compareInstants does, on every pair', () => {
  const texts = [
    '0001-01-01T00:00:00Z',
    '1969-12-31T23:59:59.999999Z',
    '1970-01-01T00:00:00+00',
    '1970-01-01 01:00:00+0100',
    '2025-01-01T00:00:00.0001Z',
    '2025-01-01T00:00:00.00010Z',
    '2024-12-31T23:59:60Z',
    '2025-01-01T00:00:00',
    '9999-12-31T23:59:59.9999999Z',
  ];
  for (const a of texts) {
    for (const b of texts) {
      const byText =
        instantSortKey(a) < instantSortKey(b) ? -1 : instantSortKey(a) > instantSortKey(b) ? 1 : 0;
      expect([a, b, byText]).toEqual([a, b, compareInstants(a, b)]);
    }
  }
});
