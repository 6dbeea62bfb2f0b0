export { JobQueueModule } from './module/job-queue.module';
export { JOB_QUEUE_MODULE_OPTIONS } from './module/job-queue.module-definition';
export type { JobQueueModuleOptions, ForbiddenFlags } from './module/job-queue.options';
export { JobQueueService, type RescheduleOptions } from './service/job-queue.service';
export type { Job, JobSpec, JobSpecWithIdentifier, JobKeyMode } from './service/job';
export { Task, type TaskOptions, type RetryDelay } from './decorators/task.decorator';
export type { JobContext, JobInfo, CronPayload } from './decorators/job-context';
export { JobQueueWorker } from './worker/job-queue.worker';
export { JobQueueMaintenance } from './maintenance/maintenance';
export type { JobQueueEvent, JobQueueEventType } from './worker/events';
export { JobQueueError, isJobQueueError, type JobQueueErrorCode } from './errors';
export {
  createJobQueueEntities,
  JobQueueEntities,
  JobEntity,
  JobQueueEntity,
  KnownCrontabEntity,
  WorkerEntity,
} from './entities/job-queue-entities';
export { createJobQueueMigrations, JobQueueMigrations } from '../../../migrations';
export { runJobQueueMigrations } from './migrate/run-migrations';
