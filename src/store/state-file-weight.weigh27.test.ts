// stateDir's files weighed before they are parsed: a file heavier than the agent writes is taken as corrupt, unparsed.
import * as nodeFs from 'node:fs/promises';
import { mkdir, mkdtemp, readdir, readFile, rm, stat, symlink, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { textSink } from '../../test/helpers/text-sink.js';
import { sha256Hex } from '../lib/hash.js';
import { createLogger, type Logger, silentLogger } from '../lib/logger.js';
import { createSecretRegistry } from '../lib/secrets.js';
import { StateFileOverweightError } from './errors.js';
import { OUTBOX_FILE, StatusOutbox } from './outbox.js';
import {
  emptyState,
  loadLocalState,
  MAX_STATE_FILE_DEPTH,
  parseStateFile,
  readStateDirFile,
  STATE_FILE,
  saveLocalState,
  UNWEIGHED_BYTES,
} from './state.js';
import { CORRUPT_STATE_FILE, StateDir } from './state-dir.js';

let dir: string;
let settings: { stateDir: string; rootDir: string; deviceId: string };

beforeEach(async () => {
  dir = await mkdtemp(path.join(os.tmpdir(), 'state-file-weight-weigh27-'));
  settings = { stateDir: path.join(dir, 'state'), rootDir: path.join(dir, 'root'), deviceId: 'dvc_weigh' };
  await mkdir(settings.stateDir, { mode: 0o700 });
  await mkdir(settings.rootDir);
});

afterEach(async () => {
  await rm(dir, { recursive: true, force: true });
});

const STATE_FILES = ['state.json', 'outbox.json', 'intent.json', 'fingerprints.json', 'renewal-asides.json'];
const clock = { now: () => 7 };

/** A logger whose lines are kept, parsed. */
function capturedLogger(): { logger: Logger; lines: () => Array<Record<string, unknown>> } {
  const sink = textSink();
  const logger = createLogger({ level: 'debug', secrets: createSecretRegistry(), destination: sink.stream });
  return {
    logger,
    lines: () =>
      sink
        .text()
        .split('\n')
        .filter((line) => line !== '')
        .map((line) => JSON.parse(line) as Record<string, unknown>),
  };
}

function errors(lines: Array<Record<string, unknown>>): Array<{ code?: string; message?: string }> {
  return lines.flatMap((line) =>
    line.err === undefined ? [] : [line.err as { code?: string; message?: string }],
  );
}

/** `[` one past the bytes read unweighed: 500 MiB of it built many GB; refused at its ninth byte. */
const NESTED = '['.repeat(UNWEIGHED_BYTES + 1);

describe('stateDir files heavier than any the agent writes', () => {
  it('nested past the depth bound: StateDir.open opens, state.json kept aside as corrupt, the outbox set aside, all empty, each named in the log', async () => {
    for (const name of STATE_FILES) await writeFile(path.join(settings.stateDir, name), NESTED);
    const { logger, lines } = capturedLogger();

    const opened = await StateDir.open(nodeFs, settings, logger, { clock });
    expect(opened.state.files.size).toBe(0);
    expect(opened.outbox.size).toBe(0);
    expect(opened.intents.size).toBe(0);
    await opened.persist();
    await opened.close();

    const names = await readdir(settings.stateDir);
    expect((await stat(path.join(settings.stateDir, CORRUPT_STATE_FILE))).size).toBe(NESTED.length);
    // The outbox's reports are never lost unsaid: its bytes kept aside for an operator, under a name never read.
    const aside = `${OUTBOX_FILE}.overweight-7`;
    expect(names).toContain(aside);
    expect(await readFile(path.join(settings.stateDir, aside), 'utf8')).toBe(NESTED);
    expect((await stat(path.join(settings.stateDir, STATE_FILE))).size).toBeLessThan(4096);
    for (const name of STATE_FILES) {
      expect(errors(lines())).toContainEqual(
        expect.objectContaining({
          code: 'state_file_overweight',
          message: `${name} nests deeper than ${MAX_STATE_FILE_DEPTH} levels, deeper than any ${name} the agent writes: not parsed`,
        }),
      );
    }
    expect(lines()).toContainEqual(
      expect.objectContaining({
        level: 'error',
        file: OUTBOX_FILE,
        aside: path.join(settings.stateDir, aside),
      }),
    );

    // The next start reads what the persist wrote, and leaves the outbox set aside alone.
    const again = await StateDir.open(nodeFs, settings, silentLogger(), { clock });
    expect(again.outbox.size).toBe(0);
    await again.close();
    expect(await readdir(settings.stateDir)).toEqual(expect.arrayContaining([CORRUPT_STATE_FILE, aside]));
  });

  it("a symlinked outbox's own target past the bound is not salvaged: the symlink moved aside, the target left as it is", async () => {
    const target = path.join(dir, 'reports.json');
    await writeFile(target, NESTED, { mode: 0o600 });
    await symlink(target, path.join(settings.stateDir, OUTBOX_FILE));
    const { logger, lines } = capturedLogger();

    const outbox = await StatusOutbox.open(nodeFs, settings.stateDir, logger, clock, process.geteuid?.());
    expect(outbox.size).toBe(0);
    expect(await readdir(settings.stateDir)).toEqual([`${OUTBOX_FILE}.not-regular-7`]);
    expect(await readFile(target, 'utf8')).toBe(NESTED);
    expect(lines()).toContainEqual(
      expect.objectContaining({
        level: 'error',
        file: OUTBOX_FILE,
        err: expect.objectContaining({ code: 'state_file_overweight' }),
      }),
    );
  });

  it('one value past the token bound: not parsed, named for its weight; at the bound it is read whole', async () => {
    // Past the bytes read unweighed by a long string (skipped whole), then `[` and commas: a token a byte.
    const weight = { maxTokens: 1000, maxDepth: MAX_STATE_FILE_DEPTH };
    const head = `"${'é'.repeat(UNWEIGHED_BYTES / 2)}"`;
    await writeFile(path.join(settings.stateDir, 'over.json'), `${head}[${','.repeat(1000)}`);
    await writeFile(path.join(settings.stateDir, 'at.json'), `${head}[${','.repeat(999)}`);

    const over = await readStateDirFile(nodeFs, settings.stateDir, 'over.json', weight);
    expect(over).toBeInstanceOf(StateFileOverweightError);
    expect(over).toMatchObject({
      code: 'state_file_overweight',
      retryable: false,
      over: 'tokens',
      bound: 1000,
    });
    expect(() => parseStateFile(over ?? '')).toThrow(
      'over.json holds more than 1000 JSON values, more than any over.json the agent writes: not parsed',
    );
    expect(await readStateDirFile(nodeFs, settings.stateDir, 'at.json', weight)).toBe(
      `${head}[${','.repeat(999)}`,
    );
  });

  it('a real state.json over the bytes read unweighed loads whole (read in chunks: strings with escapes and UTF-8 across them)', async () => {
    const saved = emptyState(settings.deviceId, settings.rootDir);
    for (let i = 0; i < 1500; i += 1) {
      const relative = `répertoire-${i % 7}/${'fichier-é'.repeat(20)} "${i}".json`;
      saved.files.set(relative, {
        instanceId: `cfg_${i}`,
        sha256: sha256Hex(Buffer.from(String(i))),
        mode: 0o644,
        createdDirs: [],
        writtenAt: '2026-11-25T12:00:00.000Z',
      });
      saved.instances.set(`cfg_${i}`, {
        relativePath: relative,
        activity: 'deployed',
        error: i % 2 === 0 ? 'none' : 'retrying',
        ...(i % 2 === 0 ? {} : { message: `cannot write "${relative}": \\"ENOSPC\\" [[[[{{{{` }),
        attempts: 0,
      });
    }
    await saveLocalState(nodeFs, settings.stateDir, saved);
    expect((await stat(path.join(settings.stateDir, STATE_FILE))).size).toBeGreaterThan(UNWEIGHED_BYTES);

    const { state, outcome } = await loadLocalState(
      nodeFs,
      settings.stateDir,
      settings.deviceId,
      silentLogger(),
      settings.rootDir,
    );
    expect(outcome).toBe('loaded');
    expect(state.files).toEqual(saved.files);
    expect(state.instances.get('cfg_1499')).toEqual(saved.instances.get('cfg_1499'));
  });

  it('a real outbox over the bytes read unweighed opens whole and in order', async () => {
    const count = 1500;
    const entries = Array.from({ length: count }, (_, i) => ({
      seq: i,
      instanceId: `cfg_${i}`,
      report: {
        activity_status: 'deployed',
        error_status: 'retrying',
        message: `"é" \\ ${'x'.repeat(700)} ${i}`,
      },
      queuedAt: '2026-11-25T12:00:00.000Z',
    }));
    const text = JSON.stringify({ version: 1, nextSeq: count, entries });
    expect(Buffer.byteLength(text)).toBeGreaterThan(UNWEIGHED_BYTES);
    await writeFile(path.join(settings.stateDir, OUTBOX_FILE), text);
    const outbox = await StatusOutbox.open(nodeFs, settings.stateDir, silentLogger(), clock);
    expect(outbox.size).toBe(count);
    expect(outbox.pending()[count - 1]).toEqual(entries[count - 1]);
    expect(await readdir(settings.stateDir)).toEqual([OUTBOX_FILE]);
  });
});
