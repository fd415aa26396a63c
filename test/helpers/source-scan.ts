// The agent's source lines (src/, not tests, not declarations), comments left out: for tests that pin what the code may call.
import { readdir, readFile } from 'node:fs/promises';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

export const SRC_DIR = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../../src');

export async function sourceFiles(): Promise<string[]> {
  const entries = await readdir(SRC_DIR, { recursive: true });
  return entries
    .filter((file) => file.endsWith('.ts') && !file.endsWith('.test.ts') && !file.endsWith('.d.ts'))
    .map((file) => file.split(path.sep).join('/'))
    .sort();
}

/** Each line of src/ (relative file name, trimmed line) that `pattern` matches, comment lines left out. */
export async function sourceLinesMatching(pattern: RegExp): Promise<Array<{ file: string; line: string }>> {
  const found: Array<{ file: string; line: string }> = [];
  for (const file of await sourceFiles()) {
    const text = await readFile(path.join(SRC_DIR, file), 'utf8');
    for (const line of text.split('\n')) {
      const code = line.trim();
      if (code.startsWith('//') || code.startsWith('*') || code.startsWith('/*')) continue;
      if (pattern.test(code)) found.push({ file, line: code });
    }
  }
  return found;
}

export interface AllowedLine {
  file: string;
  /** A piece of the line. */
  text: string;
  /** How many lines of the file hold it (1 unless said). */
  count?: number;
  why: string;
}

/** Lines no entry allows, and entries that no longer match as counted (the list must stay exact). */
export function judgeAllowList(
  found: Array<{ file: string; line: string }>,
  allowed: AllowedLine[],
): { unlisted: Array<{ file: string; line: string }>; miscounted: string[] } {
  const unlisted = found.filter(
    ({ file, line }) => !allowed.some((a) => a.file === file && line.includes(a.text)),
  );
  const miscounted = allowed
    .filter(
      (a) =>
        found.filter(({ file, line }) => file === a.file && line.includes(a.text)).length !== (a.count ?? 1),
    )
    .map((a) => `${a.file}: ${a.text}`);
  return { unlisted, miscounted };
}
