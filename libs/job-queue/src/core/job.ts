import type { EntityManager } from 'typeorm';
import type { JobState } from './job-state';
import { fromTraceColumns } from './trace-context';

export type { JobState };

/** What `ctx.progress()` stores: a percentage from 0 to 100, or a small JSON object. */
export type JobProgress = number | Record<string, unknown>;

/** One failed attempt of a job. */
export interface JobAttemptError {
  at: Date;
  /** The attempt that failed (1 for the first). */
  attempt: number;
  message: string;
  /** The error's `code` when it had a string one (JQ_JOB_TIMEOUT, JQ_WORKER_LOST, or the app's own). */
  code: string | null;
}

export type JobKeyMode = 'replace' | 'preserve_run_at' | 'unsafe_dedupe';

/** How a job is added: every field is optional. */
export interface JobSpec {
  /** Jobs of one named queue run one at a time, in order, across all workers. */
  queueName?: string;
  /** Not before this time. Default: now. */
  runAt?: Date;
  /** Smaller runs first. Default 0. */
  priority?: number;
  /** Attempts before the job fails for good. Default 25 (or the task's own default). */
  maxAttempts?: number;
  /** At most one pending job per key; see `jobKeyMode`. */
  jobKey?: string;
  /** What adding a job whose key exists does. Default `replace`. */
  jobKeyMode?: JobKeyMode;
  /** Workers with any of these in `forbiddenFlags` skip the job. */
  flags?: string[];
  /**
   * Throttling, with `jobKey`: if a job with this key was added less than this long ago (ms,
   * or a string such as '10m'), in any state, finished ones too, the add returns that job and
   * adds nothing. Past it, the add does what `jobKeyMode` says.
   */
  dedupeFor?: number | string;
  /**
   * The job's group (a tenant id, say): its task's `groupConcurrency` and `groupRateLimit` apply
   * to each group apart. 1 to 128 characters; not with `queueName` (a named queue already runs
   * one job at a time), nor in flows.
   */
  group?: string;
  /** Join this transaction: the job exists only if it commits. */
  manager?: EntityManager;
}

/** One entry of `addMany`. */
export interface JobSpecWithIdentifier extends Omit<JobSpec, 'manager'> {
  identifier: string;
  payload?: unknown;
}

/** A job as the API returns it, unfinished or finished. Ids are strings: they are bigints. */
export interface Job<Payload = unknown, Result = unknown> {
  id: string;
  /** blocked (a flow's job waiting for its dependencies), waiting (due, or claimed but not started), scheduled, running, retrying, completed, failed or cancelled. */
  state: JobState;
  /** The flow it belongs to: addFlow's, or, for a job added alone, its own id (its chain's, after `ctx.continueWith`). */
  flowId: string;
  /** Its step's `ref` in its flow (a continuation has the ref of the job it continues); null for a job added alone. */
  flowRef: string | null;
  taskIdentifier: string;
  queueName: string | null;
  /** Its `group`, or null. */
  group: string | null;
  payload: Payload;
  priority: number;
  runAt: Date;
  attempts: number;
  maxAttempts: number;
  lastError: string | null;
  key: string | null;
  revision: number;
  flags: string[];
  lockedAt: Date | null;
  lockedBy: string | null;
  createdAt: Date;
  updatedAt: Date;
  /** When its handler last started; null while it is only claimed (prefetched), or never ran. */
  startedAt: Date | null;
  /** When it completed, failed for good or was cancelled; null while unfinished. */
  finishedAt: Date | null;
  /** The handler's return value, once completed (null otherwise, and for a handler that returned nothing). */
  result: Result | null;
  /** The last value its handler reported with `ctx.progress()`. */
  progress: JobProgress | null;
  /** One entry per failed attempt, oldest first. */
  errors: JobAttemptError[];
  /** The worker that holds it now, or that finished it. */
  workerId: string | null;
  /** When a cancel was requested while a worker held it (it ends `cancelled` once that worker lets go). */
  cancelRequestedAt: Date | null;
  /**
   * The W3C trace context (`traceparent`) of the span that added the job, when telemetry
   * recorded one; null otherwise, and once the job is finished.
   */
  traceContext: Record<string, string> | null;
}

