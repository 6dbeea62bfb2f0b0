export { JobQueueModule } from './module/job-queue.module';
export { JOB_QUEUE_MODULE_OPTIONS } from './module/job-queue.module-definition';
export type { JobQueueModuleOptions, ForbiddenFlags, RetentionOptions } from './module/job-queue.options';
export {
  JobQueueService,
  type RescheduleOptions,
  type ListJobsOptions,
  type JobPage,
  type JobCounts,
  type JobCountsReport,
} from './service/job-queue.service';
export { JobEndedError } from './service/job-waiter';
export type { JobQueueTasks, TaskName, TaskPayload, TypedJobSpec } from './service/typed-tasks';
export type { Job, JobSpec, JobSpecWithIdentifier, JobKeyMode, JobState, JobProgress, JobAttemptError } from './service/job';
export { Task, type TaskOptions, type RetryDelay } from './decorators/task.decorator';
export { OnJobEvent } from './decorators/on-job-event.decorator';
export type { JobContext, JobInfo, CronPayload, TransactionalJobContext } from './decorators/job-context';
export { JobQueueWorker, type WorkerStatus } from './worker/job-queue.worker';
export { PermanentJobError, SnoozeJob } from './worker/handler-outcomes';
export type { JobMiddleware, JobMiddlewareContext } from './worker/job-middleware';
export { JobQueueMaintenance } from './maintenance/maintenance';
export type { JobQueueEvent, JobQueueEventType, JobQueueEventOf } from './worker/events';
export { JobQueueError, isJobQueueError, type JobQueueErrorCode } from './errors';
export {
  createJobQueueEntities,
  JobQueueEntities,
  JobEntity,
  FinishedJobEntity,
  JobQueueEntity,
  KnownCrontabEntity,
  WorkerEntity,
} from './entities/job-queue-entities';
export { createJobQueueMigrations, JobQueueMigrations } from './migrations';
export { runJobQueueMigrations } from './migrate/run-migrations';
