// Query parameters shared by the list endpoints: paging (clamped), order_by, expand[] and enum filters.
import { instantSortKey } from '../api/instant.js';
import { OrderByError, type OrderTerm, parseOrderBy } from '../api/order-by.js';
import { LIMIT_DEFAULT, LIMIT_MAX, LIMIT_MIN, type ListEnvelope } from '../api/schemas.js';
import { invalidRequest } from './errors.js';

export interface Page {
  limit: number;
  offset: number;
}

const INTEGER = /^[+-]?\d+$/;

/**
 * Out-of-range values are clamped (spec: Pagination rules 3-4); only a non-integer is an error. An offset past
 * 2^53 - 1 becomes that (no list is that long: the page is empty): echoed unclamped it failed the envelope's
 * integer check and the mock answered 500 (spec35).
 */
export function parsePage(rawLimit: string | undefined, rawOffset: string | undefined): Page {
  const limit = parseInteger('limit', rawLimit, LIMIT_DEFAULT);
  const offset = parseInteger('offset', rawOffset, 0);
  return {
    limit: Math.min(LIMIT_MAX, Math.max(LIMIT_MIN, limit)),
    offset: Math.min(Number.MAX_SAFE_INTEGER, Math.max(0, offset)),
  };
}

function parseInteger(name: string, raw: string | undefined, fallback: number): number {
  if (raw === undefined) return fallback;
  if (!INTEGER.test(raw)) {
    throw invalidRequest(`${name}: ${JSON.stringify(raw)} is not an integer`, { parameter: name });
  }
  return Number(raw);
}

export function parseOrder(
  raw: string | undefined,
  fields: readonly string[],
  defaultOrder: string,
): OrderTerm[] {
  try {
    return parseOrderBy(raw, fields, defaultOrder);
  } catch (error) {
    if (error instanceof OrderByError) {
      throw invalidRequest(`order_by: ${error.message}`, { parameter: 'order_by', term: error.term });
    }
    throw error;
  }
}

export function parseExpand<T extends string>(
  values: readonly string[] | undefined,
  allowed: readonly T[],
): Set<T> {
  const out = new Set<T>();
  for (const value of values ?? []) {
    if (!(allowed as readonly string[]).includes(value)) {
      throw invalidRequest(
        `expand[]: unknown value ${JSON.stringify(value)} (allowed: ${allowed.join(', ')})`,
        {
          parameter: 'expand[]',
          value,
        },
      );
    }
    out.add(value as T);
  }
  return out;
}

export function parseEnumFilter<T extends string>(
  name: string,
  raw: string | undefined,
  allowed: readonly T[],
): T | undefined {
  if (raw === undefined) return undefined;
  if (!(allowed as readonly string[]).includes(raw)) {
    throw invalidRequest(`${name}: unknown value ${JSON.stringify(raw)} (allowed: ${allowed.join(', ')})`, {
      parameter: name,
      value: raw,
    });
  }
  return raw as T;
}

export type SortKey<T> = (item: T) => string | number;

/** Sorts by the terms in order; timestamps should be given as `timestampKey`s so differing offsets compare right. */
export function sortItems<T>(
  items: readonly T[],
  terms: readonly OrderTerm[],
  keys: Record<string, SortKey<T>>,
): T[] {
  return [...items].sort((a, b) => {
    for (const term of terms) {
      const key = keys[term.field];
      if (key === undefined) continue;
      const x = key(a);
      const y = key(b);
      if (x === y) continue;
      const less = x < y ? -1 : 1;
      return term.direction === 'asc' ? less : -less;
    }
    return 0;
  });
}

/** The envelope of one page of already filtered and sorted items (spec: Pagination rules 5-6). */
export function pageOf<T>(items: readonly T[], page: Page, withTotal: boolean): ListEnvelope<T> {
  const data = items.slice(page.offset, page.offset + page.limit);
  return {
    object: 'list',
    total_count: withTotal ? items.length : -1,
    limit: page.limit,
    offset: page.offset,
    has_more: page.offset + data.length < items.length,
    data,
  };
}

/**
 * The sort key of a timestamp: the instant it names, to the last digit. Date.parse read `+00` and leap seconds
 * as NaN and dropped the digits past the millisecond (spec35).
 */
export function timestampKey(value: string): string {
  return instantSortKey(value);
}
