// Junk a local user or an application leaves under rootDir (a directory the agent cannot read, a tree deeper
// than PATH_MAX, a temp-named file it cannot unlink) never keeps the agent from starting: `--once` against the mock.
import { execFileSync } from 'node:child_process';
import { mkdir, readFile, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { onceInstance, onceWorldEachTest } from '../../test/helpers/once-world.js';
import { TEMP_PREFIX } from './path-guard.js';

const KEY = 'sk_test_sweep_junk_0123456789';
const DEVICE = 'dvc_junk';
const aJson = onceInstance(DEVICE, 'cfg_a', 'etc/a.json', { a: 1 });

// Node's rm names every path whole, which fails past PATH_MAX; rm(1) walks by descriptors (deep).
const world = onceWorldEachTest(KEY, DEVICE, 'config-agent-junk-', [aJson], { deep: true });
const once = () => world().once();
const reportsOf = (id: string) => world().reportsOf(id);

describe('the start-up sweep meets junk under rootDir', () => {
  it('a tree deeper than PATH_MAX: the agent starts, writes and reports; its own leftover beside it is swept', async () => {
    const root = path.join(world().dir, 'root');
    // 20 levels of 250-byte names: the deepest directories lie past PATH_MAX (4096) from rootDir. A shell makes
    // them one `cd` at a time (a path that long cannot be named at once), with a temp-named file at the bottom.
    await mkdir(root, { recursive: true });
    const name = 'd'.repeat(250);
    execFileSync('bash', [
      '-c',
      `cd "$1" && for i in $(seq 20); do mkdir "$2" && cd "$2" || exit 1; done && echo junk > "$3"`,
      'bash',
      root,
      name,
      `${TEMP_PREFIX}deep`,
    ]);
    await writeFile(path.join(root, `${TEMP_PREFIX}ours`), 'left by a crash');

    const { code } = await once();

    expect(code).toBe(0);
    expect(JSON.parse(await readFile(path.join(root, 'etc/a.json'), 'utf8'))).toEqual({ a: 1 });
    expect(await reportsOf('cfg_a')).toEqual(['deployed']);
    await expect(readFile(path.join(root, `${TEMP_PREFIX}ours`))).rejects.toMatchObject({ code: 'ENOENT' });
  });
});
