import type { QueryRunner } from 'typeorm';
import { addJobFunction } from './1764400000000-job-steps';
import { createFinishingFunctions } from './1764300000000-finishing-functions';
import { applyOnce, createIndex, dropIndex, forget, type JobQueueMigration, type MigrationContext } from './ledger';
import { jobsChannel, quoteIdentifier } from './names';

/**
 * Limits per group (`@Task(id, { groupConcurrency, groupRateLimit })` with the job spec `group`):
 *
 * - `jobs.group_key`, `finished_jobs.group_key`: the job's group (a tenant id, say), or null.
 *   Nullable with no default: no rewrite of the tables. The functions that finish jobs keep it
 *   (createFinishingFunctions with `groups`), and retry_jobs brings it back.
 * - `jobs_group_fetch_idx`: a group-limited claim's way to its groups and to each group's next
 *   jobs (sql/group-claim.ts). Partial on grouped jobs of no named queue, so a job without a
 *   group (every job of an app that uses none) costs it nothing. Built concurrently.
 * - `task_starts.group_key`: a start counted for a group's rate (null: the task's own rate), and
 *   its index.
 * - `task_slots`: slot leases of tasks limited by `globalConcurrency` alone (sql/slot-leases.ts):
 *   the slots a worker may fill with the task's jobs; gone with the worker's row.
 * - `add_grouped_job()`: add_job with the group and the trace context (one row version), for
 *   every keyed add of the library. `add_job()` (SQL callers, older workers) now takes a replaced
 *   job out of its group: a replace may also put it in a named queue, where no group may be.
 *
 * Workers of earlier versions ignore groups: they claim grouped jobs as any other (a group limit
 * holds once every worker runs this version), and count a group's starts into their task's rate
 * window (more than they need: never over a limit). It can run again.
 */
export function createJobGroupsMigration(schema: string): new () => JobQueueMigration {
  const s = quoteIdentifier(schema);
  const channel = jobsChannel(schema).replace(/'/g, "''");

  return class JobGroups1764900000000 implements JobQueueMigration {
    readonly name = 'JobGroups1764900000000';

    async up(q: QueryRunner): Promise<void> {
      await applyOnce(q, schema, this.name, (context) => this.apply(q, context), { outsideTransaction: true });
    }

    private async apply(q: QueryRunner, context: MigrationContext): Promise<void> {
      await q.query(`alter table ${s}.jobs add column if not exists group_key text`);
      await q.query(`alter table ${s}.finished_jobs add column if not exists group_key text`);
      await q.query(`alter table ${s}.task_starts add column if not exists group_key text`);
      await q.query(`
        create table if not exists ${s}.task_slots (
          task_identifier text not null,
          worker_id text not null references ${s}.workers (id) on delete cascade,
          slots integer not null check (slots >= 0),
          primary key (task_identifier, worker_id)
        )`);
      await createIndex(
        q,
        context,
        schema,
        'jobs_group_fetch_idx',
        `jobs (task_identifier, group_key, priority, run_at, id) where is_available and queue_name is null and group_key is not null`,
      );
      await q.query(`create index if not exists task_starts_group_time_idx on ${s}.task_starts (task_identifier, group_key, started_at) where group_key is not null`);
      await q.query(addJobFunction(s, channel, { batches: true, grouped: true }));
      await q.query(addJobFunction(s, channel, { batches: true, groupless: true }));
      for (const statement of createFinishingFunctions(schema, true, true)) await q.query(statement);
    }

    async down(q: QueryRunner): Promise<void> {
      for (const statement of createFinishingFunctions(schema, true, false)) await q.query(statement);
      await q.query(addJobFunction(s, channel, { batches: true }));
      await q.query(`drop function if exists ${s}.add_grouped_job(text, jsonb, text, timestamptz, integer, text, integer, text[], text, text, uuid, bigint, smallint)`);
      await dropIndex(q, { concurrently: !q.isTransactionActive }, schema, 'jobs_group_fetch_idx');
      await q.query(`drop index if exists ${s}.task_starts_group_time_idx`);
      await q.query(`drop table if exists ${s}.task_slots`);
      await q.query(`delete from ${s}.task_starts where group_key is not null`);
      await q.query(`alter table ${s}.task_starts drop column if exists group_key`);
      await q.query(`alter table ${s}.finished_jobs drop column if exists group_key`);
      await q.query(`alter table ${s}.jobs drop column if exists group_key`);
      await forget(q, schema, this.name);
    }
  };
}
