// How a config file is written, chosen by its path's extension: JSON, or YAML for `.yaml` and `.yml`.
import path from 'node:path';

export type FileFormat = 'json' | 'yaml';

export function formatForPath(relativePath: string): FileFormat {
  const extension = path.posix.extname(relativePath).toLowerCase();
  return extension === '.yaml' || extension === '.yml' ? 'yaml' : 'json';
}
