// doctor's tests' scratch configs: config.json and its key written 0600 in a dir, doctor run on it, output kept.
import { writeFileSync } from 'node:fs';
import path from 'node:path';
import { type DoctorEnvironment, runDoctor } from '../../src/cli/doctor.js';
import { textSink } from './text-sink.js';

export interface DoctorConfigOptions {
  deviceId: string;
  /** The API key file's text (`<dir>/api-key`). */
  key: string;
}

/**
 * Writes `<dir>/api-key` and `<dir>/config.json` (0600 both): `deviceId`, a service on the discard port (nothing
 * listens: the service check fails at once, which these tests do not look at) with a 1 s timeout, the socket in
 * `dir`, and `fields` (rootDir, stateDir, hooks...). Returns the config's path.
 */
export function writeDoctorConfig(
  dir: string,
  options: DoctorConfigOptions,
  fields: Record<string, unknown>,
): string {
  const keyPath = path.join(dir, 'api-key');
  writeFileSync(keyPath, options.key, { mode: 0o600 });
  const configPath = path.join(dir, 'config.json');
  writeFileSync(
    configPath,
    JSON.stringify({
      deviceId: options.deviceId,
      server: { baseUrl: 'http://127.0.0.1:9', apiKeyFile: keyPath, timeoutSeconds: 1 },
      socketPath: path.join(dir, 'agent.sock'),
      ...fields,
    }),
    { mode: 0o600 },
  );
  return configPath;
}

/**
 * doctor's environment on a scratch system in `dir`: no passwd or group there (unless `overrides` names them), no
 * systemctl (status 127), 1 s checks, the real clock; `overrides` on top.
 */
export function doctorEnvironment(
  dir: string,
  overrides: Partial<DoctorEnvironment> = {},
): DoctorEnvironment {
  return {
    groupFile: path.join(dir, 'no-group'),
    passwdFile: path.join(dir, 'no-passwd'),
    checkTimeoutMs: 1_000,
    systemctl: async () => ({ status: 127, stdout: '' }),
    now: () => Date.now(),
    unit: 'config-agent.service',
    ...overrides,
  };
}

/** doctor on `configPath` in `env`: its exit code and stdout (stderr dropped). */
export async function doctorOutput(
  configPath: string,
  env: DoctorEnvironment,
): Promise<{ code: number; out: string }> {
  const stdout = textSink();
  const code = await runDoctor(
    { configPath },
    { stdout: stdout.stream, stderr: textSink().stream, env: {}, isTty: false },
    env,
  );
  return { code, out: stdout.text() };
}
