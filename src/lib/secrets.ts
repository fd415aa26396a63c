// The secrets (the API key) no output may carry; apart from the logger so printing an error needs no pino.

export interface SecretRegistry {
  add(secret: string): void;
  scrub(text: string): string;
}

/**
 * Secrets shorter than this are not scrubbed: replacing "a" everywhere would shred the log. So the API key must
 * be at least this long (config/load.ts refuses a shorter one): a key that could not be scrubbed could leak.
 */
export const MIN_SECRET_LENGTH = 4;
export const REDACTED = '[REDACTED]';

/**
 * How many times a secret may have been JSON-escaped where it shows: a log line's JSON escapes a message once, a
 * message that quotes JSON (an error naming a request body) twice, and so on.
 */
const MAX_ESCAPE_LEVELS = 4;

/**
 * Every spelling of `secret` an output may carry: as it is, JSON-escaped once to MAX_ESCAPE_LEVELS times (a key
 * with `"` or `\` changes at each level), and percent-encoded (as it is and escaped). Longest first, so that a
 * longer spelling is never left half-replaced by a shorter one inside it.
 */
function spellings(secret: string): string[] {
  const found = new Set<string>([secret]);
  let escaped = secret;
  for (let level = 0; level < MAX_ESCAPE_LEVELS; level += 1) {
    escaped = JSON.stringify(escaped).slice(1, -1);
    found.add(escaped);
  }
  for (const spelling of [...found]) found.add(encodeURIComponent(spelling));
  return [...found].sort((a, b) => b.length - a.length);
}

export function createSecretRegistry(): SecretRegistry {
  const secrets = new Set<string>();
  /**
   * Every spelling of every secret, longest first across secrets too: one secret inside another (a proxy password
   * and a longer one) replaced first left the rest of the longer one in the output.
   */
  let forms: string[] = [];
  return {
    add(secret) {
      if (secret.length < MIN_SECRET_LENGTH || secrets.has(secret)) return;
      secrets.add(secret);
      forms = [...new Set([...forms, ...spellings(secret)])].sort((a, b) => b.length - a.length);
    },
    scrub(text) {
      let out = text;
      for (const form of forms) if (out.includes(form)) out = out.split(form).join(REDACTED);
      return out;
    },
  };
}
