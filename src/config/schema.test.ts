// The config schema through parseAgentConfig: defaults, config.example.json, and every rejection naming its key.
import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { ConfigError } from './errors.js';
import { parseAgentConfig } from './load.js';
import type { AgentConfig } from './schema.js';

const SOURCE = '/etc/x.json';

function minimal(): Record<string, unknown> {
  return {
    deviceId: 'dvc_123',
    server: { baseUrl: 'https://configs.example.com' },
    rootDir: '/srv/config-agent',
    stateDir: '/var/lib/config-agent',
  };
}

/** minimal() with `patch` merged one level deep (objects merge, anything else replaces). */
function withPatch(patch: Record<string, unknown>): Record<string, unknown> {
  const out = minimal();
  for (const [key, value] of Object.entries(patch)) {
    const base = out[key];
    const isObject = (v: unknown) => typeof v === 'object' && v !== null && !Array.isArray(v);
    out[key] = isObject(base) && isObject(value) ? { ...(base as object), ...(value as object) } : value;
  }
  return out;
}

function rejection(json: unknown): ConfigError {
  try {
    parseAgentConfig(json, SOURCE);
  } catch (error) {
    if (error instanceof ConfigError) return error;
    throw error;
  }
  throw new Error('expected a ConfigError, but the config was accepted');
}

const DEFAULTS: AgentConfig = {
  deviceId: 'dvc_123',
  server: {
    baseUrl: 'https://configs.example.com',
    apiVersion: 'v1',
    apiKeyFile: '/etc/config-agent/api-key',
    timeoutSeconds: 30,
    maxResponseBytes: 33_554_432,
  },
  rootDir: '/srv/config-agent',
  stateDir: '/var/lib/config-agent',
  files: { mode: 0o644, dirMode: 0o755, rules: [] },
  retry: { maxAttempts: 10, baseDelaySeconds: 15, maxDelaySeconds: 3600 },
  log: { level: 'info' },
  poll: { intervalSeconds: 30, jitterRatio: 0.2, fullResyncSeconds: 600 },
  drift: 'restore',
  hooks: [],
  socketPath: '/run/config-agent/agent.sock',
  metrics: {},
};

/** Every key path of a JSON value, arrays entered through their first element. */
function keyPaths(value: unknown, prefix = ''): string[] {
  if (Array.isArray(value)) return value.length === 0 ? [] : keyPaths(value[0], `${prefix}[]`);
  if (typeof value !== 'object' || value === null) return [];
  return Object.entries(value).flatMap(([key, child]) => {
    const here = prefix === '' ? key : `${prefix}.${key}`;
    return [here, ...keyPaths(child, here)];
  });
}

describe('defaults', () => {
  it('fills in every optional key with the default of the issues', () => {
    expect(parseAgentConfig(minimal(), SOURCE)).toEqual(DEFAULTS);
  });

  it('gives a hook the default timeout of 30 seconds', () => {
    const config = parseAgentConfig(withPatch({ hooks: [{ match: 'a/*', run: ['true'] }] }), SOURCE);
    expect(config.hooks).toEqual([{ match: 'a/*', run: ['true'], timeoutSeconds: 30 }]);
  });
});

describe('config.example.json', () => {
  const text = readFileSync(new URL('../../config.example.json', import.meta.url), 'utf8');
  const example: unknown = JSON.parse(text);

  it('parses to the defaults: no hook and no metrics file, so it works as shipped on any device', () => {
    expect(parseAgentConfig(example, 'config.example.json')).toEqual(DEFAULTS);
  });

  it('spells out every key the schema knows', () => {
    const parsed = parseAgentConfig(example, 'config.example.json');
    expect(keyPaths(example).sort()).toEqual(keyPaths(parsed).sort());
  });

  it('has every key described in docs/configuration.md', () => {
    const docs = readFileSync(new URL('../../docs/configuration.md', import.meta.url), 'utf8');
    const keys = keyPaths(example);
    const isLeaf = (key: string) =>
      !keys.some((other) => other.startsWith(`${key}.`) || other.startsWith(`${key}[]`));
    const undocumented = keys.filter((key) => isLeaf(key) && !docs.includes(`| \`${key}\` `));
    // hooks and metrics.textfile are empty by default; docs/configuration.md shows them with examples.
    expect(keys.filter(isLeaf).length).toBeGreaterThan(18);
    expect(undocumented).toEqual([]);
  });

  it('writes the modes as the octal strings the docs show', () => {
    expect(example).toMatchObject({ files: { mode: '0644', dirMode: '0755' } });
  });
});

