import { dateOfEpochMicroseconds } from '../sql/epoch-microseconds';
import { toJob, type Job, type JobRow } from '../core/job';
import { DEFAULT_MAX_ATTEMPTS, DEFAULT_PRIORITY } from '../core/job-defaults';
import type { TraceColumns } from '../core/trace-context';
import type { ValidJob } from '../core/validate-job-spec';

/** What sql addJobsBulk (addJobKeyless, addJobStarted) returns per job: what the database decided, times in epoch microseconds. */
export interface AddedRow {
  id: string;
  run_at_us: string | number;
  created_at_us: string | number;
  /** addJobStarted only: the worker the insert claimed the job for, or null. */
  locked_by?: string | null;
}

/**
 * The jobs addJobsBulk inserted, from what was sent and what came back (in the same order):
 * a new keyless row is exactly its spec with the table's defaults, as the statement wrote it
 * (claimed at its insert, by addJobStarted, when the row names a worker).
 */
export function addedJobs(jobs: readonly ValidJob[], rows: readonly AddedRow[], trace: TraceColumns | null): Job[] {
  return rows.map((row, index) => {
    const job = jobs[index];
    const createdAt = dateOfEpochMicroseconds(row.created_at_us);
    const lockedBy = row.locked_by ?? null;
    const claimedAt = lockedBy === null ? null : createdAt;
    const full: JobRow = {
      id: row.id,
      task_identifier: job.identifier,
      queue_name: job.queueName,
      payload: JSON.parse(job.payloadJson),
      priority: job.priority ?? DEFAULT_PRIORITY,
      run_at: dateOfEpochMicroseconds(row.run_at_us),
      attempts: lockedBy === null ? 0 : 1,
      max_attempts: job.maxAttempts ?? DEFAULT_MAX_ATTEMPTS,
      last_error: null,
      key: null,
      revision: 0,
      flags: job.flags ?? [],
      locked_at: claimedAt,
      locked_by: lockedBy,
      created_at: createdAt,
      updated_at: createdAt,
      started_at: claimedAt,
      progress: null,
      errors: null,
      cancel_requested_at: null,
      trace_id: trace?.traceId ?? null,
      span_id: trace?.spanId ?? null,
      trace_flags: trace?.flags ?? null,
      group_key: job.group,
    };
    return toJob(full);
  });
}
