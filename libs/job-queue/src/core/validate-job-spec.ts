import { checkDuration, DAY_MS } from './duration';
import { JobQueueError } from './errors';
import { DEFAULT_MAX_JSON_BYTES, toJsonText } from './json';
import type { JobKeyMode, JobSpec } from './job';

/** Column limits, mirrored by CHECK constraints in the migration. */
export const LIMITS = {
  identifierLength: 128,
  queueNameLength: 128,
  jobKeyLength: 512,
  groupLength: 128,
  smallintMin: -32768,
  smallintMax: 32767,
} as const;

const JOB_KEY_MODES: readonly JobKeyMode[] = ['replace', 'preserve_run_at', 'unsafe_dedupe'];

/** A job checked and ready for the add_job parameters. */
export interface ValidJob {
  identifier: string;
  payloadJson: string;
  queueName: string | null;
  runAt: Date | null;
  maxAttempts: number | null;
  jobKey: string | null;
  jobKeyMode: JobKeyMode;
  priority: number | null;
  flags: string[] | null;
  /** `dedupeFor` in ms, or null. */
  dedupeForMs: number | null;
  /** The job's group, or null. */
  group: string | null;
}

/** The longest `dedupeFor`: a year. */
const MAX_DEDUPE_MS = 365 * DAY_MS;

function fail(code: ConstructorParameters<typeof JobQueueError>[0], message: string): never {
  throw new JobQueueError(code, message);
}

export function optionalString(value: unknown, code: 'JQ_INVALID_QUEUE_NAME' | 'JQ_INVALID_JOB_KEY' | 'JQ_INVALID_GROUP', field: string, max: number): string | null {
  if (value === undefined || value === null) return null;
  if (typeof value !== 'string' || value.length === 0 || value.length > max) {
    fail(code, `${field} must be a non-empty string of at most ${max} characters, got ${describe(value)}`);
  }
  return value;
}

export function optionalSmallint(
  value: unknown,
  code: 'JQ_INVALID_MAX_ATTEMPTS' | 'JQ_INVALID_PRIORITY' | 'JQ_INVALID_SPEC',
  field: string,
  min: number,
): number | null {
  if (value === undefined || value === null) return null;
  if (typeof value !== 'number' || !Number.isInteger(value) || value < min || value > LIMITS.smallintMax) {
    fail(code, `${field} must be an integer from ${min} to ${LIMITS.smallintMax}, got ${describe(value)}`);
  }
  return value;
}

function describe(value: unknown): string {
  if (typeof value === 'string') return value.length > 40 ? `a string of ${value.length} characters` : JSON.stringify(value);
  if (typeof value === 'bigint') return `${value}n`;
  return String(value);
}

/** Serialises a payload, refusing what JSON or jsonb cannot carry, and more than `maxBytes` of it. */
export function payloadToJson(payload: unknown, maxBytes = DEFAULT_MAX_JSON_BYTES): string {
  return toJsonText(payload, 'payload', maxBytes, { notJson: 'JQ_INVALID_PAYLOAD', tooLarge: 'JQ_PAYLOAD_TOO_LARGE' }, '{}');
}

export function validateTaskIdentifier(identifier: unknown): string {
  if (typeof identifier !== 'string' || identifier.length === 0 || identifier.length > LIMITS.identifierLength) {
    fail(
      'JQ_INVALID_TASK_IDENTIFIER',
      `task identifier must be a non-empty string of at most ${LIMITS.identifierLength} characters, got ${describe(identifier)}`,
    );
  }
  return identifier;
}

/** Checks everything about one job before anything is written. */
export function validateJob(
  identifier: unknown,
  payload: unknown,
  spec: Omit<JobSpec, 'manager'> = {},
  maxJsonBytes = DEFAULT_MAX_JSON_BYTES,
): ValidJob {
  if (spec === null || typeof spec !== 'object') fail('JQ_INVALID_SPEC', 'the job spec must be an object');
  const { runAt, flags, jobKeyMode } = spec;
  if (runAt !== undefined && runAt !== null && !(runAt instanceof Date && !Number.isNaN(runAt.getTime()))) {
    fail('JQ_INVALID_RUN_AT', `runAt must be a valid Date, got ${describe(runAt)}`);
  }
  if (jobKeyMode !== undefined && !JOB_KEY_MODES.includes(jobKeyMode)) {
    fail('JQ_INVALID_JOB_KEY_MODE', `jobKeyMode must be one of ${JOB_KEY_MODES.join(', ')}, got ${describe(jobKeyMode)}`);
  }
  if (flags !== undefined && flags !== null && !(Array.isArray(flags) && flags.every((flag) => typeof flag === 'string'))) {
    fail('JQ_INVALID_FLAGS', 'flags must be an array of strings');
  }
  const jobKey = optionalString(spec.jobKey, 'JQ_INVALID_JOB_KEY', 'jobKey', LIMITS.jobKeyLength);
  let dedupeForMs: number | null = null;
  if (spec.dedupeFor !== undefined && spec.dedupeFor !== null) {
    if (jobKey === null) fail('JQ_INVALID_SPEC', 'dedupeFor needs a jobKey: it throttles the adds of one key');
    dedupeForMs = checkDuration('dedupeFor', spec.dedupeFor, 1, 'JQ_INVALID_SPEC', undefined, MAX_DEDUPE_MS);
  }
  const queueName = optionalString(spec.queueName, 'JQ_INVALID_QUEUE_NAME', 'queueName', LIMITS.queueNameLength);
  const group = optionalString(spec.group, 'JQ_INVALID_GROUP', 'group', LIMITS.groupLength);
  // A named queue runs its jobs one at a time already; a group limit inside one would limit nothing.
  if (group !== null && queueName !== null) fail('JQ_INVALID_GROUP', `a job of a named queue (${queueName}) cannot have a group: the queue already runs its jobs one at a time`);
  return {
    identifier: validateTaskIdentifier(identifier),
    payloadJson: payloadToJson(payload, maxJsonBytes),
    queueName,
    runAt: runAt ?? null,
    maxAttempts: optionalSmallint(spec.maxAttempts, 'JQ_INVALID_MAX_ATTEMPTS', 'maxAttempts', 1),
    jobKey,
    jobKeyMode: jobKeyMode ?? 'replace',
    priority: optionalSmallint(spec.priority, 'JQ_INVALID_PRIORITY', 'priority', LIMITS.smallintMin),
    flags: flags ?? null,
    dedupeForMs,
    group,
  };
}

/** A job id as text: a positive bigint, no leading zero (what the jobs' sequence draws). */
export const JOB_ID_PATTERN = /^[1-9][0-9]{0,18}$/;

/** Job ids are bigints, passed around as strings; numbers are accepted too. */
export function validateJobIds(ids: unknown): string[] {
  if (!Array.isArray(ids)) fail('JQ_INVALID_JOB_ID', 'job ids must be an array');
  return ids.map((id) => {
    const text = typeof id === 'number' && Number.isSafeInteger(id) ? String(id) : id;
    if (typeof text !== 'string' || !JOB_ID_PATTERN.test(text)) {
      fail('JQ_INVALID_JOB_ID', `a job id must be a positive integer (as a string), got ${describe(id)}`);
    }
    return text;
  });
}
