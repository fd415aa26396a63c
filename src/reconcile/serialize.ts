// Turns an instance's JSON content into the bytes of its file, chosen by the file's extension: numbers as the
// service wrote them, and YAML that every common reader (YAML 1.1 and 1.2) reads back as the same content.
import { stringifyJson } from '../api/json.js';
import { isJsonContentFile } from '../api/json-file.js';
import type { ConfigContent } from '../api/schemas.js';
import { formatForPath } from '../lib/file-format.js';
import { yamlBytesFromJson } from './yaml-stream.js';
import { yamlBytes } from './yaml-text.js';

export { type FileFormat, formatForPath } from '../lib/file-format.js';
export { yamlMisreads, yamlNumberText } from './yaml-text.js';

/**
 * Deterministic for equal content, so identical content always compares byte-identical on disk. JSON output is
 * JSON.stringify's, except that a number is written as the text the service sent (`12345678901234567891`).
 */
export function serializeContent(relativePath: string, content: ConfigContent): Buffer {
  // A large item's content arrives as its checked JSON text (api/json-file.ts): written without a tree.
  if (isJsonContentFile(content)) {
    return formatForPath(relativePath) === 'json' ? content.data : content.writtenAs(yamlBytesFromJson);
  }
  if (formatForPath(relativePath) === 'yaml') return yamlBytes(content);
  // Written with its newline straight into one buffer: joining them first would copy a large file's text once more.
  const text = stringifyJson(content, 2);
  const data = Buffer.allocUnsafe(Buffer.byteLength(text, 'utf8') + 1);
  data.write(text, 0, 'utf8');
  data[data.length - 1] = 0x0a;
  return data;
}
