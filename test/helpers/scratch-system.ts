// Scratch systems for init's and doctor's unit-sandbox tests: etc/passwd and group, a drop-in dir, hidden dirs.
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { Readable } from 'node:stream';
import { runDoctor } from '../../src/cli/doctor.js';
import type { InitEnvironment } from '../../src/cli/init.js';
import type { HiddenDir } from '../../src/cli/unit-sandbox.js';
import { textSink } from './text-sink.js';

export interface ScratchSystem {
  /** The system's `/`. */
  dir: string;
  /** init's environment: the system's passwd, group and drop-in dir, the API key on stdin, uid 0, `hides`. */
  env: InitEnvironment;
  /** What the unit hides on this system (env.unitHides). */
  hides: HiddenDir[];
  /** etc/config-agent/config.json (not written). */
  configPath: string;
}

export interface ScratchOptions {
  /** Made under `<dir>/hidden`, which `hides` names as hidden (it stands for /home or /tmp). */
  hiddenSubdir: string;
  /** The directories the unit hides, given the system's dir. */
  hides: (dir: string) => HiddenDir[];
  /** The API key init reads from stdin. */
  apiKey: string;
}

/** Scratch systems made by name under one temp dir (made now); `remove` removes them all. */
export function scratchSystems(
  prefix: string,
  options: ScratchOptions,
): { make(name: string): ScratchSystem; remove(): void } {
  const base = mkdtempSync(path.join(os.tmpdir(), `config-agent-${prefix}-`));
  return {
    make: (name) => scratchSystem(path.join(base, name), options),
    remove: () => rmSync(base, { recursive: true, force: true }),
  };
}

/** A scratch system at `dir`: the agent's user config-agent (4241:4242) in its passwd and group. */
export function scratchSystem(dir: string, options: ScratchOptions): ScratchSystem {
  mkdirSync(path.join(dir, 'etc'), { recursive: true });
  mkdirSync(path.join(dir, 'hidden', options.hiddenSubdir), { recursive: true });
  writeFileSync(path.join(dir, 'etc/passwd'), 'root:x:0:0::/root:/bin/sh\nconfig-agent:x:4241:4242::/:/x\n');
  writeFileSync(path.join(dir, 'etc/group'), 'root:x:0:\nconfig-agent:x:4242:\n');
  const hides = options.hides(dir);
  const env: InitEnvironment = {
    stdin: Readable.from([`${options.apiKey}\n`]),
    stdinIsTty: false,
    groupFile: path.join(dir, 'etc/group'),
    passwdFile: path.join(dir, 'etc/passwd'),
    dropInDir: path.join(dir, 'etc/systemd/system/config-agent.service.d'),
    checkTimeoutMs: 2_000,
    // Refused before init writes or chowns anything, so no root is needed.
    uid: 0,
    unitHides: hides,
  };
  return { dir, env, hides, configPath: path.join(dir, 'etc/config-agent/config.json') };
}

/** Writes the system's config.json (0640): dvc_1, a service on a closed port, rootDir, `extra` on top. */
export function writeScratchConfig(
  sys: ScratchSystem,
  rootDir: string,
  extra: Record<string, unknown> = {},
): void {
  mkdirSync(path.dirname(sys.configPath), { recursive: true });
  writeFileSync(
    sys.configPath,
    JSON.stringify({
      deviceId: 'dvc_1',
      server: { baseUrl: 'http://127.0.0.1:9', apiKeyFile: path.join(sys.dir, 'etc/key') },
      rootDir,
      stateDir: path.join(sys.dir, 'state'),
      ...extra,
    }),
    { mode: 0o640 },
  );
}

/**
 * doctor on the system's config.json: with `readWritePaths`, a loaded, running unit under ProtectSystem=strict
 * whose ReadWritePaths= is that; without, no systemctl (status 127). Its exit code and stdout.
 */
export async function scratchDoctor(
  sys: ScratchSystem,
  options: {
    unitHides: readonly HiddenDir[];
    readWritePaths?: string;
    /** The unit's StateDirectory= (with readWritePaths): named below the scratch system's var/lib. */
    stateDirectory?: string;
  },
): Promise<{ code: number; text: string }> {
  const out = textSink();
  const { readWritePaths } = options;
  const code = await runDoctor(
    { configPath: sys.configPath },
    { stdout: out.stream, stderr: textSink().stream, env: {}, isTty: false },
    {
      groupFile: sys.env.groupFile,
      passwdFile: sys.env.passwdFile,
      checkTimeoutMs: 2_000,
      unitHides: options.unitHides,
      systemctl: async (args) =>
        readWritePaths === undefined
          ? { status: 127, stdout: '' }
          : {
              status: 0,
              stdout: args.some((arg) => arg.includes('ReadWritePaths'))
                ? `LoadState=loaded\nProtectSystem=strict\nReadWritePaths=${readWritePaths}\n` +
                  `StateDirectory=${options.stateDirectory ?? ''}\nRuntimeDirectory=config-agent\n`
                : 'LoadState=loaded\nActiveState=active\nSubState=running\nUnitFileState=enabled\n',
            },
      now: () => 0,
      unit: 'config-agent.service',
      unitDirectoryBases: {
        StateDirectory: path.join(sys.dir, 'var/lib'),
        CacheDirectory: path.join(sys.dir, 'var/cache'),
        LogsDirectory: path.join(sys.dir, 'var/log'),
        RuntimeDirectory: path.join(sys.dir, 'run'),
      },
    },
  );
  return { code, text: out.text() };
}
