// The wire schemas (schemas.ts) against the spec's examples and the shapes a hostile service could send.
import { describe, expect, it } from 'vitest';
import {
  ConfigInstance,
  ConfigInstanceList,
  Deployment,
  DeployResponse,
  ErrorBody,
  mergeStatus,
  StatusReport,
} from './schemas.js';

const at = '2026-11-01T10:00:00Z';

function instance(overrides: Record<string, unknown> = {}): Record<string, unknown> {
  return {
    object: 'config_instance',
    id: 'cfg_1',
    target_status: 'deployed',
    activity_status: 'queued',
    error_status: 'none',
    status: 'queued',
    relative_filepath: 'app/settings.json',
    created_at: at,
    updated_at: at,
    device_id: 'dvc_1',
    config_schema_id: 'cfs_1',
    config_type_id: 'cft_1',
    device: null,
    config_schema: null,
    config_type: null,
    content: { nested: { list: [1, 'two', true, null], n: 1.5 } },
    ...overrides,
  };
}

function deployment(overrides: Record<string, unknown> = {}): Record<string, unknown> {
  return {
    object: 'deployment',
    id: 'dpl_1',
    description: 'rollout',
    status: 'failed',
    activity_status: 'deployed',
    error_status: 'failed',
    target_status: 'deployed',
    device_id: 'dvc_1',
    release_id: 'v1.4.0',
    created_at: at,
    updated_at: at,
    device: null,
    release: null,
    config_instances: null,
    ...overrides,
  };
}

