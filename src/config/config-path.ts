// Where the configuration file is: --config > CONFIG_AGENT_CONFIG > the default. No dependencies, so the code
// cache's loader (src/cli/code-cache.ts) resolves it the same way before the agent's modules load.

export const DEFAULT_CONFIG_PATH = '/etc/config-agent/config.json';
export const ENV_CONFIG_PATH = 'CONFIG_AGENT_CONFIG';

/** flag > CONFIG_AGENT_CONFIG > /etc/config-agent/config.json; empty values count as unset. */
export function resolveConfigPath(flag: string | undefined, env: NodeJS.ProcessEnv): string {
  if (flag !== undefined && flag !== '') return flag;
  const fromEnv = env[ENV_CONFIG_PATH];
  if (fromEnv !== undefined && fromEnv !== '') return fromEnv;
  return DEFAULT_CONFIG_PATH;
}
