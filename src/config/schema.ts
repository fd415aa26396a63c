// The agent's own configuration file: one strict zod schema holding every default, bound and cross-key rule.
import * as z from 'zod';
import type { LogLevel } from '../lib/logger.js';
import { globSyntaxProblem } from './glob-match.js';

export type DriftPolicy = 'restore' | 'report' | 'off';

export interface HookConfig {
  /** Glob (glob-match.ts: picomatch's syntax in part) over the file's path relative to rootDir. */
  match: string;
  /** argv, run without a shell. */
  run: [string, ...string[]];
  timeoutSeconds: number;
}

/** `files.rules[]`: per-path mode and group; the first rule whose glob matches decides (see files/rules.ts). */
export interface FileRule {
  /** Glob (glob-match.ts, as for hooks) over the file's path relative to rootDir. */
  match: string;
  /** Permission bits; absent: files.mode. */
  mode?: number;
  /** Group name or numeric gid; absent: the agent's own group. Must be one the agent's user belongs to. */
  group?: string;
}

export interface AgentConfig {
  deviceId: string;
  /** baseUrl carries no trailing slash; requests go to `${baseUrl}/${apiVersion}/...`. */
  server: {
    baseUrl: string;
    apiVersion: string;
    apiKeyFile: string;
    timeoutSeconds: number;
    /** Cap of one response body; a list page over it is asked again in smaller pages. */
    maxResponseBytes: number;
    /** HTTP(S) proxy for an https baseUrl; absent: HTTPS_PROXY/HTTP_PROXY/NO_PROXY, else direct. */
    proxy?: string;
  };
  /** Absolute, canonical, no trailing slash. */
  rootDir: string;
  stateDir: string;
  /** Permission bits, parsed from octal strings ("0644"). */
  files: { mode: number; dirMode: number; rules: FileRule[] };
  retry: { maxAttempts: number; baseDelaySeconds: number; maxDelaySeconds: number };
  log: { level: LogLevel };
  poll: { intervalSeconds: number; jitterRatio: number; fullResyncSeconds: number };
  drift: DriftPolicy;
  hooks: HookConfig[];
  socketPath: string;
  /** Absent: no metrics file is written. */
  metrics: { textfile?: string };
}

export { DEFAULT_CONFIG_PATH } from './config-path.js';

/** Every default of the issues, in one place; the schema below and the docs use these values. */
export const CONFIG_DEFAULTS = {
  server: {
    apiVersion: 'v1',
    apiKeyFile: '/etc/config-agent/api-key',
    timeoutSeconds: 30,
    maxResponseBytes: 32 * 1024 * 1024,
  },
  files: { mode: '0644', dirMode: '0755', rules: [] },
  retry: { maxAttempts: 10, baseDelaySeconds: 15, maxDelaySeconds: 3600 },
  log: { level: 'info' },
  poll: { intervalSeconds: 30, jitterRatio: 0.2, fullResyncSeconds: 600 },
  drift: 'restore',
  hooks: [],
  socketPath: '/run/config-agent/agent.sock',
  metrics: {},
  hookTimeoutSeconds: 30,
} as const;

/** Bounds shared by the schema and docs/configuration.md. */
const CONFIG_BOUNDS = {
  deviceIdMaxLength: 256,
  timeoutSeconds: { min: 1, max: 600 },
  /** 64 KiB holds a page of one ordinary instance; 1 GiB is more than a device should ever hold at once. */
  maxResponseBytes: { min: 64 * 1024, max: 1024 * 1024 * 1024 },
  maxAttempts: { min: 1, max: 1000 },
  /** setTimeout overflows past ~24.8 days; these stay far below. */
  maxDelaySeconds: 86_400,
  intervalSeconds: { min: 1, max: 86_400 },
  fullResyncSecondsMax: 604_800,
  hookTimeoutSeconds: { min: 1, max: 3600 },
  maxHooks: 100,
  maxFileRules: 100,
  pathMaxBytes: 4095,
  /** sun_path is 108 bytes including the terminating NUL. */
  socketPathMaxBytes: 107,
} as const;

// biome-ignore lint/suspicious/noControlCharactersInRegex: rejecting control characters is the point
const CONTROL_CHARS = /[\u0000-\u001f\u007f-\u009f]/;
const DEVICE_ID = /^[^\s\p{Cc}]*$/u;
const API_VERSION = /^[A-Za-z0-9][A-Za-z0-9._-]{0,31}$/;
const OCTAL_MODE = /^[0-7]{3,4}$/;
const LOOPBACK_HOSTS = new Set(['localhost', '[::1]']);

