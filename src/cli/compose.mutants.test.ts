// compose.ts where mutation testing found it untested in the unit tier: --once clears only the owner's bits of the
// umask it inherits (keepOwnerBits; the built agent under UMask=0777 is test/integration/umask.adv18.test.ts).
import { EventEmitter } from 'node:events';
import { readFile } from 'node:fs/promises';
import path from 'node:path';
import { PassThrough } from 'node:stream';
import { afterEach, describe, expect, it } from 'vitest';
import { AgentHarness } from '../../test/helpers/harness.js';
import { main } from '../main.js';
import type { CommandIo } from './io.js';

let harness: AgentHarness | undefined;
let saved: number | undefined;

afterEach(async () => {
  if (saved !== undefined) process.umask(saved);
  saved = undefined;
  await harness?.close();
  harness = undefined;
});

describe('--once under a umask taking the owner’s bits', () => {
  it.each([0o777, 0o477])(
    'umask %o: the file deployed, and the umask left with the owner’s bits clear',
    async (umask) => {
      const h = await AgentHarness.create({ registerDevice: true });
      harness = h;
      await h.createAndDeploy({ relative_filepath: 'app/a.json', content: { a: 1 } });
      const io: CommandIo = { stdout: new PassThrough(), stderr: new PassThrough(), env: {}, isTty: false };
      saved = process.umask(umask);
      const code = await main(['--once', '--config', h.configPath], io, new EventEmitter());
      const after = process.umask(saved);
      saved = undefined;
      expect(code).toBe(0);
      expect(JSON.parse(await readFile(path.join(h.rootDir, 'app/a.json'), 'utf8'))).toEqual({ a: 1 });
      expect(after).toBe(umask & 0o077);
    },
  );
});
