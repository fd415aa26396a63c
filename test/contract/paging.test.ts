// Contract: the pager against a hostile or changing service (mock faults `paging`, `rewrite`, `mutate`): every
// pull ends, bounded in requests, and one bad or oversize item costs only itself.
import { createServer, request as httpRequest } from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import { isJsonContentFile } from '../../src/api/json-file.js';
import {
  ListingRunawayError,
  ListingUnstableError,
  type PagerOptions,
  PullDeadlineError,
  type PullResult,
  pullConfigInstances,
} from '../../src/api/pager.js';
import type { ConfigContent, ConfigInstance } from '../../src/api/schemas.js';
import { type Clock, systemClock } from '../../src/lib/clock.js';
import { fileOf, type PlanInstance, withFile } from '../../src/reconcile/plan.js';
import { serializeContent } from '../../src/reconcile/serialize.js';
import { PATIENCE_MS, waitFor } from '../helpers/wait-for.js';
import { type Contract, collect, failure, startContract } from './harness.js';

const DEVICE = 'dvc_gateway_01';
const LIST = '^/v1/config_instances$';
const BIG_CAP = 4_000_000;

let contract: Contract;
beforeEach(async () => {
  contract = await startContract();
});
afterEach(async () => {
  await contract.close();
});

async function seed(ids: readonly string[], content: (id: string) => Record<string, unknown> = () => ({})) {
  for (const id of ids) {
    await contract.admin.createInstance({
      id,
      device_id: DEVICE,
      relative_filepath: `pg/${id}.json`,
      content: content(id),
    });
  }
}

const numbered = (n: number) => Array.from({ length: n }, (_, i) => `pg_${String(i).padStart(3, '0')}`);

/** The device's listing as a plain client sees it when nothing is wrong: the reference. */
async function reference(): Promise<string[]> {
  const all = await collect(
    contract
      .client({ maxResponseBytes: BIG_CAP })
      .iterateConfigInstances({ device_id: DEVICE }, { orderBy: 'id:asc' }),
  );
  return all.map((instance) => instance.id);
}

function pull(options: Partial<PagerOptions> & { cap?: number } = {}): Promise<PullResult> {
  const cap = options.cap ?? BIG_CAP;
  return pullConfigInstances([{ device_id: DEVICE }], {
    client: contract.client({ maxResponseBytes: cap }),
    clock: systemClock,
    maxResponseBytes: cap,
    pageLimit: 4,
    ...options,
  });
}

const ids = (instances: readonly ConfigInstance[]) => instances.map((instance) => instance.id);
const listRequests = async () => (await contract.admin.stats())['GET /v1/config_instances'] ?? 0;

