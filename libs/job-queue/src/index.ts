export { JobQueueModule } from './job-queue.module';
export { JOB_QUEUE_MODULE_OPTIONS } from './job-queue.module-definition';
export type { JobQueueModuleOptions, ForbiddenFlags, RetentionOptions } from './core/options';
export {
  JobQueueService,
  type RescheduleOptions,
  type ListJobsOptions,
  type JobPage,
  type JobCounts,
  type JobCountsReport,
} from './service/job-queue.service';
export { JobEndedError } from './service/job-waiter';
export { FlowEndedError } from './service/job-flows';
export type { PausedEntry } from './control/paused-entry';
export type { JobSchedule, ScheduleSpec } from './core/schedule';
export type { FlowStep, AddedFlow, Flow, FlowEdge, FlowState, DependencyResult, DependencyFailurePolicy } from './core/flow-steps';
export type { JobQueueTasks, TaskName, TaskPayload, TypedJobSpec } from './core/typed-tasks';
export type { Job, JobSpec, JobSpecWithIdentifier, JobKeyMode, JobState, JobProgress, JobAttemptError } from './core/job';
export { Task, type TaskOptions, type RetryDelay } from './decorators/task.decorator';
export { OnJobEvent } from './decorators/on-job-event.decorator';
export { OnQueueEvent, type OnQueueEventOptions } from './decorators/on-queue-event.decorator';
export type { JobContext, JobInfo, CronPayload, TransactionalJobContext, StepOptions } from './core/job-context';
export { JobQueueWorker, type WorkerStatus } from './worker/job-queue.worker';
export { PermanentJobError, SnoozeJob, BatchJobFailure, TaskRateLimited } from './core/handler-outcomes';
export type { CheckedRate, EffectiveLimits, RateLimit, StoredLimits, TaskLimitsOverride } from './core/limits';
export type { TaskLimitsEntry } from './control/job-limits';
export type { JobMiddleware, JobMiddlewareContext } from './core/middleware';
export { JobQueueMaintenance } from './maintenance/maintenance';
export type { JobQueueEvent, JobQueueEventType, JobQueueEventOf } from './core/events';
export { QUEUE_EVENT_TYPES, type QueueEvent, type QueueEventType, type QueueEventOf, type QueueEventBase } from './core/queue-events';
export { JobQueueError, isJobQueueError, type JobQueueErrorCode } from './core/errors';
export {
  createJobQueueEntities,
  JobQueueEntities,
  JobEntity,
  FinishedJobEntity,
  JobQueueEntity,
  KnownCrontabEntity,
  WorkerEntity,
  BlockedJobEntity,
  JobDependencyEntity,
  FlowEntity,
} from './entities/job-queue-entities';
export { createJobQueueMigrations, JobQueueMigrations } from './db/migrations';
export { runJobQueueMigrations } from './db/run-migrations';
