// `config-agent --once` stopped by SIGTERM, SIGINT or SIGHUP: exit 143/130/129, whole files, no temp file, no report lost.
import { EventEmitter } from 'node:events';
import { stat } from 'node:fs/promises';
import { PassThrough } from 'node:stream';
import { afterEach, describe, expect, it } from 'vitest';
import type { CommandIo } from '../../src/cli/io.js';
import { main } from '../../src/main.js';
import { findTempFiles } from '../helpers/daemon.js';
import { AgentHarness, collect, leaksApiKey, snapshotTree } from '../helpers/harness.js';
import { LIST_PATH } from '../helpers/outage.js';
import { PATIENCE_MS, waitFor } from '../helpers/wait-for.js';

/** A status report: PATCH of one instance (no other request of a pass goes to this path). */
const REPORT_PATH = '^/v1/config_instances/[^/]+$';

let harness: AgentHarness | undefined;

afterEach(async () => {
  await harness?.close();
  harness = undefined;
});

/** Resolves once the mock has handed out a use of its armed fault: a request of the agent is hanging in it. */
async function hangReached(h: AgentHarness, armed: number): Promise<void> {
  await waitFor(
    async () => {
      const { data } = (await h.api('GET', '/_admin/faults')) as { data: { remaining: number }[] };
      return (data[0]?.remaining ?? armed) < armed;
    },
    PATIENCE_MS,
    { what: 'a request hanging in the fault' },
  );
}

describe('config-agent --once: SIGTERM, SIGINT and SIGHUP', () => {
  it.each([
    ['SIGTERM', 143],
    ['SIGINT', 130],
    // The terminal of an operator's run closing (an ssh session dropped): it was a signal death mid-pass.
    ['SIGHUP', 129],
  ] as const)(
    '%s while the listing hangs: exits %i at once, nothing written, no temp file',
    async (signal, code) => {
      const h = await AgentHarness.create({ registerDevice: true });
      harness = h;
      await h.createAndDeploy({ relative_filepath: 'a.json', content: { a: 1 } });
      await h.fault({ match: LIST_PATH, count: 100, mode: 'hang' });
      const child = h.spawn(['--once']);
      const result = collect(child, 2 * PATIENCE_MS);
      await hangReached(h, 100);
      child.kill(signal);
      const exit = await result;
      expect(exit.code).toBe(code);
      expect(exit.stderr).toContain(`config-agent: ${signal}: stopping after the file in progress`);
      expect(leaksApiKey(exit)).toBe(false);
      expect(await snapshotTree(h.rootDir)).toEqual({});
      expect(await findTempFiles(h.rootDir)).toEqual([]);
    },
  );

  it('SIGINT while reports hang: exits 130 with every file whole; the next run delivers every report and rewrites nothing', async () => {
    const h = await AgentHarness.create({ registerDevice: true });
    harness = h;
    const ids: string[] = [];
    for (const name of ['a', 'b', 'c']) {
      const created = await h.createInstance({ relative_filepath: `etc/${name}.json`, content: { name } });
      await h.deploy(created.id);
      ids.push(created.id);
    }
    await h.fault({ match: REPORT_PATH, count: 100, mode: 'hang' });
    const child = h.spawn(['--once']);
    const result = collect(child, 2 * PATIENCE_MS);
    await hangReached(h, 100);
    child.kill('SIGINT');
    const interrupted = await result;
    expect(interrupted.code).toBe(130);
    expect(await findTempFiles(h.rootDir)).toEqual([]);
    // Whatever landed before the stop is whole (the writes go on while the first report hangs).
    const afterStop = await snapshotTree(h.rootDir, { identity: true });
    for (const name of ['a', 'b', 'c']) {
      const entry = afterStop[`etc/${name}.json`];
      if (entry === undefined) continue;
      const bytes = Buffer.from(entry.split(' ')[2] ?? '', 'base64').toString();
      expect(bytes).toBe(`{\n  "name": "${name}"\n}\n`);
    }

    await h.clearFaults();
    const next = await h.runOnce();
    expect(next.code).toBe(0);
    const reports = await h.reports();
    const deployed = new Set(
      reports.filter((r) => r.activity_status === 'deployed').map((r) => r.config_instance_id),
    );
    expect([...deployed].sort()).toEqual([...ids].sort());
    // A file the stopped run had written is not written again.
    const afterNext = await snapshotTree(h.rootDir, { identity: true });
    for (const [file, entry] of Object.entries(afterStop)) expect(afterNext[file]).toBe(entry);
  });
});

describe('config-agent --once: signals it has no use for', () => {
  it('SIGUSR2, SIGALRM and SIGPWR during the pass are ignored: it goes on and converges (they ended it before)', async () => {
    const h = await AgentHarness.create({ registerDevice: true });
    harness = h;
    const { deploy } = await h.createAndDeploy({ relative_filepath: 'a.json', content: { a: 1 } });
    // The listing hangs (until the request's timeout) while the signals arrive; the retry after it is answered.
    await h.fault({ match: LIST_PATH, count: 100, mode: 'hang' });
    const child = h.spawn(['--once']);
    const result = collect(child, 2 * PATIENCE_MS);
    await hangReached(h, 100);
    for (const signal of ['SIGUSR2', 'SIGALRM', 'SIGPWR'] as const) child.kill(signal);
    await h.clearFaults();
    const exit = await result;
    expect(exit.code).toBe(0);
    expect(exit.stderr).toContain('config-agent: SIGUSR2 ignored');
    expect(await snapshotTree(h.rootDir)).toEqual({
      'a.json': `file 644 ${Buffer.from('{\n  "a": 1\n}\n').toString('base64')}`,
    });
    expect((await h.instance(deploy.id)).activity_status).toBe('deployed');
  });
});

describe('runOnce: a second signal', () => {
  it('exits at once with the first signal’s code, and the pass it left still stops and lets go of stateDir', async () => {
    const h = await AgentHarness.create({ registerDevice: true });
    harness = h;
    await h.createAndDeploy({ relative_filepath: 'a.json', content: { a: 1 } });
    await h.fault({ match: LIST_PATH, count: 100, mode: 'hang' });
    const events = new EventEmitter();
    let err = '';
    const stderr = new PassThrough();
    stderr.on('data', (chunk: Buffer) => {
      err += chunk.toString();
    });
    const io: CommandIo = { stdout: new PassThrough(), stderr, env: {}, isTty: false };
    const code = main(['--once', '--config', h.configPath], io, events);
    await hangReached(h, 100);
    // Both before the pass unwinds from the first: the second must not wait for it.
    events.emit('SIGTERM');
    events.emit('SIGINT');
    expect(await code).toBe(143);
    expect(err).toContain('config-agent: SIGINT again: exiting now');
    // The abandoned pass still ends by itself: its lock goes, so a next run is not refused.
    await waitFor(
      () =>
        stat(`${h.stateDir}/agent.lock`).then(
          () => false,
          () => true,
        ),
      PATIENCE_MS,
      { what: 'the stopped pass releasing stateDir' },
    );
    expect(await snapshotTree(h.rootDir)).toEqual({});
  });
});
