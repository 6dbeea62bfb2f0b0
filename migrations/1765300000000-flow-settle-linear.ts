import type { QueryRunner } from 'typeorm';
import { applyOnce, forget, type JobQueueMigration } from './ledger';
import { COUNT_SETTLED, FINISHED_COLUMNS, finishedOfBlocked, flowFunctionStatement, moveReadyJobs } from './1764300000000-flow-functions';
import { jobsChannel, quoteIdentifier } from './names';

/**
 * Settling a flow's finished jobs takes time in proportion to the dependents it touches
 * (issue 26's fan-out line, docs/benchmark.md "Flows"). The Flows migration's
 * settle_flow_jobs filtered rows with `not (id = any(array))`, once per row against a whole
 * array: a release's function runs generic plans (the release sets plan_cache_mode), where
 * PostgreSQL compares element by element, so a root that unblocks n jobs compared n × n ids
 * (10,000 dependents: 0.55 s of a 0.96 s release). This one:
 *
 * - locks the dependents in id order and reads their counts in one statement (the lock
 *   returns each row as it is under the lock, the latest count);
 * - fails the doomed dependents (a dependency failed under the `fail` policy) first, so that
 *   the rest need no filter against them: the doomed are no longer in blocked_jobs, and the
 *   counts of the others are read again after (that insert's trigger may have counted some
 *   of them down, one level down the graph);
 * - counts down only the jobs that do not move (`pending > n`: the others move with the
 *   count they had, never written), and not at all when every one moves (a fan-out's root);
 * - names the failed dependencies of a doomed job in one join, not per edge against the array;
 * - finds the unsettled edges of each finished job (and of each doomed one) in a LATERAL
 *   subquery, which refers to its job and so runs once per job: an index lookup by
 *   dependency_id, whatever the statistics say; then updates those edges by their ctid. Joined
 *   plainly, with statistics from before a large flow was added (few edges unsettled then, so
 *   `state is null` looked rare), PostgreSQL 18 scanned the table once, kept its rows and
 *   compared every finished job with every one of them: 1,390 jobs × 9,378 edges, 2.1 s of
 *   one release of a 10,000-wide fan. The edges are locked when found (FOR UPDATE gives the
 *   row as it is now), so their ctids still hold at the update.
 *
 * It also replaces reopen_flow_jobs (reopenLockingEdges below): a retry that brought a job back
 * to blocked_jobs while another of its dependencies completed beside it could leave it blocked
 * for good.
 *
 * What settle_flow_jobs settles, moves, fails and says is unchanged. Workers of earlier versions are not
 * concerned: the function runs in the trigger on finished_jobs, whoever finishes a job. A
 * function replaced in a transaction: statements before its commit run the old one.
 */