describe('paging ends whatever the service says', () => {
  it('has_more forever while ignoring offset: fails with a typed error after a few requests, not 44,140', async () => {
    await seed(numbered(10));
    await contract.admin.addFault({
      match: LIST,
      count: 10_000,
      mode: 'paging',
      ignore_offset: true,
      has_more: true,
    });
    const error = await failure(pull());
    expect(error).toBeInstanceOf(ListingUnstableError);
    expect((error as ListingUnstableError).code).toBe('listing_unstable');
    expect((error as Error).message).toMatch(
      /began with \S+ instead of \S+, the last item of the page before/,
    );
    // Three listings of two pages each.
    expect(await listRequests()).toBe(6);
  });

  it('the client iterators stop too: a page that repeats what was listed ends the iteration', async () => {
    await seed(numbered(6));
    await contract.admin.addFault({
      match: LIST,
      count: 10_000,
      mode: 'paging',
      ignore_offset: true,
      has_more: true,
    });
    const error = await failure(
      collect(
        contract.client().iterateConfigInstances({ device_id: DEVICE }, { limit: 3, orderBy: 'id:asc' }),
      ),
    );
    expect((error as Error).message).toMatch(/the page at offset 3 repeats items already listed/);
    expect(await listRequests()).toBe(2);
  });

  it('has_more forever past the end: ends at the empty page right past total_count, after a few requests', async () => {
    await seed(numbered(6));
    const all = await reference();
    await contract.admin.addFault({ match: LIST, count: 10_000, mode: 'paging', has_more: true });
    const before = await listRequests();
    // The count ends it (adv20: a runaway before, so a service whose has_more is always true never synced).
    expect(ids((await pull()).instances)).toEqual(all);
    expect((await listRequests()) - before).toBeLessThan(10);
    // Without a count, the first page that brings nothing new still stops it.
    await contract.admin.clearFaults();
    await contract.admin.addFault({
      match: LIST,
      count: 10_000,
      mode: 'rewrite',
      replace: [
        { find: '"has_more":false', with: '"has_more":true' },
        { find: `"total_count":${all.length}`, with: '"total_count":-1' },
      ],
    });
    const error = await failure(pull());
    expect(error).toBeInstanceOf(ListingRunawayError);
    expect((error as Error).message).toMatch(/has_more is true on a page with nothing new/);
  });

  it('more items than total_count announced: stops', async () => {
    await seed(numbered(6));
    const total = (await reference()).length;
    await contract.admin.addFault({
      match: LIST,
      count: 10_000,
      mode: 'rewrite',
      replace: [{ find: `"total_count":${total}`, with: '"total_count":2' }],
    });
    const error = await failure(pull());
    expect(error).toBeInstanceOf(ListingRunawayError);
    expect((error as Error).message).toMatch(/more than the total_count of 2/);
  });

  it('a total_count that is off but steady does not block a listing whose pages all overlapped', async () => {
    await seed(numbered(10));
    const all = await reference();
    await contract.admin.addFault({
      match: LIST,
      count: 10_000,
      mode: 'rewrite',
      replace: [{ find: `"total_count":${all.length}`, with: `"total_count":${all.length + 5}` }],
    });
    expect(ids((await pull()).instances)).toEqual(all);
  });

  it('an item budget bounds memory even when every page looks right', async () => {
    await seed(numbered(10));
    const error = await failure(pull({ maxItems: 7 }));
    expect(error).toBeInstanceOf(ListingRunawayError);
    expect((error as Error).message).toMatch(/more than 7 config instances/);
  });

  it('a whole-pull deadline on the injected clock ends a pull that goes on too long', async () => {
    await seed(numbered(20));
    // Every look at the clock moves it one minute on: the 3-minute deadline passes before the third page.
    let minutes = 0;
    const clock: Clock = { ...systemClock, monotonic: () => ++minutes * 60_000 };
    const error = await failure(pull({ clock, deadlineMs: 3 * 60_000 }));
    expect(error).toBeInstanceOf(PullDeadlineError);
    expect((error as PullDeadlineError).code).toBe('pull_deadline');
    expect(await listRequests()).toBe(2);
  });

  it('the deadline also cuts a page request that hangs', async () => {
    await seed(numbered(10));
    await contract.admin.addFault({ match: LIST, count: 1, skip: 1, mode: 'hang' });
    // The pull's real timer (AbortSignal.timeout(deadlineMs)) fires when the test says: once the hanging second
    // request has reached the service. With a real 300 ms, a busy machine (load ~20) ran it out before the first
    // request was even served (0 requests). The pager's own clock check never fires: deadlineMs is an hour.
    const deadlineMs = 3_600_001;
    const timer = new AbortController();
    const timeout = AbortSignal.timeout.bind(AbortSignal);
    const spy = vi
      .spyOn(AbortSignal, 'timeout')
      .mockImplementation((ms) => (ms === deadlineMs ? timer.signal : timeout(ms)));
    try {
      const pulling = failure(
        pullConfigInstances([{ device_id: DEVICE }], {
          // No request timeout of its own before the deadline's.
          client: contract.client({ maxResponseBytes: BIG_CAP, timeoutMs: deadlineMs + 1 }),
          clock: systemClock,
          maxResponseBytes: BIG_CAP,
          pageLimit: 4,
          deadlineMs,
        }),
      );
      await waitFor(async () => (await listRequests()) >= 2, PATIENCE_MS, { what: 'the hanging request' });
      timer.abort(new DOMException('the deadline', 'TimeoutError'));
      expect(await pulling).toBeInstanceOf(PullDeadlineError);
    } finally {
      spy.mockRestore();
    }
    expect(await listRequests()).toBe(2);
  });
});

