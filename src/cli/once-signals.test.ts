// `--once` stopped by SIGTERM, SIGINT or SIGHUP, in-process: the exit code of the first signal, a second one exiting at
// once, and no listener left behind (the spawned agent's side is test/integration/once-signals.test.ts).
import { EventEmitter } from 'node:events';
import { readdir, stat } from 'node:fs/promises';
import { PassThrough } from 'node:stream';
import { afterEach, describe, expect, it } from 'vitest';
import { AgentHarness } from '../../test/helpers/harness.js';
import { LIST_PATH } from '../../test/helpers/outage.js';
import { PATIENCE_MS, waitFor } from '../../test/helpers/wait-for.js';
import { createSecretRegistry } from '../lib/secrets.js';
import { main } from '../main.js';
import { runOnce } from './compose.js';
import type { CommandIo } from './io.js';

let harness: AgentHarness | undefined;

afterEach(async () => {
  await harness?.close();
  harness = undefined;
});

/** `--once` in-process against a service whose listing hangs: started, and hanging in the listing. */
async function hangingOnce(): Promise<{ code: Promise<number>; events: EventEmitter; err: () => string }> {
  const h = await AgentHarness.create({ registerDevice: true });
  harness = h;
  await h.createAndDeploy({ relative_filepath: 'a.json', content: { a: 1 } });
  await h.fault({ match: LIST_PATH, count: 100, mode: 'hang' });
  const events = new EventEmitter();
  const stderr = new PassThrough();
  let err = '';
  stderr.on('data', (chunk: Buffer) => {
    err += chunk.toString();
  });
  const io: CommandIo = { stdout: new PassThrough(), stderr, env: {}, isTty: false };
  const code = main(['--once', '--config', h.configPath], io, events);
  await waitFor(() => (h.server.state.faults[0]?.remaining ?? 100) < 100, PATIENCE_MS, {
    what: 'the listing hanging in the fault',
    intervalMs: 2,
  });
  return { code, events, err: () => err };
}

describe('--once: SIGTERM, SIGINT and SIGHUP in-process', () => {
  it.each([
    ['SIGTERM', 143],
    ['SIGINT', 130],
    ['SIGHUP', 129],
  ] as const)('%s stops the pass: exit %i, nothing written, no listener left', async (signal, exit) => {
    const { code, events, err } = await hangingOnce();
    events.emit(signal);
    expect(await code).toBe(exit);
    expect(err()).toContain(`config-agent: ${signal}: stopping after the file in progress`);
    expect(err()).toContain(`(${signal} again to exit now)`);
    expect(await readdir(harness!.rootDir).catch(() => [])).toEqual([]);
    expect(['SIGTERM', 'SIGINT', 'SIGHUP'].map((name) => events.listenerCount(name))).toEqual([0, 0, 0]);
  });

  it('a second signal exits at once with the first one’s code; the pass left behind still lets go of stateDir', async () => {
    const { code, events, err } = await hangingOnce();
    events.emit('SIGTERM');
    events.emit('SIGINT');
    expect(await code).toBe(143);
    expect(err()).toContain('config-agent: SIGINT again: exiting now');
    await waitFor(
      () =>
        stat(`${harness!.stateDir}/agent.lock`).then(
          () => false,
          () => true,
        ),
      PATIENCE_MS,
      { what: 'the stopped pass releasing stateDir', intervalMs: 2 },
    );
    expect(['SIGTERM', 'SIGINT', 'SIGHUP'].map((name) => events.listenerCount(name))).toEqual([0, 0, 0]);
  });
});

describe('runOnce without an event source', () => {
  it('runs its pass to the end, listening to no signal: the file written, exit 0', async () => {
    const h = await AgentHarness.create({ registerDevice: true });
    harness = h;
    await h.createAndDeploy({ relative_filepath: 'a.json', content: { a: 1 } });
    const io: CommandIo = { stdout: new PassThrough(), stderr: new PassThrough(), env: {}, isTty: false };
    const command = { configPath: h.configPath, dryRun: false, json: false };
    expect(await runOnce(command, io, createSecretRegistry())).toBe(0);
    expect(await readdir(h.rootDir)).toEqual(['a.json']);
  });
});
