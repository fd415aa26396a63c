// The durable status outbox on memfs: coalescing, ordered delivery, outages, poisoned reports, restarts.

import { constants } from 'node:fs';
import { createFsFromVolume, Volume } from 'memfs';
import { describe, expect, it } from 'vitest';
import { PAGER_DEFAULTS } from '../api/pager.js';
import type { StatusReport } from '../api/schemas.js';
import type { FsPort } from '../lib/fs-port.js';
import { silentLogger } from '../lib/logger.js';
import {
  type DeliveryVerdict,
  emptyOutboxFile,
  type ListedBefore,
  MAX_REFUSED_REMEMBERED,
  OUTBOX_FILE,
  type OutboxEntry,
  outboxSchemas,
  SharedSends,
  StatusOutbox,
} from './outbox.js';

const STATE_DIR = '/var/lib/config-agent';
const OUTBOX_PATH = `${STATE_DIR}/${OUTBOX_FILE}`;
const T0 = new Date('2026-03-01T12:00:00.000Z');

const deployed: StatusReport = { activity_status: 'deployed', error_status: 'none' };
const removed: StatusReport = { activity_status: 'removed', error_status: 'none' };
const retrying: StatusReport = {
  activity_status: 'queued',
  error_status: 'retrying',
  message: 'write failed: ENOSPC',
};

class Retryable extends Error {
  readonly kind = 'retryable';
}
class Permanent extends Error {
  readonly kind = 'permanent';
}
/** The reconciler's verdicts in small: an outage stops delivery, a lone 500 skips, anything else drops. */
const isRetryable = (error: unknown): DeliveryVerdict =>
  error instanceof Retryable ? 'stop' : error instanceof LoneFailure ? 'skip' : 'drop';

class LoneFailure extends Error {}

function memfs(files: Record<string, string> = {}): { fs: FsPort; vol: InstanceType<typeof Volume> } {
  const vol = Volume.fromJSON(files);
  vol.mkdirSync(STATE_DIR, { recursive: true });
  return { fs: createFsFromVolume(vol).promises as unknown as FsPort, vol };
}

function open(fs: FsPort): Promise<StatusOutbox> {
  return StatusOutbox.open(fs, STATE_DIR, silentLogger(), { now: () => 0 });
}

function ids(entries: readonly OutboxEntry[]): string[] {
  return entries.map((entry) => entry.instanceId);
}

/** A service stand-in: records what it accepted, fails chosen instances with the given error. */
function service(failures: Record<string, () => Error> = {}) {
  const accepted: Array<[string, StatusReport]> = [];
  const attempted: string[] = [];
  const send = async (entry: OutboxEntry) => {
    attempted.push(entry.instanceId);
    const failure = failures[entry.instanceId];
    if (failure !== undefined) throw failure();
    accepted.push([entry.instanceId, entry.report]);
  };
  return { accepted, attempted, send };
}

async function filled(fs: FsPort, instanceIds: string[]): Promise<StatusOutbox> {
  const outbox = await open(fs);
  for (const id of instanceIds) outbox.enqueue(id, deployed, T0);
  await outbox.persist();
  return outbox;
}

