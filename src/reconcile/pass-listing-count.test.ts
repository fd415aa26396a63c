// list21: a listing whose total_count is -1 though asked for (expand[]=total_count) against runPass: no file is
// removed and no record forgotten on its strength; a service that sends the count still has files retired.
import * as nodeFs from 'node:fs/promises';
import { lstat, mkdir, mkdtemp, readFile, rm } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { pino } from 'pino';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import type { FaultRequest } from '../api/admin-schemas.js';
import { createClient } from '../api/client.js';
import type { Clock } from '../lib/clock.js';
import type { Deps } from '../lib/deps.js';
import { type RunningMockServer, startMockServer } from '../mock-server/server.js';
import type { ConfigInstanceRecord } from '../mock-server/state.js';
import type { PassResult } from './pass-runner.js';
import { Reconciler } from './reconcile.js';

const API_KEY = 'sk_test_list21_0123456789abcdef';
const DEVICE = 'dvc_1';
const T0 = '2026-01-01T00:00:00.000Z';
const T1 = '2026-02-01T00:00:00.000Z';
const LIST = '^/v1/config_instances$';
const WITHHELD = 'though asked for it (expand[]=total_count)';

const clock: Clock = {
  now: () => Date.parse('2026-06-01T00:00:00.000Z'),
  monotonic: () => 1_000,
  sleep: async () => undefined,
};

let dir: string;
let rootDir: string;
let server: RunningMockServer;
let reconciler: Reconciler;
/** The warnings the agent logged, one JSON line each. */
let warnings: string[];

beforeEach(async () => {
  dir = await mkdtemp(path.join(os.tmpdir(), 'config-agent-list21-'));
  rootDir = path.join(dir, 'root');
  await mkdir(rootDir);
  await mkdir(path.join(dir, 'state'), { mode: 0o700 });
  server = await startMockServer({ apiKeys: [API_KEY] });
  warnings = [];
  const logger = pino({ level: 'warn' }, { write: (line: string) => void warnings.push(line) });
  const client = createClient({
    baseUrl: server.url,
    apiKey: API_KEY,
    timeoutMs: 10_000,
    maxResponseBytes: 1 << 20,
  });
  const deps: Deps = { fs: nodeFs, clock, random: () => 0.5, logger };
  reconciler = await Reconciler.open(
    deps,
    {
      deviceId: DEVICE,
      rootDir,
      stateDir: path.join(dir, 'state'),
      fileMode: 0o640,
      dirMode: 0o750,
      retry: { maxAttempts: 3, baseDelaySeconds: 10, maxDelaySeconds: 60 },
      requestRetries: 0,
      maxResponseBytes: 1 << 20,
    },
    client,
  );
});

afterEach(async () => {
  await reconciler.close();
  await server.close();
  await rm(dir, { recursive: true, force: true });
});

function put(fields: Partial<ConfigInstanceRecord> & { id: string }): void {
  server.state.instances.set(fields.id, {
    device_id: DEVICE,
    relative_filepath: `${fields.id}.json`,
    config_schema_id: `sch_${fields.id}`,
    config_type_id: 'typ',
    target_status: 'deployed',
    activity_status: 'queued',
    error_status: 'none',
    content: { owner: fields.id },
    created_at: T0,
    updated_at: T0,
    ...fields,
  });
}

const fault = (request: FaultRequest) => server.state.addFault(request);
const pass = (): Promise<PassResult> => reconciler.runPass({ mode: 'full' });
const fileAt = (relative: string) => readFile(path.join(rootDir, relative), 'utf8');
const exists = (relative: string) =>
  lstat(path.join(rootDir, relative)).then(
    () => true,
    () => false,
  );
const reports = () =>
  server.state.reports.map((r) => `${r.config_instance_id} ${r.activity_status}/${r.error_status}`);
const withheldWarnings = () => warnings.filter((line) => line.includes(WITHHELD)).length;

/** 99 instances before b_x (a page of 100 ends on b_x), b_x at moved.json having left shared.json (still there). */
async function movedInstance(): Promise<void> {
  for (let i = 0; i < 99; i += 1) put({ id: `a_${String(i).padStart(3, '0')}` });
  put({ id: 'b_x', relative_filepath: 'shared.json', updated_at: T0 });
  put({ id: 'z_z' });
  expect((await pass()).converged).toBe(true);
  expect(await fileAt('shared.json')).toBe('{\n  "owner": "b_x"\n}\n');
  const x = server.state.instances.get('b_x')!;
  server.state.instances.set('b_x', { ...x, relative_filepath: 'moved.json', updated_at: T1 });
  // The pass that sees the move writes the new path; the old one is retired by the full pass after it.
  await pass();
  expect(await fileAt('moved.json')).toBe('{\n  "owner": "b_x"\n}\n');
  expect(await exists('shared.json')).toBe(true);
}

