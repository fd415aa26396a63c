// A daemon started while stateDir's mount already hangs (exfat-fuse stopped): said once, tried the moment it answers.
import { EventEmitter } from 'node:events';
import { mkdir, mkdtemp, rm } from 'node:fs/promises';
import { request as httpRequest } from 'node:http';
import os from 'node:os';
import path from 'node:path';
import { PassThrough } from 'node:stream';
import { afterEach, describe, expect, it } from 'vitest';
import { writeAgentConfig } from '../../test/helpers/once-world.js';
import { canPauseFuse, type PausableMount, pausableFuseMount } from '../../test/helpers/pausable-fuse.js';
import { PATIENCE_MS, waitFor } from '../../test/helpers/wait-for.js';
import { createSecretRegistry } from '../lib/secrets.js';
import { runAgent } from './compose.js';

const KEY = 'sk_test_hung_state_4f2a9c';

/** A GET over the unix socket at `socketPath`: its status and body. */
function get(socketPath: string, route: string): Promise<{ status: number; body: string }> {
  return new Promise((resolve, reject) => {
    const request = httpRequest({ socketPath, path: route, method: 'GET' }, (response) => {
      let body = '';
      response.on('data', (chunk: Buffer) => {
        body += chunk.toString();
      });
      response.on('end', () => resolve({ status: response.statusCode ?? 0, body }));
    });
    request.on('error', reject);
    request.end();
  });
}

let dir: string | undefined;
let mount: PausableMount | undefined;
afterEach(async () => {
  mount?.close();
  mount = undefined;
  if (dir !== undefined) await rm(dir, { recursive: true, force: true, maxRetries: 20, retryDelay: 20 });
  dir = undefined;
});

// Root with /dev/fuse and exfat-fuse (pausable-fuse.ts): about 2 s, the mount's bound shortened to 1 s.
describe.runIf(canPauseFuse)(
  'runAgent with stateDir on a mount that already hangs at start (mount22)',
  () => {
    // 90 s: its two waits of up to PATIENCE_MS (30 s) each, besides the mount, start and stop; 30 s had no headroom at
    // a load of ~21 (it failed once in the unit tier; fix30). What it asserts is unchanged.
    // Before: each attempt said "cannot start yet ... trying again in N s", and the start waited out its back-off (up
    // to 5 min; an hour here) after the mount answered again: the test's wait for that attempt ran out.
    it('says so once, naming the mount, and tries to start as soon as it answers, not at the next back-off', async () => {
      dir = await mkdtemp(path.join(os.tmpdir(), 'config-agent-hung-state-'));
      const mountPoint = path.join(dir, 'mnt');
      await mkdir(mountPoint);
      mount = await pausableFuseMount(path.join(dir, 'state.img'), mountPoint, 'umask=077');
      const stateDir = path.join(mount.mountPoint, 'state');
      await mkdir(stateDir, { mode: 0o700 });
      const configPath = await writeAgentConfig(dir, 'dvc_hung_state', 'http://127.0.0.1:9', {
        server: { baseUrl: 'http://127.0.0.1:9', timeoutSeconds: 1 },
        stateDir,
        drift: 'off',
      });
      const stderr = new PassThrough();
      let err = '';
      stderr.on('data', (chunk: Buffer) => {
        err += chunk.toString();
      });
      const events = new EventEmitter();
      mount.pause();
      const exit = runAgent(
        { configPath },
        { stdout: new PassThrough(), stderr, env: { CONFIG_AGENT_API_KEY: KEY }, isTty: false },
        createSecretRegistry(),
        events,
        // The back-off alone would wait an hour: only the mount's answer (or a SIGHUP) can start it sooner.
        { firstDelayMs: 3_600_000, maxDelayMs: 3_600_000, mountAnswerMs: 1_000 },
      );
      try {
        await waitFor(() => err.includes('cannot start yet'), PATIENCE_MS, { what: 'a first attempt' });
        expect(err).toContain('stateDir: cannot create');
        expect(err).toContain('ETIMEDOUT');
        expect(err).toContain(`until the mount at ${mount.mountPoint} answers`);
        // Attempts asked for meanwhile (an operator's SIGHUP each) are refused at once, with nothing more said.
        for (let hup = 0; hup < 3; hup += 1) {
          events.emit('SIGHUP');
          await new Promise((resolve) => setTimeout(resolve, 100));
        }
        expect(err.split('cannot start yet')).toHaveLength(2);
        expect(err).not.toContain('"agent started"');
        // Health says why, over the socket, while it waits (before: nothing listened there).
        const health = await get(path.join(dir, 'agent.sock'), '/v1/health');
        expect(health.status).toBe(503);
        expect(JSON.parse(health.body)).toMatchObject({ healthy: false });
        expect(JSON.parse(health.body).reason).toContain(`the mount at ${mount.mountPoint} does not answer`);
        mount.resume();
        await waitFor(() => err.includes('answers again'), PATIENCE_MS, {
          what: `an attempt once it answers (stderr so far: ${JSON.stringify(err)})`,
        });
        expect(err).toContain(`the mount at ${mount.mountPoint} answers again: trying to start now`);
        expect(err.split('cannot start yet')).toHaveLength(2);
      } finally {
        events.emit('SIGTERM');
      }
      // The attempt may still be under way at the SIGTERM (0), or have reached stateDir, where exFAT, this test's
      // stand-in for a network filesystem, refuses the lock's hard link (78); an NFS or sshfs stateDir starts.
      // Its stderr on failure: an exit code alone said nothing of why (adv28 saw 1 in three loaded unit-tier runs).
      const code = await exit;
      expect([0, 78], err).toContain(code);
      expect(err).not.toContain(KEY);
    }, 90_000);
  },
);
