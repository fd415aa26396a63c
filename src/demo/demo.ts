// `npm start`: the mock service with the demo fleet, the agent --once into ./demo, then a conflicting deploy.
import { spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { createWriteStream } from 'node:fs';
import { mkdir, readdir, readFile, rm, stat, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { DeployResponse } from '../api/schemas.js';
import { parseFixtures } from '../mock-server/fixtures.js';
import { startMockServer } from '../mock-server/server.js';

const repoRoot = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../..');
/** `./demo` by default; the demo's own test points it at a temp dir. */
const demoDir = process.env.CONFIG_AGENT_DEMO_DIR ?? path.join(repoRoot, 'demo');
const agentBin = path.join(repoRoot, 'dist', 'main.js');
const DEVICE_ID = 'dvc_robot_01';
const CONFLICTING_ID = 'cfg_r1_app_settings_v2';
const CONFLICTING_PATH = 'app/settings.json';
/** In the demo fleet: validated, not yet deployed, same config schema as robot/motion/limits.yaml. */
const SCHEMA_SUCCESSOR_ID = 'cfg_r1_motion_limits_next';

function heading(text: string): void {
  process.stdout.write(`\n\x1b[1m== ${text}\x1b[0m\n`);
}

async function runAgent(args: readonly string[], log: NodeJS.WritableStream): Promise<number> {
  const child = spawn(process.execPath, [agentBin, '--config', path.join(demoDir, 'config.json'), ...args], {
    stdio: ['ignore', 'inherit', 'pipe'],
    env: { PATH: process.env.PATH },
  });
  child.stderr?.pipe(log, { end: false });
  return new Promise((resolve, reject) => {
    child.on('error', reject);
    child.on('close', (code) => resolve(code ?? 1));
  });
}

async function tree(dir: string, prefix = ''): Promise<string[]> {
  const entries = (await readdir(dir, { withFileTypes: true })).sort((a, b) => a.name.localeCompare(b.name));
  const lines: string[] = [];
  for (const entry of entries) {
    const full = path.join(dir, entry.name);
    if (entry.isDirectory()) {
      lines.push(`${prefix}${entry.name}/`);
      lines.push(...(await tree(full, `${prefix}  `)));
    } else {
      const info = await stat(full);
      lines.push(`${prefix}${entry.name}  (${info.size} bytes, mode ${(info.mode & 0o777).toString(8)})`);
    }
  }
  return lines;
}

async function main(): Promise<void> {
  // A fresh ./demo every run, so the demo shows the same story each time; the second pass inside it shows
  // the agent's own idempotence (zero writes).
  await rm(demoDir, { recursive: true, force: true });
  await mkdir(demoDir, { recursive: true });
  const apiKey = `sk_demo_${randomBytes(16).toString('hex')}`;
  const fixtures = parseFixtures(
    JSON.parse(await readFile(path.join(repoRoot, 'test/fixtures/demo.json'), 'utf8')),
  );
  const server = await startMockServer({ port: 0, host: '127.0.0.1', apiKeys: [apiKey], fixtures });
  const log = createWriteStream(path.join(demoDir, 'agent.log'));
  try {
    await writeFile(path.join(demoDir, 'api-key'), `${apiKey}\n`, { mode: 0o600 });
    await writeFile(
      path.join(demoDir, 'config.json'),
      JSON.stringify(
        {
          deviceId: DEVICE_ID,
          server: { baseUrl: server.url, apiKeyFile: path.join(demoDir, 'api-key'), timeoutSeconds: 10 },
          rootDir: path.join(demoDir, 'root'),
          stateDir: path.join(demoDir, 'state'),
          socketPath: path.join(demoDir, 'agent.sock'),
        },
        null,
        2,
      ),
      // Not writable by the group even under a umask of 002: a config others can change is refused.
      { mode: 0o644 },
    );
    process.stdout.write(`Mock service: ${server.url} (demo fleet from test/fixtures/demo.json)\n`);
    process.stdout.write(
      `Agent: device ${DEVICE_ID}, root ./demo/root, state ./demo/state, logs ./demo/agent.log\n`,
    );

    heading('1. First sync: config-agent --once');
    const first = await runAgent(['--once'], log);
    process.stdout.write(`exit code ${first}\n`);
    heading('Files on the device (./demo/root)');
    process.stdout.write(`${(await tree(path.join(demoDir, 'root'))).join('\n')}\n`);

    heading('2. Second sync: nothing changed, nothing written');
    const second = await runAgent(['--once'], log);
    process.stdout.write(`exit code ${second}\n`);

    heading(`3. An operator deploys a new instance at ${CONFLICTING_PATH}`);
    const headers = { 'X-API-Key': apiKey, 'content-type': 'application/json' };
    const created = await fetch(`${server.url}/_admin/config_instances`, {
      method: 'POST',
      headers,
      body: JSON.stringify({
        id: CONFLICTING_ID,
        device_id: DEVICE_ID,
        relative_filepath: CONFLICTING_PATH,
        content: {
          station: 'line-b/cell-1',
          shift_pattern: '2x12',
          telemetry: { enabled: true, interval_s: 5 },
        },
      }),
    });
    if (!created.ok)
      throw new Error(`creating the demo instance failed: ${created.status} ${await created.text()}`);
    const deployed = await fetch(`${server.url}/v1/config_instances/${CONFLICTING_ID}/deploy`, {
      method: 'POST',
      headers,
    });
    const deploy = DeployResponse.parse(await deployed.json());
    process.stdout.write(`POST /v1/config_instances/${CONFLICTING_ID}/deploy →\n`);
    process.stdout.write(`  deploy: ${deploy.deploy.id} (${deploy.deploy.status})\n`);
    for (const removal of deploy.remove) {
      process.stdout.write(
        `  remove: ${removal.config_instance.id} — ${removal.code}: ${removal.explanation}\n`,
      );
    }

    heading('4. Sync again: the new instance replaces the old one');
    const third = await runAgent(['--once'], log);
    process.stdout.write(`exit code ${third}\n`);
    process.stdout.write(`\n./demo/root/${CONFLICTING_PATH} now holds:\n`);
    process.stdout.write(await readFile(path.join(demoDir, 'root', CONFLICTING_PATH), 'utf8'));

    heading('5. A new version of the motion limits, at another path with the same config schema');
    const next = await fetch(`${server.url}/v1/config_instances/${SCHEMA_SUCCESSOR_ID}/deploy`, {
      method: 'POST',
      headers,
    });
    for (const removal of DeployResponse.parse(await next.json()).remove) {
      process.stdout.write(
        `  remove: ${removal.config_instance.id} — ${removal.code}: ${removal.explanation}\n`,
      );
    }
    const fourth = await runAgent(['--once'], log);
    process.stdout.write(`exit code ${fourth}\n`);
    heading('Files on the device now');
    process.stdout.write(`${(await tree(path.join(demoDir, 'root'))).join('\n')}\n`);

    const failed = [first, second, third, fourth].some((code) => code !== 0);
    process.exitCode = failed ? 1 : 0;
    process.stdout.write(
      `\nDemo ${failed ? 'FAILED' : 'done'}. Run it again: it starts from a clean ./demo.\n`,
    );
  } finally {
    await server.close();
    log.end();
  }
}

main().catch((error: unknown) => {
  process.stderr.write(`demo failed: ${error instanceof Error ? error.stack : String(error)}\n`);
  process.exitCode = 1;
});
