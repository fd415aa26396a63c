// swapObstacle on memfs: what would still block a swap's write once its displaced files were removed.
import { createFsFromVolume, Volume } from 'memfs';
import { describe, expect, it } from 'vitest';
import type { FsPort } from '../lib/fs-port.js';
import { sha256Hex } from '../lib/hash.js';
import type { ManagedFile } from '../store/state.js';
import type { RemoveStep } from './plan.js';
import { swapObstacle } from './swap-way.js';

function world(tree: Record<string, string | null>) {
  const volume = Volume.fromJSON(tree, '/root');
  return createFsFromVolume(volume).promises as unknown as FsPort & {
    symlink(target: string, path: string): Promise<void>;
  };
}

/** The record of a file the agent wrote with `content` (as each tree below holds it, unless changed since). */
const file = (createdDirs: string[], content = '1'): ManagedFile => ({
  instanceId: 'cfg_loser',
  sha256: sha256Hex(Buffer.from(content)),
  mode: 0o640,
  createdDirs,
  writtenAt: '2026-01-01T00:00:00.000Z',
});

const losing = (path: string): RemoveStep => ({
  kind: 'remove',
  instance: { id: `cfg_${path}` } as RemoveStep['instance'],
  path,
  report: undefined,
  leftPath: true,
  makesWayFor: { path: 'a.json', instanceId: 'cfg_winner' },
});

