// node:fs's callback calls on raw descriptors as promises: the writer's temp files and directory fsyncs without a FileHandle each.
import { close, fchmod, fchown, fsync, open, write } from 'node:fs';
import type { DescriptorCalls } from './fs-port.js';

/** Settles `resolve`/`reject` from a node:fs callback that answers nothing but an error. */
function done(resolve: () => void, reject: (error: unknown) => void) {
  return (error: NodeJS.ErrnoException | null) => {
    if (error === null) resolve();
    else reject(error);
  };
}

/**
 * The production descriptor calls: each one thread-pool round trip, as the promise API's, without the
 * `FileHandle` object, its promise request and its close bookkeeping (sync14's probe: 140–200 → 71–101 ms of
 * user CPU per 10,000 files for open + write + close). The caller closes every descriptor exactly once: a
 * raw descriptor closed twice may close another file that reused its number.
 */
export const nodeDescriptorCalls: DescriptorCalls = {
  open: (file, flags, mode) =>
    new Promise((resolve, reject) => {
      open(file, flags, mode, (error, fd) => {
        if (error === null) resolve(fd);
        else reject(error);
      });
    }),
  write: (fd, buffer, offset, length) =>
    new Promise((resolve, reject) => {
      write(fd, buffer, offset, length, null, (error, written) => {
        if (error === null) resolve(written);
        else reject(error);
      });
    }),
  fchown: (fd, uid, gid) => new Promise((resolve, reject) => fchown(fd, uid, gid, done(resolve, reject))),
  fchmod: (fd, mode) => new Promise((resolve, reject) => fchmod(fd, mode, done(resolve, reject))),
  fsync: (fd) => new Promise((resolve, reject) => fsync(fd, done(resolve, reject))),
  close: (fd) => new Promise((resolve, reject) => close(fd, done(resolve, reject))),
};