describe('required keys', () => {
  it.each([
    ['deviceId', (c: Record<string, unknown>) => delete c.deviceId],
    ['server', (c: Record<string, unknown>) => delete c.server],
    ['server.baseUrl', (c: Record<string, unknown>) => delete (c.server as Record<string, unknown>).baseUrl],
    ['rootDir', (c: Record<string, unknown>) => delete c.rootDir],
    ['stateDir', (c: Record<string, unknown>) => delete c.stateDir],
  ])('a missing %s is named', (key, remove) => {
    const config = minimal();
    remove(config);
    const error = rejection(config);
    expect(error.message).toBe(`config ${SOURCE}: ${key}: required`);
    expect(error.code).toBe('invalid_config');
    expect(error.retryable).toBe(false);
    expect(error.issues).toEqual([{ path: key, message: 'required' }]);
  });

  it('names every missing key at once', () => {
    const error = rejection({});
    expect(error.issues.map((issue) => issue.path)).toEqual(['deviceId', 'server', 'rootDir', 'stateDir']);
  });

  it('rejects a file that is not an object', () => {
    expect(rejection([]).message).toBe(`config ${SOURCE}: expected an object, got array`);
    expect(rejection(null).message).toBe(`config ${SOURCE}: expected an object, got null`);
  });
});

describe('unknown keys', () => {
  it('rejects a top-level unknown key by name', () => {
    expect(rejection(withPatch({ colour: 'blue' })).message).toBe(`config ${SOURCE}: colour: unknown key`);
  });

  it('rejects a nested unknown key by its dotted path, suggesting the closest known key', () => {
    const error = rejection(withPatch({ server: { timeout: 5 } }));
    expect(error.message).toBe(
      `config ${SOURCE}: server.timeout: unknown key (did you mean "timeoutSeconds"?)`,
    );
  });

  it('suggests the key a typo meant at top level and in every nested object', () => {
    expect(rejection(withPatch({ rootdir: '/x' })).issues).toContainEqual({
      path: 'rootdir',
      message: 'unknown key (did you mean "rootDir"?)',
    });
    expect(rejection(withPatch({ poll: { intervalSecond: 5 } })).issues).toEqual([
      { path: 'poll.intervalSecond', message: 'unknown key (did you mean "intervalSeconds"?)' },
    ]);
  });

  it('rejects unknown keys inside hooks and metrics', () => {
    const error = rejection(
      withPatch({
        hooks: [{ match: 'a', run: ['x'], shell: true }],
        metrics: { textfile: '/m.prom', port: 9 },
      }),
    );
    expect(error.issues).toEqual([
      { path: 'hooks[0].shell', message: 'unknown key' },
      { path: 'metrics.port', message: 'unknown key' },
    ]);
  });

  it('rejects an apiKey put into the config file, without echoing it', () => {
    const error = rejection(withPatch({ server: { apiKey: 'sk_live_0123456789abcdef' } }));
    expect(error.message).toBe(`config ${SOURCE}: server.apiKey: unknown key (did you mean "apiKeyFile"?)`);
    expect(JSON.stringify(error.issues)).not.toContain('sk_live');
    expect(String(error.cause)).not.toContain('sk_live');
  });
});

