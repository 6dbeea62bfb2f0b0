import { JobQueueError } from '../core/errors';
import { latestJobs, toJob, type Job, type JobRow } from '../core/job';
import { JOB_STATES, type JobState } from '../core/job-state';
import { LIMITS, optionalString, validateJobIds, validateTaskIdentifier } from '../core/validate-job-spec';
import { listStatements } from '../sql/read';
import type { CliConnection } from './connection';

export interface ListOptions {
  state?: string;
  task?: string;
  queue?: string;
  limit?: string;
}

/**
 * JobQueueService.listJobs()'s first page, with its checks and codes: the same statements
 * (sql/read.ts, chosen by listStatements), unprepared, so planned for their values as the
 * service's are; unfinished jobs first (newest first), then finished ones (last finished first).
 */
export async function listJobs(connection: CliConnection, options: ListOptions): Promise<Job[]> {
  const state = options.state as JobState | undefined;
  if (state !== undefined && !JOB_STATES.includes(state)) {
    throw new JobQueueError('JQ_INVALID_STATE', `state must be one of ${JOB_STATES.join(', ')}, got ${JSON.stringify(state)}`);
  }
  const task = options.task === undefined ? undefined : validateTaskIdentifier(options.task);
  const queue = optionalString(options.queue, 'JQ_INVALID_QUEUE_NAME', 'queue', LIMITS.queueNameLength);
  const limit = options.limit === undefined ? 50 : Number(options.limit);
  if (!Number.isInteger(limit) || limit < 1 || limit > 1000) throw new JobQueueError('JQ_INVALID_SPEC', `limit must be an integer from 1 to 1000, got ${options.limit}`);
  const statements = listStatements(state ?? null, task !== undefined);
  const rows: JobRow[] = [];
  if (statements.active) rows.push(...(await connection.run<JobRow>(statements.active, [task ?? null, queue, null, limit])));
  if (statements.finished && rows.length < limit) {
    rows.push(...(await connection.run<JobRow>(statements.finished, [task ?? null, queue, null, null, limit - rows.length])));
  }
  return rows.slice(0, limit).map((row) => toJob(row));
}

/** JobQueueService.getJob(), with JQ_JOB_NOT_FOUND for an unknown id. */
export async function showJob(connection: CliConnection, id: string): Promise<Job> {
  const [jobId] = validateJobIds([id]);
  const [row] = await connection.run<JobRow>('getJob', [jobId]);
  if (!row) throw new JobQueueError('JQ_JOB_NOT_FOUND', `job ${jobId} does not exist (or retention has deleted it)`);
  return toJob(row);
}

/** The jobs with these ids as they are now, by id (getJobs; a job caught moving between tables: its finished row, as the service reads it). */
export async function jobsById(connection: CliConnection, ids: string[]): Promise<Map<string, Job>> {
  return ids.length === 0 ? new Map() : latestJobs(await connection.run<JobRow>('getJobs', [ids]));
}
