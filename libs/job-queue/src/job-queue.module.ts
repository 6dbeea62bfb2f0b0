import { Module, type DynamicModule } from '@nestjs/common';
import { DiscoveryModule } from '@nestjs/core';
import { JOB_QUEUE_OPTIONS, resolveOptions, type JobQueueModuleOptions } from './core/options';
import { CronScheduler } from './cron/cron-scheduler';
import { JobQueueDatabase } from './db/job-queue-database';
import { PinnedConnection } from './db/pinned-connection';
import { JobQueueExplorer } from './discovery/job-queue-explorer';
import { TaskRegistry } from './discovery/task-registry';
import { JobQueueEvents } from './events/job-queue-events';
import { QueueEventAudience } from './events/queue-event-audience';
import { QueueEventStream } from './events/queue-event-stream';
import { ConfigurableJobQueueModule, JOB_QUEUE_MODULE_OPTIONS, JOB_QUEUE_OPTIONS_TYPE } from './job-queue.module-definition';
import { JobQueueMaintenance } from './maintenance/maintenance';
import { AmbientTransaction } from './peers/ambient-transaction';
import { JobClsContext } from './peers/job-cls-context';
import { JobQueueService } from './service/job-queue.service';
import { JobWaiter } from './service/job-waiter';
import { JobSpecValidator } from './service/job-spec-validator';
import { JobFlows } from './service/job-flows';
import { JobAdder } from './service/job-adder';
import { JobLimits } from './control/job-limits';
import { JobPauses } from './control/job-pauses';
import { JobSchedules } from './service/job-schedules';
import { LocalStart } from './service/local-start';
import { JobQueueTelemetry } from './telemetry/job-queue-telemetry';
import { JobQueueWorker } from './worker/job-queue.worker';
import { WorkerMembership } from './worker/membership';

/**
 * `JobQueueModule.forRoot(options)` or `.forRootAsync({ imports, inject, useFactory })`.
 * Global by default (`isGlobal: false` to opt out). The composition root: the options are
 * resolved here once (JOB_QUEUE_OPTIONS), and the worker's membership is what maintenance
 * and cron get as their PinnedConnection.
 */
@Module({
  imports: [DiscoveryModule],
  providers: [
    {
      provide: JOB_QUEUE_OPTIONS,
      inject: [JOB_QUEUE_MODULE_OPTIONS],
      useFactory: (options: JobQueueModuleOptions | undefined) => resolveOptions(options ?? {}),
    },
    JobQueueDatabase,
    TaskRegistry,
    JobWaiter,
    JobSpecValidator,
    JobFlows,
    JobAdder,
    JobPauses,
    JobLimits,
    JobSchedules,
    JobQueueTelemetry,
    JobQueueEvents,
    QueueEventAudience,
    QueueEventStream,
    AmbientTransaction,
    LocalStart,
    JobClsContext,
    JobQueueService,
    WorkerMembership,
    { provide: PinnedConnection, useExisting: WorkerMembership },
    JobQueueWorker,
    JobQueueExplorer,
    CronScheduler,
    JobQueueMaintenance,
  ],
  // JobQueueDatabase, TaskRegistry and the options for the optional integrations (dashboard, health, testing), not for apps
  exports: [JobQueueService, JobQueueWorker, JobQueueMaintenance, JobQueueDatabase, TaskRegistry, JobClsContext, JOB_QUEUE_OPTIONS],
})
export class JobQueueModule extends ConfigurableJobQueueModule {
  /** Every option has a default: `JobQueueModule.forRoot()` is enough. */
  static override forRoot(options: typeof JOB_QUEUE_OPTIONS_TYPE = {}): DynamicModule {
    return super.forRoot(options);
  }
}
