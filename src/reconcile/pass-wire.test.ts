// runPass against a hostile or changing service (issue 8 §1-2): what lands on disk and what the service hears.
import * as nodeFs from 'node:fs/promises';
import { readFile, rm } from 'node:fs/promises';
import path from 'node:path';
import { pino } from 'pino';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { createPassWorld, LIST, type PassWorld } from '../../test/helpers/pass-world.js';
import { LosslessNumber } from '../api/json.js';
import type { Logger } from '../lib/logger.js';

const T0 = '2026-01-01T00:00:00.000Z';

let world: PassWorld;

/** Opens the reconciler again, with this response cap (the client's and the pull's) and logger. */
function open(maxResponseBytes = 1 << 20, logger?: Logger) {
  return world.open({ maxResponseBytes, ...(logger === undefined ? {} : { deps: { logger } }) });
}

beforeEach(async () => {
  world = await createPassWorld({ name: 'wire', maxResponseBytes: 1 << 20 });
});

afterEach(() => world.close());

describe('one bad item never blocks the others', () => {
  it('good instances are written; one with 1e400 is reported failed naming the number, once', async () => {
    world.put({ id: 'cfg_a', content: { n: 1 } });
    world.put({ id: 'cfg_b' });
    world.fault({
      match: LIST,
      count: 1000,
      mode: 'rewrite',
      replace: [{ find: '"n":1}', with: '"n":1e400}' }],
    });
    const first = await world.pass();
    expect(await world.fileAt('cfg_b.json')).toBe('{\n  "owner": "cfg_b"\n}\n');
    expect(await world.exists('cfg_a.json')).toBe(false);
    expect(world.reports().sort()).toEqual(['cfg_a queued/failed', 'cfg_b deployed/none']);
    expect(world.server.state.reports.find((r) => r.config_instance_id === 'cfg_a')?.message).toBe(
      'invalid instance from the service: content.n: number 1e400 is out of range (beyond ±1.8e308)',
    );
    expect(first.converged).toBe(false);
    // The service now shows it failed: no second report, and nothing else to do.
    const second = await world.pass();
    expect(world.reports()).toHaveLength(2);
    expect(second.converged).toBe(true);
  });

  it('its failed report lost by a cut between state.json and outbox.json is sent by the next run', async () => {
    world.put({ id: 'cfg_a', content: { n: 1 } });
    world.fault({
      match: LIST,
      count: 1000,
      mode: 'rewrite',
      replace: [{ find: '"n":1}', with: '"n":1e400}' }],
    });
    world.fault({ match: '^/v1/config_instances/cfg_a$', count: 1 });
    await world.pass();
    expect(world.reports()).toEqual([]);
    // persistRecords saves state.json (the instance recorded failed) before outbox.json (its report): a cut
    // between the two leaves the outbox as it was before the pass, here none.
    await rm(path.join(world.dir, 'state', 'outbox.json'));
    await open();
    await world.pass();
    expect(world.reports()).toEqual(['cfg_a queued/failed']);
    expect(world.server.state.instances.get('cfg_a')?.error_status).toBe('failed');
  });

  it('reported failed again when an operator redeploys it still invalid (the service shows it queued again)', async () => {
    world.put({ id: 'cfg_a', content: { n: 1 } });
    world.fault({
      match: LIST,
      count: 1000,
      mode: 'rewrite',
      replace: [{ find: '"n":1}', with: '"n":1e400}' }],
    });
    await world.pass();
    expect(world.reports()).toEqual(['cfg_a queued/failed']);
    world.put({ id: 'cfg_a', content: { n: 1 }, updated_at: '2026-02-01T00:00:00.000Z' });
    await world.pass();
    expect(world.reports()).toEqual(['cfg_a queued/failed', 'cfg_a queued/failed']);
    // Once the service holds it, not again.
    await world.pass();
    expect(world.reports()).toHaveLength(2);
  });

  it('names a megabyte key or number of a bad item by its length, not by its text', async () => {
    const key = 'k'.repeat(1_000_000);
    world.put({ id: 'cfg_key', content: { n: 1 } });
    world.put({ id: 'cfg_num', content: { m: 1 } });
    world.fault({
      match: LIST,
      count: 1000,
      mode: 'rewrite',
      replace: [
        { find: '{"n":1}', with: `{"${key}":1e400}` },
        { find: '{"m":1}', with: `{"m":1${'0'.repeat(1_000_000)}}` },
      ],
    });
    await world.pass();
    const message = (id: string) =>
      world.server.state.reports.find((r) => r.config_instance_id === id)?.message;
    expect(message('cfg_key')).toBe(
      'invalid instance from the service: content.<a key of 1000000 characters>: number 1e400 is out of range (beyond ±1.8e308)',
    );
    expect(message('cfg_num')).toBe(
      'invalid instance from the service: content.m: number <written in 1000001 characters> is out of range (beyond ±1.8e308)',
    );
  });

  it('keeps no path longer than any valid one in state.json', async () => {
    const longPath = `app/${'p'.repeat(1_000_000)}.json`;
    world.put({ id: 'cfg_long', relative_filepath: longPath });
    world.put({ id: 'cfg_ok' });
    await world.pass();
    expect(world.reports().sort()).toEqual(['cfg_long queued/failed', 'cfg_ok deployed/none']);
    const state = await readFile(path.join(world.dir, 'state', 'state.json'), 'utf8');
    expect(state.length).toBeLessThan(4_096);
    expect(JSON.parse(state).instances.cfg_long).toMatchObject({ error: 'failed', relativePath: '' });
    // The service shows it failed: nothing more to report.
    await world.pass();
    expect(world.reports()).toHaveLength(2);
  });

  it('tells each unusable item at its level once, not on every pass that lists it', async () => {
    const lines: { level: number; msg: string; instanceId?: string }[] = [];
    await open(
      1 << 20,
      pino({ level: 'debug' }, { write: (line: string) => void lines.push(JSON.parse(line)) }),
    );
    for (let n = 0; n < 5; n += 1) world.put({ id: `cfg_new_${n}` });
    world.put({ id: 'cfg_bad', content: { n: 1 } });
    world.put({ id: 'cfg_ok' });
    world.fault({
      match: LIST,
      count: 1000,
      mode: 'rewrite',
      replace: [
        {
          find: '"target_status":"deployed","activity_status":"queued","error_status":"none","status":"queued","relative_filepath":"cfg_new_',
          with: '"target_status":"superseded","activity_status":"queued","error_status":"none","status":"queued","relative_filepath":"cfg_new_',
        },
        { find: '"n":1}', with: '"n":1e400}' },
      ],
    });
    for (let n = 0; n < 4; n += 1) await world.pass();
    const told = (level: number) =>
      lines.filter((line) => line.level === level && line.instanceId !== undefined);
    // pino: 40 warn, 50 error, 20 debug.
    expect(
      told(40)
        .map((line) => line.instanceId)
        .sort(),
    ).toEqual([0, 1, 2, 3, 4].map((n) => `cfg_new_${n}`));
    expect(
      told(50)
        .filter((line) => line.msg.includes('cannot accept'))
        .map((line) => line.instanceId),
    ).toEqual(['cfg_bad']);
    expect(told(20).filter((line) => line.msg.startsWith('instance skipped'))).toHaveLength(15);
    expect(await world.fileAt('cfg_ok.json')).toBe('{\n  "owner": "cfg_ok"\n}\n');
  });

  it('an unknown target_status skips that instance: nothing written, nothing reported, its file kept', async () => {
    world.put({ id: 'cfg_a' });
    await world.pass();
    expect(await world.exists('cfg_a.json')).toBe(true);
    const before = world.reports().length;
    world.fault({
      match: LIST,
      count: 1000,
      mode: 'rewrite',
      replace: [{ find: '"target_status":"deployed"', with: '"target_status":"superseded"' }],
    });
    world.put({
      id: 'cfg_old',
      target_status: 'removed',
      activity_status: 'deployed',
      relative_filepath: 'cfg_a.json',
    });
    const result = await world.pass();
    expect(await world.fileAt('cfg_a.json')).toBe('{\n  "owner": "cfg_a"\n}\n');
    expect(
      world
        .reports()
        .slice(before)
        .filter((r) => r.startsWith('cfg_a ')),
    ).toEqual([]);
    expect(result.error).toBeUndefined();
    // Nothing can be said of the skipped instances: the pass has not converged (--once exited 0).
    expect(result.outcomes.filter((o) => !o.converged)).toContainEqual({
      instanceId: 'cfg_a',
      path: 'cfg_a.json',
      action: 'untouched',
      converged: false,
      message: 'left alone: its target_status "superseded" is not a value this agent knows',
    });
    expect(result.converged).toBe(false);
  });

  it("an invalid or unknown-status item of another device is not this device's: never reported, never protects a path", async () => {
    world.put({ id: 'cfg_a' });
    await world.pass();
    // A poll lists each changed query on its own: the service (a bug) slips in other devices' broken items.
    world.put({ id: 'cfg_bad', content: { n: 1 } });
    world.put({ id: 'cfg_odd' });
    world.put({ id: 'cfg_new' });
    world.fault({
      match: LIST,
      count: 1000,
      mode: 'rewrite',
      replace: [
        {
          find: '"device_id":"dvc_1","config_schema_id":"sch_cfg_bad"',
          with: '"device_id":"dvc_2","config_schema_id":"sch_cfg_bad"',
        },
        { find: '"n":1}', with: '"n":1e400}' },
        {
          find: '"id":"cfg_odd","target_status":"deployed"',
          with: '"id":"cfg_odd","target_status":"superseded"',
        },
        {
          find: '"device_id":"dvc_1","config_schema_id":"sch_cfg_odd"',
          with: '"device_id":"dvc_2","config_schema_id":"sch_cfg_odd"',
        },
      ],
    });
    const poll = await world.reconciler.runPass({ mode: 'incremental' });
    expect(await world.fileAt('cfg_new.json')).toBe('{\n  "owner": "cfg_new"\n}\n');
    expect(
      world
        .reports()
        .filter((r) => !r.startsWith('cfg_a '))
        .sort(),
    ).toEqual(['cfg_new deployed/none']);
    expect(poll.converged).toBe(true);
  });

  it('an instance with an empty id is invalid: the others are written, and the local state still loads', async () => {
    world.put({ id: 'cfg_a' });
    world.put({ id: 'cfg_b' });
    world.fault({
      match: LIST,
      count: 1,
      mode: 'rewrite',
      replace: [{ find: '"id":"cfg_a"', with: '"id":""' }],
    });
    const first = await world.pass();
    expect(await world.fileAt('cfg_b.json')).toBe('{\n  "owner": "cfg_b"\n}\n');
    expect(await world.exists('cfg_a.json')).toBe(false);
    expect(first.converged).toBe(false);
    // The next run (a new process) still knows cfg_b.json is its own: retired, it is deleted. An instance
    // recorded under the id "" made state.json unloadable, so the agent owned nothing any more.
    await open();
    world.server.state.removeInstance('cfg_b', T0);
    const second = await world.pass();
    expect(await world.exists('cfg_b.json')).toBe(false);
    expect(await world.fileAt('cfg_a.json')).toBe('{\n  "owner": "cfg_a"\n}\n');
    expect(world.reports()).toContain('cfg_b removed/none');
    expect(second.converged).toBe(true);
  });

  it('an id holding a lone surrogate (no URL can carry it) is invalid: nothing stuck once the service is fixed', async () => {
    world.put({ id: 'cfg_a' });
    world.put({ id: 'cfg_b' });
    world.fault({
      match: LIST,
      count: 1,
      mode: 'rewrite',
      replace: [{ find: '"id":"cfg_a"', with: '"id":"cfg_\\ud800"' }],
    });
    const first = await world.pass();
    expect(await world.fileAt('cfg_b.json')).toBe('{\n  "owner": "cfg_b"\n}\n');
    expect(first.converged).toBe(false);
    // The service lists the id right again: the pass converges. A report queued for the broken id could never
    // be sent (encodeURIComponent throws on it) nor dropped, and kept every later pass from converging.
    const second = await world.pass();
    expect(await world.fileAt('cfg_a.json')).toBe('{\n  "owner": "cfg_a"\n}\n');
    expect(second.reports.pending).toBe(0);
    expect(second.converged).toBe(true);
  });

  it('a path that fits alone but not under rootDir fails at once, naming why; the others are written', async () => {
    // 4,060 bytes: valid as a relative path (at most 4095), over PATH_MAX once rootDir is in front of it.
    const long = `${Array.from({ length: 20 }, () => 'd'.repeat(200)).join('/')}/${'f'.repeat(54)}.json`;
    world.put({ id: 'cfg_long', relative_filepath: long });
    world.put({ id: 'cfg_b' });

    const result = await world.pass();

    expect(await world.fileAt('cfg_b.json')).toBe('{\n  "owner": "cfg_b"\n}\n');
    expect(await world.exists('d'.repeat(200))).toBe(false);
    // Not `retrying` with ENAMETOOLONG, attempt after attempt for hours, before `failed` anyway.
    expect(world.reports().sort()).toEqual(['cfg_b deployed/none', 'cfg_long queued/failed']);
    expect(world.server.state.reports.find((r) => r.config_instance_id === 'cfg_long')?.message).toMatch(
      /is too long under rootDir/,
    );
    expect(result.converged).toBe(false);
  });

  it('an id longer than 512 characters is invalid: nothing recorded under it, no report no server would take', async () => {
    world.put({ id: 'cfg_a' });
    world.put({ id: 'cfg_b' });
    const huge = `cfg_${'x'.repeat(100_000)}`;
    world.fault({
      match: LIST,
      count: 1,
      mode: 'rewrite',
      replace: [{ find: '"id":"cfg_a"', with: `"id":"${huge}"` }],
    });
    const first = await world.pass();
    expect(await world.fileAt('cfg_b.json')).toBe('{\n  "owner": "cfg_b"\n}\n');
    expect(first.converged).toBe(false);
    // Kept, its report's URL (100 KB) was refused by every server (414) and stayed queued for good, and the id
    // sat in state.json and the outbox. The service lists the id right again: the pass converges.
    const second = await world.pass();
    expect(await world.fileAt('cfg_a.json')).toBe('{\n  "owner": "cfg_a"\n}\n');
    expect(second.reports.pending).toBe(0);
    expect(second.converged).toBe(true);
    expect(await readFile(path.join(world.dir, 'state', 'state.json'), 'utf8')).not.toContain('xxxxxxxxxx');
  });

  it('a refusal whose message is over 4096 characters is reported once, not again on every pass', async () => {
    // Two instances at one long path: the refusal names the path and both ids, past what a report holds.
    const long = Array.from({ length: 14 }, (_, i) => `${i}${'p'.repeat(220)}`).join('/');
    const older = `cfg_old_${'o'.repeat(480)}`;
    const newer = `cfg_new_${'n'.repeat(480)}`;
    world.put({ id: older, relative_filepath: long, updated_at: '2026-01-01T00:00:00.000Z' });
    world.put({ id: newer, relative_filepath: long, updated_at: '2026-01-02T00:00:00.000Z' });

    await world.pass();
    await world.pass();
    await world.pass();

    const refusals = world.reports().filter((r) => r.startsWith(`${older} `));
    // The record kept the whole message, the report the cut one: they never matched, so it went out again.
    expect(refusals).toEqual([`${older} queued/retrying`]);
  });

  it('large configs sync: pages shrink; only the instance too large alone is reported retrying, by id, until the limit is raised', async () => {
    await open(64 * 1024);
    for (let i = 0; i < 20; i++)
      world.put({ id: `cfg_${String(i).padStart(2, '0')}`, content: { blob: 'x'.repeat(8_000) } });
    world.put({ id: 'cfg_big', content: { blob: 'y'.repeat(100_000) } });
    const result = await world.pass();
    for (let i = 0; i < 20; i++)
      expect(await world.exists(`cfg_${String(i).padStart(2, '0')}.json`)).toBe(true);
    expect(await world.exists('cfg_big.json')).toBe(false);
    const big = world.server.state.reports.filter((r) => r.config_instance_id === 'cfg_big');
    // Not `failed`: a final status, the instance stayed skipped for good after the operator raised the limit.
    expect(big.map((r) => `${r.activity_status}/${r.error_status}`)).toEqual(['queued/retrying']);
    expect(big[0]?.message).toMatch(
      /larger by itself than the response limit of 65536 bytes \(server.maxResponseBytes\)/,
    );
    expect(result.outcomes.find((o) => o.instanceId === 'cfg_big')).toMatchObject({
      action: 'retrying',
      converged: false,
    });
    expect(result.converged).toBe(false);
    // Passes under the same limit report nothing more.
    await world.pass();
    expect(world.server.state.reports.filter((r) => r.config_instance_id === 'cfg_big')).toHaveLength(1);

    await open(1 << 20);
    expect(await world.pass()).toMatchObject({ converged: true });
    expect(await world.exists('cfg_big.json')).toBe(true);
    expect(world.server.state.reports.filter((r) => r.config_instance_id === 'cfg_big').at(-1)).toMatchObject(
      {
        activity_status: 'deployed',
        error_status: 'none',
      },
    );
  });
});

