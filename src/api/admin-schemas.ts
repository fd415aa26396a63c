// Wire shapes of the mock service's test-only admin API (/_admin) and of its fixtures file.
import * as z from 'zod';
import {
  ConfigContent,
  ConfigInstanceActivityStatus,
  ConfigInstanceTargetStatus,
  DeploymentActivityStatus,
  DeploymentTargetStatus,
  ErrorStatus,
  Timestamp,
} from './schemas.js';

const Id = z.string().min(1, 'must be a non-empty string');

// ---- POST /_admin/config_instances ----

/** Omitted ids get defaults: `config_schema_id` is derived from the path so that two created instances never
 * conflict by schema unless they share a path too. */
export const CreateConfigInstanceRequest = z.strictObject({
  device_id: Id,
  // Any string on purpose: tests create hostile paths to check that the agent rejects them.
  relative_filepath: z.string(),
  content: ConfigContent,
  id: Id.optional(),
  config_schema_id: Id.optional(),
  config_type_id: Id.optional(),
  created_at: Timestamp.optional(),
});
export type CreateConfigInstanceRequest = z.infer<typeof CreateConfigInstanceRequest>;

// ---- POST /_admin/faults ----

/**
 * reset: the socket is destroyed without a response. hang: no answer until the client or the server gives up.
 * truncate: 200, close-delimited (no content-length) body cut in the middle of the real JSON, then close.
 * malformed: 200 with a body that is not JSON. slow: the real body, `chunk_bytes` every `interval_ms`.
 * Without a mode the fault answers `status` (default 503) with the standard error body, and `Retry-After` when
 * `retry_after` is given.
 * Extensions for hostile-service tests:
 * rewrite: the request is served for real (its effects happen), then the answer's status becomes `status`
 *   (any 2xx-5xx) and its body `body`, or the real body with each `replace` substitution applied (literal text,
 *   every occurrence), e.g. to put `1e400` or an unknown `target_status` into one item of a list.
 * paging (list routes): `ignore_offset` serves every page from offset 0 while echoing the offset asked for;
 *   `has_more` forces the envelope's has_more; `limit` cuts each page to at most that many items and answers
 *   it as the envelope's limit (has_more as the shorter page leaves it), as a service whose maximum page is below
 *   the interface's 100 would (the interface clamps only to 1-100, so this is a deviation: it lets a test page
 *   4 instances as it would 100). A paging fault applies together with another fault taking the same request
 *   (a rewrite of that page, a mutate before it): the first armed paging fault and the first armed other one.
 * mutate: before the request is served, `remove_instances` are deleted from the service (no longer listed)
 *   and `add_instances` created, as an operator acting between two pages of a pull would.
 */
export const FaultMode = z.enum([
  'reset',
  'hang',
  'truncate',
  'malformed',
  'slow',
  'rewrite',
  'paging',
  'mutate',
]);
export type FaultMode = z.infer<typeof FaultMode>;

export const TextReplacement = z.strictObject({ find: z.string().min(1), with: z.string() });

const FaultFields = z.strictObject({
  /** A regular expression tested against the request's path (no query string), e.g. `^/v1/config_instances$`. */
  match: z.string().refine(isValidRegex, { message: 'must be a valid regular expression' }),
  count: z.int().min(1),
  /**
   * Extension: how many matching requests pass untouched before the fault applies (default 0), so a later
   * request (page 2 of a list, the third report) can be targeted. Every fault still skipping counts each
   * request its pattern matches, whichever fault (if any) applies to that request.
   */
  skip: z.int().min(0).optional(),
  /** 400-599 for a status fault; `rewrite` may also answer 2xx or 3xx. */
  status: z.int().min(200).max(599).optional(),
  /** Seconds, sent as the `Retry-After` header of a status fault. */
  retry_after: z.int().min(0).optional(),
  mode: FaultMode.optional(),
  /** Extension for `slow`: bytes per tick (default 8) and the tick in milliseconds (default 300). */
  chunk_bytes: z.int().min(1).optional(),
  interval_ms: z.int().min(1).max(10_000).optional(),
  /** Extension for `rewrite`. */
  body: z.string().optional(),
  replace: z.array(TextReplacement).optional(),
  /** Extension for `paging`. */
  ignore_offset: z.boolean().optional(),
  has_more: z.boolean().optional(),
  limit: z.int().min(1).max(100).optional(),
  /** Extension for `mutate`. */
  remove_instances: z.array(z.string().min(1)).optional(),
  add_instances: z.array(CreateConfigInstanceRequest).optional(),
});

