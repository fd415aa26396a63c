// A failed renewal's own reason (say ENOSPC on renewal-asides.json) is what the held-back files' EIO names, logged once.
import * as nodeFs from 'node:fs/promises';
import { chmod, mkdir, mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { Writable } from 'node:stream';
import { afterEach, beforeEach, expect, it } from 'vitest';
import type { FsPort } from '../lib/fs-port.js';
import { createLogger } from '../lib/logger.js';
import { createSecretRegistry } from '../lib/secrets.js';
import {
  DirectorySyncLedger,
  type RenewalAside,
  type RenewalAsides,
  renewalFailureLog,
} from './directory-syncs.js';
import { publishFile, renewDroppedOnTheWay, unsettledEntry } from './durable-writer.js';
import { VerifiedDirectories } from './path-guard.js';

const EUID = process.geteuid?.() ?? -1;

let dir: string;
let root: string;

beforeEach(async () => {
  dir = await mkdtemp(path.join(os.tmpdir(), 'renewal-cause-'));
  root = path.join(dir, 'root');
  await mkdir(path.join(root, 'top/app'), { recursive: true, mode: 0o755 });
  await chmod(root, 0o755);
  await chmod(path.join(root, 'top'), 0o755);
  await writeFile(path.join(root, 'top/app/a.json'), 'deployed\n');
});

afterEach(async () => {
  await rm(dir, { recursive: true, force: true });
});

/** renewal-asides.json's writes: failing with ENOSPC while `full`, recorded (in memory) once there is room. */
function asidesOnADisk(disk: { full: boolean }): RenewalAsides {
  return {
    record: async (_rootDir, _dir, _name, aside): Promise<RenewalAside> => {
      if (disk.full)
        throw Object.assign(new Error('ENOSPC: no space left on device, write'), { code: 'ENOSPC' });
      return { aside, state: 'renaming' };
    },
    asideAt: () => undefined,
    holding: false,
    holds: () => false,
    stillHolds: async () => false,
    beforeMaking: () => undefined,
    pending: 0,
    retry: async () => 0,
  };
}

it('the EIO a file below a directory whose renewal failed is held back with names the real reason, logged once', async () => {
  // This run made top/app and the fsync of top failed: its entry may be dropped.
  const ledger = new DirectorySyncLedger();
  ledger.changed(path.join(root, 'top'), 'app');
  ledger.failed(path.join(root, 'top'));
  const disk = { full: true };
  ledger.keepAsidesIn(asidesOnADisk(disk));
  let log = '';
  const logged = new Writable({
    write(chunk: Buffer, _encoding, done) {
      log += chunk.toString('utf8');
      done();
    },
  });
  ledger.onRenewalFailure = renewalFailureLog(
    createLogger({ level: 'info', secrets: createSecretRegistry(), destination: logged }),
  );
  const fs: FsPort = { ...(nodeFs as unknown as FsPort), directorySyncs: ledger };

  // Three passes of a batch, the disk full: the renewal fails each time, the file is held back each time.
  for (let pass = 0; pass < 3; pass += 1) {
    await renewDroppedOnTheWay(fs, root, 'top/app/a.json', new VerifiedDirectories(EUID), new Set());
    const held = unsettledEntry(fs, root, 'top/app/a.json');
    // Before: 'fsync directory (...) failed for top/app: EIO' with no word of the full disk.
    expect(held?.message).toContain('record directory renewal');
    expect(held?.message).toContain('ENOSPC');
    expect(held?.cause).toMatchObject({ code: 'disk_error', errno: 'ENOSPC' });
  }
  // A publish alone meets it too: its renewal fails the same way and its file is held back with the same reason.
  await publishFile(fs, {
    rootDir: root,
    relativePath: 'top/app/a.json',
    data: Buffer.from('v2\n'),
    mode: 0o644,
    dirMode: 0o755,
  });
  expect(unsettledEntry(fs, root, 'top/app/a.json')?.message).toContain('ENOSPC');
  const lines = log.split('\n').filter((line) => line !== '');
  expect(lines).toHaveLength(1);
  expect(JSON.parse(lines[0]!)).toMatchObject({ level: 'error', name: 'app', err: { errno: 'ENOSPC' } });

  // Room again: the next publish renews top/app, and nothing is held back any more, nor logged.
  disk.full = false;
  await publishFile(fs, {
    rootDir: root,
    relativePath: 'top/app/a.json',
    data: Buffer.from('v3\n'),
    mode: 0o644,
    dirMode: 0o755,
  });
  expect(unsettledEntry(fs, root, 'top/app/a.json')).toBeUndefined();
  expect(await readFile(path.join(root, 'top/app/a.json'), 'utf8')).toBe('v3\n');
  expect(log.split('\n').filter((line) => line !== '')).toHaveLength(1);
});
