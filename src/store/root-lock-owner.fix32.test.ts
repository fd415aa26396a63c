// rootDir's lock believes a holder that owns rootDir whatever its owner bits say: it may chmod them (fix32).
import { mkdir, mkdtemp, rm, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { type HolderEvidence, modeLetsWrite, trusted } from './lock.js';

let dir: string;

beforeEach(async () => {
  dir = await mkdtemp(path.join(os.tmpdir(), 'root-lock-owner-'));
});

afterEach(async () => {
  await rm(dir, { recursive: true, force: true });
});

/** A stand-in /proc with one process `pid` whose status says these effective ids. */
async function fakeProc(pid: number, uid: number, gid: number): Promise<string> {
  const proc = path.join(dir, 'proc');
  await mkdir(path.join(proc, String(pid)), { recursive: true });
  await writeFile(
    path.join(proc, String(pid), 'status'),
    `Name:\tnode\nUid:\t${uid}\t${uid}\t${uid}\t${uid}\nGid:\t${gid}\t${gid}\t${gid}\t${gid}\nGroups:\t\n`,
  );
  return proc;
}

const NO_EVIDENCE: HolderEvidence = { acl: async () => undefined, ownsRecorded: async () => false };

describe("rootDir's owner with its write bit off (fix32)", () => {
  it('is believed as a holder: it may chmod rootDir, as good as the agent user', async () => {
    // rootDir 0555 owned by the service's user (998): a root --once beside that service.
    const root = { uid: 998, gid: 998, mode: 0o40555 };
    expect(modeLetsWrite({ uid: 998, groups: [998] }, root)).toBe(true);
    expect(await trusted(7, root, NO_EVIDENCE, await fakeProc(7, 998, 998), 0)).toBe(true);
    // Nobody else gains by it: a member of its group, another user, with the same bits.
    expect(modeLetsWrite({ uid: 999, groups: [998] }, root)).toBe(false);
    expect(await trusted(7, root, NO_EVIDENCE, await fakeProc(7, 999, 998), 0)).toBe(false);
    expect(await trusted(7, root, NO_EVIDENCE, await fakeProc(7, 1001, 1001), 0)).toBe(false);
  });
});
