// Statuses × endpoints through a real `--once` (in-process main, the mock on loopback): the exit code, and what
// the service holds afterwards, for every kind of answer the interface does not define.
import { EventEmitter } from 'node:events';
import { mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { PassThrough } from 'node:stream';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { mockRecord } from '../../test/helpers/instances.js';
import { main } from '../main.js';
import { type RunningMockServer, startMockServer } from '../mock-server/server.js';
import type { CommandIo } from './io.js';

const KEY = 'sk_test_statuses_3f9a1c7e2b';
const LIST = '^/v1/config_instances$';
const REPORT = '^/v1/config_instances/cfg_a$';

let dir: string;
let server: RunningMockServer;

beforeEach(async () => {
  dir = await mkdtemp(path.join(os.tmpdir(), 'config-agent-statuses-'));
  server = await startMockServer({ apiKeys: [KEY] });
  server.state.instances.set('cfg_a', mockRecord('cfg_a'));
});

afterEach(async () => {
  await server.close();
  await rm(dir, { recursive: true, force: true });
});

async function once(): Promise<number> {
  const file = path.join(dir, 'config.json');
  await writeFile(
    file,
    JSON.stringify({
      deviceId: 'dvc_1',
      server: { baseUrl: server.url, timeoutSeconds: 5 },
      rootDir: path.join(dir, 'root'),
      stateDir: path.join(dir, 'state'),
      log: { level: 'silent' },
    }),
  );
  const io: CommandIo = {
    stdout: new PassThrough().resume(),
    stderr: new PassThrough().resume(),
    env: { CONFIG_AGENT_API_KEY: KEY },
    isTty: false,
  };
  return main(['--once', '--config', file], io, new EventEmitter());
}

/** A status fault (the error body), or for statuses below 400 (and 204) the real answer given that status. */
function fault(match: string, status: number): void {
  server.state.addFault(
    status < 400 ? { match, count: 1000, mode: 'rewrite', status } : { match, count: 1000, status },
  );
}

async function fileOnDisk(): Promise<string | undefined> {
  return readFile(path.join(dir, 'root', 'cfg_a.json'), 'utf8').catch(() => undefined);
}

const reportsReceived = () =>
  server.state.reports.map((r) => `${r.config_instance_id} ${r.activity_status}/${r.error_status}`);

// A listing answered so: nothing is written or reported; exit 3 unless a working service judged the request
// (a wrong base URL or version: 404, 400, 405, 410, 422), which is the agent's setup: exit 1.
describe('a listing answered with a status the interface does not define', () => {
  it.each<[number, number]>([
    [204, 3],
    [302, 3],
    [304, 3],
    [307, 3],
    [406, 3],
    [412, 3],
    [416, 3],
    [418, 3],
    [421, 3],
    [451, 3],
    [402, 3],
    [499, 3],
    [401, 3],
    [400, 1],
    [404, 1],
    [410, 1],
    [422, 1],
  ])('%i: --once exits %i, writes and reports nothing; the next run converges', async (status, code) => {
    fault(LIST, status);

    expect(await once()).toBe(code);
    expect(await fileOnDisk()).toBeUndefined();
    expect(reportsReceived()).toEqual([]);

    server.state.clearFaults();
    expect(await once()).toBe(0);
    expect(await fileOnDisk()).toBe('{\n  "owner": "cfg_a"\n}\n');
    expect(reportsReceived()).toEqual(['cfg_a deployed/none']);
  });
});

// A report answered so: the file is written (the listing worked), the run does not converge (exit 1: the
// service was reached and a report is undelivered); the report is kept for the next run unless the service
// judged it (`rejected`, `too_large`: dropped, so one poisoned report never blocks convergence for good).
describe('a status report answered with a status the interface does not define', () => {
  it.each<[number, 'kept' | 'dropped']>([
    [302, 'kept'],
    [304, 'kept'],
    [307, 'kept'],
    [406, 'kept'],
    [412, 'kept'],
    [416, 'kept'],
    [418, 'kept'],
    [421, 'kept'],
    [428, 'kept'],
    [451, 'kept'],
    [402, 'kept'],
    [499, 'kept'],
    [401, 'kept'],
    [400, 'dropped'],
    [404, 'dropped'],
    [409, 'dropped'],
    [422, 'dropped'],
  ])('%i: --once exits 1 with the file written; the report is %s', async (status, fate) => {
    fault(REPORT, status);

    expect(await once()).toBe(1);
    expect(await fileOnDisk()).toBe('{\n  "owner": "cfg_a"\n}\n');
    expect(await queuedReports()).toEqual(fate === 'kept' ? ['cfg_a deployed/none'] : []);

    server.state.clearFaults();
    expect(await once()).toBe(0);
    expect(reportsReceived().at(-1)).toBe('cfg_a deployed/none');
    expect(await queuedReports()).toEqual([]);
  });
});

/** The reports `outbox.json` holds for the next run. */
async function queuedReports(): Promise<string[]> {
  const text = await readFile(path.join(dir, 'state', 'outbox.json'), 'utf8').catch(() => undefined);
  if (text === undefined) return [];
  const entries = (JSON.parse(text) as { entries: { instanceId: string; report: Record<string, string> }[] })
    .entries;
  return entries.map((e) => `${e.instanceId} ${e.report.activity_status}/${e.report.error_status}`);
}
