import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import type { Client } from 'pg';
import { createQueries } from '../../libs/job-queue/src/sql/queries';
import { CLAIM_SESSION_SETTINGS } from '../../libs/job-queue/src/worker/claim-connection';
import { closeTestApp, openTestApp, type TestApp, type TestDatabase } from '../support/app';
import { planNodes, type PlanNode } from '../support/plan';

/**
 * The claim's plan when the statistics say `jobs` is empty, as they do after a vacuum of a
 * drained table (the maintenance leader vacuums often): jobs added since are found by their
 * ids, never by walking the table once per candidate (1.5-3 s a claim of 250 among 15,000).
 */
describe('the claim on a table whose statistics say it is empty', () => {
  let db: TestDatabase;
  let sql: Client;
  let t: TestApp;

  before(async () => ({ db, sql, t } = await openTestApp('claim_plan', { jobQueue: { worker: false, externalTasks: '*' } })));
  after(() => closeTestApp({ db, sql, t }));

  it('updates the claimed jobs through the primary key, by their ids', async () => {
    // 20,000 jobs drained but one at the table's end: a vacuum leaves its pages, with reltuples about 1.
    await sql.query(`insert into job_queue.jobs (task_identifier) select 'work' from generate_series(1, 20000)`);
    await sql.query(`insert into job_queue.jobs (task_identifier, run_at) values ('work', now() + interval '1 day')`);
    await sql.query(`delete from job_queue.jobs where run_at <= now()`);
    await sql.query('vacuum job_queue.jobs');
    const { rows: stats } = await sql.query(`select reltuples, relpages from pg_class where oid = 'job_queue.jobs'::regclass`);
    assert.ok(stats[0].reltuples <= 1 && stats[0].relpages > 10, `statistics of a drained table: ${JSON.stringify(stats[0])}`);
    await sql.query(`insert into job_queue.jobs (task_identifier) select 'work' from generate_series(1, 15000)`);
    await sql.query(`insert into job_queue.workers (id) values ('plan-worker')`);

    const claim = createQueries('job_queue').claimJobs;
    await sql.query('begin');
    try {
      await sql.query(CLAIM_SESSION_SETTINGS.replace(/\bset /g, 'set local '));
      const { rows } = await sql.query(`explain (analyze, format json) ${claim}`, [['work'], [], 250, 'plan-worker', 10]);
      const plan = rows[0]['QUERY PLAN'][0].Plan as PlanNode;
      assert.equal(plan['Node Type'], 'ModifyTable');
      assert.equal(plan['Actual Rows'], 250, 'jobs claimed');
      // The update's own scan of jobs (the candidates' scan of jobs_fetch_idx is in an InitPlan/CTE below it too).
      const scans = planNodes(plan).filter((n) => n['Relation Name'] === 'jobs' && n['Index Name'] === 'jobs_pkey');
      assert.equal(scans.length, 1, JSON.stringify(planNodes(plan).map((n) => [n['Node Type'], n['Index Name'], n['Index Cond']])));
      assert.match(scans[0]['Index Cond'] ?? '', /= ANY/, 'found by id = any(the picked ids)');
      assert.equal(scans[0]['Actual Rows'], 250);
    } finally {
      await sql.query('rollback');
    }
  });
});
