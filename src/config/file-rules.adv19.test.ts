// adv19: a files.rules group that no chown can give (gid 4294967295 is chown's "leave as is", larger ones overflow).
import { describe, expect, it } from 'vitest';
import { ConfigError } from './errors.js';
import { compileFileRules } from './file-rules.js';
import { parseAgentConfig } from './load.js';

const ROOT_FACTS = { gidByName: new Map([['root', 0]]), memberGids: [], primaryGid: 0, privileged: true };

function files(group: string) {
  return parseAgentConfig(
    {
      deviceId: 'dvc_1',
      server: { baseUrl: 'https://configs.example.com' },
      rootDir: '/srv/config-agent',
      stateDir: '/var/lib/config-agent',
      files: { rules: [{ match: '**', group }] },
    },
    'test.json',
  ).files;
}

describe('files.rules group out of the range of a gid', () => {
  // As root, "4294967295" was taken: fchown(fd, -1, 4294967295) changes nothing, so every file's group stayed
  // "wrong" and every --once and every daemon pass published every matching file again (hooks run each time);
  // "9999999999" made every write fail in fchown (ERR_OUT_OF_RANGE).
  for (const group of ['4294967295', '9999999999']) {
    it(`refuses ${group} at load, naming the key`, () => {
      expect(() => compileFileRules(files(group), ROOT_FACTS)).toThrow(ConfigError);
      expect(() => compileFileRules(files(group), ROOT_FACTS)).toThrow(
        /files\.rules\[0\]\.group: gid \d+ is not a group id/,
      );
    });
  }

  it('the largest real gid is still taken as root', () => {
    expect(compileFileRules(files('4294967294'), ROOT_FACTS)('a')).toEqual({ mode: 0o644, gid: 4294967294 });
  });
});
