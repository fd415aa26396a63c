// First sync of N instances by the agent, the two floor loops and the curl + jq script, each in a fresh world.
import { mkdtemp, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import type { Fixtures } from '../../src/api/admin-schemas.js';
import { BENCH_API_KEY, BENCH_DEVICE, benchFixtures, expectedFiles } from './fixtures.js';
import { median, runTimed, settleDisk } from './proc.js';
import { removeAtExit } from './scratch.js';
import { type BenchWorld, createWorld, verifyTree } from './world.js';

const HERE = path.dirname(fileURLToPath(import.meta.url));
/** dist-bench/bench/lib → the repository root. */
export const REPO_ROOT = path.resolve(HERE, '../../..');
export const FLOOR_LOOP = path.resolve(HERE, '../floor-loop.js');
export const CURL_JQ = path.join(REPO_ROOT, 'bench', 'alternatives', 'curl-jq.sh');
/** What users run: the bundle the packages ship (packaging/bundle.mjs, built by `npm run bench`). */
export const BUNDLE_BIN = path.join(REPO_ROOT, 'dist-bench', 'agent', 'dist', 'main.cjs');
export const AGENT_BIN = process.env.BENCH_AGENT_BIN ?? BUNDLE_BIN;
/**
 * Node's flags the packages' launcher gives `--once` (`ONCE_NODE_FLAGS` in packaging/launcher.mjs): it is
 * measured as the packages run it. `--help` and `--version` get none there, nor here.
 */
const launcher = (await import(pathToFileURL(path.join(REPO_ROOT, 'packaging', 'launcher.mjs')).href)) as {
  ONCE_NODE_FLAGS: string[];
  ONCE_MALLOC_ENV: Record<string, string>;
};
export const AGENT_NODE_FLAGS: readonly string[] = launcher.ONCE_NODE_FLAGS;
/** glibc's malloc settings the launcher gives `--once` (`ONCE_MALLOC_ENV`), as it gives them. */
export const AGENT_ENV: Readonly<Record<string, string>> = launcher.ONCE_MALLOC_ENV;
/** The command line of `--once` before its own arguments: the flags, then the entry (main.cjs). */
export const AGENT_ARGV: readonly string[] = [...AGENT_NODE_FLAGS, AGENT_BIN];

export type Contender = 'agent' | 'floor1' | 'floor16' | 'curl-jq';

export interface SyncSamples {
  contender: Contender;
  instances: number;
  ms: number[];
  maxRssKiB: number[];
  /** Every run's failure, if any (exit code or a wrong tree): a failed run is not a time. */
  failures: string[];
}

export function medianMs(samples: SyncSamples | undefined): number {
  return samples === undefined ? Number.NaN : median(samples.ms);
}

/** Runs the agent's `--once` from nothing; returns the run and the world (kept for the steady-state bench). */
export async function agentFirstSync(
  fixtures: Fixtures,
  onWorld?: (world: BenchWorld) => Promise<void>,
): Promise<{ ms: number; maxRssKiB: number | undefined; failure?: string; world: BenchWorld }> {
  const world = await createWorld(fixtures, { removeAtExit: true });
  await settleDisk();
  const run = await runTimed(process.execPath, [...AGENT_ARGV, '--config', world.configPath, '--once'], {
    rss: true,
    env: AGENT_ENV,
  });
  await onWorld?.(world);
  let failure: string | undefined;
  if (run.code !== 0) failure = `exit ${run.code}: ${run.stderr.slice(0, 400)}`;
  else failure = await verifyTree(world.rootDir, expectedFiles(fixtures));
  return { ms: run.ms, maxRssKiB: run.maxRssKiB, world, ...(failure === undefined ? {} : { failure }) };
}

export interface FirstSyncOptions {
  instances: number;
  reps: number;
  contenders: readonly Contender[];
  /** Keeps the world of the agent's last run open for the caller (then the caller closes it). */
  keepAgentWorld?: boolean;
  log?: (line: string) => void;
}

export async function firstSync(
  options: FirstSyncOptions,
): Promise<{ samples: Map<Contender, SyncSamples>; agentWorld?: BenchWorld }> {
  const fixtures = benchFixtures({ count: options.instances });
  const expected = expectedFiles(fixtures);
  const samples = new Map<Contender, SyncSamples>();
  const sample = (contender: Contender) => {
    let found = samples.get(contender);
    if (found === undefined) {
      found = { contender, instances: options.instances, ms: [], maxRssKiB: [], failures: [] };
      samples.set(contender, found);
    }
    return found;
  };
  const scratch = await mkdtemp(path.join(os.tmpdir(), 'config-agent-bench-floor-'));
  const manifest = path.join(scratch, 'manifest.json');
  await writeFile(
    manifest,
    JSON.stringify(expected.map((f) => ({ path: f.path, text: f.data.toString('utf8') }))),
  );
  // One mock for curl + jq: it only reads, so every repetition sees the same service.
  const curlWorld = options.contenders.includes('curl-jq') ? await createWorld(fixtures) : undefined;
  let agentWorld: BenchWorld | undefined;
  try {
    // Interleaved repetitions: a slow minute on the shared machine hurts every contender alike.
    for (let rep = 0; rep < options.reps; rep += 1) {
      for (const contender of options.contenders) {
        const into = sample(contender);
        if (contender === 'agent') {
          const run = await agentFirstSync(fixtures);
          into.ms.push(run.ms);
          if (run.maxRssKiB !== undefined) into.maxRssKiB.push(run.maxRssKiB);
          if (run.failure !== undefined) into.failures.push(run.failure);
          const last = rep === options.reps - 1;
          if (last && options.keepAgentWorld) agentWorld = run.world;
          else await run.world.close();
          options.log?.(`  agent      ${options.instances} instances: ${run.ms.toFixed(0)} ms`);
          continue;
        }
        const root = path.join(scratch, `root-${contender}-${rep}`);
        await settleDisk();
        const run =
          contender === 'curl-jq'
            ? await runTimed('bash', [CURL_JQ, curlWorld!.server.url, BENCH_DEVICE, root], {
                env: { CONFIG_API_KEY: BENCH_API_KEY },
                rss: true,
              })
            : await runTimed(
                process.execPath,
                [FLOOR_LOOP, manifest, root, contender === 'floor16' ? '16' : '1'],
                { rss: true },
              );
        into.ms.push(run.ms);
        if (run.maxRssKiB !== undefined) into.maxRssKiB.push(run.maxRssKiB);
        const wrong =
          run.code !== 0
            ? `exit ${run.code}: ${run.stderr.slice(0, 400)}`
            : // curl + jq writes jq's pretty-printing, not byte-for-byte the agent's: presence is checked.
              await verifyTree(root, expected, contender === 'curl-jq' ? 'presence' : 'bytes');
        if (wrong !== undefined) into.failures.push(wrong);
        removeAtExit(root);
        options.log?.(`  ${contender.padEnd(10)} ${options.instances} instances: ${run.ms.toFixed(0)} ms`);
      }
    }
  } finally {
    await curlWorld?.close();
    removeAtExit(scratch);
  }
  return { samples, ...(agentWorld === undefined ? {} : { agentWorld }) };
}
