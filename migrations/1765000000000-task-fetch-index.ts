import type { QueryRunner } from 'typeorm';
import { applyOnce, createIndex, dropIndex, forget, type JobQueueMigration, type MigrationContext } from './ledger';

/**
 * `jobs_task_fetch_idx`: each task's available jobs of no named queue, in fetch order. The
 * claim finds there, for each of its tasks, where that task's jobs begin, and starts its walk of
 * jobs_fetch_unqueued_idx at the first of them (sql/claim.ts `unqueued_from`): the jobs ahead of
 * it, of tasks the claim leaves out (paused, over a limit, another app's), are no longer read
 * one by one (a backlog of 100,000 of them cost every claim 18 ms). Built concurrently.
 *
 * Workers of earlier versions do not use it; it costs their adds one more index entry a job.
 * It can run again.
 */
export function createTaskFetchIndexMigration(schema: string): new () => JobQueueMigration {
  return class TaskFetchIndex1765000000000 implements JobQueueMigration {
    readonly name = 'TaskFetchIndex1765000000000';

    async up(q: QueryRunner): Promise<void> {
      await applyOnce(q, schema, this.name, (context) => this.apply(q, context), { outsideTransaction: true });
    }

    private async apply(q: QueryRunner, context: MigrationContext): Promise<void> {
      await createIndex(q, context, schema, 'jobs_task_fetch_idx', 'jobs (task_identifier, priority, run_at, id) where is_available and queue_name is null');
    }

    async down(q: QueryRunner): Promise<void> {
      await dropIndex(q, { concurrently: !q.isTransactionActive }, schema, 'jobs_task_fetch_idx');
      await forget(q, schema, this.name);
    }
  };
}
