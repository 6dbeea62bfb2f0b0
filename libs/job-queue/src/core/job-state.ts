/** A job's states, as getJob() and listJobs() report them. `blocked`: a job of a flow waiting for its dependencies (addFlow). */
export const JOB_STATES = ['blocked', 'waiting', 'scheduled', 'running', 'retrying', 'completed', 'failed', 'cancelled'] as const;
export type JobState = (typeof JOB_STATES)[number];
/** The states of `finished_jobs`: a job in one of them never runs again (unless retried by hand). */
export const FINISHED_STATES = ['completed', 'failed', 'cancelled'] as const;