describe('StatusOutbox', () => {
  it('a newer report for an instance replaces its undelivered older one and moves to the end', async () => {
    const { fs } = memfs();
    const outbox = await open(fs);
    outbox.enqueue('cfg_a', retrying, T0);
    outbox.enqueue('cfg_b', deployed, T0);
    outbox.enqueue('cfg_a', deployed, new Date(T0.getTime() + 1_000));

    expect(outbox.size).toBe(2);
    expect(outbox.pending().map((entry) => [entry.instanceId, entry.report, entry.queuedAt])).toEqual([
      ['cfg_b', deployed, T0.toISOString()],
      ['cfg_a', deployed, '2026-03-01T12:00:01.000Z'],
    ]);
    expect(outbox.pendingFor('cfg_a')?.report).toEqual(deployed);
    expect(outbox.pendingFor('cfg_c')).toBeUndefined();
  });

  it('pendingFor answers the queued report after a flush settles some, after a reopen, and after a replacement', async () => {
    const { fs } = memfs();
    const outbox = await filled(fs, ['cfg_a', 'cfg_b', 'cfg_c']);
    await outbox.flush(service({ cfg_b: () => new Error('later') }).send, () => 'skip');
    expect(outbox.pendingFor('cfg_a')).toBeUndefined();
    expect(outbox.pendingFor('cfg_b')?.report).toEqual(deployed);
    expect(outbox.pendingFor('cfg_c')).toBeUndefined();
    // Queued again after its delivery: a new entry, found as such.
    outbox.enqueue('cfg_a', removed, T0);
    expect(outbox.pendingFor('cfg_a')?.report).toEqual(removed);
    await outbox.persist();

    const reopened = await open(fs);
    expect(ids(reopened.pending())).toEqual(['cfg_b', 'cfg_a']);
    expect(reopened.pendingFor('cfg_a')?.report).toEqual(removed);
    expect(reopened.pendingFor('cfg_b')?.report).toEqual(deployed);
    reopened.enqueue('cfg_b', retrying, T0);
    expect(ids(reopened.pending())).toEqual(['cfg_a', 'cfg_b']);
    expect(reopened.pendingFor('cfg_b')?.report).toEqual(retrying);
    expect(reopened.pendingFor('cfg_c')).toBeUndefined();
  });

  it('persist writes the queue to stateDir before anything is sent', async () => {
    const { fs, vol } = memfs();
    const outbox = await filled(fs, ['cfg_a', 'cfg_b']);
    const onDisk = JSON.parse(vol.readFileSync(OUTBOX_PATH, 'utf8') as string);
    expect(onDisk.version).toBe(1);
    expect(onDisk.entries).toEqual(outbox.pending());
    expect(vol.statSync(OUTBOX_PATH).mode & 0o777).toBe(0o600);
  });

  it('flush sends in queue order and removes what was acknowledged, on disk too', async () => {
    const { fs, vol } = memfs();
    const outbox = await filled(fs, ['cfg_c', 'cfg_a', 'cfg_b']);
    const svc = service();

    const result = await outbox.flush(svc.send, isRetryable);

    expect(svc.accepted.map(([id]) => id)).toEqual(['cfg_c', 'cfg_a', 'cfg_b']);
    expect(ids(result.delivered)).toEqual(['cfg_c', 'cfg_a', 'cfg_b']);
    expect(result.rejected).toEqual([]);
    expect(result.deferredBy).toBeUndefined();
    expect(outbox.size).toBe(0);
    expect(JSON.parse(vol.readFileSync(OUTBOX_PATH, 'utf8') as string).entries).toEqual([]);
    expect((await open(fs)).size).toBe(0);
  });

  it('a retryable failure stops delivery and keeps that report and the rest, in order, across a restart', async () => {
    const { fs } = memfs();
    const outbox = await filled(fs, ['cfg_a', 'cfg_b', 'cfg_c']);
    const outage = new Retryable('connect ECONNREFUSED');
    const svc = service({ cfg_b: () => outage });

    const result = await outbox.flush(svc.send, isRetryable);

    expect(svc.attempted).toEqual(['cfg_a', 'cfg_b']);
    expect(ids(result.delivered)).toEqual(['cfg_a']);
    expect(result.deferredBy).toBe(outage);
    expect(ids(outbox.pending())).toEqual(['cfg_b', 'cfg_c']);
    const reopened = await open(fs);
    expect(reopened.pending()).toEqual(outbox.pending());
  });

  it('nothing is lost over a long outage: repeated failed flushes keep the queue, the next success drains it in order', async () => {
    const { fs } = memfs();
    let up = false;
    const accepted: string[] = [];
    const send = async (entry: OutboxEntry) => {
      if (!up) throw new Retryable('ETIMEDOUT');
      accepted.push(entry.instanceId);
    };
    let outbox = await filled(fs, ['cfg_a', 'cfg_b']);
    for (let attempt = 0; attempt < 5; attempt += 1) {
      const result = await outbox.flush(send, isRetryable);
      expect(result.delivered).toEqual([]);
      // The agent restarts in the middle of the outage and queues more.
      outbox = await open(fs);
      if (attempt === 2) {
        outbox.enqueue('cfg_c', removed, T0);
        await outbox.persist();
      }
    }
    up = true;
    await outbox.flush(send, isRetryable);
    expect(accepted).toEqual(['cfg_a', 'cfg_b', 'cfg_c']);
    expect(outbox.size).toBe(0);
  });

  it('a permanent rejection drops only that report and delivery goes on', async () => {
    const { fs } = memfs();
    const outbox = await filled(fs, ['cfg_a', 'cfg_gone', 'cfg_c']);
    const svc = service({ cfg_gone: () => new Permanent('404 config instance not found') });

    const result = await outbox.flush(svc.send, isRetryable);

    expect(svc.accepted.map(([id]) => id)).toEqual(['cfg_a', 'cfg_c']);
    expect(ids(result.delivered)).toEqual(['cfg_a', 'cfg_c']);
    expect(result.rejected.map(({ entry, error }) => [entry.instanceId, (error as Error).message])).toEqual([
      ['cfg_gone', '404 config instance not found'],
    ]);
    expect(result.deferredBy).toBeUndefined();
    expect(outbox.size).toBe(0);
    expect((await open(fs)).size).toBe(0);
  });

  it('a rejection before an outage: the rejected report is dropped, the deferred ones stay in order', async () => {
    const { fs } = memfs();
    const outbox = await filled(fs, ['cfg_gone', 'cfg_b', 'cfg_c']);
    const svc = service({ cfg_gone: () => new Permanent('410'), cfg_b: () => new Retryable('503') });

    await outbox.flush(svc.send, isRetryable);

    expect(ids(outbox.pending())).toEqual(['cfg_b', 'cfg_c']);
    expect(ids((await open(fs)).pending())).toEqual(['cfg_b', 'cfg_c']);
  });

  it('a report failing on its own is kept and the others still go out', async () => {
    const { fs } = memfs();
    const outbox = await filled(fs, ['cfg_a', 'cfg_stuck', 'cfg_c']);
    const svc = service({ cfg_stuck: () => new LoneFailure('500') });

    const result = await outbox.flush(svc.send, isRetryable);

    expect(ids(result.delivered)).toEqual(['cfg_a', 'cfg_c']);
    expect(ids(result.skipped.map((skip) => skip.entry))).toEqual(['cfg_stuck']);
    expect(ids(outbox.pending())).toEqual(['cfg_stuck']);
    expect(ids((await open(fs)).pending())).toEqual(['cfg_stuck']);
  });

  it('a failure to rewrite the outbox after delivery is returned, and memory stays right', async () => {
    const { fs } = memfs();
    const outbox = await filled(fs, ['cfg_a']);
    // Reading still works on a full disk; creating the new outbox file does not.
    const full: FsPort = {
      ...fs,
      open: (async (...args: Parameters<FsPort['open']>) => {
        const flags = args[1];
        if (typeof flags === 'number' && (flags & constants.O_CREAT) !== 0)
          throw Object.assign(new Error('ENOSPC: no space left on device'), { code: 'ENOSPC' });
        return fs.open(...args);
      }) as FsPort['open'],
    };
    const onFullDisk = await StatusOutbox.open(full, STATE_DIR, silentLogger(), { now: () => 0 });
    onFullDisk.enqueue('cfg_a', deployed, T0);

    const result = await onFullDisk.flush(service({}).send, isRetryable);

    expect(ids(result.delivered)).toEqual(['cfg_a']);
    expect(result.persistError).toMatchObject({ code: 'disk_error', errno: 'ENOSPC' });
    expect(onFullDisk.size).toBe(0);
    expect(outbox.size).toBe(1);
  });

  it('a flush that settles nothing leaves the file as it was (reports queued since are not written by it)', async () => {
    const { fs } = memfs();
    const outbox = await open(fs);
    outbox.enqueue('cfg_a', deployed, T0);
    await outbox.persist();
    outbox.enqueue('cfg_b', deployed, T0);

    const result = await outbox.flush(service({ cfg_a: () => new Retryable('down') }).send, isRetryable);

    expect(result.deferredBy).toBeInstanceOf(Retryable);
    expect(ids((await open(fs)).pending())).toEqual(['cfg_a']);
  });

  it('a report failing on its own counts an attempt, kept on disk; a backoff holds it back until due', async () => {
    const { fs } = memfs();
    const outbox = await open(fs);
    outbox.enqueue('cfg_a', deployed, T0);
    outbox.enqueue('cfg_b', deployed, T0);
    let now = 0;
    const backoff = { now: () => now, delayMs: (attempts: number) => attempts * 1_000 };
    const failing = service({ cfg_a: () => new LoneFailure('500'), cfg_b: () => new LoneFailure('500') });

    const first = await outbox.flush(failing.send, isRetryable, { backoff });
    expect(first.skipped).toHaveLength(2);
    expect((await open(fs)).pending().map((entry) => entry.attempts)).toEqual([1, 1]);

    now = 999;
    const early = await outbox.flush(failing.send, isRetryable, { backoff });
    expect([early.skipped.length, early.backingOff]).toEqual([0, 2]);
    // A newer report of cfg_b replaces it, backoff and attempts included: it goes at once.
    outbox.enqueue('cfg_b', removed, T0);
    const replaced = await outbox.flush(service().send, isRetryable, { backoff });
    expect([ids(replaced.delivered), replaced.backingOff]).toEqual([['cfg_b'], 1]);

    now = 1_000;
    const due = await outbox.flush(failing.send, isRetryable, { backoff });
    expect(due.skipped.map(({ entry }) => [entry.instanceId, entry.attempts])).toEqual([['cfg_a', 2]]);
    expect(failing.attempted).toEqual(['cfg_a', 'cfg_b', 'cfg_a']);
  });

  it('a file whose nextSeq lags its entries: new reports still get sequence numbers above every entry', async () => {
    const entry = (seq: number, instanceId: string) => ({
      seq,
      instanceId,
      report: deployed,
      queuedAt: T0.toISOString(),
    });
    for (const entries of [[entry(3, 'cfg_a')], [entry(7, 'cfg_a'), entry(2, 'cfg_b')]]) {
      const { fs } = memfs({ [OUTBOX_PATH]: JSON.stringify({ version: 1, nextSeq: 3, entries }) });
      const outbox = await open(fs);

      outbox.enqueue('cfg_new', deployed, T0);

      const seqs = outbox.pending().map((pending) => pending.seq);
      expect(seqs.at(-1)).toBe(Math.max(...entries.map((e) => e.seq)) + 1);
    }
  });

  it('persists across reopen: same entries, and new sequence numbers keep increasing', async () => {
    const { fs } = memfs();
    const first = await open(fs);
    first.enqueue('cfg_a', retrying, T0);
    first.enqueue('cfg_b', removed, T0);
    first.enqueue('cfg_a', deployed, T0);
    await first.persist();

    const second = await open(fs);
    expect(second.pending()).toEqual(first.pending());
    second.enqueue('cfg_c', deployed, T0);
    const seqs = second.pending().map((entry) => entry.seq);
    expect(new Set(seqs).size).toBe(seqs.length);
    expect(seqs.at(-1)).toBeGreaterThan(Math.max(...first.pending().map((entry) => entry.seq)));
  });

  it('keeps with each report the instance as listed before it across a reopen; a malformed one is dropped alone', async () => {
    const { fs, vol } = memfs();
    const first = await open(fs);
    first.enqueue('cfg_a', retrying, T0, '2026-01-01T00:00:00.000Z');
    first.enqueue('cfg_b', deployed, T0);
    // A later listing: the report still queued takes its updated_at and version; one not listed keeps none.
    const relisted = first.relist((id) =>
      id === 'cfg_a' ? { updatedAt: '2026-01-02T00:00:00.000Z', version: 'v1' } : undefined,
    );
    expect(relisted).toBe(true);
    expect(first.relist(() => ({ updatedAt: '2026-01-02T00:00:00.000Z', version: 'v1' }))).toBe(true);
    expect(first.relist(() => ({ updatedAt: '2026-01-02T00:00:00.000Z', version: 'v1' }))).toBe(false);
    await first.persist();
    const reopened = await open(fs);
    const listed = (entry: OutboxEntry) => [entry.listedUpdatedAt, entry.listedVersion];
    expect(reopened.pending().map((entry) => [entry.instanceId, ...listed(entry)])).toEqual([
      ['cfg_a', '2026-01-02T00:00:00.000Z', 'v1'],
      ['cfg_b', '2026-01-02T00:00:00.000Z', 'v1'],
    ]);

    // One entry's record malformed (an edit, another agent): that entry loses it, no report is lost.
    const file = JSON.parse(String(vol.readFileSync(OUTBOX_PATH))) as { entries: Record<string, unknown>[] };
    file.entries[0]!.listedUpdatedAt = 7;
    file.entries[1]!.listedVersion = { v: 1 };
    vol.writeFileSync(OUTBOX_PATH, JSON.stringify(file));
    const salvaged = await open(fs);
    expect(salvaged.pending().map((entry) => [entry.instanceId, entry.report, ...listed(entry)])).toEqual([
      ['cfg_a', retrying, undefined, 'v1'],
      ['cfg_b', deployed, '2026-01-02T00:00:00.000Z', undefined],
    ]);
  });

  it('keeps the updated_at a report was queued with on disk before any relisting; a relisting changes only what differs', async () => {
    const { fs } = memfs();
    const first = await open(fs);
    first.enqueue('cfg_a', retrying, T0, '2026-01-01T00:00:00.000Z');
    first.enqueue('cfg_b', deployed, T0);
    await first.persist();
    // A crash before the pass's end: the next process finds the updated_at given at enqueue.
    const reopened = await open(fs);
    const listed = (outbox: StatusOutbox) =>
      outbox.pending().map((entry) => [entry.instanceId, entry.listedUpdatedAt, entry.listedVersion]);
    expect(listed(reopened)).toEqual([
      ['cfg_a', '2026-01-01T00:00:00.000Z', undefined],
      ['cfg_b', undefined, undefined],
    ]);
    const onlyA = (before: ListedBefore) => (id: string) => (id === 'cfg_a' ? before : undefined);
    // The version alone differs.
    expect(reopened.relist(onlyA({ updatedAt: '2026-01-01T00:00:00.000Z', version: 'v1' }))).toBe(true);
    expect(listed(reopened)[0]).toEqual(['cfg_a', '2026-01-01T00:00:00.000Z', 'v1']);
    // The updated_at alone differs.
    expect(reopened.relist(onlyA({ updatedAt: '2026-01-03T00:00:00.000Z', version: 'v1' }))).toBe(true);
    expect(listed(reopened)[0]).toEqual(['cfg_a', '2026-01-03T00:00:00.000Z', 'v1']);
    expect(reopened.relist(onlyA({ updatedAt: '2026-01-03T00:00:00.000Z', version: 'v1' }))).toBe(false);
    // Listed without a version: the one kept goes.
    expect(reopened.relist(onlyA({ updatedAt: '2026-01-03T00:00:00.000Z' }))).toBe(true);
    await reopened.persist();
    expect(listed(await open(fs))).toEqual([
      ['cfg_a', '2026-01-03T00:00:00.000Z', undefined],
      ['cfg_b', undefined, undefined],
    ]);
  });

  it('an outbox that was never persisted is not on disk after a restart', async () => {
    const { fs } = memfs();
    const outbox = await open(fs);
    outbox.enqueue('cfg_a', deployed, T0);
    expect((await open(fs)).size).toBe(0);
  });

  it.each([
    ['not JSON', '{"version": 1, "entr'],
    ['another version', JSON.stringify({ version: 2, nextSeq: 0, entries: [] })],
    [
      'an invalid report',
      JSON.stringify({
        version: 1,
        nextSeq: 1,
        entries: [
          {
            seq: 0,
            instanceId: 'x',
            report: { activity_status: 'nope', error_status: 'none' },
            queuedAt: '',
          },
        ],
      }),
    ],
  ])(
    'a corrupt outbox file (%s) starts empty and is replaced on the next persist',
    async (_name, content) => {
      const { fs, vol } = memfs({ [OUTBOX_PATH]: content });
      const outbox = await open(fs);
      expect(outbox.size).toBe(0);
      outbox.enqueue('cfg_a', deployed, T0);
      await outbox.persist();
      expect(ids((await open(fs)).pending())).toEqual(['cfg_a']);
      expect(JSON.parse(vol.readFileSync(OUTBOX_PATH, 'utf8') as string).version).toBe(1);
    },
  );
});

