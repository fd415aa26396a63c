// adv19: a proxy the agent would use but no request can (malformed HTTPS_PROXY, port 0) is refused at start, exit 78.
import { describe, expect, it } from 'vitest';
import { exitCodeForStartupError } from '../cli/exit-codes.js';
import { ConfigError } from './errors.js';
import { assertEnvironmentProxyUsable, parseAgentConfig } from './load.js';

function config(server: Record<string, unknown> = {}) {
  return parseAgentConfig(
    {
      deviceId: 'dvc_1',
      server: { baseUrl: 'https://configs.example.com', ...server },
      rootDir: '/srv/config-agent',
      stateDir: '/var/lib/config-agent',
    },
    'test.json',
  );
}

function refusal(env: NodeJS.ProcessEnv, server: Record<string, unknown> = {}): ConfigError {
  try {
    assertEnvironmentProxyUsable(config(server), env);
  } catch (error) {
    expect(error).toBeInstanceOf(ConfigError);
    return error as ConfigError;
  }
  throw new Error('not refused');
}

describe('the environment proxy, when requests would go through it', () => {
  // Each of these failed every request (ERR_INVALID_URL, ECONNREFUSED) as a network error: exit 3, retried for ever.
  it.each([
    ['HTTPS_PROXY', '127.0.0.1:3128', 'with its scheme'],
    ['HTTPS_PROXY', 'not a url', 'must be an absolute URL'],
    ['https_proxy', 'http://[::1', 'must be an absolute URL'],
    ['HTTP_PROXY', 'http://proxy.example.com:0', 'port 0'],
    ['HTTPS_PROXY', 'ftp://proxy.example.com:21', 'http or https'],
  ])('%s=%s is refused naming the variable, not its value', (name, value, problem) => {
    const error = refusal({ [name]: value });
    expect(error.message).toContain(`${name}: `);
    expect(error.message).toContain(problem);
    expect(error.message).not.toContain(value);
    expect(exitCodeForStartupError(error)).toBe(78);
  });

  it('a password in a refused one is not shown', () => {
    const error = refusal({ HTTPS_PROXY: 'http://user:pw-SEKRET@proxy.example.com:0' });
    expect(error.message).not.toContain('SEKRET');
  });

  it('is not judged when unused: an http loopback baseUrl, or server.proxy set (which wins)', () => {
    expect(() =>
      assertEnvironmentProxyUsable(
        parseAgentConfig(
          {
            deviceId: 'dvc_1',
            server: { baseUrl: 'http://127.0.0.1:8080' },
            rootDir: '/srv/config-agent',
            stateDir: '/var/lib/config-agent',
          },
          'test.json',
        ),
        { HTTPS_PROXY: 'not a url' },
      ),
    ).not.toThrow();
    expect(() =>
      assertEnvironmentProxyUsable(config({ proxy: 'http://proxy.example.com:3128' }), {
        HTTPS_PROXY: 'not a url',
      }),
    ).not.toThrow();
  });

  it('usable ones pass: with a port, without, https, with credentials', () => {
    for (const value of [
      'http://proxy.example.com:3128',
      'http://proxy',
      'https://p.example.com',
      'http://u:p@p:8',
    ]) {
      expect(() =>
        assertEnvironmentProxyUsable(config(), { HTTPS_PROXY: value, HTTP_PROXY: value }),
      ).not.toThrow();
    }
  });

  it('server.proxy with port 0 is refused by the schema, as baseUrl is', () => {
    expect(() => config({ proxy: 'http://proxy.example.com:0' })).toThrow(
      /server\.proxy: must not use port 0/,
    );
  });
});