describe('report answers and oversize items over server.maxResponseBytes', () => {
  const PATCH = '^/v1/config_instances/[^/]+$';

  it("a report's answer over the cap still records its new updated_at: two instances at one path do not take turns", async () => {
    await open(64 * 1024);
    world.put({ id: 'cfg_old', relative_filepath: 'app.json', updated_at: '2026-01-01T00:00:00.000Z' });
    world.put({ id: 'cfg_new', relative_filepath: 'app.json', updated_at: '2026-01-02T00:00:00.000Z' });
    // Every report's answer is padded past the cap after the instance's head (id, statuses, updated_at).
    const pad = `"pad":"${'p'.repeat(70 * 1024)}","content":`;
    world.fault({ match: PATCH, count: 1000, mode: 'rewrite', replace: [{ find: '"content":', with: pad }] });

    await world.pass();
    expect(await world.fileAt('app.json')).toBe(`${JSON.stringify({ owner: 'cfg_new' }, null, 2)}\n`);
    expect(world.reports().sort()).toEqual(['cfg_new deployed/none', 'cfg_old queued/retrying']);
    // cfg_old's own report moved its updated_at past cfg_new's: only the recorded echo says it was the agent's.
    await world.pass();
    await world.pass();

    expect(await world.fileAt('app.json')).toBe(`${JSON.stringify({ owner: 'cfg_new' }, null, 2)}\n`);
    expect(world.reports().sort()).toEqual(['cfg_new deployed/none', 'cfg_old queued/retrying']);
  });

  it("the same with the answer's head after 70 KiB (nested, with quotes and brackets in its strings): scanned for it", async () => {
    await open(64 * 1024);
    world.put({ id: 'cfg_old', relative_filepath: 'app.json', updated_at: '2026-01-01T00:00:00.000Z' });
    world.put({ id: 'cfg_new', relative_filepath: 'app.json', updated_at: '2026-01-02T00:00:00.000Z' });
    // Before the id, statuses and updated_at: past the 64 KiB of the answer that were all it read of it.
    const nested = `{"updated_at":"1999-01-01T00:00:00.000Z","a":["\\"}]","${'p'.repeat(70 * 1024)}"]}`;
    const pad = `"object":"config_instance","pad":${nested},`;
    world.fault({
      match: PATCH,
      count: 1000,
      mode: 'rewrite',
      replace: [{ find: '"object":"config_instance",', with: pad }],
    });

    await world.pass();
    await world.pass();
    await world.pass();

    expect(await world.fileAt('app.json')).toBe(`${JSON.stringify({ owner: 'cfg_new' }, null, 2)}\n`);
    expect(world.reports().sort()).toEqual(['cfg_new deployed/none', 'cfg_old queued/retrying']);
  });

  it('an instance too large by itself whose content comes before its statuses is reported retrying once, not on every pass', async () => {
    await open(64 * 1024);
    world.put({ id: 'cfg_a' });
    world.put({ id: 'cfg_big', content: { blob: 'y'.repeat(100_000) } });
    // The service's field order: the content first, its statuses past the 64 KiB the agent reads of it.
    const first = `"object":"config_instance","id":"cfg_big","content":{"blob":"${'y'.repeat(100_000)}"},`;
    world.fault({
      match: LIST,
      count: 1000,
      mode: 'rewrite',
      replace: [{ find: '"object":"config_instance","id":"cfg_big",', with: first }],
    });

    await world.pass();
    await world.pass();
    await world.pass();

    expect(world.reports().filter((r) => r.startsWith('cfg_big '))).toEqual(['cfg_big queued/retrying']);
    expect(await world.exists('cfg_a.json')).toBe(true);
    expect(await world.exists('cfg_big.json')).toBe(false);
  });
});

