// Unit tests of the order_by parser against the spec's sorting rules.
import { describe, expect, it } from 'vitest';
import { AgentError } from '../lib/errors.js';
import { OrderByError, type OrderTerm, parseOrderBy } from './order-by.js';

const FIELDS = ['id', 'name', 'created_at'] as const;

/** Terms back in order_by's own syntax, so an expectation reads like the query. */
function formatOrderBy(terms: readonly OrderTerm[]): string {
  return terms.map((term) => `${term.field}:${term.direction}`).join(',');
}

function thrown(fn: () => unknown): unknown {
  try {
    fn();
  } catch (error) {
    return error;
  }
  throw new Error('expected a throw');
}

describe('parseOrderBy', () => {
  it('uses the default order when the parameter is absent or blank, appending id:asc', () => {
    const expected = [
      { field: 'created_at', direction: 'desc' },
      { field: 'id', direction: 'asc' },
    ];
    expect(parseOrderBy(undefined, FIELDS, 'created_at:desc')).toEqual(expected);
    expect(parseOrderBy('', FIELDS, 'created_at:desc')).toEqual(expected);
    expect(parseOrderBy('  ', FIELDS, 'created_at:desc')).toEqual(expected);
  });

  it('defaults the direction to desc', () => {
    expect(formatOrderBy(parseOrderBy('name', FIELDS, 'id:asc'))).toBe('name:desc,id:asc');
    expect(formatOrderBy(parseOrderBy('id', FIELDS, 'id:asc'))).toBe('id:desc');
  });

  it('keeps a multi-field order and appends id:asc only when id is absent', () => {
    expect(formatOrderBy(parseOrderBy('name:asc,created_at:desc', FIELDS, 'id:asc'))).toBe(
      'name:asc,created_at:desc,id:asc',
    );
    expect(formatOrderBy(parseOrderBy('id:asc,created_at:desc', FIELDS, 'id:asc'))).toBe(
      'id:asc,created_at:desc',
    );
    expect(formatOrderBy(parseOrderBy('created_at:asc,id:desc', FIELDS, 'id:asc'))).toBe(
      'created_at:asc,id:desc',
    );
  });

  it('tolerates spaces around terms', () => {
    expect(formatOrderBy(parseOrderBy(' name:asc , id:desc ', FIELDS, 'id:asc'))).toBe('name:asc,id:desc');
  });

  it.each([
    ['color:asc', 'color:asc', 'unknown field'],
    ['name:up', 'name:up', 'unknown direction'],
    ['name:ASC', 'name:ASC', 'unknown direction'],
    ['name:asc:x', 'name:asc:x', 'expected <field>:<direction>'],
    ['name:asc,', '', 'empty term'],
    ['name:asc,name:desc', 'name:desc', 'appears twice'],
    [':asc', ':asc', 'unknown field'],
  ])('rejects %j naming the bad term', (raw, term, problem) => {
    const error = thrown(() => parseOrderBy(raw, FIELDS, 'id:asc'));
    expect(error).toBeInstanceOf(OrderByError);
    expect(error).toBeInstanceOf(AgentError);
    const orderError = error as OrderByError;
    expect(orderError.code).toBe('invalid_order_by');
    expect(orderError.retryable).toBe(false);
    expect(orderError.term).toBe(term);
    expect(orderError.message).toContain(JSON.stringify(term));
    expect(orderError.message).toContain(problem);
  });

  it('rejects a bad default order too, so a misconfigured endpoint fails loudly', () => {
    expect(() => parseOrderBy(undefined, ['id'], 'created_at:desc')).toThrow(OrderByError);
  });
});
