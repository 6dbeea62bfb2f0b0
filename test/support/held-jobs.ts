import type { Client } from 'pg';
import type { ClaimToken } from '../../libs/job-queue/src/core/claim-token';
import { claimTokenOf } from '../../libs/job-queue/src/sql/release';
import type { ReleaseBatch } from '../../libs/job-queue/src/worker/release-batcher';

/** `count` jobs of task 'work' inserted as held by worker `workerId` (attempt 1 started), with their claims: for a release written by hand (writeReleases). */
export async function insertHeldJobs(sql: Client, workerId: string, count: number): Promise<Array<{ id: string; claim: ClaimToken }>> {
  const { rows } = await sql.query<{ id: string; claim: ClaimToken }>(`
    insert into job_queue.jobs (task_identifier, locked_at, locked_by, started_at, attempts)
    select 'work', now(), $2, now(), 1 from generate_series(1, $1) returning id, ${claimTokenOf('jobs')} as claim`, [count, workerId]);
  return rows;
}

/** A release batch with nothing in it, to spread the parts of a test's flush over. */
export const emptyBatch = (): ReleaseBatch => ({ completed: [], failed: [], started: [], progress: new Map(), claims: new Map() });
