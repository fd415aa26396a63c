// files.rules: schema rejections, first-match-wins resolution, and group checks against the agent's groups.
import { describe, expect, it } from 'vitest';
import { ConfigError } from './errors.js';
import { compileFileRules, parseGroupFile } from './file-rules.js';
import { parseAgentConfig } from './load.js';

const GROUPS = parseGroupFile(
  [
    'root:x:0:',
    'config-agent:x:997:',
    'app:x:1001:config-agent',
    'app:x:9999:',
    'broken-line',
    'web:x:1002:',
  ].join('\n'),
);
const FACTS = { gidByName: GROUPS, memberGids: [997, 1001], primaryGid: 997 };

function files(rules: unknown[], extra: Record<string, unknown> = {}) {
  return parseAgentConfig(
    {
      deviceId: 'dvc_1',
      server: { baseUrl: 'https://configs.example.com' },
      rootDir: '/srv/config-agent',
      stateDir: '/var/lib/config-agent',
      files: { rules, ...extra },
    },
    'test.json',
  ).files;
}

describe('parseGroupFile', () => {
  it('maps names to gids, first entry wins, malformed lines skipped', () => {
    expect([...GROUPS]).toEqual([
      ['root', 0],
      ['config-agent', 997],
      ['app', 1001],
      ['web', 1002],
    ]);
  });
});

describe('compileFileRules', () => {
  it('gives the first matching rule mode and group; unmatched paths get files.mode and the agent group', () => {
    const resolve = compileFileRules(
      files(
        [
          { match: 'secrets/**', mode: '0640', group: 'app' },
          { match: 'secrets/public.json', mode: '0644' },
          { match: '**/*.key', group: '1001' },
        ],
        { mode: '0600' },
      ),
      FACTS,
    );
    expect(resolve('secrets/db.json')).toEqual({ mode: 0o640, gid: 1001 });
    // First match wins: the broader rule above shadows this one.
    expect(resolve('secrets/public.json')).toEqual({ mode: 0o640, gid: 1001 });
    expect(resolve('tls/server.key')).toEqual({ mode: 0o600, gid: 1001 });
    expect(resolve('app/.hidden.key')).toEqual({ mode: 0o600, gid: 1001 });
    expect(resolve('app/config.json')).toEqual({ mode: 0o600, gid: 997 });
  });

  it('refuses groups that do not exist or that the agent is not a member of, naming each rule', () => {
    const error = (() => {
      try {
        compileFileRules(
          files([
            { match: 'a/**', group: 'nosuch' },
            { match: 'b/**', group: 'web' },
            { match: 'c/**', group: 'config-agent' },
          ]),
          FACTS,
        );
      } catch (e) {
        return e;
      }
      return undefined;
    })();
    expect(error).toBeInstanceOf(ConfigError);
    expect((error as ConfigError).issues).toEqual([
      { path: 'files.rules[0].group', message: 'group "nosuch" does not exist on this system' },
      {
        path: 'files.rules[1].group',
        message:
          'the agent is not a member of group "web" (gid 1002), so it cannot give files that group: add ' +
          'SupplementaryGroups=web in a drop-in (docs/operations.md#file-modes-and-groups)',
      },
    ]);
  });
});

describe('compileFileRules as root', () => {
  it('accepts any existing group (CAP_CHOWN), still refuses a missing one', () => {
    const privileged = { ...FACTS, memberGids: [], privileged: true };
    expect(compileFileRules(files([{ match: '**', group: 'web' }]), privileged)('a')).toEqual({
      mode: 0o644,
      gid: 1002,
    });
    expect(() => compileFileRules(files([{ match: '**', group: 'nosuch' }]), privileged)).toThrow(
      'group "nosuch" does not exist',
    );
  });
});

describe('files.rules in the schema', () => {
  it.each([
    [[{ match: 'a/**' }], 'files.rules[0]: must set mode, group or both'],
    [
      [{ match: '/etc/**', mode: '0644' }],
      'files.rules[0].match: must be a glob relative to rootDir (no leading /)',
    ],
    [
      [{ match: '!secrets/**', mode: '0600' }],
      'files.rules[0].match: unsupported glob: negation (a leading !) is not supported',
    ],
    [[{ match: 'a/**', mode: '0200' }], 'files.rules[0].mode: must grant the owner read (0400)'],
    [[{ match: 'a/**', mode: '4755' }], 'files.rules[0].mode: must not set the setuid, setgid or sticky bit'],
    [
      [{ match: 'a/**', group: 'a b' }],
      'files.rules[0].group: must be a group name (like "app") or a numeric gid',
    ],
    [[{ match: 'a/**', mode: '0644', owner: 'x' }], 'files.rules[0].owner: unknown key'],
  ])('%j → %s', (rules, message) => {
    expect(() => files(rules)).toThrow(message);
  });

  it('defaults to no rules', () => {
    expect(files([]).rules).toEqual([]);
  });
});
