import type { JobQueueErrorCode } from '../core/errors';
import { cancelRefusal, validateReason } from '../core/cancel-outcome';
import type { Job } from '../core/job';
import { mergeQueueEventFilters, type QueueEventFilter } from '../core/queue-events';
import { validateJobIds, validateTaskIdentifier } from '../core/validate-job-spec';
import type { CliConnection } from './connection';
import { jobsById } from './jobs-read';

/** An id the action was refused for, with the code JobQueueService would throw. */
export interface Refusal {
  id: string;
  code: JobQueueErrorCode;
  message: string;
}

/** As JobQueueService.cancelJob() checks it. */

/**
 * JobQueueService.retryJobs(): failed and cancelled jobs back to the queue (the SQL function
 * retry_jobs). The service ignores the other ids; here each one is explained, from the job
 * as it is now: unknown, unfinished, or failed/cancelled all the same (a newer unfinished job
 * holds its key, or someone retried it meanwhile).
 */
export async function retryJobs(connection: CliConnection, ids: string[]): Promise<{ retried: Job[]; refused: Refusal[] }> {
  const jobIds = [...new Set(validateJobIds(ids))];
  const retriedIds = (await connection.run<{ id: string }>('retryJobs', [jobIds])).map((row) => row.id);
  const now = await jobsById(connection, jobIds);
  const refused = jobIds
    .filter((id) => !retriedIds.includes(id))
    .map((id): Refusal => {
      const job = now.get(id);
      if (!job) return { id, code: 'JQ_JOB_NOT_FOUND', message: `job ${id} does not exist (or retention has deleted it)` };
      if (job.state !== 'failed' && job.state !== 'cancelled') {
        return { id, code: 'JQ_INVALID_STATE', message: `job ${id} is ${job.state}: only a failed or cancelled job can be retried` };
      }
      return { id, code: 'JQ_INVALID_STATE', message: `job ${id} is ${job.state} but was not retried: a newer unfinished job holds its key ${JSON.stringify(job.key)}` };
    });
  return { retried: retriedIds.flatMap((id) => now.get(id) ?? []), refused };
}

/** What a cancel did: `cancelled` at once, or `requested` of the worker that holds the job (it ends cancelled once that worker lets go). */
export interface Cancelled {
  id: string;
  outcome: 'cancelled' | 'requested';
  job: Job | null;
}

/**
 * JobQueueService.cancelJob() for each id, one after the other: the SQL function cancel_job,
 * the cluster-wide `job:cancelled` event when it cancelled the job itself and someone listens
 * (as the service publishes it), then the job read back.
 */
export async function cancelJobs(connection: CliConnection, ids: string[], reason: string | undefined): Promise<{ done: Cancelled[]; refused: Refusal[] }> {
  const jobIds = [...new Set(validateJobIds(ids))];
  validateReason(reason);
  const done: Cancelled[] = [];
  const refused: Refusal[] = [];
  for (const id of jobIds) {
    const [{ outcome, state }] = await connection.run<{ outcome: string; state: string | null }>('cancelJob', [id, reason ?? null]);
    const refusal = cancelRefusal(id, outcome, state);
    if (refusal) refused.push({ id, code: refusal.code, message: refusal.detail });
    else {
      if (outcome === 'cancelled') await publishCancelled(connection, id);
      done.push({ id, outcome: outcome === 'cancelled' ? 'cancelled' : 'requested', job: (await jobsById(connection, [id])).get(id) ?? null });
    }
  }
  return { done, refused };
}

/** What QueueEventAudience.fresh() and cancelJob do: publish the cancel if a live listener wants it. */
async function publishCancelled(connection: CliConnection, id: string): Promise<void> {
  const rows = await connection.run<{ filter: QueueEventFilter }>('eventListenerFilters', []);
  const merged = mergeQueueEventFilters(rows.map((row) => row.filter));
  if (merged !== null) await connection.run('publishCancelled', [id, JSON.stringify(merged)]);
}

/** JobQueueService.retryFailedJobs(): every failed job of a task that retention keeps, 1,000 per statement. */
export async function retryFailedJobs(connection: CliConnection, task: string): Promise<number> {
  validateTaskIdentifier(task);
  let retried = 0;
  let cursor: [string | null, string | null] = [null, null];
  for (;;) {
    const [page] = await connection.run<{ retried: number; next_at: string | null; next_id: string | null }>('retryFailedOfTask', [task, ...cursor]);
    retried += page.retried;
    if (page.next_at === null) return retried;
    cursor = [page.next_at, page.next_id];
  }
}