describe('StatusOutbox.flush with concurrency', () => {
  /** A service whose answers the test releases one by one; it records how many sends were open at once. */
  function gatedService(failures: Record<string, () => Error> = {}) {
    const accepted: string[] = [];
    const waiting: Array<() => void> = [];
    let open = 0;
    let peak = 0;
    const send = (entry: OutboxEntry) =>
      new Promise<void>((resolve, reject) => {
        open += 1;
        peak = Math.max(peak, open);
        waiting.push(() => {
          open -= 1;
          const failure = failures[entry.instanceId];
          if (failure !== undefined) reject(failure());
          else {
            accepted.push(entry.instanceId);
            resolve();
          }
        });
      });
    const releaseAll = async () => {
      while (waiting.length > 0 || open > 0) {
        waiting.shift()?.();
        await new Promise((resolve) => setImmediate(resolve));
      }
    };
    return { accepted, send, releaseAll, peak: () => peak };
  }

  it('delivers every report with at most `concurrency` open at once, and empties the file', async () => {
    const { fs, vol } = memfs();
    const names = Array.from({ length: 20 }, (_, i) => `cfg_${String(i).padStart(2, '0')}`);
    const outbox = await filled(fs, names);
    const svc = gatedService();

    const flushing = outbox.flush(svc.send, isRetryable, { concurrency: 4 });
    await svc.releaseAll();
    const result = await flushing;

    expect(svc.peak()).toBe(4);
    expect([...svc.accepted].sort()).toEqual(names);
    expect(ids(result.delivered).sort()).toEqual(names);
    expect(outbox.size).toBe(0);
    expect(JSON.parse(vol.readFileSync(OUTBOX_PATH, 'utf8') as string).entries).toEqual([]);
  });

  it('an outage stops new sends; what was not sent stays queued in order, on disk too', async () => {
    const { fs } = memfs();
    const outbox = await filled(fs, ['cfg_a', 'cfg_b', 'cfg_c', 'cfg_d', 'cfg_e', 'cfg_f']);
    const outage = new Retryable('connect ECONNREFUSED');
    const svc = gatedService({ cfg_a: () => outage });

    const flushing = outbox.flush(svc.send, isRetryable, { concurrency: 2 });
    await svc.releaseAll();
    const result = await flushing;

    expect(result.deferredBy).toBe(outage);
    // cfg_b was already on its way when cfg_a failed; nothing after it was sent.
    expect(svc.accepted).toEqual(['cfg_b']);
    expect(ids(outbox.pending())).toEqual(['cfg_a', 'cfg_c', 'cfg_d', 'cfg_e', 'cfg_f']);
    expect(ids((await open(fs)).pending())).toEqual(['cfg_a', 'cfg_c', 'cfg_d', 'cfg_e', 'cfg_f']);
  });

  it('an outage answering two sends in flight: the first answer is the one returned', async () => {
    const { fs } = memfs();
    const outbox = await filled(fs, ['cfg_a', 'cfg_b', 'cfg_c']);
    const first = new Retryable('first');
    const svc = gatedService({ cfg_a: () => first, cfg_b: () => new Retryable('second') });

    const flushing = outbox.flush(svc.send, isRetryable, { concurrency: 2 });
    await svc.releaseAll();
    const result = await flushing;

    expect(result.deferredBy).toBe(first);
    expect(ids(outbox.pending())).toEqual(['cfg_a', 'cfg_b', 'cfg_c']);
  });

  it('rejected and skipped reports are judged the same as one at a time', async () => {
    const { fs } = memfs();
    const outbox = await filled(fs, ['cfg_a', 'cfg_gone', 'cfg_stuck', 'cfg_d']);
    const svc = gatedService({
      cfg_gone: () => new Permanent('404'),
      cfg_stuck: () => new LoneFailure('500'),
    });

    const flushing = outbox.flush(svc.send, isRetryable, { concurrency: 3 });
    await svc.releaseAll();
    const result = await flushing;

    expect(ids(result.delivered).sort()).toEqual(['cfg_a', 'cfg_d']);
    expect(result.rejected.map(({ entry }) => entry.instanceId)).toEqual(['cfg_gone']);
    expect(ids(outbox.pending())).toEqual(['cfg_stuck']);
    expect(ids((await open(fs)).pending())).toEqual(['cfg_stuck']);
  });
});

