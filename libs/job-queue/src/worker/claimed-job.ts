import { attemptErrorsOf, type Job, type JobProgress, type JobRow } from '../core/job';
import { dateOfEpochMicroseconds as dateOf } from '../sql/epoch-microseconds';
import { fromTraceColumns } from '../core/trace-context';

/** A row of sql claimJobs (CLAIMED_COLUMNS in sql/claim.ts): times in epoch microseconds. */
export interface ClaimedRow {
  id: string;
  task_identifier: string;
  queue_name: string | null;
  payload: unknown;
  priority: number;
  attempts: number;
  max_attempts: number;
  last_error: string | null;
  key: string | null;
  revision: number;
  /** Null when the job has none. */
  flags: string[] | null;
  progress: JobProgress | null;
  errors: JobRow['errors'];
  trace_id: string | null;
  span_id: string | null;
  trace_flags: number | null;
  /** Null for a job added alone (its flow is itself). */
  flow_id: string | null;
  flow_ref: string | null;
  group_key: string | null;
  run_at_us: string | number;
  created_at_us: string | number;
  /** The claim's now(): the job's locked_at and updated_at, and its started_at if `started`. */
  claimed_at_us: string | number;
  /** Claimed for a free slot (its start marked); false: prefetched. */
  started: boolean;
  candidate_count: number;
}

/** The Job a claim of worker `workerId` returned, as toJob() would make it from the whole row. */
export function toClaimedJob<Payload = unknown>(row: ClaimedRow, workerId: string): Job<Payload> {
  const claimedAt = dateOf(row.claimed_at_us).getTime();
  return {
    id: row.id,
    state: row.started ? 'running' : 'waiting',
    flowId: row.flow_id ?? row.id,
    flowRef: row.flow_ref,
    taskIdentifier: row.task_identifier,
    queueName: row.queue_name,
    group: row.group_key,
    payload: row.payload as Payload,
    priority: row.priority,
    runAt: dateOf(row.run_at_us),
    attempts: row.attempts,
    maxAttempts: row.max_attempts,
    lastError: row.last_error,
    key: row.key,
    revision: row.revision,
    flags: row.flags ?? [],
    lockedAt: new Date(claimedAt),
    lockedBy: workerId,
    createdAt: dateOf(row.created_at_us),
    updatedAt: new Date(claimedAt),
    startedAt: row.started ? new Date(claimedAt) : null,
    finishedAt: null,
    result: null,
    progress: row.progress,
    errors: attemptErrorsOf(row.errors),
    workerId,
    cancelRequestedAt: null,
    traceContext: fromTraceColumns(row.trace_id, row.span_id, row.trace_flags),
  };
}
