// The write journal's own mechanics: a settle's unlink never takes away the declaration queued after it.
import * as nodeFs from 'node:fs/promises';
import { mkdtemp, readFile, rm } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import type { FsPort } from '../lib/fs-port.js';
import { silentLogger } from '../lib/logger.js';
import { INTENT_FILE, IntentJournal } from './intent-journal.js';
import type { ManagedFile } from './state.js';

let dir: string;

beforeEach(async () => {
  dir = await mkdtemp(path.join(os.tmpdir(), 'config-agent-intents-'));
});

afterEach(async () => {
  await rm(dir, { recursive: true, force: true });
});

const SHA_A = 'a'.repeat(64);
const SHA_B = 'b'.repeat(64);

function recorded(pathName: string, instanceId: string, sha256: string): Map<string, ManagedFile> {
  return new Map([[pathName, { instanceId, sha256, mode: 0o644, createdDirs: [], writtenAt: 'now' }]]);
}

describe('IntentJournal', () => {
  it('a settle whose unlink is slow never removes the declaration made after it (a persist beside the next batch)', async () => {
    let release: () => void = () => undefined;
    let waiting = false;
    const fs: FsPort = {
      ...nodeFs,
      // The unlink waits until the next declaration's rename has landed (or 50 ms, if that is held back).
      unlink: async (file) => {
        const gate = new Promise<void>((resolve) => {
          release = resolve;
        });
        waiting = true;
        const timer = setTimeout(release, 50);
        await gate;
        clearTimeout(timer);
        return nodeFs.unlink(file);
      },
      rename: async (from, to) => {
        await nodeFs.rename(from, to);
        if (waiting && path.basename(String(to)) === INTENT_FILE) release();
      },
    };
    const journal = await IntentJournal.open(fs, dir, '/root', silentLogger());
    await journal.declare([{ path: 'a.json', instanceId: 'cfg_a', sha256: SHA_A }]);
    const settled = journal.recordedIn(recorded('a.json', 'cfg_a', SHA_A));

    await Promise.all([
      journal.settle(settled),
      journal.declare([{ path: 'b.json', instanceId: 'cfg_b', sha256: SHA_B }]),
    ]);

    const text = await readFile(path.join(dir, INTENT_FILE), 'utf8');
    expect(JSON.parse(text)).toMatchObject({ intents: [{ path: 'b.json', instanceId: 'cfg_b' }] });
    expect(journal.size).toBe(1);
  });

  it('settled and empty: the journal is unlinked; another root directory proves nothing', async () => {
    const journal = await IntentJournal.open(nodeFs, dir, '/root', silentLogger());
    await journal.declare([{ path: 'a.json', instanceId: 'cfg_a', sha256: SHA_A }]);
    expect((await IntentJournal.open(nodeFs, dir, '/elsewhere', silentLogger())).size).toBe(0);
    expect((await IntentJournal.open(nodeFs, dir, '/root', silentLogger())).size).toBe(1);

    await journal.settle(journal.recordedIn(recorded('a.json', 'cfg_a', SHA_A)));

    await expect(readFile(path.join(dir, INTENT_FILE))).rejects.toMatchObject({ code: 'ENOENT' });
  });
});
