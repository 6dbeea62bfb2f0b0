/**
 * Every error this library throws on purpose is a JobQueueError with a stable `code`.
 * Codes are part of the public API: add new ones, never rename.
 */
export type JobQueueErrorCode =
  // job spec (add / addMany)
  | 'JQ_INVALID_TASK_IDENTIFIER'
  | 'JQ_INVALID_QUEUE_NAME'
  | 'JQ_INVALID_JOB_KEY'
  | 'JQ_INVALID_JOB_KEY_MODE'
  | 'JQ_INVALID_MAX_ATTEMPTS'
  | 'JQ_INVALID_PRIORITY'
  | 'JQ_INVALID_RUN_AT'
  | 'JQ_INVALID_PAYLOAD'
  | 'JQ_INVALID_FLAGS'
  | 'JQ_INVALID_GROUP'
  | 'JQ_INVALID_JOB_ID'
  | 'JQ_INVALID_SPEC'
  | 'JQ_NO_TRANSACTION'
  | 'JQ_ISOLATION_LEVEL'
  | 'JQ_WRONG_DATA_SOURCE'
  // module set-up
  | 'JQ_INVALID_SCHEMA'
  | 'JQ_INVALID_OPTIONS'
  | 'JQ_NO_DATA_SOURCE'
  | 'JQ_ENTITIES_NOT_REGISTERED'
  | 'JQ_TRANSACTION_POOLER'
  // tasks
  | 'JQ_DUPLICATE_TASK'
  | 'JQ_REQUEST_SCOPED_TASK'
  | 'JQ_INVALID_TASK_OPTIONS'
  | 'JQ_UNKNOWN_TASK'
  // flow control (task limits)
  | 'JQ_INVALID_LIMIT'
  // cron
  | 'JQ_INVALID_CRON_EXPRESSION'
  | 'JQ_INVALID_TIME_ZONE'
  | 'JQ_DUPLICATE_CRON'
  | 'JQ_REQUEST_SCOPED_CRON'
  | 'JQ_INVALID_CRONTAB'
  | 'JQ_PAYLOAD_TOO_LARGE'
  // schedules at run time (upsertSchedule, removeSchedule, pauseSchedule, resumeSchedule)
  | 'JQ_INVALID_SCHEDULE'
  | 'JQ_SCHEDULE_NOT_FOUND'
  | 'JQ_SCHEDULE_DECLARED_IN_CODE'
  // running jobs
  | 'JQ_JOB_TIMEOUT'
  | 'JQ_WORKER_LOST'
  | 'JQ_RESULT_NOT_JSON'
  | 'JQ_RESULT_TOO_LARGE'
  | 'JQ_INVALID_PROGRESS'
  | 'JQ_INVALID_EVENT'
  | 'JQ_JOB_FAILED_FOR_GOOD'
  | 'JQ_JOB_SNOOZED'
  | 'JQ_TRANSACTION_MISUSED'
  | 'JQ_BATCH_FAILED'
  // durable steps (ctx.step)
  | 'JQ_DUPLICATE_STEP'
  | 'JQ_INVALID_STEP'
  // the job lifecycle (cancelJob, retryJobs, waitForJob, listJobs)
  | 'JQ_JOB_NOT_FOUND'
  | 'JQ_JOB_FINISHED'
  | 'JQ_JOB_FAILED'
  | 'JQ_JOB_CANCELLED'
  | 'JQ_WAIT_TIMEOUT'
  | 'JQ_INVALID_STATE'
  | 'JQ_INVALID_CURSOR'
  | 'JQ_JOB_RUNNING'
  // flows
  | 'JQ_INVALID_FLOW'
  | 'JQ_DEPENDENCY_FAILED'
  | 'JQ_FLOW_FAILED'
  | 'JQ_FLOW_CANCELLED'
  | 'JQ_FLOW_NOT_FOUND'
  | 'JQ_DUPLICATE_STEP'
  // the dashboard
  | 'JQ_DASHBOARD_UNGUARDED'
  | 'JQ_INVALID_DASHBOARD_OPTIONS'
  // the admin CLI (the bin nestjs-job-queue; its exit code for each: cli/exit-codes.ts)
  | 'JQ_BAD_USAGE'
  | 'JQ_BAD_DATABASE_URL'
  | 'JQ_DB_UNREACHABLE'
  | 'JQ_DB_LOGIN_FAILED'
  | 'JQ_DB_ERROR'
  | 'JQ_SCHEMA_MISSING'
  | 'JQ_SCHEMA_OUTDATED'
  | 'JQ_MIGRATION_FAILED'
  | 'JQ_INTERNAL';

export class JobQueueError extends Error {
  override readonly name = 'JobQueueError';

  constructor(
    readonly code: JobQueueErrorCode,
    /** The message without its code. */
    readonly detail: string,
  ) {
    super(`${code}: ${detail}`);
  }

  /**
   * Rethrows a JobQueueError with where it happened in front (`addMany, job 3: ...`), under
   * its own code or `code`; anything else is rethrown as it is.
   */
  static rethrowAt(where: string, error: unknown, code?: JobQueueErrorCode): never {
    if (error instanceof JobQueueError) throw new JobQueueError(code ?? error.code, `${where}: ${error.detail}`);
    throw error;
  }
}

/** Narrowing helper for `catch (e)` blocks and tests. */
export function isJobQueueError(error: unknown, code?: JobQueueErrorCode): error is JobQueueError {
  return error instanceof JobQueueError && (code === undefined || error.code === code);
}
