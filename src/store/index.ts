// The file store: hostile-path guard, durable publish/remove/read of files under a root, and their errors.

export {
  type PublishRequest,
  type PublishResult,
  publishFile,
  type RegularFile,
  type RemoveOutcome,
  type RemoveRequest,
  readRegularFile,
  removeManagedFile,
  sha256Hex,
  sweepTempFiles,
  writeDurableJson,
} from './durable-writer.js';
export { DiskError, type DiskErrorOptions, PathRejectedError, type PathRule } from './errors.js';
export {
  MAX_PATH_BYTES,
  MAX_SEGMENT_BYTES,
  resolveInsideRoot,
  TEMP_PREFIX,
  validateRelativePath,
} from './path-guard.js';
