import type { QueryRunner } from 'typeorm';
import { applyOnce, forget, type JobQueueMigration } from './ledger';
import { quoteIdentifier } from './names';

/**
 * Rate limits, holds and limits set at run time (`@Task(id, { rateLimit })`,
 * `ctx.rateLimited(retryAfter)`, `setTaskLimits` / `resetTaskLimits`):
 *
 * - `task_starts`: the starts of rate-limited tasks, one row per claim (`started` jobs at
 *   `started_at`, the claim's transaction time, which is also the jobs' `started_at`; `per_ms`,
 *   the window it was counted in). A rate-limited claim counts the rows of its window under the
 *   task's advisory lock; the maintenance leader deletes rows older than their window and than
 *   an hour. Only rate-limited tasks write here.
 * - `task_limits`: a task's limits set at run time, as a JSON object of the limits it overrides
 *   (`globalConcurrency`, `rateLimit: { max, perMs }`; a key with null removes that limit). Read
 *   by every worker as it reads `pauses`.
 * - `pauses.until`: a pause with an end (a task held by `ctx.rateLimited`); null for a pause
 *   until resumed. Workers of earlier versions read the row as a pause with no end, until the
 *   maintenance leader deletes it once it is over.
 *
 * New tables and a nullable column (no rewrite); one transaction, and it can run again.
 */
export function createTaskLimitsMigration(schema: string): new () => JobQueueMigration {
  const s = quoteIdentifier(schema);

  return class TaskLimits1764800000000 implements JobQueueMigration {
    readonly name = 'TaskLimits1764800000000';

    async up(q: QueryRunner): Promise<void> {
      await applyOnce(q, schema, this.name, async () => {
        await q.query(`
          create table if not exists ${s}.task_starts (
            task_identifier text not null,
            started_at timestamptz not null,
            started integer not null check (started > 0),
            per_ms bigint not null
          )`);
        await q.query(`create index if not exists task_starts_task_time_idx on ${s}.task_starts (task_identifier, started_at)`);
        await q.query(`
          create table if not exists ${s}.task_limits (
            task_identifier text primary key,
            limits jsonb not null check (jsonb_typeof(limits) = 'object'),
            updated_at timestamptz not null default now()
          )`);
        await q.query(`alter table ${s}.pauses add column if not exists until timestamptz`);
      });
    }

    async down(q: QueryRunner): Promise<void> {
      await q.query(`delete from ${s}.pauses where until is not null`);
      await q.query(`alter table ${s}.pauses drop column if exists until`);
      await q.query(`drop table if exists ${s}.task_limits`);
      await q.query(`drop table if exists ${s}.task_starts`);
      await forget(q, schema, this.name);
    }
  };
}