describe('an id the service lists twice', () => {
  const DUPLICATED =
    'invalid instance from the service: listed more than once in one listing by the service (ambiguous: no copy is used)';

  it('with other content and path, in one page: neither copy is written, the file on disk stays, it is reported retrying once', async () => {
    world.put({ id: 'cfg_a', content: { v: 'A' } });
    world.put({ id: 'cfg_c' });
    await world.pass();
    const before = world.reports().length;
    world.put({ id: 'cfg_b', content: { v: 'B' } });
    // cfg_b's item comes out as a second cfg_a (other content, other path) in every listing.
    world.fault({
      match: LIST,
      count: 1000,
      mode: 'rewrite',
      replace: [{ find: '"id":"cfg_b"', with: '"id":"cfg_a"' }],
    });
    const first = await world.pass();
    const second = await world.pass();

    expect(await world.fileAt('cfg_a.json')).toBe('{\n  "v": "A"\n}\n');
    expect(await world.exists('cfg_b.json')).toBe(false);
    expect(world.reports().slice(before)).toEqual(['cfg_a deployed/retrying']);
    expect(world.server.state.reports.at(-1)?.message).toBe(DUPLICATED);
    expect(first.error).toBeUndefined();
    // Not converged while the service still lists it twice; reported once, not again on every pass.
    expect(first.converged).toBe(false);
    expect(second.converged).toBe(false);
    // One listing per pass: no relisting, and the rest of the device is not held up (it was: listing_unstable).
    expect(world.server.state.stats.get('GET /v1/config_instances')).toBe(3);
  });

  it("the service stops listing it twice: the instance converges (a duplicate is the listing's fault, not the instance's: retrying, never failed)", async () => {
    world.put({ id: 'cfg_a', content: { v: 'A' } });
    world.put({ id: 'cfg_b', content: { v: 'B' } });
    world.fault({
      match: LIST,
      count: 1000,
      mode: 'rewrite',
      replace: [{ find: '"id":"cfg_b"', with: '"id":"cfg_a"' }],
    });
    await world.pass();
    await world.pass();
    expect(await world.exists('cfg_a.json')).toBe(false);
    expect(world.reports()).toEqual(['cfg_a queued/retrying']);
    world.server.state.clearFaults();

    const clean = await world.pass();

    expect(await world.fileAt('cfg_a.json')).toBe('{\n  "v": "A"\n}\n');
    expect(await world.fileAt('cfg_b.json')).toBe('{\n  "v": "B"\n}\n');
    expect(world.server.state.instance('cfg_a')).toMatchObject({
      activity_status: 'deployed',
      error_status: 'none',
    });
    expect(clean.converged).toBe(true);
  });

  it('on two pages: the others are written, the id is reported retrying and written nowhere', async () => {
    // The service pages by 4 (as it would by 100, for 25 times fewer files): pages cfg_000-003 and cfg_003-005.
    world.fault({ match: LIST, count: 100_000, mode: 'paging', limit: 4 });
    const ids = Array.from({ length: 6 }, (_, i) => `cfg_${String(i).padStart(3, '0')}`);
    for (const id of ids) world.put({ id, content: { owner: id } });
    // The last item (page 2) comes out as a second cfg_000 (page 1).
    world.fault({
      match: LIST,
      count: 1000,
      mode: 'rewrite',
      replace: [{ find: '"id":"cfg_005"', with: '"id":"cfg_000"' }],
    });
    const result = await world.pass();
    for (const id of ids.slice(1, 5)) expect(await world.exists(`${id}.json`), id).toBe(true);
    expect(await world.exists('cfg_000.json')).toBe(false);
    expect(await world.exists('cfg_005.json')).toBe(false);
    expect(world.reports().filter((r) => !r.endsWith('deployed/none'))).toEqual(['cfg_000 queued/retrying']);
    expect(result.error).toBeUndefined();
  });
});

