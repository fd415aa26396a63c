// packaging/bundle.mjs's asciiComments: a chunk's non-ASCII comment text escaped, so V8 keeps its source one byte a char.
import { mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { asciiComments } from '../../packaging/bundle.mjs';

let dir: string;
beforeEach(async () => {
  dir = await mkdtemp(path.join(os.tmpdir(), 'config-agent-ascii-'));
});
afterEach(async () => {
  await rm(dir, { recursive: true, force: true });
});

describe('asciiComments', () => {
  it('escapes the non-ASCII characters of comments, and leaves an ASCII file as it was', async () => {
    const file = path.join(dir, 'chunk.js');
    await writeFile(
      file,
      'var Outbox = class {\n  /** one per file \u2014 a scan each was O(n\u00b2); \u{1F600} */\n  #byInstance = new Map();\n};\nexport { Outbox };\n',
    );
    asciiComments(file);
    const text = await readFile(file, 'utf8');
    expect(text).toBe(
      'var Outbox = class {\n  /** one per file \\u{2014} a scan each was O(n\\u{b2}); \\u{1f600} */\n  #byInstance = new Map();\n};\nexport { Outbox };\n',
    );
    asciiComments(file);
    expect(await readFile(file, 'utf8')).toBe(text);
  });

  it('refuses a non-ASCII character whose escape would change the program (a raw template)', async () => {
    const file = path.join(dir, 'chunk.js');
    const text = 'export const raw = String.raw`caf\u00e9`;\n';
    await writeFile(file, text);
    expect(() => asciiComments(file)).toThrow(/non-ASCII character outside a comment/);
    expect(await readFile(file, 'utf8')).toBe(text);
  });
});
