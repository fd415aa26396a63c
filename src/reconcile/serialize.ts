// Turns an instance's JSON content into the bytes of its file, chosen by the file's extension.
import path from 'node:path';
import { stringify as stringifyYaml } from 'yaml';
import type { ConfigContent } from '../api/schemas.js';

export type FileFormat = 'json' | 'yaml';

export function formatForPath(relativePath: string): FileFormat {
  const extension = path.posix.extname(relativePath).toLowerCase();
  return extension === '.yaml' || extension === '.yml' ? 'yaml' : 'json';
}

/** Deterministic for equal content, so identical content always compares byte-identical on disk. */
export function serializeContent(relativePath: string, content: ConfigContent): Buffer {
  if (formatForPath(relativePath) === 'yaml') {
    return Buffer.from(stringifyYaml(content, { indent: 2, lineWidth: 0 }), 'utf8');
  }
  return Buffer.from(`${JSON.stringify(content, null, 2)}\n`, 'utf8');
}
