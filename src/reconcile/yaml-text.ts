// YAML for an instance's JSON content, written in chunks: byte for byte what the yaml package wrote before
// (`new Document(content).toString({ indent: 2, lineWidth: 0 })` with the quoting below), without its node tree,
// except where that did not read back as the content (docs/reliability.md).
import { isLosslessNumber, type LosslessNumber } from '../api/json.js';
import type { ConfigContent } from '../api/schemas.js';

/*
 * Plain scalars some YAML reader takes for something other than a string. The union of YAML 1.1's type
 * repository (PyYAML, go-yaml v2, Ruby Psych, SnakeYAML 1.x) and YAML 1.2's core schema, erring on the side of
 * quoting: a quoted string is a string for every reader. (It contains every pattern of the yaml package's
 * core schema, so that package's own "would this plain string resolve to a non-string" check never fired.)
 */
const WORDS = /^(?:y|n|yes|no|true|false|on|off|null|~|<<|=)$/i;
const INTEGER = /^[-+]?(?:[0-9][0-9_]*|0b[01_]+|0o[0-7_]+|0x[0-9a-f_]+)$/i;
const SEXAGESIMAL = /^[-+]?[0-9][0-9_]*(?::[0-5]?[0-9])+(?:\.[0-9_]*)?$/;
const FLOAT = /^[-+]?(?:[0-9][0-9_]*(?:\.[0-9_]*)?|\.[0-9_]+)(?:e[-+]?[0-9]+)?$/i;
const SPECIAL_FLOAT = /^[-+]?\.(?:inf|nan)$/i;
/**
 * What the yaml package's YAML 1.1 schema takes for a float beyond the others: a lone dot (the 1.1 type
 * repository's own pattern allows it) and an exponent without a mantissa (`E5`, `.e5`): NaN, both.
 */
const LOOSE_FLOAT = /^[-+]?(?:\.|(?:[0-9][0-9_]*)?(?:\.[0-9_]*)?e[-+]?[0-9]+)$/i;
const TIMESTAMP =
  /^[0-9]{4}-[0-9]{1,2}-[0-9]{1,2}(?:(?:t|[ \t]+)[0-9]{1,2}:[0-9]{2}:[0-9]{2}(?:\.[0-9]*)?(?:[ \t]*(?:z|[-+][0-9]{1,2}(?::[0-9]{2})?))?)?$/i;

/** Whether a string written plain would be read back as something else by some common YAML reader. */
export function yamlMisreads(value: string): boolean {
  return (
    value === '' ||
    WORDS.test(value) ||
    INTEGER.test(value) ||
    SEXAGESIMAL.test(value) ||
    FLOAT.test(value) ||
    SPECIAL_FLOAT.test(value) ||
    LOOSE_FLOAT.test(value) ||
    TIMESTAMP.test(value) ||
    // Ruby's Psych reads `:name` as a symbol.
    value.startsWith(':') ||
    // Written plain as the first key, it would open the file: readers drop a byte order mark there.
    value.startsWith('\ufeff')
  );
}

/**
 * A JSON number's text as a YAML float or int that 1.1 and 1.2 readers both take for the same number: YAML 1.1
 * wants a dot in the mantissa and a sign in the exponent (`1e5` is a string to PyYAML; `1.0e+5` is not).
 */
export function yamlNumberText(text: string): string {
  const match = /^(-?)([0-9]+)(\.[0-9]+)?(?:[eE]([-+]?)([0-9]+))?$/.exec(text);
  if (match === null) return text;
  const [, sign = '', whole = '', fraction, expSign, exponent] = match;
  if (exponent === undefined) return text;
  return `${sign}${whole}${fraction ?? '.0'}e${expSign === '-' ? '-' : '+'}${exponent}`;
}

/**
 * Characters YAML 1.1 readers refuse in a stream (DEL, the C1 controls, U+FFFE, U+FFFF: PyYAML rejects the
 * whole file) or read as line breaks (NEL, LS, PS: a value folded to a space, a mapping broken). A string holding
 * one is double-quoted, and each such character written as an escape both versions read (`\x85`, `\u2028`).
 */
const RAW_UNSAFE = /[\x7f-\x9f\u2028\u2029\ufffe\uffff]/;
const RAW_UNSAFE_ALL = new RegExp(RAW_UNSAFE.source, 'g');

