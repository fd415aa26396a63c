// The proxy variables' credentials: split off for a hook's environment, and every spelling the log must scrub.
import { describe, expect, it } from 'vitest';
import { createSecretRegistry, REDACTED } from '../lib/secrets.js';
import { isProxyVariable, proxyCredentialSecrets, splitProxyCredentials } from './proxy.js';

describe('splitProxyCredentials', () => {
  it.each([
    ['http://user:pw%40x@proxy:3128', 'http://proxy:3128', 'user:pw%40x'],
    ['https://tok@proxy.corp:443/path?q=1', 'https://proxy.corp:443/path?q=1', 'tok'],
    ['user:secret@proxy:3128', 'proxy:3128', 'user:secret'],
    ['http://a:b@c@proxy:8080', 'http://proxy:8080', 'a:b@c'],
    ['http://proxy:3128', 'http://proxy:3128', undefined],
    ['http://proxy:3128/a@b', 'http://proxy:3128/a@b', undefined],
    ['', '', undefined],
  ])('%s', (value, without, userinfo) => {
    expect(splitProxyCredentials(value)).toEqual({
      value: without,
      ...(userinfo === undefined ? {} : { userinfo }),
    });
  });
});

describe('isProxyVariable', () => {
  it('takes every *_proxy name in either case, never no_proxy', () => {
    expect(
      ['HTTPS_PROXY', 'http_proxy', 'ALL_PROXY', 'ftp_proxy', 'NO_PROXY', 'no_proxy', 'PROXY', 'PATH'].filter(
        isProxyVariable,
      ),
    ).toEqual(['HTTPS_PROXY', 'http_proxy', 'ALL_PROXY', 'ftp_proxy']);
  });
});

describe('proxyCredentialSecrets', () => {
  it('scrubs the credentials as written, decoded, the password alone and the Basic token, nothing else', () => {
    const secrets = createSecretRegistry();
    for (const secret of proxyCredentialSecrets({
      HTTPS_PROXY: ' http://agent:p%40ss-w0rd@proxy.corp:3128 ',
      http_proxy: 'http://proxy.corp:3128',
      NO_PROXY: 'user:notasecret@x',
      PATH: '/usr/bin',
    })) {
      secrets.add(secret);
    }
    const basic = Buffer.from('agent:p@ss-w0rd').toString('base64');
    const printed = [
      'Uses proxy env variable https_proxy == http://agent:p%40ss-w0rd@proxy.corp:3128',
      `> Proxy-Authorization: Basic ${basic}`,
      'password p@ss-w0rd, as written p%40ss-w0rd, pair agent:p@ss-w0rd',
      'no_proxy user:notasecret@x',
    ].join('\n');
    const scrubbed = secrets.scrub(printed);
    expect(scrubbed).toBe(
      [
        `Uses proxy env variable https_proxy == http://${REDACTED}@proxy.corp:3128`,
        `> Proxy-Authorization: Basic ${REDACTED}`,
        `password ${REDACTED}, as written ${REDACTED}, pair ${REDACTED}`,
        'no_proxy user:notasecret@x',
      ].join('\n'),
    );
  });

  it('finds none without a userinfo', () => {
    expect(proxyCredentialSecrets({ HTTPS_PROXY: 'http://proxy:3128', https_proxy: '' })).toEqual([]);
  });
});
