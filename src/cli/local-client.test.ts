// `config-agent status` against a stand-in agent on a real unix socket: what reaches the operator's terminal.
import { describe, expect, it } from 'vitest';
import { bufferedIo, localSocketEachTest, streamedAnswer } from '../../test/helpers/local-socket.js';
import { MAX_LOCAL_ANSWER_BYTES, runStatus, runSync } from './local-client.js';

const socket = localSocketEachTest('config-agent-status-');

/** An agent whose status holds `body`, listening where the config written beside it says. */
function agentAnswering(body: unknown): Promise<string> {
  return socketServing((_request, response) => {
    response.writeHead(200, { 'content-type': 'application/json' });
    response.end(JSON.stringify(body));
  });
}

/** Whatever answers on the socket the config written beside it names. */
function socketServing(handler: Parameters<typeof socket.serve>[0]): Promise<string> {
  return socket.serve(handler, {
    deviceId: 'dvc_1',
    server: { baseUrl: 'https://configs.example.com' },
    rootDir: `${socket.dir}/root`,
    stateDir: `${socket.dir}/state`,
  });
}

/**
 * A socket answering `limit` bytes of a JSON string in 64 KiB writes, each after the last drained: endless to a
 * client that keeps reading; stops writing when the client goes. `sent` counts what the socket took.
 */
function endlessAnswer(limit: number): ReturnType<typeof streamedAnswer> {
  const piece = Buffer.alloc(64 * 1024, 'a');
  return streamedAnswer((sent) => (sent < limit ? piece : undefined), '"', '"');
}

describe('config-agent status', () => {
  it("shows the service's ids and messages quoted and escaped: they cannot drive the terminal or forge a line", async () => {
    // Ids and messages come from the service (state.json keeps them as sent).
    const hostileId = 'cfg_\u001b[2J\u001b[31mx\nDevice:             dvc_forged';
    const configPath = await agentAnswering({
      deviceId: 'dvc_1',
      pendingReports: 0,
      managedFiles: [{ path: 'app/a.json', instanceId: hostileId, status: 'deployed' }],
      errors: [
        {
          instanceId: 'cfg_b\u009b31m',
          path: 'app/b.json',
          status: 'retrying',
          message: `path conflict: "app/b.json" is also targeted by ${hostileId}`,
        },
      ],
    });
    const io = bufferedIo();

    expect(await runStatus({ configPath, json: false }, io)).toBe(1);

    const out = io.out();
    expect(out.includes('\u001b') || out.includes('\u009b')).toBe(false);
    expect(out.match(/^Device:/gmu)).toHaveLength(1);
    expect(out).toContain('app/a.json ("cfg_\\u001b[2J\\u001b[31mx\\nDevice:             dvc_forged")');
    expect(out).toContain('app/b.json ("cfg_b\\u009b31m")');
  });
});

describe('config-agent status: degraded (hook26)', () => {
  it('says first what the agent says is degraded (a hook process left behind), its exit code unchanged', async () => {
    const why =
      'hook nfs/**: its process (pid 1001, reload) did not end after SIGKILL and is still there (a hung mount?); the hook does not run until it ends';
    const configPath = await agentAnswering({
      deviceId: 'dvc_1',
      pendingReports: 0,
      errors: [],
      degraded: [why],
    });
    const io = bufferedIo();

    expect(await runStatus({ configPath, json: false }, io)).toBe(0);

    expect(io.out().split('\n')[0]).toBe(`Degraded:           ${why}`);
  });
});

describe('config-agent status: text of a megabyte', () => {
  it('names a path, id or message over 10,000 characters by its length', async () => {
    const longPath = `app/${'p'.repeat(1_000_000)}.json`;
    const configPath = await agentAnswering({
      deviceId: 'dvc_1',
      pendingReports: 0,
      managedFiles: [{ path: 'app/a.json', instanceId: 'cfg_a', status: 'deployed' }],
      errors: [
        {
          instanceId: 'cfg_b',
          path: longPath,
          status: 'failed',
          message: `path rejected: "${longPath}" is longer than 4095 bytes`,
        },
      ],
    });
    const io = bufferedIo();

    expect(await runStatus({ configPath, json: false }, io)).toBe(1);

    const out = io.out();
    expect(out.length).toBeLessThan(2_000);
    expect(out).toContain('<1000009 characters, not shown> (cfg_b) — <1000052 characters, not shown>');
    expect(out).toContain('app/a.json (cfg_a)');
  });
});

describe('status and sync against whatever answers on the socket', () => {
  it('stop reading an answer over the cap: exit 3, the answer named, the rest never read', async () => {
    const answer = endlessAnswer(64 * 1024 * 1024);
    const configPath = await socketServing(answer.handler);
    const io = bufferedIo();

    expect(await runStatus({ configPath, json: true }, io, { maxBytes: 1024 * 1024 })).toBe(3);

    expect(io.err()).toContain('its answer is larger than 1048576 bytes');
    expect(io.out()).toBe('');
    // Read to its end before (64 MiB, then exit 3 for a JSON string that is not a status): a few socket buffers now.
    expect(answer.sent()).toBeLessThan(16 * 1024 * 1024);
  });

  it('the default cap holds for sync too, and takes a status at the listing limit (100,000 files) with room', async () => {
    // 16 MiB (mem35) was under a status of 100,000 files (~18 MB): status exited 3 on a device the agent serves.
    expect(MAX_LOCAL_ANSWER_BYTES).toBeGreaterThanOrEqual(1.5 * 10 * 1_800_000);
    const answer = endlessAnswer(3 * MAX_LOCAL_ANSWER_BYTES);
    const configPath = await socketServing(answer.handler);
    const io = bufferedIo();

    expect(await runSync({ configPath }, io)).toBe(3);

    expect(io.err()).toContain(`its answer is larger than ${MAX_LOCAL_ANSWER_BYTES} bytes`);
    expect(answer.sent()).toBeLessThan(2 * MAX_LOCAL_ANSWER_BYTES);
  });

  it('a declared length over the cap is refused before its body', async () => {
    const configPath = await socketServing((_request, response) => {
      response.writeHead(200, { 'content-length': String(2 * 1024 * 1024) });
      response.write('"');
    });
    const io = bufferedIo();

    expect(await runStatus({ configPath, json: true }, io, { maxBytes: 1024 * 1024 })).toBe(3);
    expect(io.err()).toContain('its answer is larger than 1048576 bytes');
  });

  it('a silent socket and one that trickles its answer end at the deadline: exit 3', async () => {
    let trickling: NodeJS.Timeout | undefined;
    const configPath = await socketServing((request, response) => {
      if (request.method === 'POST') return; // sync: accepted, never answered
      // status: a byte every 50 ms for 20 s, so the socket never goes idle; a valid status at its end.
      response.writeHead(200, { 'content-type': 'application/json' });
      response.write('{"pendingReports":0,"pad":"');
      let left = 400;
      trickling = setInterval(() => {
        left -= 1;
        if (response.destroyed || left === 0) {
          clearInterval(trickling);
          if (!response.destroyed) response.end('"}');
          return;
        }
        response.write('a');
      }, 50);
    });

    const silent = bufferedIo();
    expect(await runSync({ configPath }, silent, { timeoutMs: 200 })).toBe(3);
    expect(silent.err()).toContain('no whole answer within');

    // Before the deadline, only an idle socket timed out: this one exited 0 after 20 s.
    const trickled = bufferedIo();
    expect(await runStatus({ configPath, json: true }, trickled, { timeoutMs: 500 })).toBe(3);
    expect(trickled.err()).toContain('no whole answer within');
    clearInterval(trickling);
  });
});
