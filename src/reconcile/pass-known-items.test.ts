// Items known by their exact text (api/list-page.ts KnownItems), through whole passes against the mock on loopback
// and a real temp dir: only the very same text skips the content check and the serialization; a changed byte, a
// hostile item, a drifted or deleted file are each met as if nothing were known.
import { createHash } from 'node:crypto';
import { lstat, readdir, readFile, unlink, utimes, writeFile } from 'node:fs/promises';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import path from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { createPassWorld, type PassWorld } from '../../test/helpers/pass-world.js';
import { parseCompactListBody } from '../api/json.js';
import { ITEM_RULES_VERSION, itemKey } from '../api/list-page.js';
import type { Clock } from '../lib/clock.js';
import type { ConfigInstanceRecord } from '../mock-server/state.js';
import { CACHE_DIR } from '../store/content-cache.js';
import { FINGERPRINTS_FILE, RACY_MARGIN_MS } from '../store/fingerprints.js';

const API_KEY = 'sk_test_known_0123456789abcdef';
const DEVICE = 'dvc_1';
const COUNT = 12;

let world: PassWorld;
/** In front of the mock (which only ever sends what its schema allows): rewrites list bodies as a hostile service. */
let proxy: http.Server;
let proxyUrl: string;
let rewriteList: (body: string) => string = (body) => body;

async function startProxy(): Promise<void> {
  proxy = http.createServer((request, response) => {
    const chunks: Buffer[] = [];
    request.on('data', (chunk: Buffer) => chunks.push(chunk));
    request.on('end', () => {
      const upstream = http.request(
        `${world.server.url}${request.url}`,
        { method: request.method, headers: request.headers },
        (answer) => {
          const parts: Buffer[] = [];
          answer.on('data', (chunk: Buffer) => parts.push(chunk));
          answer.on('end', () => {
            let body = Buffer.concat(parts).toString('utf8');
            if (request.method === 'GET' && request.url?.startsWith('/v1/config_instances'))
              body = rewriteList(body);
            response.writeHead(answer.statusCode ?? 502, {
              'content-type': 'application/json',
              'content-length': Buffer.byteLength(body),
            });
            response.end(body);
          });
        },
      );
      upstream.end(Buffer.concat(chunks));
    });
  });
  await new Promise<void>((resolve) => proxy.listen(0, '127.0.0.1', resolve));
  proxyUrl = `http://127.0.0.1:${(proxy.address() as AddressInfo).port}`;
}

/** The wall clock past the racy margin of every file: their fingerprints are trusted, as on a later run. */
function clock(): Clock {
  return {
    now: () => Date.now() + RACY_MARGIN_MS + 1_000,
    monotonic: () => performance.now(),
    sleep: async () => undefined,
  };
}

/** A run of `--once` through the proxy, with the settings given (the content cache off) and heapCheckpoint. */
function runPass(settings: { inMemoryFileBytes?: number } = {}, heapCheckpoint?: () => void) {
  return world.runOnce({
    clientOptions: { baseUrl: proxyUrl },
    settings,
    ...(heapCheckpoint === undefined ? {} : { deps: { heapCheckpoint } }),
  });
}

const rootFile = (relative: string) => path.join(world.dir, 'root', relative);

/** The instance's content on the service changed in place: same `updated_at`, as a broken service could do. */
function changeContentQuietly(id: string, content: ConfigInstanceRecord['content']): void {
  const record = world.server.state.instances.get(id);
  if (record === undefined) throw new Error(`no ${id}`);
  world.server.state.instances.set(id, { ...record, content });
}

/** A hostile service: `id`'s listed content is replaced by `content` (text), all else as the mock listed it. */
function listHostile(id: string, content: string): void {
  rewriteList = (body) => {
    const list = JSON.parse(body) as { data: Record<string, unknown>[] };
    const texts = list.data.map((item) => {
      if (item.id !== id) return JSON.stringify(item);
      const { content: _content, ...rest } = item;
      return `${JSON.stringify(rest).slice(0, -1)},"content":${content}}`;
    });
    const empty = JSON.stringify({ ...list, data: [] });
    return empty.replace('"data":[]', `"data":[${texts.join(',')}]`);
  };
}

/** Content nested 70 levels deep: past the 64 the agent accepts. */
const DEEP = `${'{"a":'.repeat(69)}{}${'}'.repeat(69)}`;