describe('wrong types', () => {
  it.each([
    [{ server: { timeoutSeconds: '30' } }, 'server.timeoutSeconds: expected a number, got string'],
    [{ deviceId: 42 }, 'deviceId: expected a string, got number'],
    [{ server: 'https://x' }, 'server: expected an object, got string'],
    [{ retry: { maxAttempts: 2.5 } }, 'retry.maxAttempts: expected an integer, got a fractional number'],
    [{ hooks: { match: 'a' } }, 'hooks: expected an array, got object'],
    [
      { log: { level: 'verbose' } },
      'log.level: expected one of "fatal", "error", "warn", "info", "debug", "trace", "silent"',
    ],
    [{ drift: 'fix' }, 'drift: expected one of "restore", "report", "off"'],
    [{ rootDir: null }, 'rootDir: expected a string, got null'],
    [{ poll: { jitterRatio: true } }, 'poll.jitterRatio: expected a number, got boolean'],
    // What JSON.parse makes of 1e400 and -1e400: the message said "expected a number, got number".
    [{ poll: { intervalSeconds: Infinity } }, 'poll.intervalSeconds: number out of range (beyond ±1.8e308)'],
    [{ retry: { maxAttempts: -Infinity } }, 'retry.maxAttempts: number out of range (beyond ±1.8e308)'],
  ])('%j → %s', (patch, expected) => {
    expect(rejection(withPatch(patch)).message).toBe(`config ${SOURCE}: ${expected}`);
  });

  it('names every bad key in one message, in order', () => {
    const error = rejection(withPatch({ deviceId: '', server: { timeoutSeconds: 0 }, drift: 1 }));
    expect(error.message).toBe(
      `config ${SOURCE}: deviceId: must not be empty; server.timeoutSeconds: must be >= 1; ` +
        'drift: expected one of "restore", "report", "off"',
    );
  });

  it('never echoes a value, only its type', () => {
    const error = rejection(withPatch({ deviceId: 'my secret value', log: { level: 'hunter2hunter2' } }));
    expect(error.message).not.toContain('secret');
    expect(error.message).not.toContain('hunter2');
    expect(error.issues.map((issue) => issue.path)).toEqual(['deviceId', 'log.level']);
  });
});

describe('file modes', () => {
  it('parses octal strings of 3 or 4 digits', () => {
    const config = parseAgentConfig(withPatch({ files: { mode: '640', dirMode: '0750' } }), SOURCE);
    expect(config.files).toEqual({ mode: 0o640, dirMode: 0o750, rules: [] });
  });

  it('accepts a read-only file mode (the agent publishes by rename)', () => {
    expect(parseAgentConfig(withPatch({ files: { mode: '0444' } }), SOURCE).files.mode).toBe(0o444);
  });

  it.each([
    [{ mode: '0999' }, 'files.mode: must be 3 or 4 octal digits, like "0644"'],
    [{ mode: '64' }, 'files.mode: must be 3 or 4 octal digits, like "0644"'],
    [{ mode: '00644' }, 'files.mode: must be 3 or 4 octal digits, like "0644"'],
    [{ mode: 'rw-r--r--' }, 'files.mode: must be 3 or 4 octal digits, like "0644"'],
    [{ mode: 644 }, 'files.mode: expected an octal string like "0644", got number'],
    [{ mode: '4755' }, 'files.mode: must not set the setuid, setgid or sticky bit'],
    [{ dirMode: '1777' }, 'files.dirMode: must not set the setuid, setgid or sticky bit'],
    [{ mode: '0200' }, 'files.mode: must grant the owner read (0400)'],
    [{ dirMode: '0644' }, 'files.dirMode: must grant the owner read, write and search (0700)'],
    [{ mode: '0666' }, 'files.mode: must not be writable by others'],
    [{ dirMode: '0777' }, 'files.dirMode: must not be writable by others'],
  ])('%j → %s', (files, expected) => {
    expect(rejection(withPatch({ files })).message).toBe(`config ${SOURCE}: ${expected}`);
  });
});

