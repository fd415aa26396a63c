// Durable writer on a real directory: the group of a published file, set before the rename or changed in place.
import { mkdtempSync, rmSync, statSync } from 'node:fs';
import * as nodeFs from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { publishFile } from './durable-writer.js';

const isRoot = process.getuid?.() === 0;
const BASE = mkdtempSync(path.join(os.tmpdir(), 'config-agent-group-'));
afterAll(() => rmSync(BASE, { recursive: true, force: true }));

/** A gid no account uses: root may chown to any number, no group entry needed. */
const GID = 4242;
const OTHER_GID = 4243;

const publish = (root: string, text: string, mode: number, gid?: number) =>
  publishFile(nodeFs, {
    rootDir: root,
    relativePath: 'secrets/db.json',
    data: Buffer.from(text),
    mode,
    dirMode: 0o755,
    ...(gid === undefined ? {} : { gid }),
  });

describe.skipIf(!isRoot)(
  'publishFile with a group (skipped unless root: only root may chown to any group)',
  () => {
    it('publishes a new file already in its group and mode', async () => {
      const root = mkdtempSync(path.join(BASE, 'new-'));
      expect((await publish(root, '{"a":1}', 0o640, GID)).outcome).toBe('written');
      const stats = statSync(path.join(root, 'secrets/db.json'));
      expect({ gid: stats.gid, mode: stats.mode & 0o7777 }).toEqual({ gid: GID, mode: 0o640 });
    });

    it('changes the group and mode of identical bytes in place: same inode, same mtime', async () => {
      const root = mkdtempSync(path.join(BASE, 'meta-'));
      await publish(root, '{"a":1}', 0o644);
      const file = path.join(root, 'secrets/db.json');
      const before = statSync(file);
      expect((await publish(root, '{"a":1}', 0o640, GID)).outcome).toBe('metadata');
      const after = statSync(file);
      expect({ gid: after.gid, mode: after.mode & 0o7777, ino: after.ino, mtimeMs: after.mtimeMs }).toEqual({
        gid: GID,
        mode: 0o640,
        ino: before.ino,
        mtimeMs: before.mtimeMs,
      });
      expect((await publish(root, '{"a":1}', 0o640, GID)).outcome).toBe('unchanged');
      // A group change alone is metadata too.
      expect((await publish(root, '{"a":1}', 0o640, OTHER_GID)).outcome).toBe('metadata');
      expect(statSync(file).gid).toBe(OTHER_GID);
    });

    it('rewrites changed bytes into the wanted group, and leaves the group alone when none is asked', async () => {
      const root = mkdtempSync(path.join(BASE, 'rewrite-'));
      await publish(root, '{"a":1}', 0o640, GID);
      expect((await publish(root, '{"a":2}', 0o640, OTHER_GID)).outcome).toBe('written');
      const file = path.join(root, 'secrets/db.json');
      expect(statSync(file).gid).toBe(OTHER_GID);
      expect((await publish(root, '{"a":2}', 0o640)).outcome).toBe('unchanged');
      expect(statSync(file).gid).toBe(OTHER_GID);
    });
  },
);
