// Which way requests to the service go: direct, through server.proxy, or through HTTPS_PROXY/HTTP_PROXY (NO_PROXY honoured).
/** Where the proxy settings come from: the config's `server.proxy` and the process environment. */
export interface ProxySettings {
  /** `server.proxy`; wins over the environment. */
  url?: string;
  env: NodeJS.ProcessEnv;
}

export type ProxyChoice =
  | { kind: 'direct' }
  | { kind: 'configured'; url: string }
  | {
      kind: 'environment';
      httpsProxy: string | undefined;
      httpProxy: string | undefined;
      noProxy: string | undefined;
    };

/** The lowercase form first, as curl and undici read them; empty values count as unset. */
function envValue(env: NodeJS.ProcessEnv, name: string): string | undefined {
  const value = env[name.toLowerCase()] ?? env[name.toUpperCase()];
  return value === undefined || value.trim() === '' ? undefined : value.trim();
}

/**
 * An http:// base URL (allowed only for loopback) never goes through a proxy: the key would cross it in clear,
 * and a loopback service is not behind one. An https:// one goes through a CONNECT tunnel, so the proxy sees
 * the host and port, never the key.
 */
export function chooseProxy(baseUrl: string, settings: ProxySettings | undefined): ProxyChoice {
  if (settings === undefined || new URL(baseUrl).protocol !== 'https:') return { kind: 'direct' };
  if (settings.url !== undefined) return { kind: 'configured', url: settings.url };
  const httpsProxy = envValue(settings.env, 'https_proxy');
  const httpProxy = envValue(settings.env, 'http_proxy');
  if (httpsProxy === undefined && httpProxy === undefined) return { kind: 'direct' };
  return { kind: 'environment', httpsProxy, httpProxy, noProxy: envValue(settings.env, 'no_proxy') };
}

/**
 * A variable naming a proxy, as curl, wget, undici and pip read them: `https_proxy`, `HTTP_PROXY`, `all_proxy`,
 * `ftp_proxy`, ... in either case. `no_proxy` names hosts, not a proxy.
 */
export function isProxyVariable(name: string): boolean {
  return /_proxy$/i.test(name) && name.toLowerCase() !== 'no_proxy';
}

/** A URL's parts around its userinfo: scheme (with `//`, or none: curl takes `user:pw@host:3128`), authority, rest. */
const URL_PARTS = /^([A-Za-z][A-Za-z0-9+.-]*:\/\/)?([^/?#]*)([\s\S]*)$/;

/**
 * A proxy variable's value split at its userinfo (`user:password@`, the proxy's credentials): the value without
 * it, and the userinfo as written (percent-encoded or not); no userinfo when it holds none.
 */
export function splitProxyCredentials(value: string): { value: string; userinfo?: string } {
  const [, scheme = '', authority = '', rest = ''] = URL_PARTS.exec(value) ?? [];
  const at = authority.lastIndexOf('@');
  if (at === -1) return { value };
  return { value: `${scheme}${authority.slice(at + 1)}${rest}`, userinfo: authority.slice(0, at) };
}

function decoded(text: string): string {
  try {
    return decodeURIComponent(text);
  } catch {
    return text;
  }
}

/**
 * Every spelling of the proxy credentials in `env`'s proxy variables that an output may carry (for the log's
 * secret registry, lib/secrets.ts): the userinfo as written and decoded, the password alone both ways, and the
 * `Basic` token a client sends for it (`Proxy-Authorization`, which `curl -v` prints). A user name alone is not
 * secret.
 */
export function proxyCredentialSecrets(env: NodeJS.ProcessEnv): string[] {
  const found = new Set<string>();
  for (const [name, value] of Object.entries(env)) {
    if (value === undefined || !isProxyVariable(name)) continue;
    const { userinfo } = splitProxyCredentials(value.trim());
    if (userinfo === undefined || userinfo === '') continue;
    const colon = userinfo.indexOf(':');
    const password = colon === -1 ? '' : userinfo.slice(colon + 1);
    for (const form of [userinfo, decoded(userinfo)]) {
      found.add(form);
      found.add(Buffer.from(form).toString('base64'));
    }
    if (password !== '') {
      found.add(password);
      found.add(decoded(password));
    }
  }
  return [...found];
}