describe('paths', () => {
  it.each([
    ['rootDir', 'srv/config-agent', 'must be an absolute path (starting with /)'],
    ['stateDir', './state', 'must be an absolute path (starting with /)'],
    ['stateDir', '/var/lib/../lib/x', "must be a canonical path (no '.', '..' or empty segments)"],
    ['rootDir', '/srv//x', "must be a canonical path (no '.', '..' or empty segments)"],
    ['rootDir', '/srv/./x', "must be a canonical path (no '.', '..' or empty segments)"],
    ['rootDir', '/', 'must not be /'],
    ['stateDir', '/', 'must not be /'],
    ['rootDir', '/srv/a\nb', 'must not contain control characters'],
    ['socketPath', 'agent.sock', 'must be an absolute path (starting with /)'],
    ['socketPath', `/run/${'s'.repeat(110)}.sock`, 'must be at most 107 bytes long'],
  ])('%s %j: %s', (key, value, problem) => {
    expect(rejection(withPatch({ [key]: value })).issues).toContainEqual({ path: key, message: problem });
  });

  it('names a relative apiKeyFile and metrics textfile', () => {
    const error = rejection(
      withPatch({ server: { apiKeyFile: 'api-key' }, metrics: { textfile: 'x.prom' } }),
    );
    expect(error.issues).toEqual([
      { path: 'server.apiKeyFile', message: 'must be an absolute path (starting with /)' },
      { path: 'metrics.textfile', message: 'must be an absolute path (starting with /)' },
    ]);
  });

  it('requires the .prom suffix node_exporter reads', () => {
    expect(rejection(withPatch({ metrics: { textfile: '/var/lib/m.txt' } })).message).toBe(
      `config ${SOURCE}: metrics.textfile: must end with .prom`,
    );
  });

  it('drops one trailing slash', () => {
    const config = parseAgentConfig(withPatch({ rootDir: '/srv/ca/', stateDir: '/var/lib/ca/' }), SOURCE);
    expect([config.rootDir, config.stateDir]).toEqual(['/srv/ca', '/var/lib/ca']);
  });

  it.each([
    ['/srv/a', '/srv/a'],
    ['/srv/a', '/srv/a/state'],
    ['/srv/a/files', '/srv/a'],
    ['/srv/a/', '/srv/a'],
  ])('rootDir %s and stateDir %s overlap', (rootDir, stateDir) => {
    expect(rejection(withPatch({ rootDir, stateDir })).issues).toEqual([
      {
        path: 'stateDir',
        message: 'rootDir and stateDir must be different directories, neither inside the other',
      },
    ]);
  });

  it('accepts sibling directories sharing a name prefix', () => {
    expect(parseAgentConfig(withPatch({ rootDir: '/srv/a', stateDir: '/srv/ab' }), SOURCE).stateDir).toBe(
      '/srv/ab',
    );
  });

  it('keeps the agent own files out of rootDir, where server-sent files land', () => {
    const error = rejection(
      withPatch({
        server: { apiKeyFile: '/srv/config-agent/api-key' },
        socketPath: '/srv/config-agent/s.sock',
        metrics: { textfile: '/srv/config-agent/m.prom' },
      }),
    );
    expect(error.issues).toEqual([
      { path: 'server.apiKeyFile', message: 'must not be inside rootDir' },
      { path: 'socketPath', message: 'must not be inside rootDir' },
      { path: 'metrics.textfile', message: 'must not be inside rootDir' },
    ]);
  });

  it('reports cross-key problems together with unrelated bad keys', () => {
    const error = rejection(withPatch({ stateDir: '/srv/config-agent', drift: 'nope' }));
    expect(error.issues.map((issue) => issue.path)).toEqual(['drift', 'stateDir']);
  });
});

