// Every repository file the docs name (src/…, test/…, bench/…) exists: a test moved or renamed takes its docs along.
import { existsSync, readdirSync, readFileSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';

const REPO = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');
/** performance-history.md records earlier rounds, prototypes on branches that never landed among them. */
const HISTORY = new Set(['performance-history.md']);
const NAMED_FILE = /\b(?:src|test|bench)\/[A-Za-z0-9_./-]+\.(?:ts|mts|mjs|md|sh|json)\b/g;

function documents(): string[] {
  const docs = readdirSync(path.join(REPO, 'docs'))
    .filter((name) => name.endsWith('.md') && !HISTORY.has(name))
    .map((name) => `docs/${name}`);
  return ['README.md', 'test/README.md', 'bench/README.md', ...docs];
}

describe('files named in the docs', () => {
  it('exist in the repository', () => {
    const missing: string[] = [];
    let named = 0;
    for (const doc of documents()) {
      for (const file of new Set(readFileSync(path.join(REPO, doc), 'utf8').match(NAMED_FILE) ?? [])) {
        named += 1;
        if (!existsSync(path.join(REPO, file))) missing.push(`${doc}: ${file}`);
      }
    }
    expect(named).toBeGreaterThan(100);
    expect(missing).toEqual([]);
  });
});
