// Every source file of the repository opens with a one-line comment saying what it is for (after a shebang).
import { readdirSync, readFileSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';

const REPO = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');
const FOLDERS = ['src', 'test', 'bench', 'scripts', 'packaging'];
const SOURCE = /\.(?:ts|mts|cts|js|mjs|cjs|sh)$/;
/** Made by tools or the build, not written by hand. */
const SKIPPED = new Set(['node_modules', 'dist', 'dist-bench', 'dist-pkg', 'results', '.cache']);

function sourceFiles(folder: string): string[] {
  const found: string[] = [];
  for (const entry of readdirSync(path.join(REPO, folder), { withFileTypes: true })) {
    const relative = path.posix.join(folder, entry.name);
    if (entry.isDirectory() && !SKIPPED.has(entry.name)) found.push(...sourceFiles(relative));
    else if (entry.isFile() && SOURCE.test(entry.name)) found.push(relative);
  }
  return found;
}

function opensWithComment(text: string): boolean {
  const lines = text.split('\n');
  const first = lines[0]?.startsWith('#!') === true ? lines[1] : lines[0];
  return first !== undefined && /^(?:\/\/|\/\*|#(?!!))/.test(first);
}

describe('opening comments', () => {
  it('every source file under src, test, bench, scripts and packaging opens with a comment', () => {
    const files = FOLDERS.flatMap(sourceFiles);
    expect(files.length).toBeGreaterThan(100);
    const bare = files.filter((file) => !opensWithComment(readFileSync(path.join(REPO, file), 'utf8')));
    expect(bare).toEqual([]);
  });
});
