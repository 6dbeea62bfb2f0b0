import { Module } from '@nestjs/common';
import { DiscoveryModule } from '@nestjs/core';
import { CronScheduler } from '../cron/cron-scheduler';
import { TaskRegistry } from '../decorators/task-registry';
import { JobQueueMaintenance } from '../maintenance/maintenance';
import { JobQueueService } from '../service/job-queue.service';
import { JobQueueTelemetry } from '../telemetry/job-queue-telemetry';
import { JobWaiter } from '../service/job-waiter';
import { JobQueueWorker } from '../worker/job-queue.worker';
import { JobQueueDatabase } from './job-queue-database';
import { ConfigurableJobQueueModule } from './job-queue.module-definition';

/**
 * `JobQueueModule.forRoot(options)` or `.forRootAsync({ imports, inject, useFactory })`.
 * Global by default (`isGlobal: false` to opt out).
 */
@Module({
  imports: [DiscoveryModule],
  providers: [JobQueueDatabase, TaskRegistry, JobWaiter, JobQueueTelemetry, JobQueueService, JobQueueWorker, CronScheduler, JobQueueMaintenance],
  // JobQueueDatabase and TaskRegistry for the optional integrations (dashboard, health), not for apps
  exports: [JobQueueService, JobQueueWorker, JobQueueMaintenance, JobQueueDatabase, TaskRegistry],
})
export class JobQueueModule extends ConfigurableJobQueueModule {}