describe('large configs sync', () => {
  it('pages too large are halved; only an instance too large by itself is invalid (not by its own fault), named by its id', async () => {
    await seed(numbered(9), () => ({ blob: 'x'.repeat(3_000) }));
    await seed(['pg_big'], () => ({ blob: 'y'.repeat(12_000) }));
    const all = await reference();
    const result = await pull({ cap: 10_000, pageLimit: 5 });
    expect(ids(result.instances)).toEqual(all.filter((id) => id !== 'pg_big'));
    expect(result.invalid).toEqual([
      {
        id: 'pg_big',
        // Read from the body's first bytes, like the id: the mock sends them before the content.
        deviceId: expect.any(String),
        activityStatus: 'created',
        errorStatus: 'none',
        problem:
          'config instance is larger by itself than the response limit of 10000 bytes (server.maxResponseBytes)',
        listingFault: true,
      },
    ]);
  });

  it('large items become the bytes of their files as the usual path writes them, JSON and YAML streamed or not', async () => {
    // Long strings, few of them: over 1 MiB in all, cheap to build and compare.
    const rules = Array.from(
      { length: 1000 },
      (_, k) => `rule ${k}: "ship" /var/log/é-${k}/*.log\t☃ ${'x'.repeat(1000)}`,
    );
    const contents: Record<string, Record<string, unknown>> = {
      pg_json: { rules, n: [0, -5, 1.5, 1e21, 5e-324], nested: { a: [true, null, {}], b: [] } },
      // Integer-like keys, which JSON.parse moves first: streamed too, in the parse's order (json-file.ts MemberPlan).
      pg_keys: { rules: rules.slice(0, 100), 10: 'ten', 2: 'two' },
      pg_yaml: { rules: rules.slice(0, 100), on: 'yes' },
    };
    for (const [id, content] of Object.entries(contents)) {
      const extension = id === 'pg_yaml' ? 'yaml' : 'json';
      await contract.admin.createInstance({
        id,
        device_id: DEVICE,
        relative_filepath: `pg/${id}.${extension}`,
        content,
      });
    }
    const streamed: string[] = [];
    const result = await pullConfigInstances<PlanInstance>([{ device_id: DEVICE }], {
      client: contract.client({ maxResponseBytes: BIG_CAP }),
      clock: systemClock,
      maxResponseBytes: BIG_CAP,
      // One page over NATIVE_SPLIT_MAX_CHARS: cut on its bytes, its items judged from them.
      pageLimit: 20,
      prepare: (instance) => {
        if (isJsonContentFile(instance.content)) streamed.push(instance.id);
        return withFile(instance);
      },
    });
    // A YAML path streams too (reconcile/yaml-stream.ts): the same bytes as yaml-text.ts writes from the tree.
    expect(streamed).toEqual(['pg_json', 'pg_keys', 'pg_yaml']);
    const pulled = result.instances.filter((instance) => instance.id in contents);
    expect(pulled.map((instance) => instance.id)).toEqual(['pg_json', 'pg_keys', 'pg_yaml']);
    for (const instance of pulled) {
      const expected = serializeContent(instance.relative_filepath, contents[instance.id] as ConfigContent);
      expect(fileOf(instance).data?.equals(expected), instance.id).toBe(true);
    }
  });

  it('an oversize instance whose id cannot be read from its first bytes is named by its place', async () => {
    await seed(numbered(3));
    await seed(['pg_zbig'], () => ({ blob: 'y'.repeat(12_000) }));
    // The id moves behind the content: the first 64 KiB would not show it if the content were that big.
    await contract.admin.addFault({
      match: LIST,
      count: 10_000,
      mode: 'rewrite',
      replace: [{ find: '"id":"pg_zbig"', with: '"id_moved":"pg_zbig"' }],
    });
    const result = await pull({ cap: 10_000 });
    expect(result.invalid).toHaveLength(1);
    expect(result.invalid[0]?.id).toBeUndefined();
    expect(result.invalid[0]?.problem).toMatch(
      /^the instance right after pg_002 \(offset \d+\) is larger by itself/,
    );
  });
});

