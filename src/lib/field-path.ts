// How every message names a field inside a validated value: `server.timeoutSeconds`, `data[3].created_at`.

/**
 * A key longer than this is named by its length: keys come from the service's content, and a hostile one of a
 * megabyte made every log line and summary naming the field a megabyte long. Left out whole, never cut: a cut
 * could leave part of an API key the service echoed, which the scrub of whole keys would not catch.
 */
export const SHOWN_KEY_CHARS = 64;

export function formatFieldPath(path: readonly PropertyKey[]): string {
  let out = '';
  for (const key of path) {
    if (typeof key === 'number') {
      out += `[${key}]`;
      continue;
    }
    const text = String(key);
    const shown = text.length > SHOWN_KEY_CHARS ? `<a key of ${text.length} characters>` : text;
    out += out === '' ? shown : `.${shown}`;
  }
  return out;
}