describe('an unreadable outbox', () => {
  it('names stateDir instead of failing with a raw errno, and a FIFO in its place does not hang', async () => {
    // A regular file the agent may not open (a FIFO or directory there is moved aside: state-files-aside.test.ts).
    const { fs } = memfs({ [OUTBOX_PATH]: '{}' });
    const denied: FsPort = {
      ...fs,
      open: (async () => {
        throw Object.assign(new Error('EACCES: simulated'), { code: 'EACCES' });
      }) as FsPort['open'],
    };
    await expect(open(denied)).rejects.toMatchObject({
      code: 'state_dir_unusable',
      retryable: false,
      message: expect.stringMatching(
        /^stateDir \/var\/lib\/config-agent is not usable: cannot read outbox\.json: permission denied/,
      ),
    });
  });
});

describe('StatusOutbox.flush while reports are queued (a pass delivering as it writes)', () => {
  /** Holds every send until `release`; records the order in which the service accepted reports. */
  function heldService() {
    const accepted: Array<[string, StatusReport]> = [];
    const held: Array<() => void> = [];
    const send = (entry: OutboxEntry) =>
      new Promise<void>((resolve) => {
        held.push(() => {
          accepted.push([entry.instanceId, entry.report]);
          resolve();
        });
      });
    const release = async () => {
      while (held.length > 0) {
        held.shift()?.();
        await new Promise((resolve) => setImmediate(resolve));
      }
    };
    return { accepted, send, release };
  }

  it('a report replaced while a flush runs is not sent; its replacement goes next time, after it in order', async () => {
    const { fs } = memfs();
    const outbox = await filled(fs, ['cfg_a', 'cfg_b', 'cfg_c']);
    const svc = heldService();

    // One at a time: cfg_a is on its way, cfg_b and cfg_c wait their turn when cfg_c's newer report comes.
    const flushing = outbox.flush(svc.send, isRetryable, { concurrency: 1, persist: false });
    outbox.enqueue('cfg_c', removed, T0);
    outbox.enqueue('cfg_d', deployed, T0);
    await svc.release();
    const first = await flushing;
    const second = outbox.flush(svc.send, isRetryable, { concurrency: 1 });
    await svc.release();
    await second;

    expect(ids(first.delivered)).toEqual(['cfg_a', 'cfg_b']);
    expect(svc.accepted).toEqual([
      ['cfg_a', deployed],
      ['cfg_b', deployed],
      ['cfg_c', removed],
      ['cfg_d', deployed],
    ]);
    expect(outbox.size).toBe(0);
  });

  it("flushes side by side: an instance's later report waits for its earlier one in flight, never both at once", async () => {
    const { fs } = memfs();
    const outbox = await filled(fs, ['cfg_a', 'cfg_b']);
    // Every send is held until released; what matters is which are in flight together, per instance.
    const inFlight = new Map<string, number>();
    let together = 0;
    const accepted: Array<[string, string]> = [];
    const held: Array<() => void> = [];
    const send = (entry: OutboxEntry) => {
      const open = (inFlight.get(entry.instanceId) ?? 0) + 1;
      inFlight.set(entry.instanceId, open);
      if (open > 1) together += 1;
      return new Promise<void>((resolve) => {
        held.push(() => {
          inFlight.set(entry.instanceId, open - 1);
          accepted.push([entry.instanceId, entry.report.activity_status]);
          resolve();
        });
      });
    };
    const release = async () => {
      while (held.length > 0) {
        held.shift()?.();
        await new Promise((resolve) => setImmediate(resolve));
      }
    };

    const first = outbox.flush(send, isRetryable, { concurrency: 8, persist: false });
    await new Promise((resolve) => setImmediate(resolve));
    // cfg_a's deployed report is in flight; its newer one goes with the next flush, beside the first.
    outbox.enqueue('cfg_a', removed, T0);
    outbox.enqueue('cfg_c', deployed, T0);
    // As a pass's deliveries do, the second sends only what the first did not take (PassReports `select`).
    const second = outbox.flush(send, isRetryable, {
      concurrency: 8,
      persist: false,
      select: (entry) => entry.instanceId !== 'cfg_b',
    });
    await new Promise((resolve) => setImmediate(resolve));
    await release();
    await Promise.all([first, second]);

    expect(together).toBe(0);
    expect(accepted.filter(([id]) => id === 'cfg_a')).toEqual([
      ['cfg_a', 'deployed'],
      ['cfg_a', 'removed'],
    ]);
    expect(accepted.map(([id]) => id).sort()).toEqual(['cfg_a', 'cfg_a', 'cfg_b', 'cfg_c']);
    expect(outbox.size).toBe(0);
  });

  it('a stop in one of two flushes side by side (`shared`) ends the other: nothing more is sent', async () => {
    const { fs } = memfs();
    const outbox = await filled(fs, ['cfg_a', 'cfg_b', 'cfg_c', 'cfg_d']);
    const shared = new SharedSends(8);
    const attempted: string[] = [];
    let failFirst: ((error: Error) => void) | undefined;
    const send = (entry: OutboxEntry) => {
      attempted.push(entry.instanceId);
      if (entry.instanceId === 'cfg_a')
        return new Promise<void>((_resolve, reject) => {
          failFirst = reject;
        });
      return Promise.resolve();
    };
    let releaseSecond: (() => void) | undefined;
    const gate = new Promise<void>((resolve) => {
      releaseSecond = resolve;
    });
    const first = outbox.flush(send, isRetryable, {
      select: (entry) => entry.instanceId === 'cfg_a',
      shared,
      persist: false,
    });
    const second = outbox.flush(
      async (entry) => {
        await gate;
        await send(entry);
      },
      isRetryable,
      { select: (entry) => entry.instanceId !== 'cfg_a', shared, persist: false },
    );
    await new Promise((resolve) => setImmediate(resolve));
    failFirst?.(new Retryable('service unavailable'));
    const stopped = await first;
    releaseSecond?.();
    await second;

    expect(stopped.deferredBy).toBeInstanceOf(Retryable);
    // The second flush had cfg_b on its way (one at a time): it settles; cfg_c and cfg_d are not sent.
    expect(attempted).toEqual(['cfg_a', 'cfg_b']);
    expect(ids(outbox.pending())).toEqual(['cfg_a', 'cfg_c', 'cfg_d']);
  });

  it('flushes side by side keep to their shared bound on sends in flight together', async () => {
    const { fs } = memfs();
    const outbox = await filled(fs, ['cfg_a', 'cfg_b', 'cfg_c', 'cfg_d', 'cfg_e', 'cfg_f']);
    const shared = new SharedSends(3);
    let open = 0;
    let most = 0;
    const held: Array<() => void> = [];
    const send = () => {
      open += 1;
      most = Math.max(most, open);
      return new Promise<void>((resolve) => {
        held.push(() => {
          open -= 1;
          resolve();
        });
      });
    };
    const half = (entry: OutboxEntry) => entry.instanceId < 'cfg_d';
    const flushes = Promise.all([
      outbox.flush(send, isRetryable, { concurrency: 3, shared, persist: false, select: half }),
      outbox.flush(send, isRetryable, { concurrency: 3, shared, persist: false, select: (e) => !half(e) }),
    ]);
    for (let i = 0; i < 50 && (held.length > 0 || open > 0 || i < 2); i++) {
      held.shift()?.();
      await new Promise((resolve) => setImmediate(resolve));
    }
    const [first, second] = await flushes;

    expect(most).toBe(3);
    expect(first.delivered.length + second.delivered.length).toBe(6);
    expect(outbox.size).toBe(0);
  });

  it('`persist: false` leaves the file to the caller; `select` sends only what it picks', async () => {
    const { fs, vol } = memfs();
    const outbox = await filled(fs, ['cfg_a', 'cfg_b', 'cfg_c']);
    const svc = service();

    const result = await outbox.flush(svc.send, isRetryable, {
      select: (entry) => entry.instanceId !== 'cfg_b',
      persist: false,
    });

    expect(svc.attempted).toEqual(['cfg_a', 'cfg_c']);
    expect(ids(result.delivered)).toEqual(['cfg_a', 'cfg_c']);
    expect(ids(outbox.pending())).toEqual(['cfg_b']);
    // Not rewritten: the file still lists all three (resent harmlessly after a crash), until the next persist.
    expect(ids(JSON.parse(vol.readFileSync(OUTBOX_PATH, 'utf8') as string).entries)).toEqual([
      'cfg_a',
      'cfg_b',
      'cfg_c',
    ]);
    await outbox.persist();
    expect(ids((await open(fs)).pending())).toEqual(['cfg_b']);
  });

  it('queuedEver counts every report queued, replaced ones too, across restarts', async () => {
    const { fs } = memfs();
    const outbox = await filled(fs, ['cfg_a', 'cfg_b']);
    outbox.enqueue('cfg_a', removed, T0);
    expect(outbox.queuedEver).toBe(3);
    await outbox.persist();
    expect((await open(fs)).queuedEver).toBe(3);
  });
});

