// Content digests: the sha256 that state records, the planner compares and the content cache is keyed by.
import { createHash } from 'node:crypto';

export function sha256Hex(data: Uint8Array): string {
  return createHash('sha256').update(data).digest('hex');
}
