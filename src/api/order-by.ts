// The `order_by` query parameter: parsing and formatting under the spec's sorting rules (shared by client and mock).
import { AgentError } from '../lib/errors.js';

export type OrderDirection = 'asc' | 'desc';

export interface OrderTerm {
  field: string;
  direction: OrderDirection;
}

/** A malformed `order_by`: a schema-level mistake of the caller, so never worth retrying. */
export class OrderByError extends AgentError {
  readonly term: string;

  constructor(term: string, problem: string) {
    super('invalid_order_by', `order_by term ${JSON.stringify(term)}: ${problem}`, { retryable: false });
    this.term = term;
  }
}

/**
 * Parses `<field>[:<dir>][,<field>[:<dir>]...]` (spec: Sorting rules 1-4): the direction defaults to desc,
 * and `id:asc` is appended unless `id` is already present so that ties always resolve the same way.
 * An empty or absent `raw` means `defaultOrder`.
 */
export function parseOrderBy(
  raw: string | undefined,
  allowedFields: readonly string[],
  defaultOrder: string,
): OrderTerm[] {
  const source = raw === undefined || raw.trim() === '' ? defaultOrder : raw;
  const terms: OrderTerm[] = [];
  const seen = new Set<string>();
  for (const rawTerm of source.split(',')) {
    const term = rawTerm.trim();
    if (term === '') throw new OrderByError(rawTerm, 'empty term');
    const parts = term.split(':');
    if (parts.length > 2) throw new OrderByError(term, 'expected <field>:<direction>');
    const field = parts[0] ?? '';
    const direction = parts[1] ?? 'desc';
    if (!allowedFields.includes(field)) {
      throw new OrderByError(
        term,
        `unknown field ${JSON.stringify(field)} (allowed: ${allowedFields.join(', ')})`,
      );
    }
    if (direction !== 'asc' && direction !== 'desc') {
      throw new OrderByError(term, `unknown direction ${JSON.stringify(direction)} (allowed: asc, desc)`);
    }
    if (seen.has(field)) throw new OrderByError(term, `field ${JSON.stringify(field)} appears twice`);
    seen.add(field);
    terms.push({ field, direction });
  }
  if (!seen.has('id')) terms.push({ field: 'id', direction: 'asc' });
  return terms;
}
