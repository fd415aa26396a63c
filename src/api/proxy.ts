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
