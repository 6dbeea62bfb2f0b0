import { JOB_STATES, type JobState } from './job-state';

/** How many jobs are in each state. */
export type JobCounts = Record<JobState, number>;

export interface JobCountsReport {
  byState: JobCounts;
  byTask: Record<string, JobCounts>;
  byQueue: Record<string, JobCounts>;
}

/** A row of sql countJobs. */
export interface JobCountRow {
  state: JobState;
  task_identifier: string;
  queue_name: string | null;
  count: string;
}

/** countJobs's rows as countJobs() reports them (the service's and the CLI's status): every state of JOB_STATES, in all, per task, per named queue. */
export function countsReport(rows: readonly JobCountRow[]): JobCountsReport {
  const empty = (): JobCounts => Object.fromEntries(JOB_STATES.map((state) => [state, 0])) as JobCounts;
  const report: JobCountsReport = { byState: empty(), byTask: {}, byQueue: {} };
  for (const row of rows) {
    const count = Number(row.count);
    report.byState[row.state] += count;
    (report.byTask[row.task_identifier] ??= empty())[row.state] += count;
    if (row.queue_name !== null) (report.byQueue[row.queue_name] ??= empty())[row.state] += count;
  }
  return report;
}