export function createFlowSettleLinearMigration(schema: string): new () => JobQueueMigration {
  const s = quoteIdentifier(schema);
  const jobs = jobsChannel(schema).replace(/'/g, "''");

  return class FlowSettleLinear1765300000000 implements JobQueueMigration {
    readonly name = 'FlowSettleLinear1765300000000';

    async up(q: QueryRunner): Promise<void> {
      await applyOnce(q, schema, this.name, async () => {
        await q.query(`
          create or replace function ${s}.settle_flow_jobs(done bigint[]) returns void
          language plpgsql volatile as $fn$
          declare
            v_dependents bigint[];
            v_counts integer[];
            v_doomed bigint[];
            v_ready bigint[];
            v_woken integer;
            v_edges tid[];
            v_staying bigint;
          begin
            -- The edges waiting for each finished job, locked: one index lookup per job, whatever the
            -- statistics say (the subquery refers to its job, so it runs once per job).
            select array_agg(w.edge) into v_edges
            from unnest(done) as d(id)
            cross join lateral (select u.ctid as edge from ${s}.job_dependencies u where u.dependency_id = d.id and u.state is null for update) w;
            if v_edges is null then
              return;
            end if;
            with settled as (
              update ${s}.job_dependencies e
              set (state, result, error, settled_at) = (
                select coalesce(f.state, 'cancelled'), f.result, f.last_error, now()
                from (select e.dependency_id) as v(id) left join ${s}.finished_jobs f on f.id = v.id)
              where e.ctid = any(v_edges)
              returning e.job_id, e.state <> 'completed' and e.policy = 'fail' as fails
            ),
${COUNT_SETTLED}            if v_doomed is not null then
              with recursive doomed(id) as (
                select unnest(v_doomed)
                union
                select w.job_id from doomed d
                cross join lateral (select e.job_id from ${s}.job_dependencies e where e.dependency_id = d.id and e.policy = 'fail' and e.state is null offset 0) w
              )
              select array_agg(id order by id) into v_doomed from doomed;
            end if;
            -- One lock order (by id) for every transaction that settles: none waits for another in a
            -- circle. Each row comes back as it is under its lock: the jobs whose last dependencies
            -- these are move with the count they have (it is never written). The locked rows are the
            -- preserved side of the join, so every one is read, and locked, whatever the join's plan
            -- (a merge join could stop at the last dependent, leaving doomed jobs past it unlocked).
            select array_agg(l.id) filter (where l.pending <= c.n), count(*) filter (where l.pending > c.n) into v_ready, v_staying
            from (select b.id, b.pending from ${s}.blocked_jobs b where b.id = any(v_dependents || coalesce(v_doomed, '{}')) order by b.id for update) l
            left join unnest(v_dependents, v_counts) as c(id, n) on c.id = l.id;
            if v_doomed is not null then
              with gone as (delete from ${s}.blocked_jobs b where b.id = any(v_doomed) returning b.*),
              reasons as (
                select e.job_id, string_agg(e.dependency_ref || case when e.state = 'cancelled' then ' was cancelled' else ' failed' end, ', ' order by e.dependency_ref) as text
                from gone g join ${s}.job_dependencies e on e.job_id = g.id
                left join unnest(v_doomed) as d(id) on d.id = e.dependency_id
                where e.policy = 'fail' and (e.state in ('failed', 'cancelled') or d.id is not null)
                group by e.job_id
              )
              insert into ${s}.finished_jobs (${FINISHED_COLUMNS})
              select ${finishedOfBlocked('g', `'failed'`, `'JQ_DEPENDENCY_FAILED: ' || coalesce(r.text, 'a dependency failed')`)}
              from gone g left join reasons r on r.job_id = g.id;
              -- The doomed are gone; the others' counts again, as that insert's trigger left them.
              select array_agg(b.id) filter (where b.pending <= c.n), count(*) filter (where b.pending > c.n) into v_ready, v_staying
              from ${s}.blocked_jobs b join unnest(v_dependents, v_counts) as c(id, n) on c.id = b.id;
            end if;
            if v_staying > 0 then
              update ${s}.blocked_jobs b set pending = b.pending - c.n
              from unnest(v_dependents, v_counts) as c(id, n)
              where b.id = c.id and b.pending > c.n;
            end if;
            if v_ready is not null then
${moveReadyJobs(s, jobs)}            end if;
          end;
          $fn$`);
        await q.query(reopenLockingEdges(schema));
      });
    }

    async down(q: QueryRunner): Promise<void> {
      for (const name of ['settle_flow_jobs', 'reopen_flow_jobs']) await q.query(flowFunctionStatement(schema, name));
      await forget(q, schema, this.name);
    }
  };
}

/** The statement of migration 7's reopen_flow_jobs after which the jobs to bring back (`v_chain`) are known. */
const CHAIN_KNOWN = 'into v_chain from reopened;\n';

/**
 * reopen_flow_jobs (retry_jobs of a flow's failed job) as migration 7 wrote it, with the edges of
 * the jobs it brings back from finished_jobs locked before it counts what they still wait for.
 * Unlocked, a dependency completing in a transaction not yet committed was counted as still to
 * come, and the job it settled stayed blocked for good (test/worker/flow-races.test.ts). Locked,
 * the count waits for that commit. Then the jobs to bring back are read again: a retry beside
 * this one that brought the same job back (it held those locks) has counted it in its flow, and
 * counted twice, the flow never ended. Edges are locked before blocked_jobs rows, as settle_flow_jobs
 * does, and by dependency, in index order, as settle_flow_jobs finds them.
 */
export function reopenLockingEdges(schema: string): string {
  const s = quoteIdentifier(schema);
  const original = flowFunctionStatement(schema, 'reopen_flow_jobs');
  if (!original.includes(CHAIN_KNOWN)) throw new Error("migration 7's reopen_flow_jobs has no statement to derive from");
  return original.replace(
    CHAIN_KNOWN,
    `${CHAIN_KNOWN}       perform 1 from ${s}.job_dependencies e where e.job_id = any(v_chain) order by e.dependency_id, e.ctid for update;\n` +
      // a retry beside this one may have brought some back already (it held those locks): they are its to count
      `       select array_agg(f.id order by f.id) into v_chain from ${s}.finished_jobs f where f.id = any(v_chain);\n`,
  );
}
