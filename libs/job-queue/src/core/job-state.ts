/** A job's states, as getJob() and listJobs() report them. */
export const JOB_STATES = ['waiting', 'scheduled', 'running', 'retrying', 'completed', 'failed', 'cancelled'] as const;
export type JobState = (typeof JOB_STATES)[number];
/** The states of `finished_jobs`: a job in one of them never runs again (unless retried by hand). */
export const FINISHED_STATES = ['completed', 'failed', 'cancelled'] as const;
