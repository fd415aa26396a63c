// Benchmarks that print ratios (never pass/fail): cost of a steady-state poll, of an unchanged pass, of a durable write.
import * as nodeFs from 'node:fs/promises';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { createClient } from '../src/api/client.js';
import { systemClock } from '../src/lib/clock.js';
import type { Deps } from '../src/lib/deps.js';
import { silentLogger } from '../src/lib/logger.js';
import { startMockServer } from '../src/mock-server/server.js';
import { Reconciler } from '../src/reconcile/reconcile.js';
import { publishFile } from '../src/store/durable-writer.js';

const API_KEY = 'sk_bench_0123456789abcdef';
const DEVICE = 'dvc_bench';
const INSTANCES = Number(process.env.BENCH_INSTANCES ?? 1000);

function line(name: string, value: string): void {
  process.stdout.write(`${name.padEnd(58)} ${value}\n`);
}

async function timed<T>(run: () => Promise<T>): Promise<{ ms: number; value: T }> {
  const start = performance.now();
  const value = await run();
  return { ms: performance.now() - start, value };
}

function totalRequests(stats: Record<string, number>): number {
  return Object.values(stats).reduce((sum, count) => sum + count, 0);
}

async function reconcileBench(): Promise<void> {
  const server = await startMockServer({
    port: 0,
    apiKeys: [API_KEY],
    fixtures: { devices: [{ id: DEVICE }] },
  });
  const dir = await mkdtemp(path.join(os.tmpdir(), 'config-agent-bench-'));
  try {
    const at = new Date().toISOString();
    for (let i = 0; i < INSTANCES; i += 1) {
      const created = server.state.createInstance(
        {
          device_id: DEVICE,
          relative_filepath: `svc${i % 20}/conf${i}.json`,
          content: { index: i, name: `service-${i}`, limits: { cpu: 0.5, memoryMb: 256 }, tags: ['a', 'b'] },
        },
        at,
      );
      server.state.deploy(created.id, { dryRun: false, at });
    }
    const deps: Deps = { fs: nodeFs, clock: systemClock, random: Math.random, logger: silentLogger() };
    const client = createClient({
      baseUrl: server.url,
      apiKey: API_KEY,
      timeoutMs: 30_000,
      maxResponseBytes: 64 << 20,
    });
    const settings = {
      deviceId: DEVICE,
      rootDir: path.join(dir, 'root'),
      stateDir: path.join(dir, 'state'),
      fileMode: 0o644,
      dirMode: 0o755,
      retry: { maxAttempts: 3, baseDelaySeconds: 1, maxDelaySeconds: 10 },
      requestRetries: 0,
    };
    await nodeFs.mkdir(settings.rootDir, { recursive: true });
    await nodeFs.mkdir(settings.stateDir, { recursive: true, mode: 0o700 });
    const reconciler = await Reconciler.open(deps, settings, client);

    const heapBefore = process.memoryUsage().heapUsed;
    const first = await timed(() => reconciler.runPass({ mode: 'full' }));
    const heapAfter = process.memoryUsage().heapUsed;
    const before = totalRequests(server.state.statsSnapshot().requests);
    const full = await timed(() => reconciler.runPass({ mode: 'full' }));
    const afterFull = totalRequests(server.state.statsSnapshot().requests);
    const poll = await timed(() => reconciler.runPass({ mode: 'incremental' }));
    const afterPoll = totalRequests(server.state.statsSnapshot().requests);

    const written = first.value.outcomes.filter((o) => o.action === 'written').length;
    const rewritten = full.value.outcomes.filter((o) => o.action === 'written').length;
    line(`instances`, `${INSTANCES}`);
    line(`first pass: files written`, `${written}`);
    line(`second full pass: files rewritten (want 0)`, `${rewritten}`);
    line(`steady-state poll: requests (want <= 2)`, `${afterPoll - afterFull}`);
    line(`full pass: requests`, `${afterFull - before}`);
    line(`poll time / full pass time`, (poll.ms / full.ms).toFixed(3));
    line(`unchanged full pass time / first pass time`, (full.ms / first.ms).toFixed(3));
    line(
      `heap growth of the first pass per instance (bytes)`,
      `${Math.round((heapAfter - heapBefore) / INSTANCES)}`,
    );
  } finally {
    await server.close();
    await rm(dir, { recursive: true, force: true });
  }
}

async function writerBench(): Promise<void> {
  const dir = await mkdtemp(path.join(os.tmpdir(), 'config-agent-bench-w-'));
  const count = 200;
  const data = Buffer.alloc(1024, 'x');
  try {
    const plain = await timed(async () => {
      for (let i = 0; i < count; i += 1) await writeFile(path.join(dir, `plain${i}.json`), data);
    });
    const durable = await timed(async () => {
      for (let i = 0; i < count; i += 1) {
        await publishFile(nodeFs, {
          rootDir: dir,
          relativePath: `durable${i}.json`,
          data,
          mode: 0o644,
          dirMode: 0o755,
        });
      }
    });
    const unchanged = await timed(async () => {
      for (let i = 0; i < count; i += 1) {
        await publishFile(nodeFs, {
          rootDir: dir,
          relativePath: `durable${i}.json`,
          data,
          mode: 0o644,
          dirMode: 0o755,
        });
      }
    });
    line(`durable write ms per 1 KiB file`, (durable.ms / count).toFixed(3));
    line(`durable write / plain writeFile`, (durable.ms / plain.ms).toFixed(2));
    line(`unchanged publish (compare only) / durable write`, (unchanged.ms / durable.ms).toFixed(3));
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
}

await reconcileBench();
await writerBench();
