/**
 * Acting on jobs on request (JobQueueService's admin calls), beside the data path (add → row
 * + NOTIFY → claim → run → release): remove, complete, fail, reschedule, cancel and retry
 * jobs, each through its SQL function from the migrations. `s` is the quoted schema.
 */

import { jobColumns } from './job-columns';

export function createAdminQueries(s: string) {
  return {
    /** $1 job key */
    removeJob: `select ${jobColumns('j')} from ${s}.remove_job($1::text) j where j.id is not null`,
    /** $1 ids */
    completeJobs: `select ${jobColumns('j')} from ${s}.complete_jobs($1::bigint[]) j`,
    /** $1 ids, $2 reason */
    permanentlyFailJobs: `select ${jobColumns('j')} from ${s}.permanently_fail_jobs($1::bigint[], $2::text) j`,
    /** $1 ids, $2 run_at, $3 priority, $4 attempts, $5 max_attempts */
    rescheduleJobs: `select ${jobColumns('j')} from ${s}.reschedule_jobs($1::bigint[], $2::timestamptz, $3::integer, $4::integer, $5::integer) j`,

    /** $1 id, $2 reason: see cancel_job() in the migration. */
    cancelJob: `select outcome, state from ${s}.cancel_job($1::bigint, $2::text)`,

    /** $1 ids: see retry_jobs() in the migration. */
    retryJobs: `select id::text from ${s}.retry_jobs($1::bigint[])`,
  };
}