export const FaultRequest = FaultFields.superRefine((fault, ctx) => {
  if (fault.status !== undefined && fault.status < 400 && fault.mode !== 'rewrite') {
    ctx.addIssue({ code: 'custom', path: ['status'], message: 'below 400 only with mode rewrite' });
  }
});
export type FaultRequest = z.infer<typeof FaultRequest>;

/**
 * A registered fault as the admin API returns it: `remaining` counts down as matching requests consume it,
 * `skip_remaining` (present when `skip` was given) as matching requests pass before it applies.
 */
export const ActiveFault = FaultFields.extend({
  id: z.string(),
  remaining: z.int().min(0),
  skip_remaining: z.int().min(0).optional(),
});
export type ActiveFault = z.infer<typeof ActiveFault>;

export const ActiveFaultList = z.object({ data: z.array(ActiveFault) });
export type ActiveFaultList = z.infer<typeof ActiveFaultList>;

function isValidRegex(source: string): boolean {
  try {
    new RegExp(source);
    return true;
  } catch {
    return false;
  }
}

// ---- GET /_admin/reports ----

/** One accepted `PATCH /v1/config_instances/{id}`, as the mock received it. */
export const ReceivedReport = z.object({
  config_instance_id: z.string(),
  activity_status: ConfigInstanceActivityStatus,
  error_status: ErrorStatus,
  message: z.string().optional(),
  received_at: Timestamp,
});
export type ReceivedReport = z.infer<typeof ReceivedReport>;

export const ReceivedReportList = z.object({ data: z.array(ReceivedReport) });
export type ReceivedReportList = z.infer<typeof ReceivedReportList>;

// ---- GET /_admin/stats ----

/** Requests per route key `<METHOD> <route pattern>` (e.g. `GET /v1/config_instances/:id`), admin routes excluded;
 * requests that match no route count under `<METHOD> (unmatched)`. */
export const AdminStats = z.object({
  requests: z.record(z.string(), z.int().min(0)),
  total: z.int().min(0),
});
export type AdminStats = z.infer<typeof AdminStats>;

// ---- fixtures file (config-agent-mock-server --fixtures) ----
// The spec's fields; `object` and `status` are derived (accepted and ignored), missing timestamps default to
// the load time and missing statuses to the initial ones. Unknown fields are rejected so typos surface.

const Derived = { object: z.string().optional(), status: z.string().optional() };

export const FixtureDevice = z.strictObject({
  object: z.literal('device').optional(),
  id: Id,
  name: z.string().optional(),
  status: z.string().optional(),
  last_connected_at: Timestamp.optional(),
  last_disconnected_at: Timestamp.optional(),
  created_at: Timestamp.optional(),
  updated_at: Timestamp.optional(),
});
export type FixtureDevice = z.infer<typeof FixtureDevice>;

export const FixtureConfigSchema = z.union([
  Id,
  z.looseObject({ object: z.literal('config_schema').optional(), id: Id }),
]);

export const FixtureRelease = z.strictObject({
  object: z.literal('release').optional(),
  id: Id,
  version: z.string().min(1),
  created_at: Timestamp.optional(),
  updated_at: Timestamp.optional(),
  config_schemas: z.array(FixtureConfigSchema).optional(),
});
export type FixtureRelease = z.infer<typeof FixtureRelease>;

export const FixtureConfigInstance = z.strictObject({
  ...Derived,
  id: Id,
  device_id: Id,
  relative_filepath: z.string(),
  content: ConfigContent,
  config_schema_id: Id.optional(),
  config_type_id: Id.optional(),
  target_status: ConfigInstanceTargetStatus.optional(),
  activity_status: ConfigInstanceActivityStatus.optional(),
  error_status: ErrorStatus.optional(),
  created_at: Timestamp.optional(),
  updated_at: Timestamp.optional(),
});
export type FixtureConfigInstance = z.infer<typeof FixtureConfigInstance>;

export const FixtureDeployment = z.strictObject({
  ...Derived,
  id: Id,
  description: z.string().optional(),
  device_id: Id,
  /** The release's version label (spec), which must name a release of the fixtures. */
  release_id: z.string().min(1),
  target_status: DeploymentTargetStatus.optional(),
  activity_status: DeploymentActivityStatus.optional(),
  error_status: ErrorStatus.optional(),
  created_at: Timestamp.optional(),
  updated_at: Timestamp.optional(),
  config_instance_ids: z.array(Id).optional(),
});
export type FixtureDeployment = z.infer<typeof FixtureDeployment>;

export const Fixtures = z.strictObject({
  devices: z.array(FixtureDevice).optional(),
  releases: z.array(FixtureRelease).optional(),
  config_instances: z.array(FixtureConfigInstance).optional(),
  deployments: z.array(FixtureDeployment).optional(),
});
export type Fixtures = z.infer<typeof Fixtures>;
