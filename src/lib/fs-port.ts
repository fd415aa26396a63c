// The slice of node:fs/promises the agent uses; node's and memfs's promise APIs both satisfy it.
import type * as fsp from 'node:fs/promises';

export type FsPort = Pick<
  typeof fsp,
  | 'open'
  | 'rename'
  | 'unlink'
  | 'link'
  | 'lstat'
  | 'stat'
  | 'mkdir'
  | 'readdir'
  | 'readFile'
  | 'rmdir'
  | 'chmod'
>;

export type FileHandle = fsp.FileHandle;