describe('one id given by two queries of one pull, with other fields', () => {
  // A poll lists `activity_status=queued`, then `target_status=removed&activity_status=deployed`; the second
  // answer is made to carry cfg_a again (cfg_z's item renamed), at another path.
  const secondQueryGivesCfgAAt = (updatedAt: string) => {
    world.put({ id: 'cfg_a', relative_filepath: 'a.json', content: { v: 'old' } });
    world.put({
      id: 'cfg_z',
      relative_filepath: 'b.json',
      target_status: 'removed',
      activity_status: 'deployed',
      content: { v: 'new' },
      updated_at: updatedAt,
    });
    world.fault({
      match: LIST,
      count: 1,
      skip: 1,
      mode: 'rewrite',
      replace: [
        { find: '"id":"cfg_z"', with: '"id":"cfg_a"' },
        { find: '"target_status":"removed"', with: '"target_status":"deployed"' },
      ],
    });
  };

  it('the copy updated last is used, whichever query gave it', async () => {
    secondQueryGivesCfgAAt('2026-02-01T00:00:00.000Z');
    await world.reconciler.runPass({ mode: 'incremental' });
    expect(await world.exists('a.json')).toBe(false);
    expect(await world.fileAt('b.json')).toBe('{\n  "v": "new"\n}\n');
  });

  it('updated a microsecond later: that copy is used (Date.parse alone took them for the same time)', async () => {
    secondQueryGivesCfgAAt('2026-01-01T00:00:00.000002Z');
    world.server.state.instances.set('cfg_a', {
      ...world.server.state.instance('cfg_a'),
      updated_at: '2026-01-01T00:00:00.000001Z',
    });
    await world.reconciler.runPass({ mode: 'incremental' });
    expect(await world.exists('a.json')).toBe(false);
    expect(await world.fileAt('b.json')).toBe('{\n  "v": "new"\n}\n');
  });

  it('the same copy with updated_at written another way (+00:00 for Z) is one copy: used, not ambiguous', async () => {
    world.put({ id: 'cfg_a', relative_filepath: 'a.json', content: { v: 'same' } });
    world.put({
      id: 'cfg_z',
      relative_filepath: 'a.json',
      config_schema_id: 'sch_cfg_a',
      target_status: 'removed',
      activity_status: 'deployed',
      content: { v: 'same' },
      updated_at: '2026-01-01T00:00:00+00:00',
    });
    world.fault({
      match: LIST,
      count: 1,
      skip: 1,
      mode: 'rewrite',
      replace: [
        { find: '"id":"cfg_z"', with: '"id":"cfg_a"' },
        { find: '"target_status":"removed"', with: '"target_status":"deployed"' },
        { find: '"activity_status":"deployed"', with: '"activity_status":"queued"' },
        { find: '"status":"deployed"', with: '"status":"queued"' },
      ],
    });
    const result = await world.reconciler.runPass({ mode: 'incremental' });
    expect(await world.fileAt('a.json')).toBe('{\n  "v": "same"\n}\n');
    expect(world.reports()).toEqual(['cfg_a deployed/none']);
    expect(result.converged).toBe(true);
  });

  it('updated at the same time: ambiguous, no copy is used and it is reported retrying', async () => {
    secondQueryGivesCfgAAt(T0);
    const result = await world.reconciler.runPass({ mode: 'incremental' });
    expect(await world.exists('a.json')).toBe(false);
    expect(await world.exists('b.json')).toBe(false);
    expect(world.reports()).toEqual(['cfg_a queued/retrying']);
    expect(result.converged).toBe(false);
  });
});