describe('wire schemas', () => {
  it('each wire shape is one schema, built on first use: the shapes that hold it hold that very schema', () => {
    const instanceSchema = ConfigInstance.unwrap();
    expect(ConfigInstance.unwrap()).toBe(instanceSchema);
    expect(ConfigInstanceList.unwrap().shape.data.element).toBe(instanceSchema);
    expect(Deployment.unwrap().shape.config_instances.unwrap().unwrap().element).toBe(instanceSchema);
    expect(DeployResponse.unwrap().shape.deploy).toBe(instanceSchema);
    expect(DeployResponse.unwrap().shape.remove.element.shape.config_instance).toBe(instanceSchema);
    // What a parse through the lazy export refuses, and how, is the built schema's own verdict.
    const bad = instance({ id: '', target_status: 'retired', content: [] });
    expect(ConfigInstance.safeParse(bad).error?.issues).toEqual(instanceSchema.safeParse(bad).error?.issues);
    expect(ConfigInstance.safeParse(bad).error?.issues.map((issue) => issue.path.join('.'))).toEqual([
      'id',
      'target_status',
      'content',
    ]);
  });

  it('accepts a full config instance and keeps its nested content', () => {
    const parsed = ConfigInstance.parse(instance());
    expect(parsed.content).toEqual({ nested: { list: [1, 'two', true, null], n: 1.5 } });
  });

  it.each([
    ['target_status', 'archived'],
    ['activity_status', 'pending'],
    ['error_status', 'broken'],
    ['created_at', 'yesterday'],
    ['content', [1, 2]],
    ['content', 'text'],
    ['object', 'deployment'],
  ])('rejects a config instance whose %s is %j, naming the field', (field, value) => {
    const result = ConfigInstance.safeParse(instance({ [field]: value }));
    expect(result.success).toBe(false);
    expect(result.error?.issues[0]?.path[0]).toBe(field);
  });

  // The agent expands none of them and reads none: an expansion it did not ask for, in a shape other than the
  // spec's, costs the item nothing (it was invalid: reported `failed`, final). The spec's shape is kept.
  it.each([
    ['device', 'dvc_1'],
    ['device', { object: 'device', id: 'dvc_1', last_connected_at: null }],
    ['config_schema', 'cs_1'],
    ['config_type', { object: 'config_type' }],
  ])('reads an unasked %s expansion of another shape (%j) as null', (field, value) => {
    expect(ConfigInstance.parse(instance({ [field]: value }))[field as 'device']).toBeNull();
  });

  it('keeps an expansion of the spec shape', () => {
    const device = {
      object: 'device',
      id: 'dvc_1',
      name: 'robot',
      status: 'online',
      last_connected_at: '2026-11-01T10:00:00Z',
      last_disconnected_at: '2026-11-01T09:00:00Z',
      created_at: '2026-11-01T08:00:00Z',
      updated_at: '2026-11-01T10:00:00Z',
    };
    expect(ConfigInstance.parse(instance({ device })).device).toEqual(device);
    expect(
      ConfigInstance.parse(instance({ config_schema: { object: 'config_schema', id: 'cs' } })).config_schema,
    ).toEqual({
      object: 'config_schema',
      id: 'cs',
    });
  });

  it('keeps every key of the content as the service sent it, __proto__ included', () => {
    const parsed = ConfigInstance.parse({
      ...instance(),
      content: JSON.parse('{"n": {"__proto__": {"a": 1}, "b": 2}, "list": [{"__proto__": 3}]}'),
    });
    expect(JSON.stringify(parsed.content)).toBe('{"n":{"__proto__":{"a":1},"b":2},"list":[{"__proto__":3}]}');
  });

  it('rejects content nested beyond the depth limit', () => {
    let deep: unknown = 1;
    for (let level = 0; level < 100; level += 1) deep = { next: deep };
    expect(ConfigInstance.safeParse(instance({ content: deep })).success).toBe(false);
  });

  it('requires content on every config instance', () => {
    const { content: _content, ...withoutContent } = instance();
    expect(ConfigInstance.safeParse(withoutContent).success).toBe(false);
  });

  it('accepts ISO 8601 timestamps with an offset or Z', () => {
    expect(ConfigInstance.safeParse(instance({ created_at: '2026-11-01T10:00:00.123+02:00' })).success).toBe(
      true,
    );
  });

  it('a deployment carries every spec enum and its expandable fields default to null', () => {
    const parsed = Deployment.parse(deployment());
    expect([parsed.status, parsed.device, parsed.release, parsed.config_instances]).toEqual([
      'failed',
      null,
      null,
      null,
    ]);
    // Deployment statuses are read, never acted on: a value the service adds later is kept, not refused.
    expect(Deployment.parse(deployment({ target_status: 'queued' })).target_status).toBe('queued');
    expect(Deployment.parse(deployment({ config_instances: [instance()] })).config_instances).toHaveLength(1);
  });

  it('the merge rule: an error wins over the activity', () => {
    expect(mergeStatus('deployed', 'failed')).toBe('failed');
    expect(mergeStatus('queued', 'retrying')).toBe('retrying');
    expect(mergeStatus('deployed', 'none')).toBe('deployed');
  });

  it('a list envelope bounds limit to 1..100 and holds typed items', () => {
    const envelope = {
      object: 'list',
      total_count: -1,
      limit: 10,
      offset: 0,
      has_more: false,
      data: [instance()],
    };
    expect(ConfigInstanceList.parse(envelope).data[0]?.id).toBe('cfg_1');
    expect(ConfigInstanceList.safeParse({ ...envelope, limit: 101 }).success).toBe(false);
    expect(ConfigInstanceList.safeParse({ ...envelope, data: [{ id: 'x' }] }).success).toBe(false);
  });

  it('a deploy response lists conflicting instances with code and explanation', () => {
    const body = {
      deploy: instance(),
      remove: [
        {
          code: 'device_file_path_conflict',
          explanation: 'same path',
          config_instance: instance({ id: 'cfg_0' }),
        },
      ],
    };
    expect(DeployResponse.parse(body).remove[0]?.config_instance.id).toBe('cfg_0');
    expect(DeployResponse.safeParse({ deploy: instance() }).success).toBe(false);
  });

  it('an error body defaults params to {}', () => {
    expect(ErrorBody.parse({ error: { code: 'not_found', message: 'no such id' } }).error.params).toEqual({});
  });

  it('a status report is strict: known enums only, no unknown fields, bounded message', () => {
    expect(StatusReport.safeParse({ activity_status: 'deployed', error_status: 'none' }).success).toBe(true);
    expect(StatusReport.safeParse({ activity_status: 'done', error_status: 'none' }).success).toBe(false);
    expect(
      StatusReport.safeParse({ activity_status: 'deployed', error_status: 'none', extra: 1 }).success,
    ).toBe(false);
    expect(
      StatusReport.safeParse({
        activity_status: 'deployed',
        error_status: 'failed',
        message: 'x'.repeat(5000),
      }).success,
    ).toBe(false);
  });
});
