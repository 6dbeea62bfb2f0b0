import type { QueryRunner } from 'typeorm';
import { applyOnce, createIndex, dropIndex, forget, type JobQueueMigration, type MigrationContext } from './ledger';
import { createFinishingFunctions } from './1764300000000-finishing-functions';
import { createFlowAdminFunctions } from './1764300000000-flow-admin-functions';
import { createFlowFunctions, FLOW_FUNCTIONS } from './1764300000000-flow-functions';
import { quoteIdentifier } from './names';

/**
 * Flows: jobs that wait for other jobs (`addFlow`, `ctx.continueWith`, `completeJobs`).
 *
 * - `blocked_jobs`: a job whose dependencies have not all finished waits here, not in `jobs`,
 *   with `pending`, the count of its unfinished dependencies. No claim ever reads this table,
 *   so blocked jobs cost the claim nothing and workers of earlier versions (which claim from
 *   `jobs` alone) can never take one. A job leaves it for `jobs` (keeping its id) when its
 *   count reaches zero, or for `finished_jobs` when a dependency failed under the `fail` policy.
 * - `job_dependencies`: the edges (job, dependency), with the dependent's policy for a failed
 *   dependency, and, once the dependency finished, its state, result and error
 *   (`ctx.dependencyResults()` reads them here, whatever the retention). No index covers
 *   `state`, and half of each page is left free (fillfactor 50, as in blocked_jobs, whose
 *   count is updated), so that settling an edge is a HOT update: no index write.
 * - `flows`: one row per flow of more than one job, with `unfinished`, the count of its jobs
 *   not finished yet, and its state once none is.
 * - `jobs.flow_id`, `jobs.flow_ref` and the same in `finished_jobs`: a job's flow and its step.
 *   A job added alone has none (its flow is itself).
 * - The trigger `finished_jobs_settle_flows` (after each statement that inserts into
 *   finished_jobs, sharing the transition table of the counting triggers): the flow jobs a
 *   statement finished are recorded on their edges, their dependents counted down under their
 *   row locks (two dependencies finishing at once cannot both miss the zero) and moved, and
 *   their flows counted down, in the transaction that finished them.
 * - The SQL functions that finish jobs (complete_jobs, permanently_fail_jobs, cancel_job,
 *   retry_jobs) keep the flow columns and know blocked jobs; add_flow(jsonb) adds a flow.
 *
 * By the rules in docs/maintainers.md: columns are added without defaults, the one index on
 * `jobs` is built concurrently outside a transaction, and every step can run again. Workers of
 * the previous version keep working: they never see a blocked job; a flow job one of them
 * finishes loses its flow columns in finished_jobs, and the maintenance leader's flow sweep
 * settles its edges and counts its flow again.
 */
export function createFlowsMigration(schema: string): new () => JobQueueMigration {
  const s = quoteIdentifier(schema);

  return class Flows1764300000000 implements JobQueueMigration {
    readonly name = 'Flows1764300000000';
    readonly outsideTransaction = true;

    async up(q: QueryRunner): Promise<void> {
      await applyOnce(q, schema, this.name, (context) => this.apply(q, context), { outsideTransaction: true });
    }

    private async apply(q: QueryRunner, context: MigrationContext): Promise<void> {
      await q.query(`alter table ${s}.jobs add column if not exists flow_id bigint, add column if not exists flow_ref text`);
      await q.query(`alter table ${s}.finished_jobs add column if not exists flow_id bigint, add column if not exists flow_ref text`);
      await q.query(`
        create table if not exists ${s}.flows (
          id bigint primary key,
          state text not null default 'running',
          unfinished integer not null,
          created_at timestamptz not null default now(),
          updated_at timestamptz not null default now(),
          finished_at timestamptz
        )`);
      await q.query(`create index if not exists flows_running_idx on ${s}.flows (updated_at) where state = 'running'`);
      await q.query(`create index if not exists flows_finished_idx on ${s}.flows (finished_at) where state <> 'running'`);
      await q.query(`
        create table if not exists ${s}.blocked_jobs (
          id bigint primary key,
          task_identifier text not null,
          queue_name text,
          payload jsonb not null,
          priority smallint not null,
          run_at timestamptz,
          max_attempts smallint not null,
          flags text[] not null default '{}',
          trace_id uuid,
          span_id bigint,
          trace_flags smallint,
          flow_id bigint not null,
          flow_ref text,
          pending integer not null,
          created_at timestamptz not null default now()
        ) with (fillfactor = 50)`);
      await q.query(`create index if not exists blocked_jobs_flow_idx on ${s}.blocked_jobs (flow_id)`);
      await q.query(`
        create table if not exists ${s}.job_dependencies (
          job_id bigint not null,
          job_ref text,
          dependency_ref text not null,
          dependency_id bigint not null,
          flow_id bigint not null,
          policy text not null,
          state text,
          result jsonb,
          error text,
          settled_at timestamptz,
          primary key (job_id, dependency_ref)
        ) with (fillfactor = 50)`);
      await q.query(`create index if not exists job_dependencies_dependency_idx on ${s}.job_dependencies (dependency_id)`);
      await q.query(`create index if not exists job_dependencies_flow_idx on ${s}.job_dependencies (flow_id)`);
      await q.query(`create index if not exists finished_jobs_flow_idx on ${s}.finished_jobs (flow_id) where flow_id is not null`);
      await createIndex(q, context, schema, 'jobs_flow_idx', `jobs (flow_id) where flow_id is not null`);
      for (const statement of [...createFlowFunctions(schema), ...createFlowAdminFunctions(schema), ...createFinishingFunctions(schema)]) await q.query(statement);
      await q.query(`
        create or replace trigger finished_jobs_settle_flows after insert on ${s}.finished_jobs
        referencing new table as new_rows for each statement execute function ${s}.flow_jobs_finished()`);
    }

    async down(q: QueryRunner): Promise<void> {
      const context = { concurrently: !q.isTransactionActive };
      await q.query(`drop trigger if exists finished_jobs_settle_flows on ${s}.finished_jobs`);
      for (const statement of createFinishingFunctions(schema, false)) await q.query(statement);
      for (const fn of FLOW_FUNCTIONS) await q.query(`drop function if exists ${s}.${fn}`);
      await dropIndex(q, context, schema, 'jobs_flow_idx');
      await q.query(`drop index if exists ${s}.finished_jobs_flow_idx`);
      for (const table of ['job_dependencies', 'blocked_jobs', 'flows']) await q.query(`drop table if exists ${s}.${table}`);
      await q.query(`alter table ${s}.finished_jobs drop column if exists flow_id, drop column if exists flow_ref`);
      await q.query(`alter table ${s}.jobs drop column if exists flow_id, drop column if exists flow_ref`);
      await forget(q, schema, this.name);
    }
  };
}
