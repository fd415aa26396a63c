// The mock against spec/interface.md where it disagreed (spec35): each case is a statement of the spec.
import { describe, expect, it } from 'vitest';
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