export interface JobRow {
  id: string;
  task_identifier: string;
  queue_name: string | null;
  payload: unknown;
  priority: number;
  run_at: Date;
  attempts: number;
  max_attempts: number;
  last_error: string | null;
  key: string | null;
  revision: number;
  flags: string[];
  locked_at: Date | null;
  locked_by: string | null;
  created_at: Date;
  updated_at: Date;
  started_at: Date | null;
  progress?: JobProgress | null;
  errors?: Array<{ at: string; attempt: number; message: string; code: string | null }> | null;
  cancel_requested_at?: Date | null;
  trace_id?: string | null;
  span_id?: string | null;
  trace_flags?: number | null;
  flow_id?: string | null;
  flow_ref?: string | null;
  group_key?: string | null;
  /** Rows of a read (sql/read.ts) carry these; rows of add do not. */
  state?: JobState;
  result?: unknown;
  finished_at?: Date | null;
  worker_id?: string | null;
}

/** The state of a row of `jobs` (as activeState in sql/read.ts computes it, on this process's clock). */
function stateOf(row: JobRow): JobState {
  if (row.locked_at) return row.started_at ? 'running' : 'waiting';
  if (row.cancel_requested_at) return 'cancelled';
  if (row.attempts >= row.max_attempts) return 'failed';
  if (row.attempts > 0) return 'retrying';
  return row.run_at.getTime() > Date.now() && row.run_at > row.created_at ? 'scheduled' : 'waiting';
}

/** The `errors` column of a job row as the Job's `errors`. */
export function attemptErrorsOf(errors: JobRow['errors']): JobAttemptError[] {
  return (errors ?? []).map((e) => ({ at: new Date(e.at), attempt: e.attempt, message: e.message, code: e.code ?? null }));
}

export function toJob<Payload = unknown, Result = unknown>(row: JobRow): Job<Payload, Result> {
  return {
    id: String(row.id),
    state: row.state ?? stateOf(row),
    flowId: row.flow_id == null ? String(row.id) : String(row.flow_id),
    flowRef: row.flow_ref ?? null,
    taskIdentifier: row.task_identifier,
    queueName: row.queue_name,
    group: row.group_key ?? null,
    payload: row.payload as Payload,
    priority: row.priority,
    runAt: row.run_at,
    attempts: row.attempts,
    maxAttempts: row.max_attempts,
    lastError: row.last_error,
    key: row.key,
    revision: row.revision,
    flags: row.flags,
    lockedAt: row.locked_at,
    lockedBy: row.locked_by,
    createdAt: row.created_at,
    updatedAt: row.updated_at,
    startedAt: row.started_at,
    finishedAt: row.finished_at ?? null,
    result: (row.result ?? null) as Result | null,
    progress: row.progress ?? null,
    errors: attemptErrorsOf(row.errors),
    workerId: row.worker_id !== undefined ? row.worker_id : row.locked_by,
    cancelRequestedAt: row.cancel_requested_at ?? null,
    traceContext: fromTraceColumns(row.trace_id, row.span_id, row.trace_flags),
  };
}

/**
 * Rows of a read across the job tables (sql getJobs) as jobs by id. A job caught moving between
 * two tables comes twice: its finished row tells the end.
 */
export function latestJobs(rows: readonly JobRow[]): Map<string, Job> {
  const byId = new Map<string, Job>();
  for (const row of rows) {
    const job = toJob(row);
    if (!byId.has(job.id) || job.finishedAt) byId.set(job.id, job);
  }
  return byId;
}

/** Orders two job ids (bigint as decimal text, no leading zeros) by value, without parsing them: the shorter is smaller. */
export const compareJobIds = (a: string, b: string): number => a.length - b.length || (a < b ? -1 : a > b ? 1 : 0);