describe('the owner a poll fetches by id', () => {
  it('answered with another instance (a broken service): that answer is not taken, nothing is written at its path', async () => {
    world.put({ id: 'cfg_old', relative_filepath: 'a.json', content: { v: 'old' } });
    await world.pass();
    world.put({
      id: 'cfg_new',
      relative_filepath: 'a.json',
      content: { v: 'new' },
      updated_at: '2026-02-01T00:00:00.000Z',
    });
    // The poll's third request fetches cfg_old, the recorded owner of a.json; it is answered with cfg_new at b.json.
    world.fault({
      match: LIST,
      count: 1,
      skip: 2,
      mode: 'rewrite',
      replace: [
        { find: '"id":"cfg_old"', with: '"id":"cfg_new"' },
        { find: '"relative_filepath":"a.json"', with: '"relative_filepath":"b.json"' },
      ],
    });
    const poll = await world.reconciler.runPass({ mode: 'incremental' });
    expect(await world.exists('b.json')).toBe(false);
    // Taken, it was a second cfg_new: a file was written at each copy's path. The owner given back by nobody
    // counts as gone, as before: the newcomer (updated later anyway) takes the path.
    expect(await world.fileAt('a.json')).toBe('{\n  "v": "new"\n}\n');
    expect(poll.outcomes.filter((o) => o.instanceId === 'cfg_new')).toHaveLength(1);
  });
});