describe('server', () => {
  it('strips trailing slashes from baseUrl and keeps a path prefix', () => {
    const config = parseAgentConfig(withPatch({ server: { baseUrl: 'https://h.example/api/' } }), SOURCE);
    expect(config.server.baseUrl).toBe('https://h.example/api');
  });

  it.each(['http://127.0.0.1:8080', 'http://localhost:1', 'http://[::1]:9'])(
    'allows plain http to %s',
    (baseUrl) => {
      expect(parseAgentConfig(withPatch({ server: { baseUrl } }), SOURCE).server.baseUrl).toBe(baseUrl);
    },
  );

  it.each([
    ['not a url', 'must be an absolute http(s) URL'],
    ['/v1', 'must be an absolute http(s) URL'],
    ['ftp://h.example', 'must use https (got ftp)'],
    ['https://h.example/?token=1', 'must not contain a query or a fragment'],
    ['https://h.example/#x', 'must not contain a query or a fragment'],
    ['http://h.example', 'must use https (http is allowed only for a loopback host)'],
    // Port 0 names no service: every request failed "unreachable" (exit 3, retried for good) instead of 78.
    ['https://h.example:0', 'must not use port 0 (no service listens there)'],
    ['http://127.0.0.1:0/api', 'must not use port 0 (no service listens there)'],
  ])('rejects baseUrl %j', (baseUrl, problem) => {
    expect(rejection(withPatch({ server: { baseUrl } })).issues).toEqual([
      { path: 'server.baseUrl', message: problem },
    ]);
  });

  it('rejects credentials in baseUrl without echoing them', () => {
    const error = rejection(withPatch({ server: { baseUrl: 'https://user:pa55word@h.example' } }));
    expect(error.message).toBe(
      `config ${SOURCE}: server.baseUrl: must not contain credentials (the API key has its own sources)`,
    );
    expect(error.message).not.toContain('pa55word');
  });

  it.each([
    [{ timeoutSeconds: 0 }, 'server.timeoutSeconds: must be >= 1'],
    [{ timeoutSeconds: 601 }, 'server.timeoutSeconds: must be <= 600'],
    [{ maxResponseBytes: 65_535 }, 'server.maxResponseBytes: must be >= 65536'],
    [{ maxResponseBytes: 1_073_741_825 }, 'server.maxResponseBytes: must be <= 1073741824'],
    [
      { maxResponseBytes: 1.5e6 + 0.5 },
      'server.maxResponseBytes: expected an integer, got a fractional number',
    ],
    [
      { apiVersion: 'v1/../v2' },
      'server.apiVersion: must be one path segment of letters, digits, ".", "_" or "-" (like "v1")',
    ],
    [
      { apiVersion: '' },
      'server.apiVersion: must be one path segment of letters, digits, ".", "_" or "-" (like "v1")',
    ],
  ])('%j → %s', (server, expected) => {
    expect(rejection(withPatch({ server })).message).toBe(`config ${SOURCE}: ${expected}`);
  });

  it('accepts the timeout bounds', () => {
    expect(
      parseAgentConfig(withPatch({ server: { timeoutSeconds: 600 } }), SOURCE).server.timeoutSeconds,
    ).toBe(600);
    expect(parseAgentConfig(withPatch({ server: { timeoutSeconds: 1 } }), SOURCE).server.timeoutSeconds).toBe(
      1,
    );
  });
});

describe('deviceId', () => {
  it.each([
    ['', 'must not be empty'],
    ['dvc 123', 'must not contain whitespace or control characters'],
    ['dvc_123\n', 'must not contain whitespace or control characters'],
    ['dvc\u0007', 'must not contain whitespace or control characters'],
    ['d'.repeat(257), 'must be at most 256 characters'],
  ])('%j: %s', (deviceId, problem) => {
    expect(rejection(withPatch({ deviceId })).issues).toEqual([{ path: 'deviceId', message: problem }]);
  });
});

