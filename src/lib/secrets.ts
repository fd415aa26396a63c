// The secrets (the API key) no output may carry; apart from the logger so printing an error needs no pino.

export interface SecretRegistry {
  add(secret: string): void;
  scrub(text: string): string;
}

/** Secrets shorter than this are not scrubbed: replacing "a" everywhere would shred the log. */
const MIN_SECRET_LENGTH = 4;
export const REDACTED = '[REDACTED]';

export function createSecretRegistry(): SecretRegistry {
  const secrets = new Set<string>();
  return {
    add(secret) {
      if (secret.length >= MIN_SECRET_LENGTH) secrets.add(secret);
    },
    scrub(text) {
      let out = text;
      for (const secret of secrets) {
        if (out.includes(secret)) out = out.split(secret).join(REDACTED);
        // The key can also appear JSON-escaped or percent-encoded inside a logged string.
        const escaped = JSON.stringify(secret).slice(1, -1);
        if (escaped !== secret && out.includes(escaped)) out = out.split(escaped).join(REDACTED);
        const encoded = encodeURIComponent(secret);
        if (encoded !== secret && out.includes(encoded)) out = out.split(encoded).join(REDACTED);
      }
      return out;
    },
  };
}