describe('swapObstacle', () => {
  it('nothing in the way but the losers and the directories made for them: clear', async () => {
    const fs = world({ 'a.json/x/b.json': '1', 'a.json/x/c.json': '2' });
    const files = new Map([
      ['a.json/x/b.json', file(['a.json'])],
      ['a.json/x/c.json', file(['a.json/x'], '2')],
    ]);
    const removes = [losing('a.json/x/b.json'), losing('a.json/x/c.json')];
    expect(await swapObstacle(fs, '/root', 'a.json', removes, files)).toBeUndefined();
  });

  // Its removal leaves such a file in place (apply.ts removeFile), so the others were removed and put back each retry.
  it('a loser changed by someone else since it was written stays in the way: other bytes, another length, or on the way', async () => {
    const files = new Map([
      ['a.json/x/b.json', file(['a.json'])],
      ['a.json/x/c.json', file(['a.json/x'], '2')],
    ]);
    const removes = [losing('a.json/x/b.json'), losing('a.json/x/c.json')];
    for (const changed of ['3', 'an operator edit']) {
      const fs = world({ 'a.json/x/b.json': '1', 'a.json/x/c.json': changed });
      const obstacle = await swapObstacle(fs, '/root', 'a.json', removes, files);
      expect(obstacle?.message).toContain('"a.json/x/c.json" was changed by someone else');
      expect(obstacle?.retryable).toBe(true);
    }
    const onTheWay = {
      ...losing('a.json'),
      makesWayFor: { path: 'a.json/b.json', instanceId: 'cfg_winner' },
    };
    const edited = await swapObstacle(
      world({ 'a.json': '9' }),
      '/root',
      'a.json/b.json',
      [onTheWay],
      new Map([['a.json', file([])]]),
    );
    expect(edited?.message).toContain('"a.json" was changed by someone else');
  });

  it('names the first entry that would stay: a local file, a directory the agent did not make', async () => {
    const files = new Map([['a.json/b.json', file(['a.json'])]]);
    const local = await swapObstacle(
      world({ 'a.json/b.json': '1', 'a.json/mine.txt': 'x' }),
      '/root',
      'a.json',
      [losing('a.json/b.json')],
      files,
    );
    expect(local?.message).toContain('"a.json/mine.txt" is not a file of this agent');
    expect(local?.retryable).toBe(true);
    const dir = await swapObstacle(
      world({ 'a.json/b.json': '1', 'a.json/keep': null }),
      '/root',
      'a.json',
      [losing('a.json/b.json')],
      files,
    );
    expect(dir?.message).toContain('"a.json/keep" is a directory this agent did not make');
    const notMade = await swapObstacle(
      world({ 'a.json/b.json': '1' }),
      '/root',
      'a.json',
      [losing('a.json/b.json')],
      new Map([['a.json/b.json', file([])]]),
    );
    expect(notMade?.message).toContain('"a.json" is a directory this agent did not make');
    const another = await swapObstacle(
      world({ 'a.json/b.json': '1', 'a.json/other.json': '2' }),
      '/root',
      'a.json',
      [losing('a.json/b.json')],
      new Map([...files, ['a.json/other.json', { ...file([]), instanceId: 'cfg_other' }]]),
    );
    expect(another?.message).toContain(
      '"a.json/other.json" is the file of cfg_other, not removed for this write',
    );
  });

  // A case-insensitive filesystem (exFAT) lists the name as it was first spelled, not as the record has it.
  it('an entry spelled otherwise than its record (by fold key) is the loser, not an obstacle', async () => {
    const fs = world({ 'a.json/B.json': '1' });
    const files = new Map([['a.json/b.json', file(['a.json'])]]);
    expect(await swapObstacle(fs, '/root', 'a.json', [losing('a.json/b.json')], files)).toBeUndefined();
  });

  // 200,000 entries listed whole: +56 MiB of RSS and ~200 ms of CPU at each retry; read through opendir: +0.3 MiB, 2 ms.
  it('reads a directory a few entries at a time: one too large to list whole (readdir fails) is still judged', async () => {
    const memfs = world({ 'a.json/b.json': '1', 'a.json/mine.txt': 'x' });
    const fs: FsPort = {
      ...memfs,
      readdir: (async () => {
        throw Object.assign(new Error('ENOMEM: cannot allocate memory, scandir'), { code: 'ENOMEM' });
      }) as unknown as FsPort['readdir'],
    };
    const files = new Map([['a.json/b.json', file(['a.json'])]]);
    const obstacle = await swapObstacle(fs, '/root', 'a.json', [losing('a.json/b.json')], files);
    expect(obstacle?.message).toContain('"a.json/mine.txt" is not a file of this agent');
    // And where the port cannot, the whole listing: the same answer.
    const { opendir: _, ...whole } = memfs;
    expect((await swapObstacle(whole, '/root', 'a.json', [losing('a.json/b.json')], files))?.message).toBe(
      obstacle?.message,
    );
  });

  it('on the way: a displaced file where a directory is needed is cleared; one only forgotten (aliasOf), a local file or a symlink is not', async () => {
    const files = new Map([['a.json', file([])]]);
    const displaced = {
      ...losing('a.json'),
      makesWayFor: { path: 'a.json/b.json', instanceId: 'cfg_winner' },
    };
    const tree = () => world({ 'a.json': '1', 'elsewhere/x': '2' });
    expect(await swapObstacle(tree(), '/root', 'a.json/b.json', [displaced], files)).toBeUndefined();
    const kept = { ...displaced, aliasOf: { path: 'A.json', instanceId: 'cfg_other' } };
    expect((await swapObstacle(tree(), '/root', 'a.json/b.json', [kept], files))?.rule).toBe(
      'not_a_directory',
    );
    expect((await swapObstacle(tree(), '/root', 'a.json/b.json', [], files))?.message).toContain(
      'has a parent component that exists but is not a directory (a.json)',
    );
    const linked = tree();
    await linked.symlink('/root/elsewhere', '/root/link');
    const through = await swapObstacle(linked, '/root', 'link/b.json', [displaced], files);
    expect([through?.rule, through?.retryable]).toEqual(['crosses_symlink', true]);
    const atPath = await swapObstacle(linked, '/root', 'link', [displaced], files);
    expect(atPath?.message).toContain('crosses a symlink (the target itself)');
  });

  it('a winner path that is a file, or missing, is left to the writer', async () => {
    const files = new Map([['a.json/b.json', file(['a.json'])]]);
    for (const tree of [{ 'a.json': 'a file' }, { 'other.json': '1' }]) {
      expect(
        await swapObstacle(world(tree), '/root', 'a.json', [losing('a.json/b.json')], files),
      ).toBeUndefined();
    }
  });
});
