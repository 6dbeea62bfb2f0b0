import type { QueryRunner } from 'typeorm';
import { applyOnce, forget, type JobQueueMigration } from './ledger';
import { reopenChain } from './1764300000000-flow-functions';
import { reopenLockingEdges } from './1765300000000-flow-settle-linear';
import { quoteIdentifier } from './names';

/**
 * retryJobs of a flow's failed job brings back only the dependents whose `fail` dependencies
 * all come back with it. Until now, retrying A of a join on A and B, both failed for good, put the
 * join back to blocked with B's edge still failed: A's completion ran the join, though its
 * policy says a failed dependency fails it. Now such a dependent stays failed (and so do its
 * own `fail` dependents), with its edge from A waiting again; retrying B later brings it back,
 * counting A's edge as it then stands.
 *
 * reopen_flow_jobs as migration 17 left it (its edges locked before it counts, the jobs to bring
 * back read again under those locks), with the jobs that stay failed taken out before anything
 * is written; then the Flows migration's own steps (reopenChain). Those reset every edge out of
 * what comes back, a kept-failed dependent's too: a later retry of its other failed dependency
 * counts that edge as it then stands. Every set is built by hashing (EXCEPT, INTERSECT) or by
 * index lookups, never by `x = any(array)` filtering row by row, which a generic plan makes
 * n × m (docs/maintainers.md "Flows"). Workers of earlier versions are not concerned: retry_jobs calls this function, in
 * the database, whoever retries.
 */
export function createFlowRetryKeepsFailuresMigration(schema: string): new () => JobQueueMigration {
  const s = quoteIdentifier(schema);

  return class FlowRetryKeepsFailures1765400000000 implements JobQueueMigration {
    readonly name = 'FlowRetryKeepsFailures1765400000000';

    async up(q: QueryRunner): Promise<void> {
      await applyOnce(q, schema, this.name, async () => {
        await q.query(`
          create or replace function ${s}.reopen_flow_jobs(job_ids bigint[]) returns void
          language plpgsql volatile set enable_seqscan = off as $fn$
          declare
            v_chain bigint[];
            v_lost bigint[];
            v_flows bigint[];
            v_counts integer[];
          begin
            -- The dependents that failed because of these jobs (JQ_DEPENDENCY_FAILED), down the graph.
            -- Each job's dependents by index lookups: its edges in a LATERAL subquery, each dependent's
            -- row by a scalar subquery (an EXISTS is made a join), and no sequential scan (the
            -- function's SET: statistics taken while one wide fan filled job_dependencies say a
            -- dependency_id matches every row, and each lookup scanned the table, 109 s). Joined
            -- plainly, with finished_jobs filled since the statistics were taken, each level compared
            -- every job it reached with every dependency-failed job (a 10,000-wide fan: 6 s).
            with recursive reopened(id) as (
              select unnest(job_ids)
              union
              select w.job_id from reopened r
              cross join lateral (select e.job_id from ${s}.job_dependencies e where e.dependency_id = r.id offset 0) w
              where coalesce((select f.state = 'failed' and f.last_error like 'JQ_DEPENDENCY_FAILED:%' from ${s}.finished_jobs f where f.id = w.job_id), false)
            )
            select array_agg(c.id order by c.id) into v_chain from (select id from reopened except select unnest(job_ids)) c;
            -- Their edges, locked as settle_flow_jobs locks them (by dependency, in index order) and
            -- before any blocked_jobs row: a dependency completing beside this retry is counted once
            -- it commits. A retry beside this one may have brought some back already: its to count.
            perform 1 from ${s}.job_dependencies e where e.job_id = any(v_chain) order by e.dependency_id, e.ctid for update;
            select array_agg(f.id order by f.id) into v_chain from ${s}.finished_jobs f where f.id = any(v_chain);
            -- The dependencies that failed one of them under the \`fail\` policy and do not come back...
            select array_agg(d.id) into v_lost from (
              select e.dependency_id from ${s}.job_dependencies e
              where e.job_id = any(v_chain) and e.policy = 'fail' and e.state in ('failed', 'cancelled')
              except select unnest(job_ids || v_chain)
            ) d(id);
            -- ...keep those dependents failed, and theirs, down the \`fail\` edges.
            if v_lost is not null then
              with recursive kept_failed(id) as (
                (select e.job_id from ${s}.job_dependencies e
                 where e.dependency_id = any(v_lost) and e.policy = 'fail' and e.state in ('failed', 'cancelled')
                 intersect select unnest(v_chain))
                union
                select w.job_id from kept_failed k
                cross join lateral (select e.job_id from ${s}.job_dependencies e
                  where e.dependency_id = k.id and e.policy = 'fail' and e.state in ('failed', 'cancelled') offset 0) w
                -- only through jobs still failed by a dependency: one retried in this same call (no
                -- longer in finished_jobs) comes back, and so do its dependents
                where coalesce((select f.state = 'failed' and f.last_error like 'JQ_DEPENDENCY_FAILED:%' from ${s}.finished_jobs f where f.id = w.job_id), false)
              )
              select array_agg(c.id order by c.id) into v_chain from (select unnest(v_chain) except select id from kept_failed) c(id);
            end if;
${reopenChain(s)}          end;
          $fn$`);
      });
    }

    async down(q: QueryRunner): Promise<void> {
      await q.query(reopenLockingEdges(schema));
      await forget(q, schema, this.name);
    }
  };
}