describe('a pull is bounded', () => {
  it('has_more forever while ignoring offset: the pass fails with a typed error after a few requests, disk untouched', async () => {
    // Pages of 4 (as of 100, for fewer items listed): the second page of each listing begins on cfg_000 again.
    for (let i = 0; i < 6; i++) world.put({ id: `cfg_${String(i).padStart(3, '0')}` });
    world.fault({
      match: LIST,
      count: 100_000,
      mode: 'paging',
      ignore_offset: true,
      has_more: true,
      limit: 4,
    });
    const result = await world.pass();
    expect(result.reachable).toBe(false);
    expect(result.error).toMatchObject({ code: 'listing_unstable', retryable: true });
    expect(result.converged).toBe(false);
    expect(await nodeFs.readdir(world.rootDir)).toEqual([]);
    expect(world.server.state.stats.get('GET /v1/config_instances')).toBe(6);
  });
});

describe('offset paging under change', () => {
  it('an instance removed between page 1 and page 2: the boundary instance is still written', async () => {
    // The service pages by 4 (as it would by 100, for 25 times fewer files): page 1 is cfg_000-003.
    world.fault({ match: LIST, count: 100_000, mode: 'paging', limit: 4 });
    const ids = Array.from({ length: 6 }, (_, i) => `cfg_${String(i).padStart(3, '0')}`);
    for (const id of ids) world.put({ id });
    // Page 2 of the first query finds cfg_001 gone: without the re-pull cfg_004 would land on neither page.
    world.fault({ match: LIST, count: 1, skip: 1, mode: 'mutate', remove_instances: ['cfg_001'] });
    const result = await world.pass();
    for (const id of ids.filter((id) => id !== 'cfg_001'))
      expect(await world.exists(`${id}.json`), id).toBe(true);
    expect(result.converged).toBe(true);
  });
});