describe('retry and poll bounds', () => {
  it.each([
    [{ retry: { maxAttempts: 0 } }, 'retry.maxAttempts: must be >= 1'],
    [{ retry: { maxAttempts: 1001 } }, 'retry.maxAttempts: must be <= 1000'],
    [{ retry: { baseDelaySeconds: 0 } }, 'retry.baseDelaySeconds: must be > 0'],
    [{ retry: { maxDelaySeconds: -1 } }, 'retry.maxDelaySeconds: must be > 0'],
    [
      { retry: { baseDelaySeconds: 60, maxDelaySeconds: 30 } },
      'retry: baseDelaySeconds must not exceed maxDelaySeconds',
    ],
    [{ retry: { baseDelaySeconds: 4000 } }, 'retry: baseDelaySeconds must not exceed maxDelaySeconds'],
    [{ poll: { intervalSeconds: 0.5 } }, 'poll.intervalSeconds: must be >= 1'],
    [{ poll: { jitterRatio: -0.1 } }, 'poll.jitterRatio: must be >= 0'],
    [{ poll: { jitterRatio: 1.5 } }, 'poll.jitterRatio: must be <= 1'],
    [{ poll: { intervalSeconds: 900 } }, 'poll: fullResyncSeconds must not be less than intervalSeconds'],
    [
      { poll: { intervalSeconds: 60, fullResyncSeconds: 30 } },
      'poll: fullResyncSeconds must not be less than intervalSeconds',
    ],
  ])('%j → %s', (patch, expected) => {
    expect(rejection(withPatch(patch)).message).toBe(`config ${SOURCE}: ${expected}`);
  });

  it('accepts fractional delays, so tests can run fast', () => {
    const config = parseAgentConfig(
      withPatch({ retry: { baseDelaySeconds: 0.01, maxDelaySeconds: 0.1 } }),
      SOURCE,
    );
    expect(config.retry).toEqual({ maxAttempts: 10, baseDelaySeconds: 0.01, maxDelaySeconds: 0.1 });
  });

  it('accepts the edges: jitter 0 and 1, fullResync equal to the interval', () => {
    const config = parseAgentConfig(
      withPatch({ poll: { intervalSeconds: 1, jitterRatio: 1, fullResyncSeconds: 1 } }),
      SOURCE,
    );
    expect(config.poll).toEqual({ intervalSeconds: 1, jitterRatio: 1, fullResyncSeconds: 1 });
    expect(parseAgentConfig(withPatch({ poll: { jitterRatio: 0 } }), SOURCE).poll.jitterRatio).toBe(0);
  });
});

describe('hooks', () => {
  it('accepts a full hook list', () => {
    const hooks = [
      { match: 'nginx/**', run: ['systemctl', 'reload', 'nginx'], timeoutSeconds: 3600 },
      { match: '*.conf', run: ['/usr/local/bin/reload'], timeoutSeconds: 1 },
    ];
    expect(parseAgentConfig(withPatch({ hooks }), SOURCE).hooks).toEqual(hooks);
  });

  it.each([
    [
      { match: 'a', run: [] },
      'hooks[0].run: must be a non-empty argv, like ["systemctl", "reload", "nginx"]',
    ],
    [{ match: 'a', run: 'systemctl reload nginx' }, 'hooks[0].run: expected an array, got string'],
    [{ match: 'a', run: [''] }, 'hooks[0].run: the program (first element) must not be empty'],
    [{ match: 'a', run: ['x', 1] }, 'hooks[0].run[1]: expected a string, got number'],
    [{ match: 'a', run: ['x\u0000y'] }, 'hooks[0].run[0]: must not contain a NUL character'],
    [{ run: ['x'] }, 'hooks[0].match: required'],
    [{ match: '', run: ['x'] }, 'hooks[0].match: must not be empty'],
    [
      { match: '/etc/nginx/**', run: ['x'] },
      'hooks[0].match: must be a glob relative to rootDir (no leading /)',
    ],
    [{ match: '../x/*', run: ['x'] }, "hooks[0].match: must not contain '..'"],
    [
      { match: '+(a|b)/*', run: ['x'] },
      'hooks[0].match: unsupported glob: "(" is not supported (no negation, escapes, extglobs or alternation with |; use {a,b})',
    ],
    [
      { match: 'a**b', run: ['x'] },
      'hooks[0].match: unsupported glob: ** must be a whole path segment (a/**/b); use * within one',
    ],
    [{ match: 'a', run: ['x'], timeoutSeconds: 0 }, 'hooks[0].timeoutSeconds: must be >= 1'],
    [{ match: 'a', run: ['x'], timeoutSeconds: 3601 }, 'hooks[0].timeoutSeconds: must be <= 3600'],
  ])('%j → %s', (hook, expected) => {
    expect(rejection(withPatch({ hooks: [hook] })).message).toBe(`config ${SOURCE}: ${expected}`);
  });

  it('names the index of the bad hook', () => {
    const hooks = [
      { match: 'a', run: ['x'] },
      { match: 'b', run: [] },
    ];
    expect(rejection(withPatch({ hooks })).issues.map((issue) => issue.path)).toEqual(['hooks[1].run']);
  });
});