/** Synced, every file fingerprinted and every item known by its text: what every later --once starts from. */
async function settledWorld(): Promise<void> {
  expect((await runPass()).converged).toBe(true);
  expect((await runPass()).converged).toBe(true);
  const prints = JSON.parse(await readFile(path.join(world.dir, 'state', FINGERPRINTS_FILE), 'utf8'));
  expect(Object.keys(prints.items.byId)).toHaveLength(COUNT);
  expect(Object.keys(prints.files)).toHaveLength(COUNT);
  // The one page of the listing, known by its items' text: an idle pass makes no key per item; recorded with its
  // items' text lengths, by which an idle pass cuts them out of the body instead of printing them.
  const records = Object.values(prints.items.pages) as unknown[][];
  expect(records).toHaveLength(1);
  expect(records[0]).toHaveLength(1 + COUNT);
  expect(records[0]?.slice(1).every((length) => typeof length === 'number' && length > 100)).toBe(true);
}

/** fingerprints.json's one page record, changed by `edit`. */
async function editPageRecord(edit: (record: unknown[]) => unknown): Promise<void> {
  const printsFile = path.join(world.dir, 'state', FINGERPRINTS_FILE);
  const prints = JSON.parse(await readFile(printsFile, 'utf8'));
  const [pageKey] = Object.keys(prints.items.pages);
  prints.items.pages[pageKey as string] = edit(prints.items.pages[pageKey as string]);
  await writeFile(printsFile, JSON.stringify(prints));
}

/** A drifted file (size and mtime kept) and a deleted one, to be written back from their items' texts. */
async function driftTwoFiles(): Promise<{ original: string; yaml: string }> {
  const drifted = rootFile('d1/conf4.json');
  const original = await readFile(drifted, 'utf8');
  const stats = await lstat(drifted);
  await writeFile(drifted, original.replace('"index": 4', '"index": 8'));
  await utimes(drifted, stats.atime, stats.mtime);
  const yaml = await readFile(rootFile('d1/conf7.yaml'), 'utf8');
  await unlink(rootFile('d1/conf7.yaml'));
  return { original, yaml };
}

/** driftTwoFiles' two files are back byte for byte. */
async function expectWrittenBack({ original, yaml }: { original: string; yaml: string }): Promise<void> {
  expect(await readFile(rootFile('d1/conf4.json'), 'utf8')).toBe(original);
  expect(await readFile(rootFile('d1/conf7.yaml'), 'utf8')).toBe(yaml);
}

/** The pass after a write-back records the written files' fingerprints; the one after that writes nothing. */
async function expectFingerprintsSettle(printsFile: string): Promise<void> {
  expect((await runPass()).converged).toBe(true);
  const settled = await readFile(printsFile, 'utf8');
  expect((await runPass()).converged).toBe(true);
  expect(await readFile(printsFile, 'utf8')).toBe(settled);
}

beforeEach(async () => {
  world = await createPassWorld({
    name: 'known',
    apiKey: API_KEY,
    open: false,
    deps: { clock: clock() },
    // As --once runs: no content-cache copies, so a known item's bytes can come only from its text.
    settings: { cacheWrittenFiles: false },
  });
  rewriteList = (body) => body;
  await startProxy();
  for (let i = 0; i < COUNT; i += 1) {
    world.put({
      id: `cfg_${i}`,
      relative_filepath: i % 4 === 3 ? `d${i % 3}/conf${i}.yaml` : `d${i % 3}/conf${i}.json`,
      config_schema_id: `sch_${i}`,
      content: { index: i, enabled: i % 2 === 0, name: `service ${i}` },
    });
  }
});

afterEach(async () => {
  proxy.closeAllConnections();
  await new Promise((resolve) => proxy.close(resolve));
  await world.close();
});