describe('what is written means what the service sent', () => {
  it('a 64-bit integer is written byte-faithfully, in JSON and in YAML; YAML strings every reader reads back', async () => {
    const serial = new LosslessNumber('12345678901234567891');
    world.put({ id: 'cfg_j', content: { serial } });
    world.put({
      id: 'cfg_y',
      relative_filepath: 'cfg_y.yaml',
      content: { serial, mode: 'off', answer: 'NO', at: '1:20' },
    });
    await world.pass();
    expect(await world.fileAt('cfg_j.json')).toBe('{\n  "serial": 12345678901234567891\n}\n');
    expect(await world.fileAt('cfg_y.yaml')).toBe(
      'serial: 12345678901234567891\nmode: "off"\nanswer: "NO"\nat: "1:20"\n',
    );
  });

  it('keys in another order are another file (consumers may read keys in order): written once, nothing reported, no churn', async () => {
    world.put({ id: 'cfg_a', content: { a: 1, b: { c: 2, d: 3 } } });
    await world.pass();
    const before = world.reports();
    const reordered = () =>
      world.fault({
        match: LIST,
        count: 1,
        mode: 'rewrite',
        replace: [{ find: '{"a":1,"b":{"c":2,"d":3}}', with: '{"b":{"d":3,"c":2},"a":1}' }],
      });
    reordered();
    const first = await world.pass();
    expect(await world.fileAt('cfg_a.json')).toBe(
      '{\n  "b": {\n    "d": 3,\n    "c": 2\n  },\n  "a": 1\n}\n',
    );
    expect(first.outcomes.map((o) => o.action)).toEqual(['written']);
    // The same order again: nothing to write. The service already holds deployed: nothing reported either time.
    reordered();
    const again = await world.pass();
    expect(again.outcomes.map((o) => o.action)).toEqual(['unchanged']);
    expect(world.reports()).toEqual(before);
    expect(first.converged && again.converged).toBe(true);
  });

  it('a status report answered 204 is settled: not re-sent, and the pass converges', async () => {
    world.put({ id: 'cfg_a' });
    world.fault({ match: '^/v1/config_instances/[^/]+$', count: 1, mode: 'rewrite', status: 204 });
    const result = await world.pass();
    expect(result.reports).toMatchObject({ delivered: 1, pending: 0 });
    expect(result.converged).toBe(true);
    await world.pass();
    expect(world.reports()).toEqual(['cfg_a deployed/none']);
  });
});
