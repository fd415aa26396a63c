// An outbox.json of 200,000 queued reports opens whole and in order: nothing in loading is bounded by the call stack (integration tier: seconds of CPU).
import { createFsFromVolume, Volume } from 'memfs';
import { describe, expect, it } from 'vitest';
import type { StatusReport } from '../api/schemas.js';
import type { FsPort } from '../lib/fs-port.js';
import { silentLogger } from '../lib/logger.js';
import { OUTBOX_FILE, StatusOutbox } from './outbox.js';

const STATE_DIR = '/var/lib/config-agent';
const OUTBOX_PATH = `${STATE_DIR}/${OUTBOX_FILE}`;
const T0 = new Date('2026-03-01T12:00:00.000Z');
const deployed: StatusReport = { activity_status: 'deployed', error_status: 'none' };
const removed: StatusReport = { activity_status: 'removed', error_status: 'none' };

function memfs(files: Record<string, string> = {}): { fs: FsPort } {
  const vol = Volume.fromJSON(files);
  vol.mkdirSync(STATE_DIR, { recursive: true });
  return { fs: createFsFromVolume(vol).promises as unknown as FsPort };
}

function open(fs: FsPort): Promise<StatusOutbox> {
  return StatusOutbox.open(fs, STATE_DIR, silentLogger(), { now: () => 0 });
}

describe('a large outbox at start-up', () => {
  it('opens 200,000 queued reports (nothing in loading is bounded by the call stack) and keeps their order', async () => {
    const count = 200_000;
    const entries = Array.from({ length: count }, (_, i) => ({
      seq: i * 2,
      instanceId: `cfg_${i}`,
      report: deployed,
      queuedAt: T0.toISOString(),
    }));
    const { fs } = memfs({ [OUTBOX_PATH]: JSON.stringify({ version: 1, nextSeq: 5, entries }) });
    const outbox = await open(fs);
    expect(outbox.size).toBe(count);
    expect(outbox.pending()[count - 1]?.instanceId).toBe(`cfg_${count - 1}`);
    // The next report gets a sequence number after every loaded one, however stale nextSeq was.
    outbox.enqueue('cfg_new', removed, T0);
    expect(outbox.pending().at(-1)).toMatchObject({ instanceId: 'cfg_new', seq: (count - 1) * 2 + 1 });
  });
});
