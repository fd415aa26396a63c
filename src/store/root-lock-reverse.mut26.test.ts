// rootDir's lock, the reverse upgrade (mut26): an agent on Node 20 holds the unpadded name an agent before lock24 binds.
import * as nodeFs from 'node:fs/promises';
import { mkdir, stat } from 'node:fs/promises';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import {
  oldAgentMeets,
  PERL,
  parentOf,
  tableHasExactly,
  untilTable,
} from '../../test/helpers/legacy-lock-name.js';
import { tempDirEachTest } from '../../test/helpers/temp-dir.js';
import type { FsPort } from '../lib/fs-port.js';
import { silentLogger } from '../lib/logger.js';
import { acquireRootLock, holdsName, legacyNameHelper, rootLockNames } from './lock.js';
import { StateDir } from './state-dir.js';

const ON_NODE_20 = process.versions.node.startsWith('20.');

const temp = tempDirEachTest('root-lock-mut26-', { root: undefined });
const keyOf = async (at: string) => {
  const stats = await stat(at);
  return { key: `${stats.dev}:${stats.ino}`, uid: stats.uid, gid: stats.gid, mode: stats.mode };
};
const legacyName = async () => `\0config-agent-root-${(await keyOf(temp.at('root'))).key}`;

describe.runIf(ON_NODE_20)(
  "rootDir's lock on Node 20: an agent before lock24 started after this one (mut26)",
  () => {
    it('finds the unpadded name held and is answered with the helper pid (a child of this agent) and this stateDir', async () => {
      const stateDir = path.join(temp.dir, 'state');
      const lock = await acquireRootLock(temp.at('root'), keyOf, stateDir, undefined, PERL);
      const legacy = await legacyName();
      try {
        expect(await untilTable(legacy, true)).toBe(true);
        const met = await oldAgentMeets(legacy);
        expect(met.bind).toBe('in use');
        const answer = JSON.parse(met.answer) as { pid: number; stateDir: string; rootDir: string };
        expect(answer).toStrictEqual({ pid: answer.pid, stateDir, rootDir: temp.at('root') });
        // What the old agent believes: the pid it was given holds the name, and it runs as the agent's own user
        // (it is the agent's child).
        expect(await parentOf(answer.pid)).toBe(process.pid);
        expect(await holdsName(legacy, answer.pid)).toBe(true);
        // A reload sharing the lock with another stateDir: the helper answers with the newest.
        const reload = await acquireRootLock(
          temp.at('root'),
          keyOf,
          path.join(temp.dir, 'state2'),
          undefined,
          PERL,
        );
        let again = JSON.parse((await oldAgentMeets(legacy)).answer) as { stateDir: string };
        for (let look = 0; look < 400 && again.stateDir !== path.join(temp.dir, 'state2'); look += 1) {
          await new Promise((resolve) => setTimeout(resolve, 25));
          again = JSON.parse((await oldAgentMeets(legacy)).answer) as { stateDir: string };
        }
        expect(again.stateDir).toBe(path.join(temp.dir, 'state2'));
        await reload.release();
      } finally {
        await lock.release();
      }
      // Released: the helper is gone (awaited by release) and both names are free.
      expect(await tableHasExactly(legacy)).toBe(false);
      expect(await oldAgentMeets(legacy)).toStrictEqual({ bind: 'bound', answer: '' });
      const again = await acquireRootLock(temp.at('root'), keyOf, stateDir);
      await again.release();
    });

    it('an open that asks for no helper (a --once) leaves the unpadded name free, as before', async () => {
      const lock = await acquireRootLock(temp.at('root'), keyOf, path.join(temp.dir, 'state'));
      const legacy = await legacyName();
      try {
        expect(await oldAgentMeets(legacy)).toStrictEqual({ bind: 'bound', answer: '' });
      } finally {
        await lock.release();
      }
      expect(await oldAgentMeets(legacy)).toStrictEqual({ bind: 'bound', answer: '' });
    });

    it('without perl the lock is taken as before (the gap as it was), and released', async () => {
      const lock = await acquireRootLock(
        temp.at('root'),
        keyOf,
        path.join(temp.dir, 'state'),
        undefined,
        path.join(temp.dir, 'no-perl'),
      );
      const legacy = await legacyName();
      const { name } = rootLockNames((await keyOf(temp.at('root'))).key);
      const helper = legacyNameHelper(name, () => '{}', path.join(temp.dir, 'no-perl'));
      expect(await helper.started).toBeUndefined();
      await helper.stop();
      expect(await oldAgentMeets(legacy)).toStrictEqual({ bind: 'bound', answer: '' });
      await lock.release();
    });
  },
);

describe.runIf(ON_NODE_20)('StateDir.open (mut26)', () => {
  it("the daemon's open (legacyLockHelper) holds the unpadded name until close; an open without it does not", async () => {
    const settings = { stateDir: path.join(temp.dir, 'state'), rootDir: temp.at('root'), deviceId: 'dev-1' };
    await mkdir(settings.stateDir, { mode: 0o700 });
    const legacy = await legacyName();
    const once = await StateDir.open(nodeFs as unknown as FsPort, settings, silentLogger(), {
      clock: { now: () => 0 },
    });
    expect(await oldAgentMeets(legacy)).toStrictEqual({ bind: 'bound', answer: '' });
    await once.close();
    const daemon = await StateDir.open(nodeFs as unknown as FsPort, settings, silentLogger(), {
      clock: { now: () => 0 },
      legacyLockHelper: true,
    });
    try {
      expect(await untilTable(legacy, true)).toBe(true);
      const met = await oldAgentMeets(legacy);
      expect(met.bind).toBe('in use');
      expect(JSON.parse(met.answer)).toMatchObject({ stateDir: settings.stateDir, rootDir: temp.at('root') });
    } finally {
      await daemon.close();
    }
    expect(await oldAgentMeets(legacy)).toStrictEqual({ bind: 'bound', answer: '' });
  });
});

/**
 * Names of this process alone: another run of this file on the machine (abstract names are machine-wide) binds its
 * own. The helper's end with a SIGKILLed agent (~2.4 s of real waiting) is root-lock-reverse-kill.mut26.real-time.
 */
const OWN = `mut26:${process.pid}`;

describe('the helper itself (legacyNameHelper)', () => {
  it('binds the name at its own length, says "in use" when it is taken, and ends when stopped', async () => {
    const { name } = rootLockNames(`${OWN}:1`);
    const legacy = name.replace(/\0+$/, '');
    const first = legacyNameHelper(name, (pid) => JSON.stringify({ pid }), PERL);
    expect(await first.started).toBe('bound');
    expect(await tableHasExactly(legacy)).toBe(true);
    const second = legacyNameHelper(name, () => '{}', PERL);
    expect(await second.started).toBe('in use');
    await second.stop();
    const met = await oldAgentMeets(legacy);
    expect(met.bind).toBe('in use');
    expect(await parentOf((JSON.parse(met.answer) as { pid: number }).pid)).toBe(process.pid);
    await first.stop();
    expect(await tableHasExactly(legacy)).toBe(false);
  });
});