describe('the refused reports the outbox remembers (a daemon running for weeks)', () => {
  /** `count` instances whose every report the service refuses for good, each refused once. */
  async function refusedAll(count: number, maxRemembered?: number) {
    const { fs } = memfs();
    const outbox = await open(fs);
    const backoff = {
      now: () => 1_000,
      delayMs: () => 3_600_000,
      ...(maxRemembered === undefined ? {} : { maxRemembered }),
    };
    const ids = Array.from({ length: count }, (_, i) => `cfg_${i}`);
    const refusing = service(Object.fromEntries(ids.map((id) => [id, () => new Permanent(id)])));
    for (const id of ids) outbox.enqueue(id, deployed, T0);
    const first = await outbox.flush(refusing.send, isRetryable, { backoff, concurrency: 8 });
    expect(first.rejected).toHaveLength(count);
    return { outbox, ids, backoff };
  }

  it('a device of more than 1,000 instances whose every report is refused: none goes again within the backoff', async () => {
    // At a bound of 1,000, each pass forgot the oldest 500 of these and sent them again: the backoff undone for
    // every instance past the thousandth, on every poll.
    const { outbox, ids, backoff } = await refusedAll(1_500);
    for (const id of ids) outbox.enqueue(id, deployed, T0);
    const again = service();
    await outbox.flush(again.send, isRetryable, { backoff, concurrency: 8 });
    expect(again.attempted).toEqual([]);
  });

  it('instances the agent no longer knows are forgotten (retainRefused): a report of one goes at once', async () => {
    // Instances the service deleted (404/410) are refused for good and never reported again: each left an entry
    // in memory for the life of the daemon.
    const { outbox, backoff } = await refusedAll(3);
    outbox.retainRefused(new Set(['cfg_1']));
    for (const id of ['cfg_0', 'cfg_1', 'cfg_2']) outbox.enqueue(id, deployed, T0);
    const again = service();
    await outbox.flush(again.send, isRetryable, { backoff });
    expect(again.attempted.sort()).toEqual(['cfg_0', 'cfg_2']);
  });

  it('are bounded: past MAX_REFUSED_REMEMBERED the oldest is forgotten and its report may go again at once', async () => {
    // As many as a pull takes instances; a bound of 100 here keeps the unit tier fast, the rule is the same.
    expect(MAX_REFUSED_REMEMBERED).toBe(PAGER_DEFAULTS.maxItems);
    const maxRemembered = 100;
    const count = maxRemembered + 1;
    const { outbox, backoff } = await refusedAll(count, maxRemembered);
    // The same reports derived again within the hour: the newest still waits, the oldest was forgotten.
    const again = service();
    outbox.enqueue('cfg_0', deployed, T0);
    outbox.enqueue(`cfg_${count - 1}`, deployed, T0);
    await outbox.flush(again.send, isRetryable, { backoff });
    expect(again.attempted).toEqual(['cfg_0']);
  });
});

