// A reader of the agent's stdout and stderr that stalls (journald busy, a paused pager) or goes (`| head`) must not stall it.
import { readFileSync } from 'node:fs';
import { readdir, readFile } from 'node:fs/promises';
import path from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { callLocalApi, DaemonProcess, findTempFiles, killAllDaemons } from '../helpers/daemon.js';
import { AgentHarness, collect, REPO_ROOT } from '../helpers/harness.js';
import { PATIENCE_MS, waitFor } from '../helpers/wait-for.js';

/** systemd SIGKILLs a unit that has not stopped after TimeoutStopSec: the agent must exit on its own before. */
const STOP_TIMEOUT_MS =
  Number(
    /^TimeoutStopSec=(\d+)$/m.exec(
      readFileSync(path.join(REPO_ROOT, 'systemd/config-agent.service'), 'utf8'),
    )?.[1],
  ) * 1000;

/** The most a unix stream socket (what spawn's 'pipe' is, and journald's stdout stream) holds unread by default. */
function socketBufferBytes(): number {
  try {
    return Number(readFileSync('/proc/sys/net/core/wmem_default', 'utf8').trim()) || 212_992;
  } catch {
    return 212_992;
  }
}

/** Paths the agent rejects in each round, one error line of more than 4 KB each: four times what the socket holds. */
const REJECTED = Math.ceil((4 * (socketBufferBytes() + 65_536)) / 4_000);

let harness: AgentHarness | undefined;

afterEach(async () => {
  await killAllDaemons();
  await harness?.close();
  harness = undefined;
});

describe('stdout and stderr not read (journald busy or stopped, a paused pager)', () => {
  it('keeps syncing, answers on its socket and stops with exit 0 on SIGTERM', async () => {
    const h = await AgentHarness.create({
      registerDevice: true,
      config: { poll: { intervalSeconds: 1, jitterRatio: 0.1, fullResyncSeconds: 600 } },
    });
    harness = h;
    const daemon = DaemonProcess.start(h);
    await daemon.waitForPasses(1, PATIENCE_MS);
    const socketPath = h.configObject().socketPath as string;
    const rejectedLines = () => daemon.logsWith(/^path rejected/).length;
    /** Stops reading, then has the agent log far more than the socket holds: a line per rejected path. */
    const stallAndLog = async (round: number) => {
      daemon.child.stdout?.pause();
      daemon.child.stderr?.pause();
      await Promise.all(
        Array.from({ length: REJECTED }, (_, n) =>
          h.createAndDeploy({
            relative_filepath: `../${'p'.repeat(4000)}-${round}-${n}.json`,
            content: { n },
          }),
        ),
      );
      await h.createAndDeploy({ relative_filepath: `after-${round}.json`, content: { round } });
      const sync = await callLocalApi(socketPath, 'POST', '/v1/sync');
      expect(sync.status).toBe(200);
      expect(await readFile(h.rootPath(`after-${round}.json`), 'utf8')).toBe(
        `${JSON.stringify({ round }, null, 2)}\n`,
      );
      expect((await callLocalApi(socketPath, 'GET', '/v1/health')).status).toBe(200);
    };

    await stallAndLog(1);
    // The proof that the agent wrote while nobody read: once read again, every line arrives, many times what the
    // kernel could have held for it.
    const readBefore = daemon.stderr.length;
    daemon.child.stderr?.resume();
    daemon.child.stdout?.resume();
    await waitFor(() => rejectedLines() >= REJECTED || undefined, PATIENCE_MS, {
      what: 'the rejected paths logged',
    });
    expect(daemon.stderr.length - readBefore).toBeGreaterThan(2 * (socketBufferBytes() + 65_536));

    // And stopped while nobody reads.
    await stallAndLog(2);
    const exit = await daemon.stop('SIGTERM', STOP_TIMEOUT_MS);
    expect(exit).toMatchObject({ code: 0, signal: null });
    expect(await findTempFiles(h.rootDir)).toEqual([]);
  });
});

describe('--once whose stdout reader is gone (`config-agent --once --json | head -c 100`)', () => {
  it('converges and exits with its own code', async () => {
    const h = await AgentHarness.create({ registerDevice: true });
    harness = h;
    const count = 300;
    await Promise.all(
      Array.from({ length: count }, (_, n) =>
        h.createAndDeploy({ relative_filepath: `many/${n}.json`, content: { n } }),
      ),
    );
    const child = h.spawn(['--once', '--json']);
    // Gone before the first byte: every write of the summary fails with EPIPE.
    child.stdout?.destroy();
    const result = await collect(child, 120_000);
    expect(result).toMatchObject({ code: 0, signal: null });
    expect(await readdir(h.rootPath('many'))).toHaveLength(count);
  });
});
