import type { Client } from 'pg';
import { countsReport, type JobCountRow, type JobCountsReport } from '../../libs/job-queue/src/core/job-counts';
import { activeState } from '../../libs/job-queue/src/sql/read';

/**
 * The counts countJobs() must give, by the slow way it gave them before the counters
 * (JobCounts1764500000000): every unfinished job's state read from its row, the finished ones
 * counted in finished_jobs itself. What the counters are checked against.
 */
export async function scannedJobCounts(sql: Pick<Client, 'query'>, schema = 'job_queue'): Promise<JobCountsReport> {
  const { rows } = await sql.query<JobCountRow>(`
    select state, task_identifier, queue_name, count(*)::text as count
    from (select ${activeState('j')} as state, j.task_identifier, j.queue_name from ${schema}.jobs j
          union all select 'blocked', b.task_identifier, b.queue_name from ${schema}.blocked_jobs b
          union all select f.state, f.task_identifier, f.queue_name from ${schema}.finished_jobs f) every_job
    group by 1, 2, 3`);
  return countsReport(rows);
}
