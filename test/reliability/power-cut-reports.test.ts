// Power cuts (LazyFS) while a first sync of 300 files delivers its reports during its writes (PassReports): cut at the
// moment the service takes its K-th report; after the cut every instance the service holds `deployed` has its bytes
// on disk and its record in state.json, and the restarted agent converges.
import { type ChildProcess, spawn } from 'node:child_process';
import { createHash } from 'node:crypto';
import { mkdir, mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type RunningMockServer, startMockServer } from '../../src/mock-server/server.js';
import { serializeContent } from '../../src/reconcile/serialize.js';
import { AGENT_BIN, collect } from '../helpers/harness.js';
import { CANARY_KEY } from './support/fleet.js';
import { LazyFsMount, lazyfsUnavailable } from './support/lazyfs.js';
import { countFromEnv, randomInt, runSeed, seededRandom } from './support/random.js';
import { scratchParent } from './support/scratch.js';

/** Past the 256 reports from which a pass delivers while it writes (pass.ts `reportsWhileWriting`). */
const FILES = 300;
const CUTS = countFromEnv('RELIABILITY_REPORT_CUTS', 3);
const SEED = runSeed();
const SKIP = lazyfsUnavailable();
const DEVICE = 'dvc_report_cuts';

let base = '';
const mounts: LazyFsMount[] = [];
const servers: RunningMockServer[] = [];
beforeAll(async () => {
  if (SKIP !== undefined) return;
  base = await mkdtemp(path.join(await scratchParent(), 'config-agent-report-cuts-'));
});
afterAll(async () => {
  await Promise.all(servers.map((server) => server.close()));
  await Promise.all(mounts.map((mount) => mount.stop()));
  if (base) await rm(base, { recursive: true, force: true });
});

const sha = (data: Uint8Array) => createHash('sha256').update(data).digest('hex');

interface World {
  server: RunningMockServer;
  disk: LazyFsMount;
  rootDir: string;
  stateDir: string;
  configPath: string;
  /** Instance id → relative path and the bytes its file must hold. */
  expected: Map<string, { path: string; bytes: Buffer }>;
}

async function makeWorld(dir: string, random: () => number): Promise<World> {
  const disk = await LazyFsMount.mount(
    path.join(dir, 'backing'),
    path.join(dir, 'disk'),
    path.join(dir, 'control'),
  );
  mounts.push(disk);
  const server = await startMockServer({
    port: 0,
    host: '127.0.0.1',
    apiKeys: [CANARY_KEY],
    fixtures: { devices: [{ id: DEVICE }] },
  });
  servers.push(server);
  const agentDir = path.join(dir, 'agent');
  await mkdir(agentDir, { recursive: true });
  const keyPath = path.join(agentDir, 'api-key');
  await writeFile(keyPath, `${CANARY_KEY}\n`, { mode: 0o600 });
  const rootDir = path.join(disk.mountPoint, 'root');
  const stateDir = path.join(disk.mountPoint, 'state');
  const configPath = path.join(agentDir, 'config.json');
  await writeFile(
    configPath,
    JSON.stringify({
      deviceId: DEVICE,
      server: { baseUrl: server.url, apiKeyFile: keyPath, timeoutSeconds: 10 },
      rootDir,
      stateDir,
      retry: { maxAttempts: 5, baseDelaySeconds: 1, maxDelaySeconds: 2 },
      log: { level: 'warn' },
      socketPath: path.join(agentDir, 'agent.sock'),
    }),
  );
  const expected = new Map<string, { path: string; bytes: Buffer }>();
  const at = new Date().toISOString();
  for (let i = 0; i < FILES; i += 1) {
    // Shared and separate directories, so batches span several directory fsyncs.
    const relative = `d${i % 7}/sub${i % 3}/file-${i}.json`;
    const content = {
      i,
      payload: random()
        .toString(36)
        .repeat(1 + randomInt(random, 40)),
    };
    const record = server.state.createInstance(
      { device_id: DEVICE, relative_filepath: relative, content },
      at,
    );
    server.state.deploy(record.id, { dryRun: false, at });
    expected.set(record.id, { path: relative, bytes: serializeContent(relative, content) });
  }
  return { server, disk, rootDir, stateDir, configPath, expected };
}

