import type { MigrationInterface } from 'typeorm';
import { validateSchemaName } from '../libs/job-queue/src/sql/identifier';
import { createJobTablesMigration } from './1763700000000-create-job-tables';
import { createRecoveryAndQueueOrderMigration } from './1763800000000-recovery-and-queue-order';
import { createJobLifecycleMigration } from './1763900000000-job-lifecycle';
import { createOperationsMigration } from './1764000000000-operations';
import { createClaimByQueueHeadsMigration } from './1764100000000-claim-by-queue-heads';

/**
 * The migrations for a schema, oldest first. The module runs them itself at startup
 * (`migrationsRun`, default true); teams that run migrations with the TypeORM CLI add
 * these classes to their DataSource's `migrations` instead.
 */
export function createJobQueueMigrations(schema = 'job_queue'): Array<new () => MigrationInterface> {
  validateSchemaName(schema);
  return [
    createJobTablesMigration(schema),
    createRecoveryAndQueueOrderMigration(schema),
    createJobLifecycleMigration(schema),
    createOperationsMigration(schema),
    createClaimByQueueHeadsMigration(schema),
  ];
}

/** The migrations for the default schema `job_queue`. */
export const JobQueueMigrations = createJobQueueMigrations();