describe('a listing whose total_count is -1 though asked for it', () => {
  // The service ends the listing after its first page and withholds the count that would tell it: the file of
  // c_w (on the page never sent, deployed at the service) was deleted, since b_x (retired, its removal not yet
  // recorded by the service) was still listed at its path and the listing looked complete.
  it('removes no file on the strength of it', async () => {
    for (let i = 0; i < 99; i += 1) put({ id: `a_${String(i).padStart(3, '0')}` });
    put({ id: 'b_x', relative_filepath: 'shared.json', config_schema_id: 'sch_x', updated_at: T0 });
    expect((await pass()).converged).toBe(true);
    put({ id: 'c_w', relative_filepath: 'shared.json', config_schema_id: 'sch_w', updated_at: T1 });
    const x = server.state.instances.get('b_x')!;
    server.state.instances.set('b_x', { ...x, target_status: 'removed', activity_status: 'deployed' });
    await pass();
    expect(await fileAt('shared.json')).toBe('{\n  "owner": "c_w"\n}\n');
    const x2 = server.state.instances.get('b_x')!;
    server.state.instances.set('b_x', { ...x2, activity_status: 'deployed', error_status: 'none' });
    expect(server.state.instances.get('c_w')!.activity_status).toBe('deployed');
    const before = reports().length;
    const warnedBefore = withheldWarnings();
    fault({
      match: LIST,
      count: 1000,
      mode: 'rewrite',
      replace: [
        { find: '"has_more":true', with: '"has_more":false' },
        { find: '"total_count":101', with: '"total_count":-1' },
      ],
    });
    await pass();
    expect(await fileAt('shared.json')).toBe('{\n  "owner": "c_w"\n}\n');
    // What was listed is still used and reported.
    expect(reports().slice(before)).toEqual(['b_x removed/none']);
    expect(await fileAt('a_000.json')).toBe('{\n  "owner": "a_000"\n}\n');
    // One warning for the pass, naming the service's fault.
    expect(withheldWarnings() - warnedBefore).toBe(1);
  });

  // The record of an instance the listing did not show (a path conflict's loser, whose `retrying` report moved
  // its updated_at past the winner's) was forgotten, with the echo of that report: it then won the path.
  it('forgets no record of an instance it did not show', async () => {
    for (let i = 0; i < 99; i += 1) put({ id: `a_${String(i).padStart(3, '0')}` });
    put({ id: 'b_x', relative_filepath: 'shared.json', config_schema_id: 'sch_x', updated_at: T1 });
    put({ id: 'c_y', relative_filepath: 'shared.json', config_schema_id: 'sch_y', updated_at: T0 });
    await pass();
    expect(await fileAt('shared.json')).toBe('{\n  "owner": "b_x"\n}\n');
    expect(reports().filter((r) => r.startsWith('c_y'))).toEqual(['c_y queued/retrying']);
    fault({
      match: LIST,
      count: 1000,
      mode: 'rewrite',
      replace: [
        { find: '"has_more":true', with: '"has_more":false' },
        { find: '"total_count":101', with: '"total_count":-1' },
      ],
    });
    await pass();
    server.state.clearFaults();
    await pass();
    await pass();
    expect(await fileAt('shared.json')).toBe('{\n  "owner": "b_x"\n}\n');
    expect(reports().filter((r) => r.startsWith('c_y'))).toEqual(['c_y queued/retrying']);
  });

  it('retires no old path of a moved instance, until the service sends its count again', async () => {
    await movedInstance();
    // A whole listing (every page), each page with total_count -1.
    fault({
      match: LIST,
      count: 1000,
      mode: 'rewrite',
      replace: [{ find: '"total_count":101', with: '"total_count":-1' }],
    });
    await pass();
    expect(await fileAt('moved.json')).toBe('{\n  "owner": "b_x"\n}\n');
    expect(await exists('shared.json')).toBe(true);
    expect(withheldWarnings()).toBe(1);
    // A conformant service (the count sent as asked) has the old path retired.
    server.state.clearFaults();
    expect((await pass()).converged).toBe(true);
    expect(await exists('shared.json')).toBe(false);
    expect(await fileAt('moved.json')).toBe('{\n  "owner": "b_x"\n}\n');
    expect(withheldWarnings()).toBe(1);
  });

  it('on one page only is not proof either', async () => {
    await movedInstance();
    // The first page counts 101, the second (offset 99: b_x, z_z) says -1.
    fault({
      match: LIST,
      skip: 1,
      count: 1,
      mode: 'rewrite',
      replace: [{ find: '"total_count":101', with: '"total_count":-1' }],
    });
    await pass();
    expect(await fileAt('moved.json')).toBe('{\n  "owner": "b_x"\n}\n');
    expect(await exists('shared.json')).toBe(true);
    expect(withheldWarnings()).toBe(1);
    await pass();
    expect(await exists('shared.json')).toBe(false);
  });

  it('missing or not an integer of -1 or more, fails the pull: nothing is removed', async () => {
    await movedInstance();
    for (const replacement of ['', '"total_count":"101",', '"total_count":1.5,', '"total_count":-2,']) {
      server.state.clearFaults();
      fault({
        match: LIST,
        count: 1000,
        mode: 'rewrite',
        replace: [{ find: '"total_count":101,', with: replacement }],
      });
      expect((await pass()).error, replacement).toBeDefined();
      expect(await exists('shared.json'), replacement).toBe(true);
    }
    server.state.clearFaults();
    await pass();
    expect(await exists('shared.json')).toBe(false);
  });

  it('a count that changes between pages is listed again; changing in every try, the pull fails', async () => {
    await movedInstance();
    // Page 2 of each of the 3 tries (requests 2, 4 and 6) counts one more than page 1.
    for (const skip of [1, 3, 5]) {
      fault({
        match: LIST,
        skip,
        count: 1,
        mode: 'rewrite',
        replace: [{ find: '"total_count":101', with: '"total_count":102' }],
      });
    }
    expect((await pass()).error).toMatchObject({ code: 'listing_unstable' });
    expect(await exists('shared.json')).toBe(true);
    // From page 2 on, for good: the second try counts 102 throughout and ends after 101, a listing cut short.
    fault({
      match: LIST,
      skip: 1,
      count: 1000,
      mode: 'rewrite',
      replace: [{ find: '"total_count":101', with: '"total_count":102' }],
    });
    expect((await pass()).error).toBeUndefined();
    expect(await fileAt('moved.json')).toBe('{\n  "owner": "b_x"\n}\n');
    expect(await exists('shared.json')).toBe(true);
  });
});