interface PathRules {
  maxBytes?: number;
  suffix?: string;
}

function stripTrailingSlash(value: string): string {
  return value.length > 1 && value.endsWith('/') ? value.slice(0, -1) : value;
}

/** What is wrong with an absolute path, if anything. Canonical only: we reject rather than repair (FIELD-NOTES). */
function pathProblem(value: string, rules: PathRules = {}): string | undefined {
  const trimmed = stripTrailingSlash(value);
  const maxBytes = rules.maxBytes ?? CONFIG_BOUNDS.pathMaxBytes;
  if (!value.startsWith('/')) return 'must be an absolute path (starting with /)';
  if (CONTROL_CHARS.test(value)) return 'must not contain control characters';
  if (
    trimmed !== '/' &&
    trimmed
      .slice(1)
      .split('/')
      .some((s) => s === '' || s === '.' || s === '..')
  ) {
    return "must be a canonical path (no '.', '..' or empty segments)";
  }
  if (Buffer.byteLength(trimmed) > maxBytes) return `must be at most ${maxBytes} bytes long`;
  if (rules.suffix !== undefined && !trimmed.endsWith(rules.suffix)) return `must end with ${rules.suffix}`;
  return undefined;
}

function absolutePath(rules: PathRules = {}) {
  return z
    .string()
    .superRefine((value, ctx) => {
      const problem = pathProblem(value, rules);
      if (problem !== undefined) ctx.addIssue({ code: 'custom', message: problem });
    })
    .transform(stripTrailingSlash);
}

function isLoopback(hostname: string): boolean {
  return LOOPBACK_HOSTS.has(hostname) || /^127\.\d{1,3}\.\d{1,3}\.\d{1,3}$/.test(hostname);
}

const BaseUrl = z
  .string()
  .superRefine((value, ctx) => {
    let url: URL;
    try {
      url = new URL(value);
    } catch {
      ctx.addIssue({ code: 'custom', message: 'must be an absolute http(s) URL' });
      return;
    }
    if (url.protocol !== 'https:' && url.protocol !== 'http:') {
      ctx.addIssue({ code: 'custom', message: `must use https (got ${url.protocol.slice(0, -1)})` });
    } else if (url.username !== '' || url.password !== '') {
      // The URL ends up in logs and error messages; credentials there would leak.
      ctx.addIssue({
        code: 'custom',
        message: 'must not contain credentials (the API key has its own sources)',
      });
    } else if (value.includes('?') || value.includes('#')) {
      ctx.addIssue({ code: 'custom', message: 'must not contain a query or a fragment' });
    } else if (url.port === '0') {
      // Nothing can answer there: the agent would retry an "unreachable" service for good (exit 3), not exit 78.
      ctx.addIssue({ code: 'custom', message: 'must not use port 0 (no service listens there)' });
    } else if (url.protocol === 'http:' && !isLoopback(url.hostname)) {
      // The key travels in a header: plain http is only acceptable when it never leaves the machine.
      ctx.addIssue({ code: 'custom', message: 'must use https (http is allowed only for a loopback host)' });
    }
  })
  .transform((value) => value.replace(/\/+$/, ''));

function octalMode(kind: 'file' | 'dir') {
  const ownerBits = kind === 'file' ? 0o400 : 0o700;
  const ownerText = kind === 'file' ? 'read (0400)' : 'read, write and search (0700)';
  return z
    .string({
      error: (iss) =>
        iss.input === undefined
          ? undefined
          : `expected an octal string like "0644", got ${describeType(iss.input)}`,
    })
    .superRefine((value, ctx) => {
      if (!OCTAL_MODE.test(value)) {
        ctx.addIssue({ code: 'custom', message: 'must be 3 or 4 octal digits, like "0644"' });
        return;
      }
      const mode = Number.parseInt(value, 8);
      if (mode & 0o7000) {
        ctx.addIssue({ code: 'custom', message: 'must not set the setuid, setgid or sticky bit' });
      } else if ((mode & ownerBits) !== ownerBits) {
        // The agent runs as the owner and must read back what it wrote (and create files in directories).
        ctx.addIssue({ code: 'custom', message: `must grant the owner ${ownerText}` });
      } else if (mode & 0o002) {
        ctx.addIssue({ code: 'custom', message: 'must not be writable by others' });
      }
    })
    .transform((value) => Number.parseInt(value, 8));
}

