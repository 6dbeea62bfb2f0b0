import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import type { Client } from 'pg';
import { claimTokenOf } from '../../libs/job-queue/src/sql/release';
import { RELEASE_TYPES, releaseParameters } from '../../libs/job-queue/src/worker/release-parameters';
import { GENERIC_BEGIN } from '../../libs/job-queue/src/db/job-queue-database';
import { closeTestApp, openTestApp, type TestApp, type TestDatabase } from '../support/app';
import { planNodes, PREPARE_RELEASE, sqlLiteral, statisticsSayJobsIsEmpty, type PlanNode } from '../support/plan';

/**
 * releaseJobs runs with its generic plan (JobQueueDatabase.runGenericPlan), made without
 * knowing how many ids a flush names and with whatever statistics `jobs` has.
 * That plan must reach the named rows by their ids: a worker holds up to 200 × concurrency
 * jobs, and a plan that walks them (jobs_locked_by_idx) once per named id took seconds.
 */
describe('the release as a generic plan', () => {
  let db: TestDatabase;
  let sql: Client;
  let t: TestApp;

  before(async () => ({ db, sql, t } = await openTestApp('release_plan', { jobQueue: { worker: false, externalTasks: '*' } })));
  after(() => closeTestApp({ db, sql, t }));

  /**
   * A worker holding 5,000 jobs (every fourth keyed) beside a backlog of 20,000; the flush completes 250, fails 100 (to be
   * retried), marks 250 others started and 50 of those with progress. The keyed ones make `held` take rows: with none it
   * reads nothing, whatever its plan.
   */
  /** How many steps releaseOneFlush recorded before the flush (two per job) when completions are not kept. */
  let recordedSteps = 0;
  /** The statistics of `jobs` when the release's generic plan is made: 'a few rows when planned' makes it before the flush's rows are added. */
  type Statistics = 'analyzed' | 'say empty' | 'a few rows when planned';
  async function releaseOneFlush(statistics: Statistics, keepCompleted = true): Promise<PlanNode> {
    await sql.query('truncate job_queue.jobs, job_queue.finished_jobs, job_queue.workers, job_queue.job_steps cascade');
    await sql.query('deallocate all');
    if (statistics === 'say empty') await statisticsSayJobsIsEmpty(sql);
    if (statistics === 'a few rows when planned') {
      // The plan made as a worker's first flush makes it (runGenericPlan's preparation), on a table of 5 rows analyzed, before the rest comes.
      await sql.query('alter table job_queue.jobs set (autovacuum_enabled = false)');
      await sql.query(`insert into job_queue.jobs (task_identifier) select 'work' from generate_series(1, 5)`);
      await sql.query('vacuum analyze job_queue.jobs');
      await sql.query(`${GENERIC_BEGIN}; ${PREPARE_RELEASE}; explain execute release(${RELEASE_TYPES.map(() => 'null').join(', ')}); commit`);
    }
    await sql.query(`insert into job_queue.workers (id) values ('plan-worker')`);
    const { rows: held } = await sql.query<{ id: string; claim: string }>(`
      insert into job_queue.jobs (task_identifier, locked_at, locked_by, attempts, key)
      select 'work', now(), 'plan-worker', 1, case when g % 4 = 0 then 'plan-key-' || g end from generate_series(1, 5000) g
      returning id, ${claimTokenOf('jobs')} as claim`);
    await sql.query(`insert into job_queue.jobs (task_identifier) select 'work' from generate_series(1, 20000)`);
    // Completions not kept delete their durable steps: every job has two.
    if (!keepCompleted) recordedSteps = (await sql.query(`insert into job_queue.job_steps (job_id, name) select id, s from job_queue.jobs, unnest('{one,two}'::text[]) s`)).rowCount!;
    if (statistics === 'analyzed') await sql.query('vacuum analyze job_queue.jobs');
    const { rows: stats } = await sql.query(`select reltuples from pg_class where oid = 'job_queue.jobs'::regclass`);
    if (statistics === 'say empty') assert.ok(stats[0].reltuples <= 1, `statistics of a drained table: ${JSON.stringify(stats[0])}`);
    else if (statistics === 'a few rows when planned') assert.equal(stats[0].reltuples, 5, JSON.stringify(stats[0]));
    else assert.ok(stats[0].reltuples > 20000, JSON.stringify(stats[0]));

    const ids = held.map((r) => r.id);
    const claims = new Map(held.map((r) => [r.id, r.claim]));
    const completed = ids.slice(0, 250);
    const started = ids.slice(250, 500);
    const failed = ids.slice(500, 600);
    if (statistics !== 'a few rows when planned') await sql.query(PREPARE_RELEASE);
    try {
      const batch = {
        completed: completed.map((id) => ({ id, claim: claims.get(id)!, result: '{"sent":true}' })),
        failed: failed.map((id) => ({ id, claim: claims.get(id)!, error: 'mail server down', code: 'ECONNREFUSED', delayMs: 60_000 })),
        started,
        progress: new Map(started.slice(0, 50).map((id) => [id, '{"sent":3}'])),
        claims: new Map(started.map((id) => [id, claims.get(id)!])),
      };
      // EXPLAIN EXECUTE takes no bind parameters: the values go in as literals.
      const values = releaseParameters('plan-worker', batch, keepCompleted).map((value) => sqlLiteral(sql, value));
      // In a transaction begun as runGenericPlan begins its own: the plan is made (or was) with its settings.
      await sql.query(GENERIC_BEGIN);
      const { rows } = await sql.query(`explain (analyze, format json) execute release(${values.join(', ')})`).catch(async (error: unknown) => {
        await sql.query('rollback');
        throw error;
      });
      await sql.query('commit');
      return rows[0]['QUERY PLAN'][0].Plan as PlanNode;
    } finally {
      await sql.query('deallocate release');
    }
  }

  const described: Record<Statistics, string> = {
    analyzed: 'with statistics that are fresh',
    'say empty': 'with statistics that say the table is empty',
    'a few rows when planned': 'with its plan made when the table held 5 rows (analyzed), before the 25,000',
  };
  for (const [statistics, keepCompleted] of [['analyzed', true], ['say empty', true], ['say empty', false], ['a few rows when planned', true]] as const) {
    it(`reads no more rows of jobs than the flush names, ${described[statistics]}${keepCompleted ? '' : ', completions not kept (their steps deleted, among 50,000)'}`, async () => {
      const plan = await releaseOneFlush(statistics, keepCompleted);
      // 650 ids named (600 jobs): no step may handle more rows than twice that, counting each of
      // its loops (a nested loop over a list per row, or a walk of the 5,000 jobs the worker holds, would).
      // Rows a step read and dropped count too (EXPLAIN gives them per loop, as it does Actual Rows).
      const handled = (n: PlanNode) => (n['Actual Rows'] + (n['Rows Removed by Filter'] ?? 0) + (n['Rows Removed by Index Recheck'] ?? 0)) * n['Actual Loops'];
      const steps = planNodes(plan).map((n) => ({ node: n['Node Type'], on: n['Index Name'] ?? n['Relation Name'], rows: handled(n) }));
      assert.ok(steps.every((step) => step.rows <= 1300), `a step handled more than 1,300 rows: ${JSON.stringify(steps)}`);
      const jobsScans = planNodes(plan).filter((n) => n['Relation Name'] === 'jobs' && n['Node Type'] !== 'ModifyTable');
      assert.ok(jobsScans.length >= 5 && jobsScans.every((n) => n['Index Name'] === 'jobs_pkey' || n['Node Type'] === 'Bitmap Heap Scan'), JSON.stringify(steps));

      const { rows: finished } = await sql.query(`select count(*)::int as n from job_queue.finished_jobs where state = 'completed' and result = '{"sent":true}'`);
      assert.equal(finished[0].n, keepCompleted ? 250 : 0, 'completed jobs moved to finished_jobs, with their results (if kept)');
      if (!keepCompleted) {
        const { rows: steps } = await sql.query(`select count(*)::int as n from job_queue.job_steps`);
        assert.equal(steps[0].n, recordedSteps - 500, "the completed jobs' steps went, no other");
      }
      const { rows: marked } = await sql.query(`select count(*)::int as n from job_queue.jobs where started_at is not null`);
      assert.equal(marked[0].n, 250 + 100, 'start marks written (and kept by the retried jobs)');
      const { rows: retried } = await sql.query(`
        select count(*)::int as n from job_queue.jobs
        where locked_by is null and last_error = 'mail server down' and errors -> 0 ->> 'code' = 'ECONNREFUSED'
          and run_at > now() + interval '59 seconds'`);
      assert.equal(retried[0].n, 100, 'failures unlocked for their retry in a minute, with their error');
      const { rows: progressed } = await sql.query(`select count(*)::int as n from job_queue.jobs where progress = '{"sent":3}' and locked_by = 'plan-worker'`);
      assert.equal(progressed[0].n, 50, 'progress written');
    });
  }
});
