import type { EntityManager } from 'typeorm';

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
  /** Join this transaction: the job exists only if it commits. */
  manager?: EntityManager;
}

/** One entry of `addMany`. */
export interface JobSpecWithIdentifier extends Omit<JobSpec, 'manager'> {
  identifier: string;
  payload?: unknown;
}

/** A row of the jobs table, as the API returns it. Ids are strings: they are bigints. */
export interface Job<Payload = unknown> {
  id: string;
  taskIdentifier: string;
  queueName: string | null;
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
  /** When its handler started, while a worker holds it; null while it is only claimed (prefetched) or not held. */
  startedAt: Date | null;
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
}

export function toJob<Payload = unknown>(row: JobRow): Job<Payload> {
  return {
    id: String(row.id),
    taskIdentifier: row.task_identifier,
    queueName: row.queue_name,
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
  };
}