/** Seconds: finite, positive; fractions allowed so tests can run fast. */
function seconds(min: number, max: number, inclusiveMin = true) {
  const base = z.number();
  return (inclusiveMin ? base.min(min) : base.gt(min)).max(max);
}

const HookArg = z
  .string()
  .refine((value) => !value.includes('\u0000'), { message: 'must not contain a NUL character' });

/** A glob over paths relative to rootDir, as hooks and file rules take it. */
const RelativeGlob = z
  .string()
  .min(1)
  .superRefine((value, ctx) => {
    if (value === '') return; // min(1) says so
    if (CONTROL_CHARS.test(value))
      ctx.addIssue({ code: 'custom', message: 'must not contain control characters' });
    else if (value.startsWith('/'))
      ctx.addIssue({ code: 'custom', message: 'must be a glob relative to rootDir (no leading /)' });
    else if (value.split('/').includes('..'))
      ctx.addIssue({ code: 'custom', message: "must not contain '..'" });
    else {
      const problem = globSyntaxProblem(value);
      if (problem !== undefined) ctx.addIssue({ code: 'custom', message: `unsupported glob: ${problem}` });
    }
  });

const Hook = z.strictObject({
  match: RelativeGlob,
  run: z
    .array(HookArg)
    .min(1, { message: 'must be a non-empty argv, like ["systemctl", "reload", "nginx"]' })
    .refine((argv) => argv[0] !== '', { message: 'the program (first element) must not be empty' })
    .transform((argv) => argv as [string, ...string[]]),
  timeoutSeconds: seconds(CONFIG_BOUNDS.hookTimeoutSeconds.min, CONFIG_BOUNDS.hookTimeoutSeconds.max).default(
    CONFIG_DEFAULTS.hookTimeoutSeconds,
  ),
  /** The proxy variables with their credentials; absent or false: without them (daemon/hooks.ts). */
  proxyCredentials: z.boolean().optional(),
});

const Server = z.strictObject({
  baseUrl: BaseUrl,
  apiVersion: z
    .string()
    .regex(API_VERSION, {
      message: 'must be one path segment of letters, digits, ".", "_" or "-" (like "v1")',
    })
    .default(CONFIG_DEFAULTS.server.apiVersion),
  apiKeyFile: absolutePath().default(CONFIG_DEFAULTS.server.apiKeyFile),
  timeoutSeconds: seconds(CONFIG_BOUNDS.timeoutSeconds.min, CONFIG_BOUNDS.timeoutSeconds.max).default(
    CONFIG_DEFAULTS.server.timeoutSeconds,
  ),
  maxResponseBytes: z
    .number()
    .int()
    .min(CONFIG_BOUNDS.maxResponseBytes.min)
    .max(CONFIG_BOUNDS.maxResponseBytes.max)
    .default(CONFIG_DEFAULTS.server.maxResponseBytes),
  proxy: z
    .string()
    .superRefine((value, ctx) => {
      let url: URL;
      try {
        url = new URL(value);
      } catch {
        ctx.addIssue({
          code: 'custom',
          message: 'must be an absolute URL like "http://proxy.example.com:3128"',
        });
        return;
      }
      if (url.protocol !== 'http:' && url.protocol !== 'https:') {
        ctx.addIssue({
          code: 'custom',
          message: `must use http or https (got ${url.protocol.slice(0, -1)})`,
        });
      } else if (url.username !== '' || url.password !== '') {
        // The URL ends up in logs and error messages; a proxy password there would leak.
        ctx.addIssue({ code: 'custom', message: 'must not contain credentials' });
      } else if ((url.pathname !== '/' && url.pathname !== '') || url.search !== '' || url.hash !== '') {
        ctx.addIssue({ code: 'custom', message: 'must be only a scheme, host and port' });
      } else if (url.port === '0') {
        ctx.addIssue({ code: 'custom', message: 'must not use port 0 (no proxy listens there)' });
      }
    })
    .exactOptional(),
});

