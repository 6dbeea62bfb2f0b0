import type { JobState } from '../core/job-state';
import type { Job } from '../core/job';

/** Filters and page of listJobs(). */
export interface ListJobsOptions {
  /** Only jobs in this state. Without it: unfinished jobs first (newest first), then finished ones (last finished first). */
  state?: JobState;
  task?: string;
  queue?: string;
  /** Jobs per page, 1 to 1000. Default 50. */
  limit?: number;
  /** The `nextCursor` of the previous page. */
  cursor?: string | null;
}

export interface JobPage {
  jobs: Job[];
  /** Pass it back as `cursor` for the next page; null on the last page. */
  nextCursor: string | null;
}

/** How many jobs are in each state. */
export type JobCounts = Record<JobState, number>;

export interface JobCountsReport {
  byState: JobCounts;
  byTask: Record<string, JobCounts>;
  byQueue: Record<string, JobCounts>;
}

export interface RescheduleOptions {
  runAt?: Date;
  priority?: number;
  attempts?: number;
  maxAttempts?: number;
}