describe('an outbox file with no queued report, checked by hand', () => {
  it('gives what zod gives, or leaves the file to zod; an empty outbox never needs zod', () => {
    const versions = [1, 2, '1', undefined];
    const seqs = [0, 7, -0, -1, 1.5, '3', 2 ** 53, Number.NaN, undefined];
    const entries = [[], [{}], {}, undefined, null];
    let taken = 0;
    for (const version of versions) {
      for (const nextSeq of seqs) {
        for (const queued of entries) {
          for (const extra of [{}, { more: true }]) {
            const value = { ...extra, version, nextSeq, entries: queued };
            const quick = emptyOutboxFile(value);
            const strict = outboxSchemas().OutboxFile.safeParse(value);
            if (quick === undefined) {
              // Only what zod refuses or what holds queued reports is left to it.
              expect(
                strict.success && Array.isArray(queued) && queued.length === 0,
                JSON.stringify(value),
              ).toBe(false);
              continue;
            }
            taken += 1;
            expect(strict.success, JSON.stringify(value)).toBe(true);
            expect(quick).toStrictEqual(strict.data);
          }
        }
      }
    }
    expect(taken).toBe(6);
    expect(emptyOutboxFile([])).toBeUndefined();
    expect(emptyOutboxFile(null)).toBeUndefined();
  });
});
