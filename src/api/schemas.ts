// Wire shapes of the service (spec/interface.md), one zod schema each, shared by the client and the mock.
import * as z from 'zod';
import { SHOWN_KEY_CHARS } from '../lib/field-path.js';
import { ISO_DATE_TIME } from './instant.js';
import { isLosslessNumber, isUsableInstanceId, type LosslessNumber, MAX_INSTANCE_ID_LENGTH } from './json.js';

export { isUsableInstanceId };

/**
 * Every ISO 8601 date-time a service writes (instant.ts `ISO_DATE_TIME`: no offset, `+0000`, `+00`, `t`/`z`, a
 * space), not RFC 3339's strict form alone: an item whose `updated_at` a service wrote without an offset was
 * invalid, and reported `failed`, final, its file never written (adv33).
 */
export const Timestamp = z.stringFormat('date-time', ISO_DATE_TIME, { error: 'Invalid ISO 8601 date-time' });

/**
 * The schema `build` makes, built the first time something parses with it (or unwraps it) and kept: the object
 * schemas below cost ~4 ms to build at start-up, and an idle `--once` parses none of them (list-page.ts's hand
 * checks take every everyday item). `unwrap()` returns that one schema, never a second.
 */
function onFirstUse<T extends z.ZodType>(build: () => T): z.ZodLazy<T> {
  let built: T | undefined;
  return z.lazy(() => {
    built ??= build();
    return built;
  });
}

// ---- enums (spec: Resources and their fields) ----

export const DeploymentActivityStatus = z.enum([
  'validating',
  'pending',
  'approved',
  'queued',
  'deployed',
  'removing',
  'archived',
]);
export type DeploymentActivityStatus = z.infer<typeof DeploymentActivityStatus>;

export const ErrorStatus = z.enum(['none', 'failed', 'retrying']);
export type ErrorStatus = z.infer<typeof ErrorStatus>;

export const DeploymentStatus = z.enum([...DeploymentActivityStatus.options, 'failed', 'retrying']);
export type DeploymentStatus = z.infer<typeof DeploymentStatus>;

export const DeploymentTargetStatus = z.enum(['pending', 'approved', 'deployed', 'archived']);
export type DeploymentTargetStatus = z.infer<typeof DeploymentTargetStatus>;

export const ConfigInstanceTargetStatus = z.enum(['created', 'validated', 'deployed', 'removed']);
export type ConfigInstanceTargetStatus = z.infer<typeof ConfigInstanceTargetStatus>;

export const ConfigInstanceActivityStatus = z.enum([
  'created',
  'validating',
  'validated',
  'queued',
  'deployed',
  'removed',
]);
export type ConfigInstanceActivityStatus = z.infer<typeof ConfigInstanceActivityStatus>;

/**
 * The spec leaves the merged status's values open ("string"); the client accepts any string so a new
 * value never breaks a device, and the mock only ever produces activity ∪ {failed, retrying}.
 */
export const ConfigInstanceStatus = z.string();

/** The merge rule shared by deployments and config instances: an error wins over the activity. */
export function mergeStatus<A extends string>(activity: A, error: ErrorStatus): A | 'failed' | 'retrying' {
  return error === 'none' ? activity : error;
}

// ---- resources ----

export type JsonValue =
  | string
  | number
  | boolean
  | null
  | LosslessNumber
  | JsonValue[]
  | { [key: string]: JsonValue };

/** Deeper than this is not configuration: refusing it keeps validation (and serialisation) off the stack's edge. */
export const MAX_CONTENT_DEPTH = 64;

function isPlainObject(value: unknown): value is Record<string, unknown> {
  if (typeof value !== 'object' || value === null || Array.isArray(value)) return false;
  const prototype = Object.getPrototypeOf(value);
  return prototype === Object.prototype || prototype === null;
}

/** A number a JSON reader of the device could not hold: beyond the range of a 64-bit float. */
function numberOutOfRange(text: string): boolean {
  return !Number.isFinite(Number(text));
}

/**
 * The first thing in `value` that is not JSON content, with where it is: the real problem (a number out of
 * range, a value nested too deep), so that the message sent to the service names it. Iterative on purpose.
 */
