import type { MigrationInterface } from 'typeorm';
import { createJobTablesMigration } from './1763700000000-create-job-tables';
import { createRecoveryAndQueueOrderMigration } from './1763800000000-recovery-and-queue-order';
import { createJobLifecycleMigration } from './1763900000000-job-lifecycle';
import { createOperationsMigration } from './1764000000000-operations';
import { createClaimByQueueHeadsMigration } from './1764100000000-claim-by-queue-heads';
import { createEventListenersMigration } from './1764200000000-event-listeners';
import { createFlowsMigration } from './1764300000000-flows';
import { createJobStepsMigration } from './1764400000000-job-steps';
import { createJobCountsMigration } from './1764500000000-job-counts';
import { createPausesMigration } from './1764600000000-pauses';
import { createSchedulesMigration } from './1764700000000-schedules';
import { createTaskLimitsMigration } from './1764800000000-task-limits';
import { createJobGroupsMigration } from './1764900000000-job-groups';
import { createTaskFetchIndexMigration } from './1765000000000-task-fetch-index';
import { createJobsVacuumTruncateMigration } from './1765100000000-jobs-vacuum-truncate';
import { createFlowAddOnceMigration } from './1765200000000-flow-add-once';
import { createFlowSettleLinearMigration } from './1765300000000-flow-settle-linear';
import { createFlowRetryKeepsFailuresMigration } from './1765400000000-flow-retry-keeps-failures';
import { createFlowEdgeStatisticsMigration } from './1765500000000-flow-edge-statistics';

export { migrationLockKey, waitForLock, type JobQueueMigration } from './ledger';

/**
 * The migrations for a schema (a plain identifier: the library's createJobQueueMigrations
 * checks it), oldest first. The module runs them itself at startup
 * (`migrationsRun`, default true); teams that run migrations with the TypeORM CLI add
 * these classes to their DataSource's `migrations` instead.
 */
export function createJobQueueMigrations(schema = 'job_queue'): Array<new () => MigrationInterface> {
  return [
    createJobTablesMigration(schema),
    createRecoveryAndQueueOrderMigration(schema),
    createJobLifecycleMigration(schema),
    createOperationsMigration(schema),
    createClaimByQueueHeadsMigration(schema),
    createEventListenersMigration(schema),
    createFlowsMigration(schema),
    createJobStepsMigration(schema),
    createJobCountsMigration(schema),
    createPausesMigration(schema),
    createSchedulesMigration(schema),
    createTaskLimitsMigration(schema),
    createJobGroupsMigration(schema),
    createTaskFetchIndexMigration(schema),
    createJobsVacuumTruncateMigration(schema),
    createFlowAddOnceMigration(schema),
    createFlowSettleLinearMigration(schema),
    createFlowRetryKeepsFailuresMigration(schema),
    createFlowEdgeStatisticsMigration(schema),
  ];
}
