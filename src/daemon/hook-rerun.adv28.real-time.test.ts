// A file written again while its hook runs gets another run of the hook (adv28): real hook processes, fake poll clock.
import { mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { Volume } from 'memfs';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { HeldClock, ScriptedRunner } from '../../test/helpers/held-daemon.js';
import { memfsPort } from '../../test/helpers/memfs.js';
import { PATIENCE_MS, waitFor } from '../../test/helpers/wait-for.js';
import { parseAgentConfig } from '../config/load.js';
import type { FsPort } from '../lib/fs-port.js';
import { silentLogger } from '../lib/logger.js';
import { AgentDaemon } from './agent.js';
import { AgentMetrics } from './metrics.js';

let dir: string;
const daemons: AgentDaemon[] = [];

beforeEach(async () => {
  dir = await mkdtemp(path.join(os.tmpdir(), 'config-agent-hook-rerun-'));
});

afterEach(async () => {
  await Promise.all(daemons.splice(0).map((daemon) => daemon.stop(3_000)));
  await rm(dir, { recursive: true, force: true });
});

async function settle(done: () => boolean, what: string): Promise<void> {
  await waitFor(done, PATIENCE_MS, { what, intervalMs: 5 });
}

/** The daemon's metrics, counting the passes recorded and the renderings made (each write renders once). */
class CountedMetrics extends AgentMetrics {
  passesRecorded = 0;
  renders = 0;
  override recordPass(...summary: Parameters<AgentMetrics['recordPass']>): void {
    this.passesRecorded += 1;
    super.recordPass(...summary);
  }
  override render(): Promise<string> {
    this.renders += 1;
    return super.render();
  }
}

/** A daemon over `runner` with one hook running `/bin/sh -c script` in `dir` for every `*.json`. */
async function startDaemon(
  runner: ScriptedRunner,
  script: string,
  metrics?: { textfile: string; fs: FsPort; counted?: CountedMetrics },
): Promise<HeldClock> {
  const config = parseAgentConfig(
    {
      deviceId: 'dvc_unit',
      server: { baseUrl: 'https://dcds.example.com' },
      rootDir: dir,
      stateDir: '/var/lib/config-agent',
      drift: 'off',
      hooks: [{ match: '*.json', run: ['/bin/sh', '-c', script], timeoutSeconds: 20 }],
      ...(metrics === undefined ? {} : { metrics: { textfile: metrics.textfile } }),
    },
    'adv28',
  );
  const clock = new HeldClock(1_000_000);
  const daemon = new AgentDaemon({
    deps: { fs: metrics?.fs ?? memfsPort(new Volume()), clock, random: () => 0, logger: silentLogger() },
    config,
    runner,
    metrics: metrics?.counted ?? new AgentMetrics({ deviceId: 'dvc_unit' }),
    hookEnv: { PATH: process.env.PATH ?? '/usr/bin:/bin' },
    scrub: (text) => text,
  });
  daemons.push(daemon as AgentDaemon);
  await daemon.start();
  await settle(() => clock.waits.length === 1, 'the boot wait');
  return clock;
}

/** Ends the poll wait; the daemon runs its next pass and waits again. */
async function nextPass(clock: HeldClock, runner: ScriptedRunner): Promise<void> {
  const passes = runner.passes;
  clock.waits.shift()?.();
  await settle(() => runner.passes === passes + 1 && clock.waits.length === 1, `pass ${passes + 1}`);
}

describe('a managed file written again while its hook runs (adv28)', () => {
  it('runs the hook again after that run, which sees the new version', async () => {
    const log = path.join(dir, 'runs.log');
    const release = path.join(dir, 'release');
    // The hook reads the file (as `nginx -t` would), then waits until the test lets it end.
    const script = `cat a.json >> '${log}'; echo >> '${log}'; while [ ! -e '${release}' ]; do sleep 0.02; done`;
    const runner = new ScriptedRunner(dir);
    runner.writes.push(['a.json', '{"v":1}'], ['a.json', '{"v":2}']);
    const clock = await startDaemon(runner, script);
    const runs = async () => (await readFile(log, 'utf8').catch(() => '')).split('\n').filter(Boolean);

    await nextPass(clock, runner);
    // Pass 1 wrote v1; its hook run started and read it.
    await waitFor(async () => (await runs()).length === 1, PATIENCE_MS, { what: 'the first run' });
    expect(await runs()).toEqual(['{"v":1}']);
    // Pass 2 writes v2 while that run is still going.
    await nextPass(clock, runner);
    await writeFile(release, '');

    // The hook must hear of v2: either a second run that saw it, or a.json still pending for the next one.
    await waitFor(
      async () => (await runs()).length === 2 || (runner.passes === 2 && !runner.pending.has('a.json')),
      PATIENCE_MS,
      { what: 'a second run, or the first one settled' },
    );
    await waitFor(async () => (await runs()).length === 2, 2_000, {
      what: 'a second run of the hook for v2',
    }).catch(() => undefined);
    expect(await runs()).toEqual(['{"v":1}', '{"v":2}']);
  }, 60_000);

  it('changes that arrive while a hook runs coalesce into one run after it', async () => {
    const log = path.join(dir, 'runs.log');
    const release = path.join(dir, 'release');
    // Logs the paths it was given on one line, then waits until the test lets it end.
    const script = `echo "$CONFIG_AGENT_CHANGED" | sort | paste -sd, - >> '${log}'; while [ ! -e '${release}' ]; do sleep 0.02; done`;
    const runner = new ScriptedRunner(dir);
    runner.writes.push(['a.json', '1'], ['b.json', '1'], ['c.json', '1'], ['d.json', '1']);
    const clock = await startDaemon(runner, script);
    const runs = async () => (await readFile(log, 'utf8').catch(() => '')).split('\n').filter(Boolean);
    await nextPass(clock, runner);
    await waitFor(async () => (await runs()).length === 1, PATIENCE_MS, { what: 'the first run' });
    // Three more passes, each writing one file, while the first run goes on.
    for (let pass = 0; pass < 3; pass += 1) await nextPass(clock, runner);
    await writeFile(release, '');
    await waitFor(async () => (await runs()).length >= 2 && runner.pending.size === 0, PATIENCE_MS, {
      what: 'the runs after the first',
    });
    expect(await runs()).toEqual(['a.json', 'b.json,c.json,d.json']);
  }, 60_000);
});

describe('the metrics textfile, written after a pass and after a hook run (adv28)', () => {
  // Both wrote it on their own: a write rendered before another but renamed after it left the older text, and its
  // counters went backwards (config_agent_passes_total 2 -> 1), which Prometheus reads as a counter reset.
  it('never ends with an older rendering than the last one written', async () => {
    const volume = new Volume();
    volume.mkdirSync('/metrics', { recursive: true });
    const port = memfsPort(volume);
    let holdNext = false;
    let held: (() => void) | undefined;
    const fs: FsPort = {
      ...port,
      rename: async (from, to) => {
        if (holdNext && String(to) === '/metrics/agent.prom') {
          holdNext = false;
          await new Promise<void>((resolve) => (held = resolve));
        }
        return port.rename(from, to);
      },
    };
    const runner = new ScriptedRunner(dir);
    runner.writes.push(['a.json', '1']);
    const counted = new CountedMetrics({ deviceId: 'dvc_unit' });
    const clock = await startDaemon(runner, 'exit 0', { textfile: '/metrics/agent.prom', fs, counted });
    const passes = () => {
      const text = String(volume.readFileSync('/metrics/agent.prom', 'utf8'));
      return Number(/^config_agent_passes_total\{[^}]*result="converged"[^}]*\} (\d+)$/m.exec(text)?.[1]);
    };
    // Pass 1 writes a.json and the textfile; the hook run after it writes the textfile again, held at its rename.
    holdNext = false;
    await nextPass(clock, runner);
    expect(passes()).toBe(1);
    holdNext = true;
    await waitFor(() => held !== undefined, PATIENCE_MS, { what: "the hook run's textfile write" });
    // Pass 2 writes the textfile meanwhile; then the hook run's write goes on.
    clock.waits.shift()?.();
    // Held until pass 2's own write, if it is not queued behind the held one (rendered already: the two renderings
    // of pass 1 and its hook run are all there were), has landed: a fixed 200 ms sleep here let a slow machine
    // release the held rename before pass 2's, and the test passed without the fix (fix32).
    await waitFor(
      () => runner.passes === 2 && counted.passesRecorded === 2 && (counted.renders === 2 || passes() === 2),
      PATIENCE_MS,
      { what: "pass 2's write queued, or landed" },
    );
    held?.();
    await settle(() => clock.waits.length === 1, 'the wait after pass 2');
    expect(passes()).toBe(2);
  }, 60_000);
});
