// A ConfigInstance factory for unit tests: valid under the wire schema, merged status derived as the mock does.
import { ConfigInstance, mergeStatus } from '../../src/api/schemas.js';
import type { ConfigInstanceRecord } from '../../src/mock-server/state.js';

export type InstanceFields = Partial<Omit<ConfigInstance, 'status'>> & { id: string };

/** Returns a factory whose instances default to `defaults` (path, content, ...) under `fields`. */
export function instanceFactory(defaults: Partial<Omit<ConfigInstance, 'status' | 'id'>> = {}) {
  return (fields: InstanceFields): ConfigInstance => {
    const activity = fields.activity_status ?? defaults.activity_status ?? 'queued';
    const error = fields.error_status ?? defaults.error_status ?? 'none';
    return ConfigInstance.parse({
      object: 'config_instance',
      target_status: 'deployed',
      relative_filepath: 'app/config.json',
      created_at: '2026-01-01T00:00:00Z',
      updated_at: '2026-01-01T00:00:00Z',
      device_id: 'dvc_1',
      config_schema_id: 'sch_app',
      config_type_id: 'typ_app',
      device: null,
      config_schema: null,
      config_type: null,
      content: { a: 1 },
      ...defaults,
      ...fields,
      activity_status: activity,
      error_status: error,
      status: mergeStatus(activity, error),
    });
  };
}

/** A record for the mock service's store: device dvc_1, `deployed`, `<id>.json`, `fields` on top. */
export function mockRecord(id: string, fields: Partial<ConfigInstanceRecord> = {}): ConfigInstanceRecord {
  return {
    id,
    device_id: 'dvc_1',
    relative_filepath: `${id}.json`,
    config_schema_id: `sch_${id}`,
    config_type_id: 'typ',
    target_status: 'deployed',
    activity_status: 'queued',
    error_status: 'none',
    content: { owner: id },
    created_at: '2026-01-01T00:00:00.000Z',
    updated_at: '2026-01-01T00:00:00.000Z',
    ...fields,
  };
}
