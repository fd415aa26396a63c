// Property-based test (fast-check) of the pull over random list responses: pages of valid and invalid items
// served on loopback, read by the real client and pager. Never an instance on the strength of an invalid item,
// never a lost valid one, every readable bad item named, every unknown status skipped.
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import fc from 'fast-check';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createClient } from '../../src/api/client.js';
import { pullConfigInstances } from '../../src/api/pager.js';
import { MAX_CONTENT_DEPTH } from '../../src/api/schemas.js';
import { systemClock } from '../../src/lib/clock.js';
import { instanceFactory } from '../helpers/instances.js';
import { countFromEnv, runSeed } from './support/random.js';

const CASES = countFromEnv('RELIABILITY_LIST_CASES', 150);
const SEED = runSeed();
const makeInstance = instanceFactory({ device_id: 'dvc_props' });

/** How an item is broken, and what the pull must make of it. */
type Kind =
  | 'valid'
  | 'too_deep'
  | 'number_overflow'
  | 'wrong_type'
  | 'missing_path'
  | 'missing_id'
  | 'unknown_target_status'
  | 'wrong_object'
  | 'bad_timestamp';

const KINDS: Kind[] = [
  'valid',
  'too_deep',
  'number_overflow',
  'wrong_type',
  'missing_path',
  'missing_id',
  'unknown_target_status',
  'wrong_object',
  'bad_timestamp',
];

interface Served {
  id: string;
  kind: Kind;
  /** The item's JSON text, as the service sends it (raw, so `1e400` stays `1e400`). */
  text: string;
  /** For a valid item: the instance the pull must return, deep-equal. */
  expected?: unknown;
}

function serve(id: string, kind: Kind, path: string, value: number): Served {
  const instance = makeInstance({ id, relative_filepath: path, content: { value, id } });
  const plain = JSON.parse(JSON.stringify(instance)) as Record<string, unknown>;
  switch (kind) {
    case 'valid':
      return { id, kind, text: JSON.stringify(plain), expected: plain };
    case 'too_deep': {
      let nested: unknown = 1;
      for (let depth = 0; depth < MAX_CONTENT_DEPTH + 2; depth += 1) nested = { n: nested };
      return { id, kind, text: JSON.stringify({ ...plain, content: nested }) };
    }
    case 'number_overflow':
      return {
        id,
        kind,
        text: JSON.stringify({ ...plain, content: { big: 0 } }).replace('"big":0', '"big":1e400'),
      };
    case 'wrong_type':
      return { id, kind, text: JSON.stringify({ ...plain, target_status: 42 }) };
    case 'missing_path': {
      const { relative_filepath: _path, ...rest } = plain;
      return { id, kind, text: JSON.stringify(rest) };
    }
    case 'missing_id': {
      const { id: _id, ...rest } = plain;
      return { id, kind, text: JSON.stringify(rest) };
    }
    case 'unknown_target_status':
      return { id, kind, text: JSON.stringify({ ...plain, target_status: 'paused' }) };
    case 'wrong_object':
      return { id, kind, text: JSON.stringify({ ...plain, object: 'config_instanc' }) };
    case 'bad_timestamp':
      return { id, kind, text: JSON.stringify({ ...plain, created_at: 'yesterday' }) };
  }
}

/** The list the stub serves; replaced for every case. */
let listed: Served[] = [];
let server: Server | undefined;
let baseUrl = '';

beforeAll(async () => {
  server = createServer((req, res) => {
    const url = new URL(req.url ?? '/', 'http://stub');
    const offset = Number(url.searchParams.get('offset') ?? 0);
    const limit = Number(url.searchParams.get('limit') ?? 10);
    const page = listed.slice(offset, offset + limit);
    const body =
      `{"object":"list","total_count":${listed.length},"limit":${limit},"offset":${offset},` +
      `"has_more":${offset + limit < listed.length},"data":[${page.map((item) => item.text).join(',')}]}`;
    res.writeHead(200, { 'content-type': 'application/json' });
    res.end(body);
  });
  await new Promise<void>((resolve) => server?.listen(0, '127.0.0.1', resolve));
  baseUrl = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
});
afterAll(async () => {
  await new Promise<void>((resolve) => server?.close(() => resolve()));
});

describe('pull over random list responses', () => {
  it(`${CASES} random listings of valid and invalid items: no bad item used, no valid item lost`, async () => {
    const client = createClient({
      baseUrl,
      apiKey: 'sk_props',
      timeoutMs: 10_000,
      maxResponseBytes: 32 * 1024 * 1024,
    });
    const itemKind = fc.oneof(
      { weight: 3, arbitrary: fc.constant<Kind>('valid') },
      { weight: 2, arbitrary: fc.constantFrom(...KINDS) },
    );
    let validSeen = 0;
    let invalidSeen = 0;
    await fc.assert(
      fc.asyncProperty(
        fc.array(fc.tuple(itemKind, fc.integer({ min: -1_000_000, max: 1_000_000 })), { maxLength: 60 }),
        fc.integer({ min: 1, max: 100 }),
        async (items, pageLimit) => {
          // Ids ascending, as the service orders them for `order_by=id:asc`; one path per item.
          listed = items.map(([kind, value], index) => {
            const id = `cfg_${String(index).padStart(4, '0')}`;
            return serve(id, kind, `app/file-${index}.json`, value);
          });
          const result = await pullConfigInstances([{ device_id: 'dvc_props' }], {
            client,
            clock: systemClock,
            pageLimit,
          });
          const returned = new Map(result.instances.map((instance) => [instance.id, instance]));
          for (const item of listed) {
            if (item.kind === 'valid') {
              validSeen += 1;
              expect(returned.has(item.id), `valid ${item.id} lost (page limit ${pageLimit})`).toBe(true);
              expect(JSON.parse(JSON.stringify(returned.get(item.id)))).toEqual(item.expected);
              continue;
            }
            invalidSeen += 1;
            expect(returned.has(item.id), `${item.kind} item ${item.id} was used`).toBe(false);
            if (item.kind === 'unknown_target_status') {
              expect(
                result.skipped.map((s) => s.id),
                `${item.id} not skipped`,
              ).toContain(item.id);
            } else if (item.kind !== 'missing_id') {
              expect(
                result.invalid.map((i) => i.id),
                `${item.kind} ${item.id} not named`,
              ).toContain(item.id);
            }
          }
          expect(result.instances.length).toBe(listed.filter((item) => item.kind === 'valid').length);
          const unnamed = listed.filter((item) => item.kind === 'missing_id').length;
          expect(result.invalid.filter((i) => i.id === undefined).length).toBe(unnamed);
        },
      ),
      { numRuns: CASES, seed: SEED },
    );
    process.stderr.write(
      `list-properties: seed ${SEED}, ${CASES} listings, ${validSeen} valid and ${invalidSeen} bad items\n`,
    );
    expect(validSeen).toBeGreaterThan(0);
    expect(invalidSeen).toBeGreaterThan(0);
  });
});
