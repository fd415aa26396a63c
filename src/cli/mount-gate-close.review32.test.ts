// review32: a deferred close that went in and hung is not made again: Linux frees the number at close(2)'s start.
import { constants } from 'node:fs';
import { expect, it } from 'vitest';
import { controlledClock, settleTurns as turns } from '../../test/helpers/gate-clocks.js';
import type { DescriptorCalls, FsPort } from '../lib/fs-port.js';
import { gateMountsThatMayHang } from './mount-gate.js';

/**
 * A process's descriptor table as the kernel keeps it: an open takes the lowest free number; a close frees its
 * number at once, then flushes (an NFS close waits for its server there) until the test answers.
 */
function descriptorTable() {
  const open = new Map<number, string>();
  const held: (() => void)[] = [];
  const hold = () => new Promise<void>((resolve) => held.push(resolve));
  const calls: DescriptorCalls = {
    open: async (file) => {
      let fd = 3;
      while (open.has(fd)) fd += 1;
      open.set(fd, file);
      return fd;
    },
    write: async () => 0,
    fchown: async () => undefined,
    fchmod: async () => undefined,
    fsync: hold,
    close: async (fd) => {
      if (!open.delete(fd))
        throw Object.assign(new Error('EBADF: bad file descriptor, close'), { code: 'EBADF' });
      await hold();
    },
  };
  return {
    open,
    calls,
    answerAll: () => {
      for (const answer of held.splice(0)) answer();
    },
  };
}

it('a deferred close that hung past its bound closes only its own descriptor, not the one given its number after', async () => {
  const { clock, expire } = controlledClock();
  const table = descriptorTable();
  const fs = { descriptors: table.calls } as unknown as FsPort;
  const gated = gateMountsThatMayHang(fs, '/srv/root', () => new Set(['share']), clock, 15_000);
  const descriptors = gated.descriptors!;
  const fd = await descriptors.open('/srv/root/share/a.json', constants.O_RDONLY, 0);
  // The mount stops answering: an fsync past its bound, and the close asked for meanwhile is deferred.
  const sync = descriptors.fsync(fd).catch((error: unknown) => error);
  expire();
  expect(await sync).toMatchObject({ code: 'ETIMEDOUT' });
  await descriptors.close(fd);
  expect(table.open.get(fd)).toBe('/srv/root/share/a.json');
  // The mount answers: the deferred close goes in, frees the number, and its flush hangs past the bound again.
  table.answerAll();
  await turns();
  expect(table.open.has(fd)).toBe(false);
  expire();
  await turns();
  // A file elsewhere (not on the mount) is opened meanwhile and gets the freed number.
  const other = await descriptors.open('/var/lib/agent/state.json', constants.O_RDONLY, 0);
  expect(other).toBe(fd);
  // The close's flush ends: nothing is closed again (made again, it closed state.json's descriptor).
  table.answerAll();
  await turns();
  table.answerAll();
  await turns();
  expect(table.open.get(other)).toBe('/var/lib/agent/state.json');
});