export function contentProblem(value: unknown): { path: (string | number)[]; problem: string } | undefined {
  return isCleanContent(value) ? undefined : locateContentProblem(value);
}

/**
 * Whether `value` is JSON content, with no word on where it is not: the same walk as locateContentProblem
 * without the path it keeps, three times cheaper, for content that is nearly always clean (every listed item).
 */
export function isCleanContent(value: unknown): boolean {
  if (!isPlainObject(value)) return false;
  const items: unknown[] = [value];
  const depths: number[] = [0];
  while (depths.length > 0) {
    const item = items.pop();
    const depth = depths.pop() as number;
    if (item === null || typeof item === 'string' || typeof item === 'boolean') continue;
    if (typeof item === 'number') {
      if (!Number.isFinite(item)) return false;
      continue;
    }
    if (isLosslessNumber(item)) {
      if (numberOutOfRange(item.value)) return false;
      continue;
    }
    const isArray = Array.isArray(item);
    if (!isArray && !isPlainObject(item)) return false;
    if (depth >= MAX_CONTENT_DEPTH) return false;
    for (const child of isArray ? (item as unknown[]) : Object.values(item as object)) {
      items.push(child);
      depths.push(depth + 1);
    }
  }
  return true;
}

/** A number's text for a message: one of a megabyte of digits is named by its length (formatFieldPath's rule). */
function shownNumber(text: string): string {
  return text.length > SHOWN_KEY_CHARS ? `<written in ${text.length} characters>` : text;
}

/** contentProblem's answer, found by a walk that keeps the path to each value. */
export function locateContentProblem(
  value: unknown,
): { path: (string | number)[]; problem: string } | undefined {
  if (!isPlainObject(value)) return { path: [], problem: 'expected a JSON object' };
  // Depth-first with an explicit stack; `path` holds the keys from the root to the value being checked.
  const path: (string | number)[] = [];
  const stack: [item: unknown, key: string | number | undefined, depth: number][] = [[value, undefined, 0]];
  for (let next = stack.pop(); next !== undefined; next = stack.pop()) {
    const [item, key, depth] = next;
    path.length = Math.max(0, depth - 1);
    if (key !== undefined) path.push(key);
    if (item === null || typeof item === 'string' || typeof item === 'boolean') continue;
    if (typeof item === 'number') {
      if (!Number.isFinite(item)) return { path, problem: `number ${item} is out of range` };
      continue;
    }
    if (isLosslessNumber(item)) {
      if (numberOutOfRange(item.value)) {
        return { path, problem: `number ${shownNumber(item.value)} is out of range (beyond ±1.8e308)` };
      }
      continue;
    }
    const isArray = Array.isArray(item);
    if (!isArray && !isPlainObject(item)) return { path, problem: 'not a JSON value' };
    if (depth >= MAX_CONTENT_DEPTH)
      return { path, problem: `nested deeper than ${MAX_CONTENT_DEPTH} levels` };
    if (isArray) {
      const array = item as unknown[];
      for (let i = array.length - 1; i >= 0; i--) stack.push([array[i], i, depth + 1]);
    } else {
      const keys = Object.keys(item as object);
      for (let i = keys.length - 1; i >= 0; i--) {
        const name = keys[i] as string;
        stack.push([(item as Record<string, unknown>)[name], name, depth + 1]);
      }
    }
  }
  return undefined;
}

/**
 * Content of a config instance: a JSON object that may nest objects, arrays, booleans, numbers, strings.
 * Checked in place, never rebuilt: rebuilding drops keys such as `__proto__`, and the file on disk would then
 * differ from what the service holds. Numbers that a float cannot print back as sent stay `LosslessNumber`.
 */
export const ConfigContent = z.custom<{ [key: string]: JsonValue }>().superRefine((value, ctx) => {
  const found = contentProblem(value);
  if (found !== undefined) ctx.addIssue({ code: 'custom', path: found.path, message: found.problem });
});
export type ConfigContent = z.infer<typeof ConfigContent>;

