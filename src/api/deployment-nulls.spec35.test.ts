// A deployment whose unexpanded fields are left out (spec: "null unless expanded") reads as null, as an instance's do (spec35).
import { describe, expect, it } from 'vitest';
import { createMockService } from '../mock-server/app.js';
import { Deployment } from './schemas.js';

const KEY = 'spec35-key';

const wire = {
  object: 'deployment',
  id: 'dpl_1',
  description: 'rollout',
  status: 'queued',
  activity_status: 'queued',
  error_status: 'none',
  target_status: 'deployed',
  device_id: 'dvc_1',
  release_id: 'v1.0.0',
  created_at: '2025-01-01T00:00:00Z',
  updated_at: '2025-01-01T00:00:00Z',
};

describe('Deployment: device, release and config_instances left out', () => {
  it('parses as null, as a serializer that drops null fields (omitempty) sends them', () => {
    const parsed = Deployment.safeParse(wire);
    expect(parsed.success).toBe(true);
    expect(parsed.data).toMatchObject({ device: null, release: null, config_instances: null });
  });

  it('the mock still sends them, null unless expanded, through the same schema', async () => {
    const { app } = createMockService({
      apiKeys: [KEY],
      fixtures: {
        devices: [{ id: 'dvc_1' }],
        releases: [{ id: 'rel_1', version: 'v1.0.0' }],
        config_instances: [{ id: 'cfg_1', device_id: 'dvc_1', relative_filepath: 'a.json', content: {} }],
        deployments: [
          { id: 'dpl_1', device_id: 'dvc_1', release_id: 'v1.0.0', config_instance_ids: ['cfg_1'] },
        ],
      },
    });
    const response = await app.request('/v1/deployments/dpl_1', { headers: { 'X-API-Key': KEY } });
    expect(response.status).toBe(200);
    const body = (await response.json()) as Record<string, unknown>;
    expect(body).toMatchObject({ device: null, release: null, config_instances: null });
  });
});
