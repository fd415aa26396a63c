// adv20: a hostile or broken service's listing against runPass: what lands on disk and what the service hears.
import { createServer, request as httpRequest, type IncomingMessage, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { createPassWorld, LIST, type PassWorld } from '../../test/helpers/pass-world.js';

const T0 = '2026-01-01T00:00:00.000Z';
const T1 = '2026-02-01T00:00:00.000Z';

let world: PassWorld;

beforeEach(async () => {
  world = await createPassWorld({ name: 'adv20', maxResponseBytes: 1 << 20 });
});

afterEach(() => world.close());

/**
 * The service pages by 4 (a `paging` fault with a limit, applying together with a test's own faults): 3
 * instances before b_x put the page boundary where 99 did under the agent's page of 100, each page cut and
 * announced as a page of 100 would be, for 25 times fewer files written.
 */
function fillPageOfFour(): void {
  world.fault({ match: LIST, count: 100_000, mode: 'paging', limit: 4 });
  for (let i = 0; i < 3; i += 1) world.put({ id: `a_${String(i).padStart(3, '0')}` });
}

describe('a listing that ends before its total_count', () => {
  // A page that says `has_more: false` while `total_count` counts more: the count is off or the listing was cut
  // short. The file of an instance on the pages never sent (c_w, deployed at the service) was deleted: a
  // retired instance listed at its path (b_x, whose removal the service has not recorded yet) made the pull look
  // complete and the path wanted by nobody.
  it('removes no file on the strength of it', async () => {
    fillPageOfFour();
    // b_x held shared.json first; c_w took it over (a later deploy at the same path).
    world.put({ id: 'b_x', relative_filepath: 'shared.json', config_schema_id: 'sch_x', updated_at: T0 });
    expect((await world.pass()).converged).toBe(true);
    world.put({ id: 'c_w', relative_filepath: 'shared.json', config_schema_id: 'sch_w', updated_at: T1 });
    const x = world.server.state.instances.get('b_x')!;
    world.server.state.instances.set('b_x', { ...x, target_status: 'removed', activity_status: 'deployed' });
    await world.pass();
    expect(await world.fileAt('shared.json')).toBe('{\n  "owner": "c_w"\n}\n');
    // A service that lags: b_x still shows deployed (its removal not recorded), c_w deployed.
    const x2 = world.server.state.instances.get('b_x')!;
    world.server.state.instances.set('b_x', { ...x2, activity_status: 'deployed', error_status: 'none' });
    const w = world.server.state.instances.get('c_w')!;
    expect(w.activity_status).toBe('deployed');
    const before = world.reports().length;
    // The first page (a_000..a_002, b_x) says there is no more, though total_count counts c_w.
    world.fault({
      match: LIST,
      count: 1000,
      mode: 'rewrite',
      replace: [{ find: '"has_more":true', with: '"has_more":false' }],
    });
    await world.pass();
    expect(await world.exists('shared.json')).toBe(true);
    expect(await world.fileAt('shared.json')).toBe('{\n  "owner": "c_w"\n}\n');
    // c_w, which the service shows deployed, is told nothing; b_x only that it is removed (its file is c_w's).
    expect(world.reports().slice(before)).toEqual(['b_x removed/none']);
    expect(await world.fileAt('a_000.json')).toBe('{\n  "owner": "a_000"\n}\n');
  });
});

type Answer = (incoming: IncomingMessage, outgoing: ServerResponse, url: URL) => boolean;

/** A service in front of the mock: `answer` answers a request itself (true) or may change the URL it forwards. */
async function frontOfMock(answer: Answer): Promise<{ url: string; close(): Promise<void> }> {
  const upstream = new URL(world.server.url);
  const front = createServer((incoming, outgoing) => {
    const url = new URL(incoming.url ?? '/', upstream);
    if (answer(incoming, outgoing, url)) return;
    const forwarded = httpRequest(
      url,
      { method: incoming.method, headers: { ...incoming.headers, host: upstream.host } },
      (response) => {
        outgoing.writeHead(response.statusCode ?? 502, response.headers);
        response.pipe(outgoing);
      },
    );
    incoming.pipe(forwarded);
  });
  await new Promise<void>((resolve) => front.listen(0, '127.0.0.1', resolve));
  return {
    url: `http://127.0.0.1:${(front.address() as AddressInfo).port}`,
    close: () =>
      new Promise<void>((resolve) => {
        front.closeAllConnections();
        front.close(() => resolve());
      }),
  };
}

/** A service in front of the mock whose pages hold one item each (one that caps a page by its bytes). */
function pagesOfOne(): Promise<{ url: string; close(): Promise<void> }> {
  return frontOfMock((_incoming, _outgoing, url) => {
    if (url.pathname === '/v1/config_instances') url.searchParams.set('limit', '1');
    return false;
  });
}

describe('a listing cut short, then whole again', () => {
  // The record of an instance the cut listing did not show (and owning no file) was forgotten as if the service
  // had deleted it, and with it the echo of the agent's own report: the loser of a path conflict, whose
  // `retrying` report had moved its updated_at past the winner's, then won the path as the instance updated
  // last, and its older bytes replaced the winner's file.
  it('keeps what the agent knows of instances it did not see', async () => {
    fillPageOfFour();
    world.put({ id: 'b_x', relative_filepath: 'shared.json', config_schema_id: 'sch_x', updated_at: T1 });
    world.put({ id: 'c_y', relative_filepath: 'shared.json', config_schema_id: 'sch_y', updated_at: T0 });
    await world.pass();
    expect(await world.fileAt('shared.json')).toBe('{\n  "owner": "b_x"\n}\n');
    expect(world.reports().filter((r) => r.startsWith('c_y'))).toEqual(['c_y queued/retrying']);
    world.fault({
      match: LIST,
      count: 1000,
      mode: 'rewrite',
      replace: [{ find: '"has_more":true', with: '"has_more":false' }],
    });
    await world.pass();
    world.server.state.clearFaults();
    world.fault({ match: LIST, count: 100_000, mode: 'paging', limit: 4 });
    await world.pass();
    await world.pass();
    expect(await world.fileAt('shared.json')).toBe('{\n  "owner": "b_x"\n}\n');
    expect(world.reports().filter((r) => r.startsWith('c_y'))).toEqual(['c_y queued/retrying']);
  });
});

describe('an item whose id cannot be read', () => {
  // Whichever instance that item is, the listing cannot say it is gone: its record (and the echo of the agent's
  // own report) must not be forgotten, or a path conflict's loser wins the path once the item is readable again.
  it('keeps what the agent knows of every instance', async () => {
    world.put({ id: 'b_x', relative_filepath: 'shared.json', config_schema_id: 'sch_x', updated_at: T1 });
    world.put({ id: 'c_y', relative_filepath: 'shared.json', config_schema_id: 'sch_y', updated_at: T0 });
    await world.pass();
    expect(await world.fileAt('shared.json')).toBe('{\n  "owner": "b_x"\n}\n');
    expect(world.reports().filter((r) => r.startsWith('c_y'))).toEqual(['c_y queued/retrying']);
    world.fault({
      match: LIST,
      count: 1000,
      mode: 'rewrite',
      replace: [{ find: '"id":"c_y"', with: '"id":7' }],
    });
    await world.pass();
    world.server.state.clearFaults();
    await world.pass();
    await world.pass();
    expect(await world.fileAt('shared.json')).toBe('{\n  "owner": "b_x"\n}\n');
    expect(world.reports().filter((r) => r.startsWith('c_y'))).toEqual(['c_y queued/retrying']);
  });
});

describe('pages of one item and a total_count that is off', () => {
  // Pages of one cannot overlap, so a count that disagrees at the end could be a shift and the listing is asked
  // for again; when every try ends the same way the count is off, and the device was never synced (each pass:
  // listing_unstable after 3 listings, nothing written) for as long as the service counted so.
  it('writes and reports what is listed, after three tries that end alike', async () => {
    world.put({ id: 'a_1' });
    world.put({ id: 'a_2' });
    world.put({ id: 'a_3', target_status: 'removed', activity_status: 'deployed' });
    world.fault({
      match: LIST,
      count: 1000,
      mode: 'rewrite',
      replace: [{ find: '"total_count":3', with: '"total_count":4' }],
    });
    const front = await pagesOfOne();
    try {
      await world.open({ clientOptions: { baseUrl: front.url } });
      const result = await world.pass();
      expect(result.error?.message).toBeUndefined();
      expect(await world.fileAt('a_1.json')).toBe('{\n  "owner": "a_1"\n}\n');
      expect(await world.fileAt('a_2.json')).toBe('{\n  "owner": "a_2"\n}\n');
      expect(world.reports().sort()).toEqual(['a_1 deployed/none', 'a_2 deployed/none', 'a_3 removed/none']);
      expect(result.reachable).toBe(true);
    } finally {
      await world.reconciler.close();
      await front.close();
    }
  });
});

describe('ids that name Object.prototype members', () => {
  // Every per-instance table the agent keeps (state.json's records, the outbox, fingerprints, told items, report
  // echoes) is keyed by the service's ids: one that is a prototype member must be an instance like any other,
  // written, remembered across a restart, and its file removed when it is retired.
  it('are deployed, remembered across a restart and removed when retired', async () => {
    const ids = ['__proto__', 'constructor', 'toString', 'hasOwnProperty', 'valueOf', '__defineGetter__'];
    for (const id of ids) world.put({ id, relative_filepath: `p/${id}.json` });
    expect((await world.pass()).converged).toBe(true);
    for (const id of ids) expect(await world.fileAt(`p/${id}.json`)).toBe(`{\n  "owner": "${id}"\n}\n`);
    expect(world.reports().sort()).toEqual(ids.map((id) => `${id} deployed/none`).sort());
    await world.open();
    expect((await world.pass()).converged).toBe(true);
    expect(world.reports()).toHaveLength(ids.length);
    for (const id of ids) {
      const record = world.server.state.instances.get(id)!;
      world.server.state.instances.set(id, { ...record, target_status: 'removed', updated_at: T1 });
    }
    await world.pass();
    for (const id of ids) expect(await world.exists(`p/${id}.json`)).toBe(false);
    expect(world.reports().slice(ids.length).sort()).toEqual(ids.map((id) => `${id} removed/none`).sort());
    await world.open();
    expect((await world.pass()).converged).toBe(true);
    expect(world.reports()).toHaveLength(2 * ids.length);
  });
});

describe('instances that trade paths in one listing', () => {
  // Each new path is recorded as the other instance's file: a takeover and a moved instance's old path at once.
  it('leaves each file with its new owner and removes none', async () => {
    world.put({ id: 'x', relative_filepath: 'a.json', content: { v: 1 } });
    world.put({ id: 'y', relative_filepath: 'b.json', content: { v: 1 } });
    world.put({ id: 'z', relative_filepath: 'c.json', content: { v: 1 } });
    expect((await world.pass()).converged).toBe(true);
    const move = (id: string, to: string) => {
      const record = world.server.state.instances.get(id)!;
      world.server.state.instances.set(id, {
        ...record,
        relative_filepath: to,
        content: { v: 2, at: to },
        activity_status: 'queued',
        updated_at: T1,
      });
    };
    move('x', 'b.json');
    move('y', 'c.json');
    move('z', 'a.json');
    for (let i = 0; i < 3; i += 1) await world.pass();
    expect(await world.fileAt('b.json')).toBe('{\n  "v": 2,\n  "at": "b.json"\n}\n');
    expect(await world.fileAt('c.json')).toBe('{\n  "v": 2,\n  "at": "c.json"\n}\n');
    expect(await world.fileAt('a.json')).toBe('{\n  "v": 2,\n  "at": "a.json"\n}\n');
    expect(world.reports().slice(3).sort()).toEqual([
      'x deployed/none',
      'y deployed/none',
      'z deployed/none',
    ]);
    expect((await world.pass()).converged).toBe(true);
  });
});

/** A front that answers every status report 204 itself and forwards everything else to the mock. */
async function reportsSwallowed(): Promise<{ url: string; patches: () => number; close(): Promise<void> }> {
  let patches = 0;
  const front = await frontOfMock((incoming, outgoing) => {
    if (incoming.method !== 'PATCH') return false;
    patches += 1;
    incoming.resume();
    incoming.on('end', () => {
      outgoing.writeHead(204);
      outgoing.end();
    });
    return true;
  });
  return { ...front, patches: () => patches };
}

describe('a status endpoint that answers 204 and records nothing', () => {
  // Each pass finds the service still showing the instances queued: one request per instance per pass, until
  // report22 held such reports back (the listing shows them unrecorded: as before, same updated_at) as refused
  // ones are, none lost, and the first pass of a new process against a service that records settles them.
  it('costs one report per instance, held back after, and the reports land once the service records them', async () => {
    for (let i = 0; i < 5; i += 1) world.put({ id: `s_${i}` });
    const front = await reportsSwallowed();
    try {
      await world.open({ clientOptions: { baseUrl: front.url } });
      const counts: number[] = [];
      for (let i = 0; i < 4; i += 1) {
        await world.reconciler.runPass({ mode: i === 0 ? 'full' : 'incremental' });
        counts.push(front.patches());
      }
      expect(counts).toEqual([5, 5, 5, 5]);
      expect(world.reports()).toEqual([]);
    } finally {
      await front.close();
    }
    await world.open();
    await world.reconciler.runPass({ mode: 'incremental' });
    expect(world.reports().sort()).toEqual([0, 1, 2, 3, 4].map((i) => `s_${i} deployed/none`));
    await world.reconciler.runPass({ mode: 'incremental' });
    await world.reconciler.runPass({ mode: 'full' });
    expect(world.reports()).toHaveLength(5);
  });
});

/** A front that asks the mock for 100 items whatever limit it is given: a service that ignores `limit`. */
async function limitIgnored(): Promise<{ url: string; lists: () => number; close(): Promise<void> }> {
  let lists = 0;
  const front = await frontOfMock((_incoming, _outgoing, url) => {
    if (url.pathname === '/v1/config_instances') {
      lists += 1;
      url.searchParams.set('limit', '100');
    }
    return false;
  });
  return { ...front, lists: () => lists };
}

describe('a service that ignores limit, its listing larger than server.maxResponseBytes', () => {
  // Every page over the cap was halved down to one item, and each item in turn blamed as "larger by itself than
  // the response limit" (retrying), about 8 requests per item (each a whole listing to the service) until the
  // pull's deadline. A page whose first bytes already hold more items than asked for ends the pull instead.
  it('is told at once, and no item is blamed for it', async () => {
    for (let i = 0; i < 100; i += 1) {
      world.put({ id: `l_${String(i).padStart(3, '0')}`, content: { pad: 'x'.repeat(1000) } });
    }
    const front = await limitIgnored();
    try {
      await world.open({ clientOptions: { baseUrl: front.url }, maxResponseBytes: 64 * 1024 });
      const result = await world.pass();
      expect(result.error).toMatchObject({ code: 'listing_runaway' });
      expect(result.error?.message).toMatch(/it ignores limit/);
      expect(world.reports()).toEqual([]);
      // The first page asked for 100 items, then 50: the page for 50 holds more in its first 64 KiB.
      expect(front.lists()).toBeLessThanOrEqual(4);
    } finally {
      await world.reconciler.close();
      await front.close();
    }
  });
});

describe('a service whose has_more is always true', () => {
  // The page after the last item came back empty with has_more still true: a runaway, so every pass stopped
  // before writing anything. An empty page right past all that total_count counts is the listing's end.
  it('is listed to its total_count and synced', async () => {
    for (let i = 0; i < 3; i += 1) world.put({ id: `h_${i}` });
    world.fault({
      match: LIST,
      count: 1000,
      mode: 'rewrite',
      replace: [{ find: '"has_more":false', with: '"has_more":true' }],
    });
    const result = await world.pass();
    expect(result.error?.message).toBeUndefined();
    expect(world.reports().sort()).toEqual(['h_0 deployed/none', 'h_1 deployed/none', 'h_2 deployed/none']);
    for (let i = 0; i < 3; i += 1)
      expect(await world.fileAt(`h_${i}.json`)).toBe(`{\n  "owner": "h_${i}"\n}\n`);
    // Without a count to end it, it stays a runaway (bounded), as before.
    world.server.state.clearFaults();
    world.fault({
      match: LIST,
      count: 1000,
      mode: 'rewrite',
      replace: [
        { find: '"has_more":false', with: '"has_more":true' },
        { find: '"total_count":3', with: '"total_count":-1' },
      ],
    });
    expect((await world.pass()).error).toMatchObject({ code: 'listing_runaway' });
  });
});