export const Device = onFirstUse(() =>
  z.object({
    object: z.literal('device'),
    id: z.string(),
    name: z.string(),
    status: z.string(),
    last_connected_at: Timestamp,
    last_disconnected_at: Timestamp,
    created_at: Timestamp,
    updated_at: Timestamp,
  }),
);
export type Device = z.infer<typeof Device>;

/** Fields of a config schema and a config type are not shown by the spec: we know only that they have ids. */
export const ConfigSchemaRef = onFirstUse(() =>
  z.looseObject({ object: z.literal('config_schema'), id: z.string() }),
);
export type ConfigSchemaRef = z.infer<typeof ConfigSchemaRef>;
export const ConfigTypeRef = onFirstUse(() =>
  z.looseObject({ object: z.literal('config_type'), id: z.string() }),
);
export type ConfigTypeRef = z.infer<typeof ConfigTypeRef>;

export const Release = onFirstUse(() =>
  z.object({
    object: z.literal('release'),
    id: z.string(),
    version: z.string(),
    created_at: Timestamp,
    updated_at: Timestamp,
    config_schemas: z.array(ConfigSchemaRef.unwrap()),
  }),
);
export type Release = z.infer<typeof Release>;

export const ConfigInstance = onFirstUse(() =>
  z.object({
    object: z.literal('config_instance'),
    id: z
      .string()
      .min(1)
      .max(MAX_INSTANCE_ID_LENGTH)
      // The empty id is min(1)'s to name.
      .refine((id) => id === '' || id.length > MAX_INSTANCE_ID_LENGTH || isUsableInstanceId(id), {
        message: 'holds a lone surrogate (no URL can carry it)',
      }),
    target_status: ConfigInstanceTargetStatus,
    activity_status: ConfigInstanceActivityStatus,
    error_status: ErrorStatus,
    // The merged status, which the agent never acts on: any value, or none (null, left out), is read as null (adv33).
    status: ConfigInstanceStatus.nullable().catch(null),
    relative_filepath: z.string(),
    created_at: Timestamp,
    updated_at: Timestamp,
    device_id: z.string(),
    config_schema_id: z.string(),
    config_type_id: z.string(),
    // "null unless expanded", and the agent expands none and reads none: a service that leaves out its null
    // fields (Go's omitempty, a serializer that drops nulls) gives them absent, and one that expands them unasked
    // may send any shape (a device whose last_connected_at is null). Each is read as null unless it is the spec's
    // shape; before, the item was invalid and reported `failed`, final, never written (adv33, lead23).
    device: Device.unwrap().nullable().catch(null),
    config_schema: ConfigSchemaRef.unwrap().nullable().catch(null),
    config_type: ConfigTypeRef.unwrap().nullable().catch(null),
    content: ConfigContent,
  }),
);
export type ConfigInstance = z.infer<typeof ConfigInstance>;
/** An instance without its content: what every stage after planning needs of it. */
export type ConfigInstanceHead = Omit<ConfigInstance, 'content'>;

/**
 * The fields of an instance's place: all of what a deployed version is (`listedVersion`) but the content. A report's
 * answer is read for them (client.ts, even past the answer cap) and compared with the listing's (report.ts).
 */
export const INSTANCE_PLACE_FIELDS = [
  'relative_filepath',
  'target_status',
  'device_id',
  'config_schema_id',
  'config_type_id',
  'created_at',
] as const satisfies readonly (keyof ConfigInstanceHead)[];

/**
 * A status the agent reads but never acts on: a value added by the service later (the real product renamed its
 * deployment statuses within weeks) is accepted as a string instead of failing the whole response.
 */
function tolerated<T extends z.ZodEnum>(known: T) {
  return z.union([known, z.string()]);
}

