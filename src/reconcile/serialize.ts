// Turns an instance's JSON content into the bytes of its file, chosen by the file's extension: numbers as the
// service wrote them, and YAML that every common reader (YAML 1.1 and 1.2) reads back as the same content.
import type { ScalarTag } from 'yaml';
import { isLosslessNumber, LosslessNumber, parseJson, stringifyJson } from '../api/json.js';
import { isJsonContentFile } from '../api/json-file.js';
import type { ConfigContent } from '../api/schemas.js';
import { formatForPath } from '../lib/file-format.js';

export { type FileFormat, formatForPath } from '../lib/file-format.js';

type YamlModule = typeof import('yaml');

/**
 * The yaml package: ~260 KB of code that a device with only JSON files never needs, so it is not imported with
 * this module (the bundle keeps it in a chunk of its own) but loaded by `loadYaml` before the first YAML path
 * is serialized. Code, not state: every caller gets the same module, as with a static import.
 */
let yamlModule: YamlModule | undefined;

/** Loads the yaml package for `serializeContent`; the pass awaits it before preparing a YAML path. */
export async function loadYaml(): Promise<void> {
  yamlModule ??= await import('yaml');
}

function loadedYaml(): YamlModule {
  if (yamlModule === undefined) throw new Error('YAML content serialized before loadYaml() was awaited');
  return yamlModule;
}

/**
 * Deterministic for equal content, so identical content always compares byte-identical on disk. JSON output is
 * JSON.stringify's, except that a number is written as the text the service sent (`12345678901234567891`).
 * A YAML path needs `loadYaml()` awaited first.
 */
export function serializeContent(relativePath: string, content: ConfigContent): Buffer {
  // A large item's content arrives already as these bytes (api/json-file.ts), only ever for a JSON path.
  if (isJsonContentFile(content)) {
    if (formatForPath(relativePath) === 'json') return content.data;
    return serializeContent(relativePath, parseJson(content.data.toString('utf8')) as ConfigContent);
  }
  if (formatForPath(relativePath) === 'yaml') return Buffer.from(yamlText(content), 'utf8');
  // Written with its newline straight into one buffer: joining them first would copy a large file's text once more.
  const text = stringifyJson(content, 2);
  const data = Buffer.allocUnsafe(Buffer.byteLength(text, 'utf8') + 1);
  data.write(text, 0, 'utf8');
  data[data.length - 1] = 0x0a;
  return data;
}

/*
 * Plain scalars some YAML reader takes for something other than a string. The union of YAML 1.1's type
 * repository (PyYAML, go-yaml v2, Ruby Psych, SnakeYAML 1.x) and YAML 1.2's core schema, erring on the side of
 * quoting: a quoted string is a string for every reader.
 */
const WORDS = /^(?:y|n|yes|no|true|false|on|off|null|~|<<|=)$/i;
const INTEGER = /^[-+]?(?:[0-9][0-9_]*|0b[01_]+|0o[0-7_]+|0x[0-9a-f_]+)$/i;
const SEXAGESIMAL = /^[-+]?[0-9][0-9_]*(?::[0-5]?[0-9])+(?:\.[0-9_]*)?$/;
const FLOAT = /^[-+]?(?:[0-9][0-9_]*(?:\.[0-9_]*)?|\.[0-9_]+)(?:e[-+]?[0-9]+)?$/i;
const SPECIAL_FLOAT = /^[-+]?\.(?:inf|nan)$/i;
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

/** Writes a LosslessNumber as its text (YAML-safe form), with no explicit tag. */
const losslessNumberTag: ScalarTag = {
  identify: (value) => isLosslessNumber(value),
  default: true,
  tag: 'tag:yaml.org,2002:float',
  test: /^\b$/,
  resolve: (source) => source,
  stringify: ({ value }) => yamlNumberText(String(value)),
};

/** Plain numbers JavaScript prints with an exponent (1e+21, 5e-324) go through the same YAML-safe form. */
function withExponentNumbersAsText(value: unknown): unknown {
  if (typeof value === 'number') {
    const text = String(value);
    return /e/i.test(text) ? new LosslessNumber(text) : value;
  }
  if (Array.isArray(value)) return value.map(withExponentNumbersAsText);
  if (value !== null && typeof value === 'object' && !isLosslessNumber(value)) {
    const out: Record<string, unknown> = {};
    for (const [key, item] of Object.entries(value)) {
      // defineProperty: a `__proto__` key must stay an own key, not become the prototype.
      Object.defineProperty(out, key, {
        value: withExponentNumbersAsText(item),
        enumerable: true,
        writable: true,
        configurable: true,
      });
    }
    return out;
  }
  return value;
}

/**
 * Characters the yaml package writes raw that YAML 1.1 readers refuse in a stream (DEL, the C1 controls,
 * U+FFFE, U+FFFF: PyYAML rejects the whole file) or read as line breaks (NEL, LS, PS: a value folded to a space,
 * a mapping broken). A string holding one is double-quoted, and each such character written as an escape both
 * versions read (`\x85`, `\u2028`).
 */
const YAML_RAW_UNSAFE = /[\x7f-\x9f\u2028\u2029\ufffe\uffff]/;
const YAML_RAW_UNSAFE_ALL = new RegExp(YAML_RAW_UNSAFE.source, 'g');

function yamlEscape(char: string): string {
  const code = char.charCodeAt(0);
  return code <= 0xff ? `\\x${code.toString(16)}` : `\\u${code.toString(16)}`;
}

function yamlText(content: ConfigContent): string {
  const { Document, visit } = loadedYaml();
  const doc = new Document(withExponentNumbersAsText(content), { customTags: [losslessNumberTag] });
  let unsafe = false;
  visit(doc, {
    Scalar(_key, node) {
      if (typeof node.value !== 'string') return;
      if (YAML_RAW_UNSAFE.test(node.value)) {
        unsafe = true;
        node.type = 'QUOTE_DOUBLE';
      } else if (yamlMisreads(node.value)) node.type = 'QUOTE_DOUBLE';
    },
  });
  const text = doc.toString({ indent: 2, lineWidth: 0 });
  // Only double-quoted scalars can hold such a character now, and there an escape stands for it.
  return unsafe ? text.replace(YAML_RAW_UNSAFE_ALL, yamlEscape) : text;
}