/** Runs `--once`, killed with SIGKILL inside the service's handling of its `cutAt`-th report. */
async function runCutAtReport(world: World, cutAt: number): Promise<{ reports: number; killed: boolean }> {
  const state = world.server.state;
  const original = state.applyReport.bind(state);
  let reports = 0;
  let child: ChildProcess | undefined;
  let killed = false;
  state.applyReport = (...args: Parameters<typeof state.applyReport>) => {
    const result = original(...args);
    reports += 1;
    if (reports === cutAt && child !== undefined) {
      child.kill('SIGKILL');
      killed = true;
    }
    return result;
  };
  try {
    child = spawn(process.execPath, [AGENT_BIN, '--once', '--config', world.configPath], {
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    await collect(child, 300_000);
  } finally {
    state.applyReport = original;
  }
  return { reports, killed };
}

/** What must hold after the cut: the service was told nothing the disk and state.json cannot back. */
async function violationsAfterCut(world: World): Promise<string[]> {
  const problems: string[] = [];
  let recorded: Record<string, { instanceId: string; sha256: string }> = {};
  try {
    recorded = (
      JSON.parse(await readFile(path.join(world.stateDir, 'state.json'), 'utf8')) as {
        files: typeof recorded;
      }
    ).files;
  } catch (error) {
    problems.push(`state.json unreadable after the cut: ${String(error)}`);
  }
  for (const instance of world.server.state.instances.values()) {
    if (instance.device_id !== DEVICE || instance.activity_status !== 'deployed') continue;
    const want = world.expected.get(instance.id);
    if (want === undefined) continue;
    let bytes: Buffer | undefined;
    try {
      bytes = await readFile(path.join(world.rootDir, want.path));
    } catch {
      bytes = undefined;
    }
    if (bytes === undefined) problems.push(`${want.path}: reported deployed, absent after the cut`);
    else if (!bytes.equals(want.bytes)) {
      problems.push(
        `${want.path}: reported deployed, ${bytes.length} bytes after the cut (want ${want.bytes.length})`,
      );
    }
    const record = recorded[want.path];
    if (record?.instanceId !== instance.id || record.sha256 !== sha(want.bytes)) {
      problems.push(
        `${want.path}: reported deployed, not recorded as the agent's in state.json after the cut`,
      );
    }
  }
  return problems;
}

describe.skipIf(SKIP !== undefined)('power cuts while reports leave during the writes (LazyFS)', () => {
  it(`${CUTS} cuts at the service's K-th report of a ${FILES}-file first sync: every report backed, converges`, {
    timeout: Math.max(600_000, CUTS * 200_000),
  }, async () => {
    const random = seededRandom(SEED);
    const violations: string[] = [];
    const seen: string[] = [];
    for (let cut = 0; cut < CUTS; cut += 1) {
      const world = await makeWorld(path.join(base, `world-${cut}`), random);
      // Early, middle and late deliveries: the first part leaves after about a quarter of the files.
      const cutAt = 1 + randomInt(random, FILES - 1);
      const { reports, killed } = await runCutAtReport(world, cutAt);
      await world.disk.powerCut({ reboot: cut % 2 === 1 });
      seen.push(`cut at report ${cutAt}: ${killed ? 'killed' : `not reached (${reports} reports)`}`);
      process.stderr.write(`power-cut-reports: seed ${SEED}, cut ${cut}: ${seen.at(-1)}\n`);
      violations.push(...(await violationsAfterCut(world)).map((v) => `cut ${cut} (report ${cutAt}): ${v}`));

      const rerun = await collect(
        spawn(process.execPath, [AGENT_BIN, '--once', '--config', world.configPath], {
          stdio: ['ignore', 'pipe', 'pipe'],
        }),
        300_000,
      );
      if (rerun.code !== 0)
        violations.push(
          `cut ${cut}: the run after the cut exited ${rerun.code}: ${rerun.stderr.slice(-500)}`,
        );
      const notDeployed = [...world.server.state.instances.values()].filter(
        (i) => i.device_id === DEVICE && i.activity_status !== 'deployed',
      );
      if (notDeployed.length > 0)
        violations.push(`cut ${cut}: ${notDeployed.length} instances not deployed after the rerun`);
      violations.push(...(await violationsAfterCut(world)).map((v) => `cut ${cut}, after the rerun: ${v}`));
      for (const output of [rerun.stdout, rerun.stderr]) {
        if (output.includes(CANARY_KEY)) violations.push(`cut ${cut}: the API key in the output`);
      }
    }
    process.stderr.write(
      `power-cut-reports: seed ${SEED}; ${seen.join('; ')}; ${violations.length} violations\n`,
    );
    expect(violations, `seed ${SEED} (replay with RELIABILITY_SEED=${SEED})`).toEqual([]);
  });
});

if (SKIP !== undefined) {
  describe('power cuts while reports leave during the writes (LazyFS, skipped)', () => {
    it.skip(`skipped: ${SKIP}`, () => undefined);
  });
}
