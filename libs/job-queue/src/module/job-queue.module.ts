import { Module, type DynamicModule } from '@nestjs/common';
import { DiscoveryModule } from '@nestjs/core';
import { CronScheduler } from '../cron/cron-scheduler';
import { TaskRegistry } from '../decorators/task-registry';
import { JobQueueMaintenance } from '../maintenance/maintenance';
import { AmbientTransaction } from '../service/ambient-transaction';
import { JobQueueService } from '../service/job-queue.service';
import { JobQueueTelemetry } from '../telemetry/job-queue-telemetry';
import { JobWaiter } from '../service/job-waiter';
import { LocalStart } from '../service/local-start';
import { JobClsContext } from '../worker/job-cls-context';
import { JobEventListeners } from '../worker/job-event-listeners';
import { JobQueueWorker } from '../worker/job-queue.worker';
import { JobQueueDatabase } from './job-queue-database';
import { ConfigurableJobQueueModule, JOB_QUEUE_OPTIONS_TYPE } from './job-queue.module-definition';

/**
 * `JobQueueModule.forRoot(options)` or `.forRootAsync({ imports, inject, useFactory })`.
 * Global by default (`isGlobal: false` to opt out).
 */
@Module({
  imports: [DiscoveryModule],
  providers: [JobQueueDatabase, TaskRegistry, JobWaiter, JobQueueTelemetry, AmbientTransaction, LocalStart, JobClsContext, JobQueueService, JobQueueWorker, JobEventListeners, CronScheduler, JobQueueMaintenance],
  // JobQueueDatabase and TaskRegistry for the optional integrations (dashboard, health), not for apps
  exports: [JobQueueService, JobQueueWorker, JobQueueMaintenance, JobQueueDatabase, TaskRegistry, JobClsContext],
})
export class JobQueueModule extends ConfigurableJobQueueModule {
  /** Every option has a default: `JobQueueModule.forRoot()` is enough. */
  static override forRoot(options: typeof JOB_QUEUE_OPTIONS_TYPE = {}): DynamicModule {
    return super.forRoot(options);
  }
}
