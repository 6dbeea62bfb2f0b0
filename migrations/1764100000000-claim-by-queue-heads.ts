import type { QueryRunner } from 'typeorm';
import { applyOnce, createIndex, dropIndex, forget, type JobQueueMigration, type MigrationContext } from './ledger';

/**
 * The claim walks unqueued jobs and queued jobs apart (claimJobs in sql/queries.ts), so that
 * a named queue's backlog is never walked past to reach other work: with 100,000 jobs in one
 * queue ahead of the rest, every claim used to walk all of them (160 ms a claim).
 *
 * - `jobs_fetch_unqueued_idx`: available jobs of no named queue, in fetch order.
 * - `jobs_fetch_queued_idx`: jobs of named queues, in fetch order, for the claim's short walk
 *   to their heads.
 * - `jobs_fetch_idx` goes: the two partial indexes hold the same entries between them, so an
 *   add writes as many index entries as before. Workers of the previous version claim without
 *   it by a scan and a sort of the due jobs (86 ms a claim at 200,000 jobs) until they are
 *   replaced: slower during a rolling deploy, never wrong.
 *
 * By the rules in docs/maintainers.md: indexes are built and dropped concurrently, outside a
 * transaction, and every step can run again.
 */
export function createClaimByQueueHeadsMigration(schema: string): new () => JobQueueMigration {
  return class ClaimByQueueHeads1764100000000 implements JobQueueMigration {
    readonly name = 'ClaimByQueueHeads1764100000000';
    readonly outsideTransaction = true;

    async up(q: QueryRunner): Promise<void> {
      await applyOnce(q, schema, this.name, (context) => this.apply(q, context), { outsideTransaction: true });
    }

    private async apply(q: QueryRunner, context: MigrationContext): Promise<void> {
      await createIndex(q, context, schema, 'jobs_fetch_unqueued_idx', `jobs (priority, run_at, id) where is_available and queue_name is null`);
      await createIndex(q, context, schema, 'jobs_fetch_queued_idx', `jobs (priority, run_at, id) where is_available and queue_name is not null`);
      await dropIndex(q, context, schema, 'jobs_fetch_idx');
    }

    async down(q: QueryRunner): Promise<void> {
      const context = { concurrently: !q.isTransactionActive };
      await createIndex(q, context, schema, 'jobs_fetch_idx', `jobs (priority, run_at, id) include (task_identifier, queue_name) where is_available`);
      await dropIndex(q, context, schema, 'jobs_fetch_queued_idx');
      await dropIndex(q, context, schema, 'jobs_fetch_unqueued_idx');
      await forget(q, schema, this.name);
    }
  };
}
