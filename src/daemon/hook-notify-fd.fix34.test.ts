// The watchdog's socket, left open across exec by systemd/config-agent-notify for the agent, reaches none of its children (fix34).
// Node marks the descriptors it inherits close-on-exec at start (libuv's uv_disable_stdio_inheritance: 0-15, then on
// while they are open), so review34's finding (every child inherits it) does not hold; this pins it.
import { type ChildProcess, spawn } from 'node:child_process';
import { mkdtemp, readFile, rm } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterEach, describe, expect, it } from 'vitest';
import { bundleScript } from '../../test/helpers/bundled-script.js';

const WRAPPER = fileURLToPath(new URL('../../systemd/config-agent-notify', import.meta.url));
const HOOKS = fileURLToPath(new URL('./hooks.ts', import.meta.url));
const READER = fileURLToPath(new URL('./hook-processes.ts', import.meta.url));

let dir: string | undefined;
let listener: ChildProcess | undefined;
afterEach(async () => {
  listener?.kill('SIGKILL');
  listener = undefined;
  if (dir !== undefined) await rm(dir, { recursive: true, force: true });
  dir = undefined;
});

/**
 * What the agent (a node run by the wrapper) sees of its notify socket, and what its children see: a hook run by
 * runHooks lists its descriptors' targets, and the environ reader's grep reads its own /proc/self/fdinfo/<fd>
 * (present only while that descriptor is open in it).
 */
const AGENT = `
import { readFileSync, readlinkSync, writeFileSync } from 'node:fs';
const [out, hookOut] = process.argv.slice(2);
const fd = process.env.CONFIG_AGENT_NOTIFY_FD;
const quiet = { child: () => quiet, debug() {}, info() {}, warn() {}, error() {} };
const runs = await runHooks(
  [{ match: '*', run: ['/bin/sh', '-c', 'for f in /proc/$$/fd/*; do readlink "$f"; done > "$0"; true', hookOut], timeoutSeconds: 20 }],
  ['a.json'],
  { cwd: '/', env: { PATH: '/usr/bin:/bin', ...process.env }, logger: quiet },
);
const read = boundedFileReader(20_000).read('/proc/self/fdinfo/' + fd);
writeFileSync(out, JSON.stringify({
  fd,
  socket: readlinkSync('/proc/self/fd/' + fd),
  flags: /flags:[^0-9]*([0-7]+)/.exec(readFileSync('/proc/self/fdinfo/' + fd, 'utf8'))?.[1],
  hookExit: runs.map((run) => run.exitCode),
  readerHasIt: read instanceof Buffer && read.length > 0,
}));
`;

/** A datagram socket bound at `socketPath`, as systemd's notify socket, until killed; resolves once bound. */
function notifyListener(socketPath: string): Promise<void> {
  listener = spawn(
    'perl',
    [
      '-MSocket',
      '-e',
      'socket(my $s, PF_UNIX, SOCK_DGRAM, 0) or die; bind($s, pack_sockaddr_un($ARGV[0])) or die; $| = 1; print "bound\\n"; sleep 120',
      socketPath,
    ],
    { stdio: ['ignore', 'pipe', 'inherit'] },
  );
  const started = listener;
  return new Promise((resolve, reject) => {
    started.stdout?.once('data', () => resolve());
    started.once('exit', (code) => reject(new Error(`the listener exited ${code}`)));
  });
}

/** Runs AGENT under the wrapper with `extraFds` descriptors from 3 on held open (pipes); what it wrote. */
async function runUnderWrapper(
  work: string,
  extraFds: number,
): Promise<{
  fd: string;
  socket: string;
  flags: string;
  hookExit: number[];
  readerHasIt: boolean;
  hookFds: string[];
}> {
  const outfile = path.join(work, 'agent.mjs');
  await bundleScript(
    `import { runHooks } from ${JSON.stringify(HOOKS)};\nimport { boundedFileReader } from ${JSON.stringify(READER)};\n${AGENT}`,
    work,
    path.join(work, 'agent.ts'),
    outfile,
  );
  const out = path.join(work, `seen-${extraFds}.json`);
  const hookOut = path.join(work, `hook-${extraFds}.txt`);
  const child = spawn('perl', [WRAPPER, process.execPath, outfile, out, hookOut], {
    env: { PATH: process.env.PATH ?? '/usr/bin:/bin', NOTIFY_SOCKET: path.join(work, 'notify') },
    stdio: ['ignore', 'ignore', 'inherit', ...Array<'pipe'>(extraFds).fill('pipe')],
  });
  const code = await new Promise<number | null>((resolve) => child.once('exit', resolve));
  expect(code).toBe(0);
  const seen = JSON.parse(await readFile(out, 'utf8')) as {
    fd: string;
    socket: string;
    flags: string;
    hookExit: number[];
    readerHasIt: boolean;
  };
  return { ...seen, hookFds: (await readFile(hookOut, 'utf8')).split('\n').filter(Boolean) };
}

describe("config-agent-notify's descriptor and the agent's children (fix34)", () => {
  it('the agent holds the socket close-on-exec; a hook and the environ reader never have it, on descriptor 3 or 16', async () => {
    dir = await mkdtemp(path.join(os.tmpdir(), 'config-agent-fix34-notify-'));
    await notifyListener(path.join(dir, 'notify'));
    // 0: the socket lands on 3; 13: 3-15 held by whoever started the wrapper, so it lands on 16, past the 16
    // descriptors libuv always marks.
    for (const [extraFds, at] of [
      [0, 3],
      [13, 16],
    ] as const) {
      const seen = await runUnderWrapper(dir, extraFds);
      expect(seen.fd).toBe(String(at));
      expect(seen.socket).toMatch(/^socket:\[\d+\]$/);
      // O_CLOEXEC (02000000) in the agent: gone at every exec of its children.
      expect(Number.parseInt(seen.flags, 8) & 0o2000000).toBe(0o2000000);
      expect(seen.hookExit).toEqual([0]);
      expect(seen.hookFds.length).toBeGreaterThan(0);
      expect(seen.hookFds).not.toContain(seen.socket);
      expect(seen.readerHasIt).toBe(false);
    }
  }, 60_000);
});
