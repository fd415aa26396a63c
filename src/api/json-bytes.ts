// The bytes JSON's grammar is made of, for the scanners that read JSON a byte or a char code at a time.

export const NEWLINE = 0x0a;
export const SPACE = 0x20;
export const QUOTE = 0x22;
export const PLUS = 0x2b;
export const COMMA = 0x2c;
export const MINUS = 0x2d;
export const DOT = 0x2e;
export const SLASH = 0x2f;
export const DIGIT_0 = 0x30;
export const DIGIT_1 = 0x31;
export const DIGIT_9 = 0x39;
export const COLON = 0x3a;
export const UPPER_E = 0x45;
export const OPEN_ARRAY = 0x5b;
export const BACKSLASH = 0x5c;
export const CLOSE_ARRAY = 0x5d;
export const LOWER_E = 0x65;
export const LOWER_F = 0x66;
export const LOWER_N = 0x6e;
export const LOWER_T = 0x74;
export const LOWER_U = 0x75;
export const OPEN_OBJECT = 0x7b;
export const CLOSE_OBJECT = 0x7d;

/** JSON's four whitespace characters (RFC 8259); false past the end (`undefined`). */
export function isWhitespace(code: number | undefined): boolean {
  return code === SPACE || code === NEWLINE || code === 0x0d || code === 0x09;
}

/** The UTF-8 byte order mark, EF BB BF. */
export const UTF8_BOM = [0xef, 0xbb, 0xbf] as const;

/**
 * The body without a UTF-8 byte order mark at its start (RFC 8259 §8.1: a parser may ignore one; JSON.parse and
 * Buffer's decoder keep it as U+FEFF, a syntax error). Only the first three bytes, only when they are one.
 */
export function withoutBom(body: Buffer): Buffer {
  return body[0] === UTF8_BOM[0] && body[1] === UTF8_BOM[1] && body[2] === UTF8_BOM[2]
    ? body.subarray(3)
    : body;
}
