// The path guard's walk and final check as one call, for tests: the absolute path under the root, or the rejection.
import type { FsPort } from '../../src/lib/fs-port.js';
import { assertRegularOrAbsent, inspectPath } from '../../src/store/path-guard.js';

/**
 * The absolute path of `relativePath` under `rootDir`, after validating it and lstat'ing every existing
 * component: a symlink anywhere, a parent that is not a directory, or a final path that exists as anything
 * but a regular file throws PathRejectedError, as the writer's and observe's own uses of the two calls do.
 */
export async function resolveInsideRoot(fs: FsPort, rootDir: string, relativePath: string): Promise<string> {
  const inspection = await inspectPath(fs, rootDir, relativePath);
  assertRegularOrAbsent(inspection.final, relativePath);
  return inspection.absolute;
}