describe('the envelope, then each item', () => {
  it('good items are used; a bad one is named with its real problem; an unknown status is skipped', async () => {
    await seed(['pg_a', 'pg_b', 'pg_c', 'pg_d', 'pg_e', 'pg_f'], (id) => ({ n: 1, deep: 0, mark: id }));
    const deep = `${'['.repeat(80)}${']'.repeat(80)}`;
    await contract.admin.addFault({
      match: LIST,
      count: 10_000,
      mode: 'rewrite',
      replace: [
        { find: '"n":1,"deep":0,"mark":"pg_a"', with: '"n":1e400,"deep":0,"mark":"pg_a"' },
        { find: '"deep":0,"mark":"pg_b"', with: `"deep":${deep},"mark":"pg_b"` },
        { find: '"id":"pg_c","target_status":"created"', with: '"id":"pg_c","target_status":"superseded"' },
        { find: '"id":"pg_e"', with: '"id":17' },
        { find: '"mark":"pg_f"', with: `"mark":${'['.repeat(600)}${']'.repeat(600)}` },
      ],
    });
    const result = await pull();
    const good = ids(result.instances);
    expect(good).toContain('pg_d');
    for (const bad of ['pg_a', 'pg_b', 'pg_c', 'pg_e', 'pg_f']) expect(good).not.toContain(bad);
    const byId = new Map(result.invalid.map((item) => [item.id, item]));
    expect(byId.get('pg_a')).toEqual({
      id: 'pg_a',
      deviceId: 'dvc_gateway_01',
      activityStatus: 'created',
      errorStatus: 'none',
      problem: 'content.n: number 1e400 is out of range (beyond ±1.8e308)',
    });
    expect(byId.get('pg_b')?.problem).toMatch(/^content\.deep(\[0\]){63}: nested deeper than 64 levels$/);
    expect(byId.get('pg_f')?.problem).toBe('nested more than 512 levels deep (content may nest 64 levels)');
    expect(byId.get(undefined)?.problem).toMatch(/^id: .*expected string/);
    expect(result.skipped).toEqual([
      {
        id: 'pg_c',
        deviceId: 'dvc_gateway_01',
        relativeFilepath: 'pg/pg_c.json',
        unknown: { field: 'target_status', value: 'superseded' },
      },
    ]);
  });

  it('a broken envelope fails the page as a whole, naming the field', async () => {
    await seed(numbered(2));
    await contract.admin.addFault({
      match: LIST,
      count: 1,
      mode: 'rewrite',
      replace: [{ find: '"has_more":false', with: '"has_more":"no"' }],
    });
    const error = await failure(pull({ pageLimit: 100 }));
    expect((error as Error).message).toMatch(/has_more: /);
  });
});

describe('offset paging under change', () => {
  it('an instance removed between two pages: the shift is seen and the list taken again, nothing lost', async () => {
    await seed(numbered(10));
    const before = await reference();
    const removed = before[1] ?? '';
    // The second request (page 2) finds the instance gone: every later item moves back by one.
    await contract.admin.addFault({
      match: LIST,
      count: 1,
      skip: 1,
      mode: 'mutate',
      remove_instances: [removed],
    });
    const result = await pull();
    expect(ids(result.instances)).toEqual(before.filter((id) => id !== removed));
  });

  it('an instance added before the page boundary: seen, and the list taken again', async () => {
    await seed(numbered(10));
    const before = await reference();
    await contract.admin.addFault({
      match: LIST,
      count: 1,
      skip: 1,
      mode: 'mutate',
      add_instances: [{ id: 'aa_new', device_id: DEVICE, relative_filepath: 'pg/new.json', content: {} }],
    });
    const result = await pull();
    expect(ids(result.instances)).toEqual(['aa_new', ...before]);
  });
});

/**
 * A service in front of the mock whose pages hold fewer items than asked (the spec: "length is at most limit"),
 * as one that caps a page by its bytes does: `pageSize(offset)` items from that offset.
 */
async function smallPages(
  pageSize: (offset: number) => number,
): Promise<{ url: string; close(): Promise<void> }> {
  const upstream = new URL(contract.server.url);
  const server = createServer((incoming, outgoing) => {
    const url = new URL(incoming.url ?? '/', upstream);
    if (url.pathname === '/v1/config_instances') {
      url.searchParams.set('limit', String(pageSize(Number(url.searchParams.get('offset') ?? 0))));
    }
    const forwarded = httpRequest(
      url,
      { method: incoming.method, headers: { ...incoming.headers, host: upstream.host } },
      (answer) => {
        outgoing.writeHead(answer.statusCode ?? 502, answer.headers);
        answer.pipe(outgoing);
      },
    );
    incoming.pipe(forwarded);
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return {
    url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`,
    close: () =>
      new Promise<void>((resolve) => {
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  };
}

describe('a service whose pages hold fewer items than asked', () => {
  it('one item per page: every item listed once, one request per item', async () => {
    await seed(numbered(6));
    const all = await reference();
    const service = await smallPages(() => 1);
    const before = await listRequests();
    try {
      const result = await pull({
        client: contract.client({ baseUrl: service.url, maxResponseBytes: BIG_CAP }),
      });
      expect(ids(result.instances)).toEqual(all);
      expect((await listRequests()) - before).toBe(all.length);
    } finally {
      await service.close();
    }
  });

  it('a page of one after a page of many (a large item alone in its page): listed past it, nothing lost', async () => {
    await seed(numbered(10));
    const all = await reference();
    // The first page as asked; every later one holds a single item, so the page anchored on the last item of
    // the page before holds that item alone.
    const service = await smallPages((offset) => (offset === 0 ? 4 : 1));
    try {
      const result = await pull({
        client: contract.client({ baseUrl: service.url, maxResponseBytes: BIG_CAP }),
      });
      expect(ids(result.instances)).toEqual(all);
    } finally {
      await service.close();
    }
  });
});
