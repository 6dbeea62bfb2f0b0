import { toJob, type Job, type JobRow } from './job';
import type { TraceColumns } from '../telemetry/trace-context';
import type { ValidJob } from './validate-job-spec';

/** What sql addJobsBulk returns per job: what the database decided. */
export interface AddedRow {
  id: string;
  run_at: Date;
  created_at: Date;
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
    const lockedBy = row.locked_by ?? null;
    const claimedAt = lockedBy === null ? null : row.created_at;
    const full: JobRow = {
      id: row.id,
      task_identifier: job.identifier,
      queue_name: job.queueName,
      payload: JSON.parse(job.payloadJson),
      priority: job.priority ?? 0,
      run_at: row.run_at,
      attempts: lockedBy === null ? 0 : 1,
      max_attempts: job.maxAttempts ?? 25,
      last_error: null,
      key: null,
      revision: 0,
      flags: job.flags ?? [],
      locked_at: claimedAt,
      locked_by: lockedBy,
      created_at: row.created_at,
      updated_at: row.created_at,
      started_at: claimedAt,
      progress: null,
      errors: null,
      cancel_requested_at: null,
      trace_id: trace?.traceId ?? null,
      span_id: trace?.spanId ?? null,
      trace_flags: trace?.flags ?? null,
    };
    return toJob(full);
  });
}
