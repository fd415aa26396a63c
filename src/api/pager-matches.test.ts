// Which listed items a query would have listed (pager.ts `matches`, the wide listing's keep): every named field equal.
import { describe, expect, it } from 'vitest';
import type { PageItem } from './list-page.js';
import { matches } from './pager.js';
import type { ConfigInstance, ConfigInstanceFilters } from './schemas.js';

const instance = {
  id: 'cfg_1',
  device_id: 'dvc_1',
  target_status: 'deployed',
  activity_status: 'deployed',
  error_status: 'none',
  config_schema_id: 'sch_1',
} as unknown as ConfigInstance;
const valid: PageItem = { kind: 'valid', instance };
const unknownActivity = {
  kind: 'unknown_status',
  instance: { ...instance, activity_status: 'hibernating' },
  unknown: { field: 'activity_status', value: 'hibernating' },
} as unknown as PageItem;
const invalid: PageItem = { kind: 'invalid', id: 'cfg_2', targetStatus: 'removed', problem: 'broken' };

describe('matches', () => {
  it.each([
    ['every named field equal', valid, { device_id: 'dvc_1', target_status: 'deployed' }, true],
    ['one field differs', valid, { device_id: 'dvc_1', target_status: 'removed' }, false],
    [
      'a filter left undefined is no filter',
      valid,
      { device_id: 'dvc_1', activity_status: undefined } as unknown as ConfigInstanceFilters,
      true,
    ],
    ['no filter at all', valid, {}, true],
    [
      'a status the agent does not know matches any value',
      unknownActivity,
      { activity_status: 'failed' },
      true,
    ],
    ['… while its known fields still decide', unknownActivity, { device_id: 'dvc_9' }, false],
    ['an invalid item: unreadable fields match', invalid, { device_id: 'dvc_1', error_status: 'none' }, true],
    ['… readable ones decide', invalid, { target_status: 'deployed' }, false],
  ] as [string, PageItem, ConfigInstanceFilters, boolean][])('%s', (_name, item, filters, expected) => {
    expect(matches(item, filters)).toBe(expected);
  });
});
