import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import type { Client } from 'pg';
import { createQueries } from '../../libs/job-queue/src/sql/queries';
import { CLAIM_SESSION_SETTINGS } from '../../libs/job-queue/src/worker/claim-connection';
import { closeTestApp, openTestApp, type TestApp, type TestDatabase } from '../support/app';
import { explainStatement, planNodes, statisticsSayJobsIsEmpty, type PlanNode } from '../support/plan';

/** As PostgreSQL infers them when the claim connection prepares the statement. */
const PARAMETER_TYPES = ['text[]', 'text[]', 'integer', 'text', 'integer', 'text[]'];
const CLAIM_SIZE = 100;

/** A step's rows, counting each of its loops and the rows it read and dropped. */
const handled = (n: PlanNode) => (n['Actual Rows'] + (n['Rows Removed by Filter'] ?? 0) + (n['Rows Removed by Index Recheck'] ?? 0)) * n['Actual Loops'];

/**
 * The claim's plan, whatever the statistics of `jobs` say and whether PostgreSQL plans it for
 * its parameters or keeps one generic plan (the claim runs prepared): it walks the fetch
 * indexes and stops at its limit, finds each named queue's head by an index probe, never
 * walks a queue's backlog, and updates the claimed rows by their ids.
 */
describe('the claim plan', () => {
  let db: TestDatabase;
  let sql: Client;
  let t: TestApp;

  before(async () => ({ db, sql, t } = await openTestApp('claim_plan', { jobQueue: { worker: false, externalTasks: '*' } })));
  after(() => closeTestApp({ db, sql, t }));

  /** Empties the tables; with 'say empty', leaves `jobs` as a vacuum of a drained table does: pages kept, reltuples about 1. */
  async function reset(statistics: 'analyzed' | 'say empty'): Promise<void> {
    await sql.query('truncate job_queue.jobs, job_queue.finished_jobs, job_queue.job_queues, job_queue.workers cascade');
    if (statistics === 'say empty') await statisticsSayJobsIsEmpty(sql);
    await sql.query(`insert into job_queue.workers (id) values ('plan-worker'), ('other-worker')`);
  }

  async function settle(statistics: 'analyzed' | 'say empty'): Promise<void> {
    if (statistics === 'analyzed') await sql.query('vacuum analyze job_queue.jobs');
    const { rows } = await sql.query(`select reltuples, relpages from pg_class where oid = 'job_queue.jobs'::regclass`);
    if (statistics === 'say empty') assert.ok(rows[0].reltuples <= 1 && rows[0].relpages > 10, `statistics of a drained table: ${JSON.stringify(rows[0])}`);
    else assert.ok(rows[0].reltuples > 1000, JSON.stringify(rows[0]));
  }

  /** One claim of CLAIM_SIZE for plan-worker, prepared, under the claim connection's settings; its plan and the ids it claimed (rolled back). */
  async function claim(planMode: 'force_custom_plan' | 'force_generic_plan', pausedQueues = '{}', tasks = '{work}'): Promise<{ plan: PlanNode; claimed: string[] }> {
    await sql.query('begin');
    try {
      await sql.query(CLAIM_SESSION_SETTINGS.replace(/\bset /g, 'set local '));
      await sql.query(`set local plan_cache_mode = ${planMode}`);
      await sql.query(`prepare claim(${PARAMETER_TYPES.join(', ')}) as ${createQueries('job_queue').claimJobs}`);
      const { rows } = await sql.query(`explain (analyze, format json) execute claim('${tasks}', '{}', ${CLAIM_SIZE}, 'plan-worker', 10, '${pausedQueues}')`);
      const plan = rows[0]['QUERY PLAN'][0].Plan as PlanNode;
      const { rows: claimed } = await sql.query<{ id: string }>(`select id::text from job_queue.jobs where locked_by = 'plan-worker' order by priority, run_at, id`);
      return { plan, claimed: claimed.map((r) => r.id) };
    } finally {
      await sql.query('rollback');
      await sql.query('deallocate all'); // prepared statements outlive a rollback
    }
  }

  /** No seq scan of jobs, and every primary-key scan of it by a list of ids (a pkey walk is a seq scan in order). */
  function assertJobsReachedByIndex(plan: PlanNode): void {
    const scans = planNodes(plan).filter((n) => n['Relation Name'] === 'jobs' && n['Node Type'] !== 'ModifyTable');
    const described = JSON.stringify(planNodes(plan).map((n) => [n['Node Type'], n['Index Name'], n['Index Cond'], handled(n)]));
    assert.ok(scans.length > 0 && scans.every((n) => n['Node Type'].includes('Index')), `every scan of jobs uses an index: ${described}`);
    assert.ok(
      scans.filter((n) => n['Index Name'] === 'jobs_pkey').every((n) => /^\(id = /.test(n['Index Cond'] ?? '')),
      `jobs_pkey is only probed by id (= any(ids), or one id a row): ${described}`,
    );
    // At most the claim's size of unqueued jobs (a claim beside it walks past those it does not
    // take) and of the heads ahead of the last of them: never a walk's worth.
    const locked = planNodes(plan).filter((n) => n['Node Type'] === 'LockRows').reduce((sum, n) => sum + handled(n), 0);
    assert.ok(locked <= 2 * CLAIM_SIZE, `rows locked: ${locked}`);
  }

  for (const planMode of ['force_custom_plan', 'force_generic_plan'] as const) {
    it(`probes each queue head by jobs_queue_order_idx when the statistics were taken before any queued job (${planMode === 'force_generic_plan' ? 'generic' : 'custom'} plan)`, async () => {
      // Analyzed with unqueued jobs only: the planner takes jobs_fetch_queued_idx for empty, and
      // a head lookup (queue_name fixed by its condition, so its order starts at priority) could
      // walk that index, every queue's jobs, under an incremental sort: 20,000 rows per head.
      await reset('analyzed');
      await sql.query(`insert into job_queue.jobs (task_identifier) select 'work' from generate_series(1, 15000)`);
      await settle('analyzed');
      await sql.query(`
        insert into job_queue.jobs (task_identifier, queue_name, run_at)
        select 'work', 'q' || (g % 20), now() - interval '2 hours' + g * interval '1 millisecond' from generate_series(1, 20000) g`);
      const { plan, claimed } = await claim(planMode);
      assertJobsReachedByIndex(plan);
      const steps = planNodes(plan).map((n) => ({ node: n['Node Type'], on: n['Index Name'] ?? n['Relation Name'], rows: handled(n) }));
      assert.ok(steps.every((step) => step.rows <= 8 * CLAIM_SIZE), `a step handled more than ${8 * CLAIM_SIZE} rows: ${JSON.stringify(steps)}`);
      assert.equal(claimed.length, CLAIM_SIZE);
    });
  }

  for (const statistics of ['analyzed', 'say empty'] as const) {
    for (const planMode of ['force_custom_plan', 'force_generic_plan'] as const) {
      const label = `${statistics === 'analyzed' ? 'fresh statistics' : 'statistics that say jobs is empty'}, ${planMode === 'force_generic_plan' ? 'generic' : 'custom'} plan`;

      it(`claims unqueued jobs by walking to the limit and updates them by id (${label})`, async () => {
        await reset(statistics);
        await sql.query(`insert into job_queue.jobs (task_identifier) select 'work' from generate_series(1, 15000)`);
        await settle(statistics);
        const { plan, claimed } = await claim(planMode);
        assert.equal(plan['Node Type'], 'ModifyTable');
        assert.equal(plan['Actual Rows'], CLAIM_SIZE, 'jobs claimed');
        assert.equal(claimed.length, CLAIM_SIZE);
        assertJobsReachedByIndex(plan);
        const steps = planNodes(plan).map((n) => ({ node: n['Node Type'], on: n['Index Name'] ?? n['Relation Name'], rows: handled(n) }));
        assert.ok(steps.every((step) => step.rows <= 4 * CLAIM_SIZE), `a step handled more than ${4 * CLAIM_SIZE} rows: ${JSON.stringify(steps)}`);
      });

      it(`never walks a named queue's backlog: held, free and waiting-for-retry queues of 20,000 jobs ahead of the rest (${label})`, async () => {
        await reset(statistics);
        // Ahead of everything in fetch order: a queue whose head another worker runs, a free
        // queue, and a queue whose head waits for its retry (its place kept by first_run_at).
        const ahead = (minutes: number) => `now() - interval '${minutes} minutes' + g * interval '1 millisecond'`;
        await sql.query(`insert into job_queue.jobs (task_identifier, queue_name, run_at) select 'work', 'held', ${ahead(60)} from generate_series(1, 20000) g`);
        await sql.query(`
          update job_queue.jobs set locked_at = now(), locked_by = 'other-worker', attempts = 1
          where id = (select min(id) from job_queue.jobs where queue_name = 'held')`);
        await sql.query(`insert into job_queue.job_queues (queue_name, locked_at, locked_by) values ('held', now(), 'other-worker')`);
        await sql.query(`insert into job_queue.jobs (task_identifier, queue_name, run_at) select 'work', 'free', ${ahead(50)} from generate_series(1, 20000) g`);
        await sql.query(`insert into job_queue.jobs (task_identifier, queue_name, run_at) select 'work', 'retrying', ${ahead(40)} from generate_series(1, 20000) g`);
        await sql.query(`
          update job_queue.jobs set attempts = 1, first_run_at = run_at, run_at = now() + interval '1 hour'
          where id = (select min(id) from job_queue.jobs where queue_name = 'retrying')`);
        // Behind them: unqueued jobs, and 300 small queues of one job each.
        await sql.query(`insert into job_queue.jobs (task_identifier, run_at) select 'work', ${ahead(30)} from generate_series(1, 1000) g`);
        await sql.query(`insert into job_queue.jobs (task_identifier, queue_name, run_at) select 'work', 'small-' || g, ${ahead(20)} from generate_series(1, 300) g`);
        await settle(statistics);

        const { plan, claimed } = await claim(planMode);
        assertJobsReachedByIndex(plan);
        const steps = planNodes(plan).map((n) => ({ node: n['Node Type'], on: n['Index Name'] ?? n['Relation Name'], rows: handled(n) }));
        // A walk of the held queue's backlog alone would be 20,000 rows.
        assert.ok(steps.every((step) => step.rows <= 8 * CLAIM_SIZE), `a step handled more than ${8 * CLAIM_SIZE} rows: ${JSON.stringify(steps)}`);

        const { rows: expected } = await sql.query<{ id: string }>(`
          select id::text from job_queue.jobs
          where id = (select min(id) from job_queue.jobs where queue_name = 'free') or (queue_name is null and run_at <= now())
          order by priority, run_at, id limit ${CLAIM_SIZE}`);
        assert.deepEqual(claimed, expected.map((r) => r.id), "the free queue's head, then unqueued jobs in order; nothing of the held or the waiting queue");
      });

      it(`never walks a paused queue's backlog: a paused queue of 20,000 jobs ahead of the rest (${label})`, async () => {
        await reset(statistics);
        const ahead = (minutes: number) => `now() - interval '${minutes} minutes' + g * interval '1 millisecond'`;
        await sql.query(`insert into job_queue.jobs (task_identifier, queue_name, run_at) select 'work', 'paused', ${ahead(60)} from generate_series(1, 20000) g`);
        await sql.query(`insert into job_queue.jobs (task_identifier, run_at) select 'work', ${ahead(30)} from generate_series(1, 1000) g`);
        await sql.query(`insert into job_queue.jobs (task_identifier, queue_name, run_at) select 'work', 'small-' || g, ${ahead(20)} from generate_series(1, 300) g`);
        await settle(statistics);
        const { plan, claimed } = await claim(planMode, '{paused}');
        assertJobsReachedByIndex(plan);
        const steps = planNodes(plan).map((n) => ({ node: n['Node Type'], on: n['Index Name'] ?? n['Relation Name'], rows: handled(n) }));
        assert.ok(steps.every((step) => step.rows <= 8 * CLAIM_SIZE), `a step handled more than ${8 * CLAIM_SIZE} rows: ${JSON.stringify(steps)}`);
        const { rows: expected } = await sql.query<{ id: string }>(`
          select id::text from job_queue.jobs where queue_name is null order by priority, run_at, id limit ${CLAIM_SIZE}`);
        assert.deepEqual(claimed, expected.map((r) => r.id), 'the unqueued jobs in order; nothing of the paused queue');
      });

      it(`never walks the backlog of a task it leaves out (paused, or over its limit): 20,000 of its jobs ahead of the rest (${label})`, async () => {
        await reset(statistics);
        const ahead = (minutes: number) => `now() - interval '${minutes} minutes' + g * interval '1 millisecond'`;
        await sql.query(`insert into job_queue.jobs (task_identifier, run_at) select 'paused_task', ${ahead(60)} from generate_series(1, 20000) g`);
        // Behind it, the claim's tasks: 'work', and 'other' (ahead of 'work' by one job); 'idle' has none.
        await sql.query(`insert into job_queue.jobs (task_identifier, run_at) select 'work', ${ahead(30)} from generate_series(1, 1000) g`);
        await sql.query(`insert into job_queue.jobs (task_identifier, run_at) values ('other', now() - interval '31 minutes')`);
        await settle(statistics);
        const { plan, claimed } = await claim(planMode, '{}', '{work,idle,other}');
        const { rows: expected } = await sql.query<{ id: string }>(`
          select id::text from job_queue.jobs where task_identifier in ('work', 'other') order by priority, run_at, id limit ${CLAIM_SIZE}`);
        assert.deepEqual(claimed, expected.map((r) => r.id), "the claimed tasks' jobs in order; nothing of the other");
        const steps = planNodes(plan).map((n) => ({ node: n['Node Type'], on: n['Index Name'] ?? n['Relation Name'], rows: handled(n) }));
        assert.ok(steps.every((step) => step.rows <= 8 * CLAIM_SIZE), `a step handled more than ${8 * CLAIM_SIZE} rows: ${JSON.stringify(steps)}`);
      });

      it(`starts its walk no later than the first job it may take: a task's first job not due yet, at a higher priority (${label})`, async () => {
        await reset(statistics);
        // 'work''s first job in fetch order (priority -1) waits an hour: the walk starts there, and still takes the due ones behind it.
        await sql.query(`insert into job_queue.jobs (task_identifier, priority, run_at) values ('work', -1, now() + interval '1 hour')`);
        await sql.query(`insert into job_queue.jobs (task_identifier, run_at) select 'work', now() - interval '1 minute' + g * interval '1 millisecond' from generate_series(1, 2000) g`);
        await settle(statistics);
        const { claimed } = await claim(planMode);
        const { rows: expected } = await sql.query<{ id: string }>(`
          select id::text from job_queue.jobs where run_at <= now() order by priority, run_at, id limit ${CLAIM_SIZE}`);
        assert.deepEqual(claimed, expected.map((r) => r.id));
      });

      it(`takes queue heads when its tasks have no due job of no queue (${label})`, async () => {
        await reset(statistics);
        await sql.query(`insert into job_queue.jobs (task_identifier, queue_name) select 'work', 'only-' || g from generate_series(1, 20) g`);
        await sql.query(`insert into job_queue.jobs (task_identifier) select 'paused_task' from generate_series(1, 2000)`);
        await settle(statistics);
        const { claimed } = await claim(planMode);
        const { rows: expected } = await sql.query<{ id: string }>(`select id::text from job_queue.jobs where queue_name is not null order by priority, run_at, id`);
        assert.deepEqual(claimed, expected.map((r) => r.id), 'every queue head of the task');
      });

      it(`counts a limited task's held jobs through jobs_locked_by_idx, and claims, never walking its backlog: 20,000 waiting, 50 held (${label})`, async () => {
        await reset(statistics);
        await sql.query(`insert into job_queue.jobs (task_identifier) select 'limited' from generate_series(1, 20000)`);
        await sql.query(`insert into job_queue.jobs (task_identifier, locked_by, locked_at, attempts) select 'limited', 'other-worker', now(), 1 from generate_series(1, 50)`);
        await settle(statistics);
        await sql.query('begin');
        try {
          await sql.query(CLAIM_SESSION_SETTINGS.replace(/\bset /g, 'set local '));
          const queries = createQueries('job_queue');
          // the count of a group-limited task's claim, and the counted claim of the others (count, claim and record in one statement)
          for (const [text, values] of [
            [queries.countTaskSlots, ['limited', 1000, 5, 'w', '{}']],
            [queries.claimCountedJobs, ['{limited}', '{}', 5, 'w', 5, '{}', 100, 1000, 5, '{}', null]],
          ] as const) {
            const { plan } = await explainStatement(sql, text, [...values], planMode === 'force_generic_plan');
            const steps = planNodes(plan).map((n) => ({ node: n['Node Type'], on: n['Index Name'] ?? n['Relation Name'], rows: handled(n) }));
            assert.ok(steps.some((step) => step.on === 'jobs_locked_by_idx'), `the held jobs are read from jobs_locked_by_idx: ${JSON.stringify(steps)}`);
            assert.ok(steps.every((step) => step.rows <= 100), `a step handled more than the held jobs: ${JSON.stringify(steps)}`);
          }
        } finally {
          await sql.query('rollback');
        }
      });
    }
  }
});