/** A group name as useradd/groupadd accept it, or a numeric gid. */
const GROUP = /^(?:[A-Za-z_][A-Za-z0-9_.-]{0,31}\$?|\d{1,10})$/;

const FileRuleSchema = z
  .strictObject({
    match: RelativeGlob,
    mode: octalMode('file').exactOptional(),
    group: z
      .string()
      .regex(GROUP, { message: 'must be a group name (like "app") or a numeric gid' })
      .exactOptional(),
  })
  .refine((rule) => rule.mode !== undefined || rule.group !== undefined, {
    message: 'must set mode, group or both',
  });

const Files = z.strictObject({
  mode: octalMode('file').default(Number.parseInt(CONFIG_DEFAULTS.files.mode, 8)),
  dirMode: octalMode('dir').default(Number.parseInt(CONFIG_DEFAULTS.files.dirMode, 8)),
  rules: z.array(FileRuleSchema).max(CONFIG_BOUNDS.maxFileRules).default([]),
});

const Retry = z
  .strictObject({
    maxAttempts: z
      .number()
      .int()
      .min(CONFIG_BOUNDS.maxAttempts.min)
      .max(CONFIG_BOUNDS.maxAttempts.max)
      .default(CONFIG_DEFAULTS.retry.maxAttempts),
    baseDelaySeconds: seconds(0, CONFIG_BOUNDS.maxDelaySeconds, false).default(
      CONFIG_DEFAULTS.retry.baseDelaySeconds,
    ),
    maxDelaySeconds: seconds(0, CONFIG_BOUNDS.maxDelaySeconds, false).default(
      CONFIG_DEFAULTS.retry.maxDelaySeconds,
    ),
  })
  .superRefine((retry, ctx) => {
    // Only between valid values: a negative delay already has its own issue.
    if (
      retry.baseDelaySeconds > 0 &&
      retry.maxDelaySeconds > 0 &&
      retry.baseDelaySeconds > retry.maxDelaySeconds
    ) {
      ctx.addIssue({ code: 'custom', message: 'baseDelaySeconds must not exceed maxDelaySeconds' });
    }
  });

const Log = z.strictObject({
  level: z
    .enum(['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent'])
    .default(CONFIG_DEFAULTS.log.level),
});

const Poll = z
  .strictObject({
    intervalSeconds: seconds(CONFIG_BOUNDS.intervalSeconds.min, CONFIG_BOUNDS.intervalSeconds.max).default(
      CONFIG_DEFAULTS.poll.intervalSeconds,
    ),
    jitterRatio: z.number().min(0).max(1).default(CONFIG_DEFAULTS.poll.jitterRatio),
    fullResyncSeconds: seconds(CONFIG_BOUNDS.intervalSeconds.min, CONFIG_BOUNDS.fullResyncSecondsMax).default(
      CONFIG_DEFAULTS.poll.fullResyncSeconds,
    ),
  })
  .superRefine((poll, ctx) => {
    if (poll.intervalSeconds >= 1 && poll.fullResyncSeconds < poll.intervalSeconds) {
      ctx.addIssue({ code: 'custom', message: 'fullResyncSeconds must not be less than intervalSeconds' });
    }
  });

const Metrics = z.strictObject({
  textfile: absolutePath({ suffix: '.prom' }).exactOptional(),
});

function isSameOrInside(inner: string, outer: string): boolean {
  return outer === '/' || inner === outer || inner.startsWith(`${outer}/`);
}