function escapeRawUnsafe(char: string): string {
  const code = char.charCodeAt(0);
  return code <= 0xff ? `\\x${code.toString(16)}` : `\\u${code.toString(16)}`;
}

/** What the yaml package double-quotes whatever the style asked for: C0 controls but tab and newline, DEL, C1, lone surrogates. */
// biome-ignore lint/suspicious/noControlCharactersInRegex: finding control characters is the point
const FORCES_DOUBLE_QUOTES = /[\x00-\x08\x0b-\x1f\x7f-\x9f\u{D800}-\u{DFFF}]/u;
/**
 * Not allowed plain (the yaml package's list): `-` or `?` alone or before a blank, a leading indicator, `: `,
 * ` #`, a blank around a line break, a trailing blank or colon.
 */
const NOT_PLAIN = /^[\n\t ,[\]{}#&*!|>'"%@`]|^[?-]$|^[?-][ \t]|[\n:][ \t]|[ \t]\n|[\n\t ]#|[\n\t :]$/;
/** A line a YAML 1.1 reader would take for a directive or a document marker. */
const DOCUMENT_MARKER = /^(%|---|\.\.\.)/m;
const BLANK_AROUND_BREAK = /[ \t]\n|\n[ \t]/;
const TRAILING_BLANK_LINE = /\n[\t ]+$/;
/** Spaces and tabs on lines of their own and nothing else: a literal block would lose the spaces (its lines are empty). */
const BLANKS_ONLY = /^[\n\t ]* [\n\t ]*$/;
const BREAKS = /\n+/g;
const SINGLE_QUOTE = /'/g;
/** Runs of line breaks inside a block scalar's trailing breaks that a further line follows. */
const BLOCK_END_BREAKS = /(^|(?<!\n))\n+(?!\n|$)/g;
/** The yaml package's `doubleQuotedMinMultiLineLength`: shorter JSON texts keep `\n` escaped. */
const MIN_MULTILINE_LENGTH = 40;
/** A longer implicit key is written as an explicit one (`? key`), as YAML allows implicit keys of 1024 at most. */
const MAX_IMPLICIT_KEY = 1024;
export const INDENT_STEP = '  ';

/** `value` in double quotes: JSON's escapes, YAML's short forms, and line breaks folded where that is allowed. */
function doubleQuoted(value: string, indent: string, implicitKey: boolean): string {
  const json = JSON.stringify(value);
  let str = '';
  let start = 0;
  for (let i = 0, ch = json[i]; ch; ch = json[++i]) {
    if (ch === ' ' && json[i + 1] === '\\' && json[i + 2] === 'n') {
      // A space before a line break is escaped, or folding would drop it.
      str += `${json.slice(start, i)}\\ `;
      i += 1;
      start = i;
      ch = '\\';
    }
    if (ch !== '\\') continue;
    const escaped = json[i + 1];
    if (escaped === 'u') {
      str += json.slice(start, i);
      const code = json.substr(i + 2, 4);
      str += SHORT_ESCAPES[code] ?? (code.startsWith('00') ? `\\x${code.substring(2)}` : json.substr(i, 6));
      i += 5;
      start = i + 1;
    } else if (escaped === 'n') {
      if (implicitKey || json[i + 2] === '"' || json.length < MIN_MULTILINE_LENGTH) {
        i += 1;
      } else {
        // Folded: one more line break than the value holds, since folding turns a single one into a space.
        str += `${json.slice(start, i)}\n\n`;
        while (json[i + 2] === '\\' && json[i + 3] === 'n' && json[i + 4] !== '"') {
          str += '\n';
          i += 2;
        }
        str += indent;
        // A space after a line break is escaped, or folding would drop it; a space before the next break is
        // escaped by the first branch instead (both made an escaped backslash: the yaml package's bug).
        if (json[i + 2] === ' ' && !(json[i + 3] === '\\' && json[i + 4] === 'n')) str += '\\';
        i += 1;
        start = i + 1;
      }
    } else {
      i += 1;
    }
  }
  return start ? str + json.slice(start) : json;
}

/** The escapes JSON writes as `\u00XX` that YAML has a shorter form for (JSON never writes NEL, NBSP, LS, PS so). */
const SHORT_ESCAPES: Record<string, string> = { '0000': '\\0', '0007': '\\a', '000b': '\\v', '001b': '\\e' };

function singleQuoted(value: string, indent: string, implicitKey: boolean): string {
  if ((implicitKey && value.includes('\n')) || BLANK_AROUND_BREAK.test(value)) {
    return doubleQuoted(value, indent, implicitKey);
  }
  return `'${value.replace(SINGLE_QUOTE, "''").replace(BREAKS, `$&\n${indent}`)}'`;
}

/** Single quotes for a string with double quotes and no single ones; double quotes otherwise. */
function quoted(value: string, indent: string, implicitKey: boolean): string {
  return value.includes('"') && !value.includes("'")
    ? singleQuoted(value, indent, implicitKey)
    : doubleQuoted(value, indent, implicitKey);
}

/** A multi-line value as a literal block scalar (`|`), with the chomping and indentation indicators it needs. */
function literalBlock(text: string, indent: string): string {
  if (TRAILING_BLANK_LINE.test(text) || BLANKS_ONLY.test(text)) return quoted(text, indent, false);
  let value = text;
  let endStart = value.length;
  for (; endStart > 0; --endStart) {
    const ch = value[endStart - 1];
    if (ch !== '\n' && ch !== '\t' && ch !== ' ') break;
  }
  let end = value.substring(endStart);
  const endNlPos = end.indexOf('\n');
  // Strip (no final line break), keep (more than one, or nothing else), clip (exactly one).
  const chomp = endNlPos === -1 ? '-' : value === end || endNlPos !== end.length - 1 ? '+' : '';
  if (end) {
    value = value.slice(0, -end.length);
    if (end[end.length - 1] === '\n') end = end.slice(0, -1);
    end = end.replace(BLOCK_END_BREAKS, `$&${indent}`);
  }
  let startWithSpace = false;
  let startEnd = 0;
  let startNlPos = -1;
  for (; startEnd < value.length; ++startEnd) {
    const ch = value[startEnd];
    if (ch === ' ') startWithSpace = true;
    else if (ch === '\n') startNlPos = startEnd;
    else break;
  }
  let start = value.substring(0, startNlPos < startEnd ? startNlPos + 1 : startEnd);
  if (start) {
    value = value.substring(start.length);
    start = start.replace(BREAKS, `$&${indent}`);
  }
  // A leading space needs the indentation given: the package writes 2 (1 only at the root, never used here).
  const header = (startWithSpace ? '2' : '') + chomp;
  return `|${header}\n${indent}${start}${value.replace(BREAKS, `$&${indent}`)}${end}`;
}

function plainOrOther(value: string, indent: string, implicitKey: boolean): string {
  const multiLine = value.includes('\n');
  if (implicitKey && multiLine) return quoted(value, indent, implicitKey);
  if (NOT_PLAIN.test(value)) {
    return implicitKey || !multiLine ? quoted(value, indent, implicitKey) : literalBlock(value, indent);
  }
  if (!implicitKey && multiLine) return literalBlock(value, indent);
  // A top-level key on a line of its own starting a document marker; deeper, the indentation keeps it a key.
  if (implicitKey && indent === INDENT_STEP && DOCUMENT_MARKER.test(value))
    return quoted(value, indent, true);
  // YAML allows a tab inside a plain scalar, but PyYAML refuses the whole file ("found character '\t' that
  // cannot start any token"); quoted, every reader takes it. (The yaml package wrote it plain.)
  if (value.includes('\t')) return quoted(value, indent, implicitKey);
  return value;
}

/** A string scalar whose content starts at `indent` deep (its continuation lines' indentation). */
export function stringText(value: string, indent: string, implicitKey: boolean): string {
  const unsafe = RAW_UNSAFE.test(value);
  const text =
    unsafe || yamlMisreads(value) || FORCES_DOUBLE_QUOTES.test(value)
      ? doubleQuoted(value, indent, implicitKey)
      : plainOrOther(value, indent, implicitKey);
  return unsafe ? text.replace(RAW_UNSAFE_ALL, escapeRawUnsafe) : text;
}

function numberText(value: number): string {
  if (Object.is(value, -0)) return '-0';
  const text = String(value);
  // 1e+21, 5e-324: JavaScript's exponent form, in the form 1.1 and 1.2 readers agree on.
  return text.includes('e') ? yamlNumberText(text) : text;
}

function scalarText(value: unknown, indent: string): string {
  if (typeof value === 'string') return stringText(value, indent, false);
  if (typeof value === 'number') return numberText(value);
  if (value === null) return 'null';
  if (typeof value === 'boolean') return value ? 'true' : 'false';
  return yamlNumberText(String(value as LosslessNumber));
}

/** Collects the text in pieces and turns it into bytes every 64 K characters: no whole-file string. */
export class Utf8Chunks {
  private pending = '';
  private readonly chunks: Buffer[] = [];
  private byteLength = 0;

  write(text: string): void {
    this.pending += text;
    if (this.pending.length >= 65_536) this.flush();
  }

  bytes(): Buffer {
    this.flush();
    const [only] = this.chunks;
    return this.chunks.length === 1 && only !== undefined
      ? only
      : Buffer.concat(this.chunks, this.byteLength);
  }

  private flush(): void {
    if (this.pending === '') return;
    const chunk = Buffer.from(this.pending, 'utf8');
    this.chunks.push(chunk);
    this.byteLength += chunk.length;
    this.pending = '';
  }
}

type JsonObject = { readonly [key: string]: unknown };

function writeSequence(out: Utf8Chunks, items: readonly unknown[], indent: string): void {
  const inner = indent + INDENT_STEP;
  for (let i = 0; i < items.length; i++) {
    out.write(i === 0 ? '- ' : `\n${indent}- `);
    writeNode(out, items[i], inner, '', '');
  }
}

/** A mapping in block style: its first line where the output stands, the others on new lines at `indent`. */
function writeMapping(out: Utf8Chunks, object: JsonObject, keys: readonly string[], indent: string): void {
  const inner = indent + INDENT_STEP;
  for (let i = 0; i < keys.length; i++) {
    const key = keys[i] as string;
    if (i > 0) out.write(`\n${indent}`);
    writeNode(out, object[key], inner, ' ', writeKey(out, key, indent));
  }
}

/**
 * A mapping's key and its colon, for a mapping at `indent`; returns what goes before its value if that is a
 * non-empty collection (a space after an explicit key, a new line otherwise).
 */
export function writeKey(out: Utf8Chunks, key: string, indent: string): string {
  const inner = indent + INDENT_STEP;
  const unsafe = RAW_UNSAFE.test(key);
  let keyText =
    unsafe || yamlMisreads(key) || FORCES_DOUBLE_QUOTES.test(key)
      ? doubleQuoted(key, inner, true)
      : plainOrOther(key, inner, true);
  if (unsafe) keyText = keyText.replace(RAW_UNSAFE_ALL, escapeRawUnsafe);
  const explicitKey = keyText.length > MAX_IMPLICIT_KEY;
  out.write(explicitKey ? `? ${keyText}\n${indent}:` : `${keyText}:`);
  return explicitKey ? ' ' : `\n${inner}`;
}

/**
 * A value whose continuation lines start at `indent`: a scalar or an empty collection after `beforeScalar`, a
 * non-empty collection in block style after `beforeBlock`.
 */
function writeNode(
  out: Utf8Chunks,
  value: unknown,
  indent: string,
  beforeScalar: string,
  beforeBlock: string,
): void {
  if (value === null || typeof value !== 'object' || isLosslessNumber(value)) {
    out.write(beforeScalar + scalarText(value, indent));
  } else if (Array.isArray(value)) {
    if (value.length === 0) out.write(`${beforeScalar}[]`);
    else {
      out.write(beforeBlock);
      writeSequence(out, value, indent);
    }
  } else {
    const keys = Object.keys(value);
    if (keys.length === 0) out.write(`${beforeScalar}{}`);
    else {
      out.write(beforeBlock);
      writeMapping(out, value as JsonObject, keys, indent);
    }
  }
}

/** The YAML file for `content`, ending in a line break. */
export function yamlBytes(content: ConfigContent): Buffer {
  const out = new Utf8Chunks();
  writeNode(out, content, '', '', '');
  out.write('\n');
  return out.bytes();
}
