// rootDir's lock held in-process against the mutants Stryker left alive (mut23): what the name answers, shared by a reload, freed at the last release.
import { randomBytes } from 'node:crypto';
import net from 'node:net';
import { describe, expect, it } from 'vitest';
import { rootNameOf } from '../../test/helpers/root-lock-holder.js';
import { acquireRootLock, RootLockedError, StateLockedError } from './lock.js';

/** A key no other test process uses: the abstract name is per network namespace, shared by parallel test files. */
const uniqueKey = () => `mut23-${process.pid}-${randomBytes(6).toString('hex')}`;
/** A keyOf giving `key` for any directory, owned by this process's user. */
const keyed = (key: string) => async () => ({ key, uid: process.getuid?.() ?? 0, gid: 0, mode: 0o755 });

/** What the abstract name answers a connection now: the holder's text, or the connect's errno when none holds it. */
function ask(key: string): Promise<{ answer: string } | { refused: string }> {
  return new Promise((resolve) => {
    let text = '';
    const socket = net.connect({ path: rootNameOf(key) });
    socket.on('data', (chunk: Buffer) => {
      text += chunk.toString('utf8');
    });
    socket.on('error', (error: NodeJS.ErrnoException) => resolve({ refused: error.code ?? 'unknown' }));
    socket.on('end', () => resolve({ answer: text }));
  });
}

describe('acquireRootLock in one process', () => {
  it('the name answers who holds it: this pid, its stateDir and rootDir', async () => {
    const key = uniqueKey();
    const lock = await acquireRootLock('/srv/root', keyed(key), '/var/lib/agent');
    try {
      expect(lock.unproven).toBeUndefined();
      const asked = await ask(key);
      expect('answer' in asked && JSON.parse(asked.answer)).toStrictEqual({
        pid: process.pid,
        stateDir: '/var/lib/agent',
        rootDir: '/srv/root',
      });
    } finally {
      await lock.release();
    }
  });

  it('a reload sharing it keeps it through the first release; the last one frees the name; more releases do nothing', async () => {
    const key = uniqueKey();
    const first = await acquireRootLock('/srv/root', keyed(key), '/var/lib/agent');
    const reload = await acquireRootLock('/srv/root', keyed(key), '/var/lib/agent');
    expect(reload.unproven).toBeUndefined();

    await first.release();
    expect('answer' in (await ask(key))).toBe(true);

    await reload.release();
    expect(await ask(key)).toStrictEqual({ refused: 'ECONNREFUSED' });
    // Released twice more (a stop after a reload's failure): nothing to release, nothing thrown.
    await first.release();
    await reload.release();
    // Free for the next agent: taken again as new.
    const next = await acquireRootLock('/srv/root', keyed(key), '/var/lib/other');
    try {
      const asked = await ask(key);
      expect('answer' in asked && JSON.parse(asked.answer).stateDir).toBe('/var/lib/other');
    } finally {
      await next.release();
    }
  });

  it('no key (a mount that does not answer): no lock, and no name bound for the key it could not have', async () => {
    const lock = await acquireRootLock('/srv/hung', async () => undefined, '/var/lib/agent');
    try {
      expect(lock.unproven).toBeUndefined();
      expect('refused' in (await ask('undefined'))).toBe(true);
    } finally {
      await lock.release();
    }
  });
});

// Survivors of lock24's run over its rewrite of acquireRootLock (names, servers, holders).
describe('acquireRootLock in one process: sharers released in any order (lock24)', () => {
  it('the reload released first leaves the first open holding, answering with its stateDir', async () => {
    const key = uniqueKey();
    const first = await acquireRootLock('/srv/root', keyed(key), '/var/lib/a');
    const reload = await acquireRootLock('/srv/root', keyed(key), '/var/lib/b');
    await reload.release();
    try {
      const asked = await ask(key);
      expect('answer' in asked && JSON.parse(asked.answer).stateDir).toBe('/var/lib/a');
    } finally {
      await first.release();
    }
    expect(await ask(key)).toStrictEqual({ refused: 'ECONNREFUSED' });
  });

  it("a sharer released twice takes nothing of another's: the name still answers for the other", async () => {
    const key = uniqueKey();
    const first = await acquireRootLock('/srv/root', keyed(key), '/var/lib/a');
    const reload = await acquireRootLock('/srv/root', keyed(key), '/var/lib/b');
    await first.release();
    await first.release();
    try {
      const asked = await ask(key);
      expect('answer' in asked && JSON.parse(asked.answer).stateDir).toBe('/var/lib/b');
    } finally {
      await reload.release();
    }
  });

  // Node 24 refuses to bind a name past sun_path's 108 bytes (EINVAL), as sockets refused are: no lock and no
  // warning (it is not another's); judged as a name in use, it was asked five times and named a squat. Node 20 binds
  // its first 108 bytes (so this kills that mutant on Node 24 only, .ci/run's second stage).
  it('a name the runtime cannot bind is no warning', async () => {
    const lock = await acquireRootLock('/srv/root', keyed(`${uniqueKey()}-${'x'.repeat(120)}`), '/var/lib/a');
    expect(lock.unproven).toBeUndefined();
    await lock.release();
  });
});

describe('the refusals --once prints', () => {
  it('names the pid when known, says so when not, and the holder stateDir only when it said one', () => {
    const known = new RootLockedError('/srv/root', '/var/lib/b', 4242, '/var/lib/a');
    expect(known.refusal).toContain('(pid 4242, stateDir /var/lib/a)');
    const unknown = new RootLockedError('/srv/root', '/var/lib/b', 0, undefined);
    expect(unknown.refusal).toContain('another config-agent (pid not known) writes it');
    expect(unknown.message).toBe(unknown.refusal);
    expect(unknown.refusal).toContain('one rootDir takes one agent');

    const state = new StateLockedError('/var/lib/a', 0);
    expect(state.refusal).toBe(
      "/var/lib/a is in use: /var/lib/a/agent.lock is held by another config-agent (pid not known); nothing was done: ask it with 'config-agent sync', or run --once again once it has stopped",
    );
    expect(new StateLockedError('/var/lib/a', 7).refusal).toContain('(pid 7)');
  });
});
