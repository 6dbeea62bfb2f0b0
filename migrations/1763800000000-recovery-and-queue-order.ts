import type { QueryRunner } from 'typeorm';
import { applyOnce, createIndex, dropIndex, forget, type JobQueueMigration, type MigrationContext } from './ledger';
import { quoteIdentifier } from './names';

/**
 * Crash recovery and queue order through retries.
 *
 * - `workers.timeout_ms`: each worker row carries its own timeout, so replicas with
 *   different settings (or older code, which gets the default) are judged by their own terms.
 * - `jobs.started_at`: set when a job's handler starts; null while it is only claimed
 *   (prefetched). A dead worker's started jobs count an attempt, its prefetched ones don't.
 * - `jobs.first_run_at`: the run_at a job had before a retry first moved it. A job's place in
 *   its named queue is (priority, coalesce(first_run_at, run_at), id), fixed when it is added.
 * - `leases`: the maintenance leader's lease, on the database's clock.
 * - An index on `locked_by`, for the sweep that finds a dead worker's jobs and for the
 *   give-back at shutdown; the queue-head index by queue place replaces the one by run_at.
 *
 * By the rules in docs/maintainers.md: columns are added without a default that rewrites the
 * table, indexes are built concurrently outside a transaction, and every step can run again.
 */
export function createRecoveryAndQueueOrderMigration(schema: string): new () => JobQueueMigration {
  const s = quoteIdentifier(schema);

  return class RecoveryAndQueueOrder1763800000000 implements JobQueueMigration {
    readonly name = 'RecoveryAndQueueOrder1763800000000';
    readonly outsideTransaction = true;

    async up(q: QueryRunner): Promise<void> {
      await applyOnce(q, schema, this.name, (context) => this.apply(q, context), { outsideTransaction: true });
    }

    private async apply(q: QueryRunner, context: MigrationContext): Promise<void> {
      await q.query(`alter table ${s}.workers add column if not exists timeout_ms integer not null default 30000`);
      await q.query(`alter table ${s}.jobs add column if not exists started_at timestamptz`);
      await q.query(`alter table ${s}.jobs add column if not exists first_run_at timestamptz`);
      await q.query(`
        create table if not exists ${s}.leases (
          name text primary key,
          holder text not null,
          expires_at timestamptz not null
        )`);
      // Only held jobs have an entry: one index insert per claim, nothing for the rest.
      await createIndex(q, context, schema, 'jobs_locked_by_idx', `jobs (locked_by) where locked_by is not null`);
      await createIndex(
        q,
        context,
        schema,
        'jobs_queue_order_idx',
        `jobs (queue_name, priority, (coalesce(first_run_at, run_at)), id) where is_available and queue_name is not null`,
      );
      await dropIndex(q, context, schema, 'jobs_queue_head_idx');
    }

    async down(q: QueryRunner): Promise<void> {
      const context = { concurrently: !q.isTransactionActive };
      await createIndex(q, context, schema, 'jobs_queue_head_idx', `jobs (queue_name, priority, run_at, id) where is_available and queue_name is not null`);
      await dropIndex(q, context, schema, 'jobs_queue_order_idx');
      await dropIndex(q, context, schema, 'jobs_locked_by_idx');
      await q.query(`drop table if exists ${s}.leases`);
      await q.query(`alter table ${s}.jobs drop column if exists first_run_at, drop column if exists started_at`);
      await q.query(`alter table ${s}.workers drop column if exists timeout_ms`);
      await forget(q, schema, this.name);
    }
  };
}
