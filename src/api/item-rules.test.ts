// ITEM_RULES_VERSION's tripwire: what makes an item valid and the bytes its file gets, pinned. Items known by their
// exact text (list-page.ts KnownItems) skip both, so a change to either must bump ITEM_RULES_VERSION.
import { createHash } from 'node:crypto';
import { describe, expect, it } from 'vitest';
import { serializeContent } from '../reconcile/serialize.js';
import { parseJson } from './json.js';
import { ITEM_RULES_VERSION, judgeConfigInstance } from './list-page.js';
import type { ConfigContent } from './schemas.js';

const BUMP = 'the item rules changed: bump ITEM_RULES_VERSION (api/list-page.ts), then renew these pins';

/** Contents with what serializers and checks are particular about: odd numbers, escapes, unicode, nesting. */
const CONTENTS = [
  '{"port":8080,"enabled":true,"name":"svc","tags":["a","b"],"limits":{"cpu":0.5,"mem":null}}',
  '{"big":12345678901234567891,"one":1.0,"neg":-0,"exp":1e5,"tiny":5e-324}',
  '{"text":"line\\nbreak \\"quoted\\" \\u00e9\\u0000 ☃ 😀","empty":{},"list":[]}',
  '{"yes":"yes","no":"no","null":"null","num":"0123","colon":"a: b","dash":"- x","hash":"#c","spaces":" x "}',
  `{"deep":${'{"k":'.repeat(30)}1${'}'.repeat(30)},"arr":[[[[1,2],[3]],[]],{"a":[{"b":[]}]}]}`,
  // Strings a YAML reader (1.1 or 1.2) takes for something else unless quoted: each quoting rule of the emitter.
  `{"v":[".","-.","E5",".e5","a\\tb","+.inf",".NaN","0b101","0x1F","0o17","1_000","1:20","2001-12-14","~","y","n","on","Off","<<","="," a","a ","\\u0085x","\\u2028","\\ufeffx","x\\u00a0","0777","-0",""],".":1,"E5":2,"~":3,"<<":4,"a\\tb":5,"1:20":6}`,
];
const PATHS = ['app/conf.json', 'app/conf.yaml', 'app/conf.yml'];

/** sha256 of every (path, content) serialized, in order. */
const PINNED_BYTES = '71f4e5d42f1cb8ea0b39d77629a5ca3b294a27f5357b4d3a56afaee3e7af8d1a';

/** Contents the checks refuse or accept, with the verdict. */
const VERDICTS: [content: string, valid: boolean][] = [
  ['[1,2]', false],
  ['"text"', false],
  ['null', false],
  ['{"n":1e400}', false],
  [`${'{"a":'.repeat(64)}{}${'}'.repeat(64)}`, false],
  [`${'{"a":'.repeat(63)}{}${'}'.repeat(63)}`, true],
  [`{"a":${'['.repeat(63)}${']'.repeat(63)}}`, true],
  ['{"__proto__":{"x":1}}', true],
  ['{"k":1,"k":2}', true],
];

function item(path: string, content: string): string {
  return `{"object":"config_instance","id":"cfg_1","target_status":"deployed","activity_status":"deployed","error_status":"none","status":"deployed","relative_filepath":"${path}","created_at":"2025-01-01T00:00:00Z","updated_at":"2025-01-01T00:00:00Z","device_id":"dev_1","config_schema_id":"sch_1","config_type_id":"typ_1","device":null,"config_schema":null,"config_type":null,"content":${content}}`;
}

describe('ITEM_RULES_VERSION', () => {
  it('is 2 while the pins below hold', () => {
    expect(ITEM_RULES_VERSION, BUMP).toBe(2);
  });

  it('pins the bytes every file gets (JSON and YAML paths)', () => {
    const hash = createHash('sha256');
    for (const path of PATHS) {
      for (const content of CONTENTS) {
        hash.update(serializeContent(path, parseJson(content) as ConfigContent));
        hash.update('\0');
      }
    }
    expect(hash.digest('hex'), BUMP).toBe(PINNED_BYTES);
  });

  it('pins what the checks accept', () => {
    const verdicts = VERDICTS.map(
      ([content]) => judgeConfigInstance(item('app/conf.json', content)).kind === 'valid',
    );
    expect(verdicts, BUMP).toEqual(VERDICTS.map(([, valid]) => valid));
  });
});