/** The zod schema of the config file. Its output is exactly `AgentConfig`. */
export const AgentConfigSchema = z
  .strictObject({
    deviceId: z
      .string()
      .min(1)
      .max(CONFIG_BOUNDS.deviceIdMaxLength)
      .regex(DEVICE_ID, { message: 'must not contain whitespace or control characters' }),
    server: Server,
    rootDir: absolutePath().refine((value) => value !== '/', { message: 'must not be /' }),
    stateDir: absolutePath().refine((value) => value !== '/', { message: 'must not be /' }),
    files: Files.prefault({}),
    retry: Retry.prefault({}),
    log: Log.prefault({}),
    poll: Poll.prefault({}),
    drift: z.enum(['restore', 'report', 'off']).default(CONFIG_DEFAULTS.drift),
    hooks: z.array(Hook).max(CONFIG_BOUNDS.maxHooks).default([]),
    socketPath: absolutePath({ maxBytes: CONFIG_BOUNDS.socketPathMaxBytes }).default(
      CONFIG_DEFAULTS.socketPath,
    ),
    metrics: Metrics.prefault({}),
  })
  .superRefine(
    (config, ctx) => {
      // Runs even when unrelated keys are bad, so one pass names every problem; hence the defensive reads.
      const rootDir = validPath(config.rootDir);
      const stateDir = validPath(config.stateDir);
      if (rootDir === undefined) return;
      if (
        stateDir !== undefined &&
        (isSameOrInside(rootDir, stateDir) || isSameOrInside(stateDir, rootDir))
      ) {
        ctx.addIssue({
          code: 'custom',
          path: ['stateDir'],
          message: 'rootDir and stateDir must be different directories, neither inside the other',
        });
      }
      // rootDir is the server's territory: a server-sent file must never land on one of the agent's own paths.
      const own: [string, unknown][] = [
        ['server.apiKeyFile', (config.server as Partial<AgentConfig['server']> | undefined)?.apiKeyFile],
        ['socketPath', config.socketPath],
        ['metrics.textfile', (config.metrics as AgentConfig['metrics'] | undefined)?.textfile],
      ];
      const taken = new Map<string, string>();
      for (const [key, value] of own) {
        const p = validPath(value);
        if (p !== undefined && isSameOrInside(p, rootDir)) {
          ctx.addIssue({ code: 'custom', path: key.split('.'), message: 'must not be inside rootDir' });
        }
        if (p === undefined) continue;
        // One path for two of the agent's own files: each write of one replaces the other (adv30).
        const other = taken.get(p);
        if (other !== undefined) {
          ctx.addIssue({
            code: 'custom',
            path: key.split('.'),
            message: `must not be the same path as ${other}`,
          });
        }
        taken.set(p, key);
        const clash = stateDir === undefined ? undefined : stateDirClash(p, stateDir);
        if (clash !== undefined) ctx.addIssue({ code: 'custom', path: key.split('.'), message: clash });
      }
    },
    {
      when: (payload) =>
        typeof payload.value === 'object' && payload.value !== null && !Array.isArray(payload.value),
    },
  );

/**
 * What the agent keeps directly in stateDir (store/*.ts, cli/code-cache.ts; state-names.adv30.test.ts holds them
 * to those modules), also under `<name>.<suffix>` (asides of a damaged one, the writer's temp files).
 */
export const STATE_DIR_NAMES: readonly string[] = [
  'state.json',
  'outbox.json',
  'intent.json',
  'fingerprints.json',
  'renewal-asides.json',
  'root-mount.json',
  'clean-exit.json',
  'agent.lock',
  'cache',
  'code-cache',
];

/**
 * Why `file` (the socket, the metrics textfile, the key) may not lie where it does in stateDir: stateDir itself,
 * or a name the agent keeps there, whose writes would replace it (a socket at `state.json` was replaced by the
 * first pass's record, and the next start refused the regular file at socketPath); undefined when it may.
 */
export function stateDirClash(file: string, stateDir: string): string | undefined {
  if (file === stateDir) return 'must not be stateDir itself';
  if (!file.startsWith(`${stateDir}/`)) return undefined;
  const first = file.slice(stateDir.length + 1).split('/')[0] ?? '';
  const name = STATE_DIR_NAMES.find((own) => first === own || first.startsWith(`${own}.`));
  if (name === undefined) return undefined;
  return `must not be ${stateDir}/${first}${first === file.slice(stateDir.length + 1) ? '' : '/...'}: the agent keeps its ${name} there`;
}

/** The path as the schema would output it, or undefined when it is invalid (its own issue reports why). */
function validPath(value: unknown): string | undefined {
  if (typeof value !== 'string' || pathProblem(value) !== undefined) return undefined;
  const path = stripTrailingSlash(value);
  return path === '/' ? undefined : path;
}

// Compile-time proof that the schema produces exactly the interface other modules code against.
type Exact<A, B> = [A] extends [B] ? ([B] extends [A] ? true : false) : false;
const schemaMatchesInterface: Exact<z.output<typeof AgentConfigSchema>, AgentConfig> = true;
void schemaMatchesInterface;

/** The JSON type of a value, as config error messages name it ("got string"). */
export function describeType(value: unknown): string {
  if (value === null) return 'null';
  if (Array.isArray(value)) return 'array';
  return typeof value;
}