export const Deployment = onFirstUse(() =>
  z.object({
    object: z.literal('deployment'),
    id: z.string(),
    description: z.string(),
    status: tolerated(DeploymentStatus),
    activity_status: tolerated(DeploymentActivityStatus),
    error_status: tolerated(ErrorStatus),
    target_status: tolerated(DeploymentTargetStatus),
    device_id: z.string(),
    /** The release's version label, not its id (spec). */
    release_id: z.string(),
    created_at: Timestamp,
    updated_at: Timestamp,
    // "null unless expanded": left out by a serializer that drops nulls, read as null, as an instance's (spec35).
    device: Device.unwrap().nullable().default(null),
    release: Release.unwrap().nullable().default(null),
    config_instances: z.array(ConfigInstance.unwrap()).nullable().default(null),
  }),
);
export type Deployment = z.infer<typeof Deployment>;

// ---- lists ----

export const LIMIT_MIN = 1;
export const LIMIT_MAX = 100;
export const LIMIT_DEFAULT = 10;

export function ListEnvelope<T extends z.ZodType>(item: T) {
  return z.object({
    object: z.literal('list'),
    total_count: z.number().int().min(-1),
    limit: z.number().int().min(LIMIT_MIN).max(LIMIT_MAX),
    offset: z.number().int().min(0),
    has_more: z.boolean(),
    data: z.array(item),
  });
}
export interface ListEnvelope<T> {
  object: 'list';
  total_count: number;
  limit: number;
  offset: number;
  has_more: boolean;
  data: T[];
}

export const ConfigInstanceList = onFirstUse(() => ListEnvelope(ConfigInstance.unwrap()));
export const ReleaseList = onFirstUse(() => ListEnvelope(Release.unwrap()));
export const DeviceList = onFirstUse(() => ListEnvelope(Device.unwrap()));

// ---- deploy ----

/** The `code` of each removal a deploy answers with (spec: a conflicting path or config schema). */
export const KNOWN_REMOVE_CODES = ['device_file_path_conflict', 'device_config_schema_conflict'] as const;
export type KnownRemoveCode = (typeof KNOWN_REMOVE_CODES)[number];

export const DeployRemoval = onFirstUse(() =>
  z.object({
    code: z.string(),
    explanation: z.string(),
    config_instance: ConfigInstance.unwrap(),
  }),
);
export type DeployRemoval = z.infer<typeof DeployRemoval>;

export const DeployResponse = onFirstUse(() =>
  z.object({
    deploy: ConfigInstance.unwrap(),
    remove: z.array(DeployRemoval.unwrap()),
  }),
);
export type DeployResponse = z.infer<typeof DeployResponse>;

// ---- errors ----

/** Error body of the service: `{"error": {"code", "message", "params"}}`. */
export const ErrorBody = onFirstUse(() =>
  z.object({
    error: z.object({
      code: z.string(),
      message: z.string(),
      params: z.record(z.string(), z.unknown()).default({}),
    }),
  }),
);
export type ErrorBody = z.infer<typeof ErrorBody>;

// ---- extension: the agent's status report (PATCH /v1/config_instances/{id}) ----

export const STATUS_MESSAGE_MAX = 4096;

export const StatusReport = z.strictObject({
  activity_status: ConfigInstanceActivityStatus,
  error_status: ErrorStatus,
  message: z.string().max(STATUS_MESSAGE_MAX).optional(),
});
export type StatusReport = z.infer<typeof StatusReport>;

// ---- query vocabulary ----

export const DeploymentExpand = z.enum(['device', 'release', 'config_instances']);
export type DeploymentExpand = z.infer<typeof DeploymentExpand>;

/** Expansions a config instance list accepts: total_count (spec) and the item fields the spec marks expandable. */
export const ConfigInstanceListExpand = z.enum(['total_count', 'device', 'config_schema', 'config_type']);
export type ConfigInstanceListExpand = z.infer<typeof ConfigInstanceListExpand>;
export const ListExpand = z.enum(['total_count']);
export type ListExpand = z.infer<typeof ListExpand>;

export interface ConfigInstanceFilters {
  id?: string;
  target_status?: ConfigInstanceTargetStatus;
  activity_status?: ConfigInstanceActivityStatus;
  error_status?: ErrorStatus;
  device_id?: string;
  config_schema_id?: string;
  config_type_id?: string;
}

export interface ReleaseFilters {
  id?: string;
  version?: string;
}

export interface DeviceFilters {
  id?: string;
  name?: string;
  status?: string;
}