describe('items known by their exact text', () => {
  it('a pass with nothing changed writes nothing, reports nothing, and still converges', async () => {
    await settledWorld();
    const reports = world.server.state.reports.length;
    const before = await readFile(rootFile('d1/conf1.json'));
    const idle = await runPass();
    expect(idle.converged).toBe(true);
    expect(idle.outcomes.every((o) => o.action === 'unchanged')).toBe(true);
    expect(world.server.state.reports.length).toBe(reports);
    expect(await readFile(rootFile('d1/conf1.json'))).toEqual(before);
  });

  it('an idle pass over a known page leaves the fingerprints as they were, byte for byte', async () => {
    await settledWorld();
    const printsFile = path.join(world.dir, 'state', FINGERPRINTS_FILE);
    const before = await readFile(printsFile, 'utf8');
    expect((await runPass()).converged).toBe(true);
    expect(await readFile(printsFile, 'utf8')).toBe(before);
  });

  it('a page listed again as it was before an item changed, the item since recorded with its later text: written back', async () => {
    // The page's record is trusted only with the keys its items had then: cfg_1's record now holds its later text,
    // whose file is on disk, so taking cfg_1 by its record would leave the later file in place of this one.
    await settledWorld();
    const printsFile = path.join(world.dir, 'state', FINGERPRINTS_FILE);
    const pagesThen = JSON.parse(await readFile(printsFile, 'utf8')).items.pages;
    const original = await readFile(rootFile('d1/conf1.json'), 'utf8');
    const content = world.server.state.instances.get('cfg_1')!.content;
    changeContentQuietly('cfg_1', { index: 1, enabled: true, name: 'later' });
    expect((await runPass()).converged).toBe(true);
    expect(await readFile(rootFile('d1/conf1.json'), 'utf8')).toContain('later');
    // The record of the page as it was then, kept (as a pass that did not finish its pull keeps it).
    const prints = JSON.parse(await readFile(printsFile, 'utf8'));
    Object.assign(prints.items.pages, pagesThen);
    await writeFile(printsFile, JSON.stringify(prints));
    changeContentQuietly('cfg_1', content);
    const result = await runPass();
    expect(result.converged).toBe(true);
    expect(await readFile(rootFile('d1/conf1.json'), 'utf8')).toBe(original);
    expect(result.outcomes.filter((o) => o.action === 'written').map((o) => o.path)).toEqual([
      'd1/conf1.json',
    ]);
  });

  it("the heap's readings a pass takes: one per item judged in full and per file written, none for a known unchanged item", async () => {
    // The checkpoint reads V8's heap spaces (deps.heapCheckpoint), ~2 µs each: 1,000 known items cost ~3 ms.
    let readings = 0;
    const count = () => {
      readings += 1;
    };
    await runPass({}, count);
    const firstSync = readings;
    expect(firstSync).toBeGreaterThanOrEqual(COUNT);
    await settledWorld();
    readings = 0;
    expect((await runPass({}, count)).converged).toBe(true);
    const idle = readings;
    changeContentQuietly('cfg_2', { index: 2, enabled: false, name: 'changed' });
    changeContentQuietly('cfg_3', { index: 3, enabled: false, name: 'changed' });
    readings = 0;
    const changed = await runPass({}, count);
    expect(
      changed.outcomes
        .filter((o) => o.action === 'written')
        .map((o) => o.instanceId)
        .sort(),
    ).toEqual(['cfg_2', 'cfg_3']);
    // An idle pass takes one, after persisting; the two changed items one each when judged and when written.
    expect(idle).toBe(1);
    expect(readings).toBe(1 + 4);
    expect(firstSync).toBe(1 + 2 * COUNT);
  });

  it('one byte of content changed with the same updated_at: the new bytes are written (JSON and YAML)', async () => {
    await settledWorld();
    changeContentQuietly('cfg_1', { index: 1, enabled: false, name: 'service 2' });
    changeContentQuietly('cfg_3', { index: 3, enabled: false, name: 'service 4' });
    const result = await runPass();
    expect(result.converged).toBe(true);
    expect(JSON.parse(await readFile(rootFile('d1/conf1.json'), 'utf8'))).toEqual({
      index: 1,
      enabled: false,
      name: 'service 2',
    });
    expect(await readFile(rootFile('d0/conf3.yaml'), 'utf8')).toContain('service 4');
    // The others stay known: unchanged.
    expect(result.outcomes.filter((o) => o.action === 'written').map((o) => o.path)).toEqual([
      'd1/conf1.json',
      'd0/conf3.yaml',
    ]);
  });

  it('a hostile item with the same id and updated_at is judged: reported failed, its old file left alone', async () => {
    await settledWorld();
    const before = await readFile(rootFile('d2/conf2.json'));
    listHostile('cfg_2', DEEP);
    const result = await runPass();
    expect(result.converged).toBe(false);
    const failed = world.server.state.reports.filter((r) => r.config_instance_id === 'cfg_2').at(-1);
    expect(failed?.error_status).toBe('failed');
    expect(failed?.message).toMatch(/content/);
    expect(await readFile(rootFile('d2/conf2.json'))).toEqual(before);
  });

  it('a known item whose file drifted (size and mtime kept) or was deleted is written again from its text', async () => {
    await settledWorld();
    const drifted = rootFile('d1/conf4.json');
    const original = await readFile(drifted, 'utf8');
    const stats = await lstat(drifted);
    await writeFile(drifted, original.replace('"index": 4', '"index": 8'));
    await utimes(drifted, stats.atime, stats.mtime);
    const yaml = await readFile(rootFile('d1/conf7.yaml'), 'utf8');
    await unlink(rootFile('d1/conf7.yaml'));

    const result = await runPass();
    expect(result.converged).toBe(true);
    expect(await readFile(drifted, 'utf8')).toBe(original);
    expect(await readFile(rootFile('d1/conf7.yaml'), 'utf8')).toBe(yaml);
    expect(
      result.outcomes
        .filter((o) => o.action === 'written')
        .map((o) => o.path)
        .sort(),
    ).toEqual(['d1/conf4.json', 'd1/conf7.yaml']);
  });

  it('a page record whose lengths cut elsewhere (damaged) is proven as before: files written back right, lengths mended', async () => {
    await settledWorld();
    const printsFile = path.join(world.dir, 'state', FINGERPRINTS_FILE);
    const recorded = JSON.parse(await readFile(printsFile, 'utf8')).items.pages;
    // Two neighbours' lengths swapped (the total kept), and one shortened and the next lengthened by one.
    await editPageRecord((record) => {
      const damaged = [...record];
      [damaged[2], damaged[3]] = [damaged[3], damaged[2]];
      damaged[5] = (damaged[5] as number) - 1;
      damaged[6] = (damaged[6] as number) + 1;
      return damaged;
    });
    const { original, yaml } = await driftTwoFiles();
    const result = await runPass();
    expect(result.converged).toBe(true);
    await expectWrittenBack({ original, yaml });
    expect(
      result.outcomes
        .filter((o) => o.action === 'written')
        .map((o) => o.path)
        .sort(),
    ).toEqual(['d1/conf4.json', 'd1/conf7.yaml']);
    // The record mended to the texts' lengths: the next idle pass cuts the page and writes no state file.
    expect(JSON.parse(await readFile(printsFile, 'utf8')).items.pages).toEqual(recorded);
    await expectFingerprintsSettle(printsFile);
  });

  it('two lengths swapped where the cut lands on a `},{` inside a string (total kept): refused, files written back right, record mended', async () => {
    // cfg_0 and cfg_1 are the page's first two items (listed by id): cfg_0's content holds `},{` in a string
    // exactly where cfg_1's length cuts it, so the swapped lengths cut at a `}` followed by `,{` both times.
    const listed = async () => {
      const response = await fetch(
        `${proxyUrl}/v1/config_instances?device_id=${DEVICE}&limit=100&order_by=id:asc`,
        { headers: { 'X-API-Key': API_KEY } },
      );
      return parseCompactListBody(await response.text())?.texts ?? [];
    };
    const setContent = (id: string, content: ConfigInstanceRecord['content']) => {
      const record = world.server.state.instances.get(id)!;
      world.server.state.instances.set(id, { ...record, content });
    };
    setContent('cfg_1', { index: 1, pad: 'p'.repeat(400) });
    setContent('cfg_0', { note: '' });
    await settledWorld();
    // Placed in the text as listed once deployed (the statuses are part of it).
    const [probe, second] = await listed();
    const at = probe!.indexOf('"note":"') + '"note":"'.length;
    setContent('cfg_0', { note: `${'x'.repeat(second!.length - 1 - at)}},{"y":1` });
    const [first] = await listed();
    expect(first!.slice(second!.length - 1, second!.length + 2)).toBe('},{');
    await settledWorld();
    const printsFile = path.join(world.dir, 'state', FINGERPRINTS_FILE);
    const recorded = JSON.parse(await readFile(printsFile, 'utf8')).items.pages;
    expect((Object.values(recorded)[0] as number[]).slice(1, 3)).toEqual([first!.length, second!.length]);
    await editPageRecord((record) => [record[0], record[2], record[1], ...record.slice(3)]);
    const files = ['d0/conf0.json', 'd1/conf1.json'];
    const before = await Promise.all(files.map((file) => readFile(rootFile(file), 'utf8')));
    await Promise.all(files.map((file) => unlink(rootFile(file))));
    const reportsBefore = world.server.state.reports.length;
    const result = await runPass();
    expect(result.converged).toBe(true);
    // Judged from the page's own texts: written back byte for byte, reported deployed, nothing failed.
    expect(await Promise.all(files.map((file) => readFile(rootFile(file), 'utf8')))).toEqual(before);
    expect(
      world.server.state.reports.slice(reportsBefore).map((r) => [r.config_instance_id, r.error_status]),
    ).toEqual([]);
    expect(JSON.parse(await readFile(printsFile, 'utf8')).items.pages).toEqual(recorded);
    await expectFingerprintsSettle(printsFile);
  });

  it('a page recorded before lengths were kept (a key alone) is made again on the next pass, files written back right', async () => {
    await settledWorld();
    const printsFile = path.join(world.dir, 'state', FINGERPRINTS_FILE);
    const withLengths = JSON.parse(await readFile(printsFile, 'utf8')).items.pages;
    await editPageRecord((record) => record[0]);
    const { original, yaml } = await driftTwoFiles();
    expect((await runPass()).converged).toBe(true);
    await expectWrittenBack({ original, yaml });
    expect(JSON.parse(await readFile(printsFile, 'utf8')).items.pages).toEqual(withLengths);
    await expectFingerprintsSettle(printsFile);
  });

  it('a record of the format before the lengths were bound, one cut short or with a corrupt key, is made again, never used', async () => {
    await settledWorld();
    const printsFile = path.join(world.dir, 'state', FINGERPRINTS_FILE);
    const { byId, pages } = JSON.parse(await readFile(printsFile, 'utf8')).items;
    // The listing's order (by id), in which the page's items' keys were joined.
    const ids = Object.keys(byId as Record<string, unknown>).sort((a, b) => (a < b ? -1 : a > b ? 1 : 0));
    const keysOnly = itemKey(ids.map((id) => byId[id][0]).join(''));
    const edits: [string, (record: unknown[]) => unknown][] = [
      ['the key of the item keys alone, lengths kept', (record) => [keysOnly, ...record.slice(1)]],
      ['the same with two lengths swapped', (record) => [keysOnly, record[2], record[1], ...record.slice(3)]],
      ['lengths cut short', (record) => record.slice(0, 5)],
      ['a corrupt key', (record) => [`${'A'.repeat(43)}=`, ...record.slice(1)]],
    ];
    for (const [what, edit] of edits) {
      await editPageRecord(edit);
      const { original, yaml } = await driftTwoFiles();
      const reportsBefore = world.server.state.reports.length;
      expect([what, (await runPass()).converged]).toEqual([what, true]);
      await expectWrittenBack({ original, yaml });
      expect([what, world.server.state.reports.length]).toEqual([what, reportsBefore]);
      expect([what, JSON.parse(await readFile(printsFile, 'utf8')).items.pages]).toEqual([what, pages]);
    }
    await expectFingerprintsSettle(printsFile);
  });

  it('past the budget of bytes a pass holds, a known item is judged and set aside as any other, not held as text', async () => {
    await settledWorld();
    const cache = path.join(world.dir, 'state', CACHE_DIR);
    expect(await readdir(cache).catch(() => [])).toEqual([]);
    const idle = await runPass({ inMemoryFileBytes: 1 });
    expect(idle.converged).toBe(true);
    expect(idle.outcomes.every((o) => o.action === 'unchanged')).toBe(true);
    // Every file's bytes were made and set aside in the content cache: no text was held instead.
    expect(await readdir(cache)).toHaveLength(COUNT);
  });

  /** The fingerprints file with `edit` applied to its items, as a broken or older agent could have left it. */
  async function editItems(
    edit: (items: { rules: number; byId: Record<string, [string, string, number]> }) => void,
  ) {
    const printsFile = path.join(world.dir, 'state', FINGERPRINTS_FILE);
    const prints = JSON.parse(await readFile(printsFile, 'utf8'));
    edit(prints.items);
    await writeFile(printsFile, JSON.stringify(prints));
  }

  /** The exact text of `id` as the (hostile) service now lists it, and its key. */
  async function listedKey(id: string): Promise<string> {
    const response = await fetch(`${proxyUrl}/v1/config_instances?device_id=${DEVICE}&limit=100`, {
      headers: { 'X-API-Key': API_KEY },
    });
    const body = await response.text();
    const texts = parseCompactListBody(body)?.texts ?? [];
    const text = texts.find((item) => item.startsWith(`{"object":"config_instance","id":"${id}"`));
    if (text === undefined) throw new Error(`${id} not listed`);
    return itemKey(text);
  }

  it('the premise: a text recorded for its id under these rules is taken without checking its content', async () => {
    await settledWorld();
    listHostile('cfg_5', DEEP);
    const key = await listedKey('cfg_5');
    await editItems((items) => {
      items.byId.cfg_5![0] = key;
    });
    // Nothing but that record vouches for the text: its content goes unchecked (the file is left, nothing failed).
    const result = await runPass();
    expect(result.converged).toBe(true);
    expect(world.server.state.reports.filter((r) => r.error_status === 'failed')).toEqual([]);
  });

  it('a text recorded for another id is judged in full', async () => {
    await settledWorld();
    listHostile('cfg_5', DEEP);
    const key = await listedKey('cfg_5');
    await editItems((items) => {
      items.byId.cfg_6![0] = key;
    });
    await runPass();
    expect(
      world.server.state.reports.filter((r) => r.config_instance_id === 'cfg_5').at(-1)?.error_status,
    ).toBe('failed');
  });

  it('a text recorded under other item rules (an older agent) is judged in full', async () => {
    await settledWorld();
    listHostile('cfg_5', DEEP);
    const key = await listedKey('cfg_5');
    await editItems((items) => {
      items.byId.cfg_5![0] = key;
      items.rules = ITEM_RULES_VERSION + 1;
    });
    await runPass();
    expect(
      world.server.state.reports.filter((r) => r.config_instance_id === 'cfg_5').at(-1)?.error_status,
    ).toBe('failed');
  });

  it('a record of other bytes under the very key (a corrupt fingerprints.json) is written over by the pass that judges it', async () => {
    await settledWorld();
    const printsFile = path.join(world.dir, 'state', FINGERPRINTS_FILE);
    const good = JSON.parse(await readFile(printsFile, 'utf8')).items.byId;
    await editItems((items) => {
      items.byId.cfg_1![1] = '0'.repeat(64);
    });
    const before = await readFile(rootFile('d1/conf1.json'));
    const result = await runPass();
    expect(result.converged).toBe(true);
    expect(await readFile(rootFile('d1/conf1.json'))).toEqual(before);
    // Healed: the next pass takes it as known again instead of judging it in full each time.
    expect(JSON.parse(await readFile(printsFile, 'utf8')).items.byId.cfg_1).toEqual(good.cfg_1);
  });

  it("an item an agent at ca34b7e recorded at a YAML path before bef34e6 quoted '.' is serialized again", async () => {
    // Between ca34b7e (rules 1) and bef34e6 the YAML emitter wrote '.' plain (read back as NaN by a YAML 1.1
    // reader); an agent of that range recorded that file's bytes for the item's text under rules 1. Trusted
    // under the same rules after an upgrade, the file stayed so for good: the bump makes it serialized again.
    const record = world.server.state.instances.get('cfg_3')!;
    world.server.state.instances.set('cfg_3', { ...record, content: { v: '.' } });
    await settledWorld();
    const yamlPath = rootFile('d0/conf3.yaml');
    const current = await readFile(yamlPath, 'utf8');
    expect(current).toBe('v: "."\n');
    const old = Buffer.from('v: .\n');
    await writeFile(yamlPath, old);
    await editItems((items) => {
      const entry = items.byId.cfg_3!;
      entry[1] = createHash('sha256').update(old).digest('hex');
      entry[2] = old.length;
      items.rules = 1;
    });
    // That agent's state.json recorded the bytes it wrote.
    const statePath = path.join(world.dir, 'state', 'state.json');
    const state = JSON.parse(await readFile(statePath, 'utf8'));
    state.files['d0/conf3.yaml'].sha256 = createHash('sha256').update(old).digest('hex');
    state.files['d0/conf3.yaml'].size = old.length;
    await writeFile(statePath, JSON.stringify(state));
    const result = await runPass();
    expect(result.converged).toBe(true);
    expect(await readFile(yamlPath, 'utf8')).toBe(current);
  });
});
