import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import type { Client } from 'pg';
import { createQueries } from '../../libs/job-queue/src/sql/queries';
import { closeTestApp, openTestApp, type TestApp, type TestDatabase } from '../support/app';
import { explainStatement, planNodes, statisticsSayJobsIsEmpty, type PlanNode } from '../support/plan';
import { scannedJobCounts } from '../support/scanned-counts';

const MILLION = 1_000_000;
/** The indexes that hold only jobs that are not plainly waiting: what countJobs may read `jobs` through. */
const APART_INDEXES = ['jobs_locked_by_idx', 'jobs_leftover_idx', 'jobs_retrying_idx', 'jobs_scheduled_idx'];

/** The plan's nodes on `jobs` and `blocked_jobs`, in a few words each: "Index Scan using jobs_scheduled_idx on jobs, 2000 rows". */
function scansOfJobs(plan: PlanNode): Array<{ text: string; index?: string; rows: number }> {
  return planNodes(plan)
    .filter((node) => node['Relation Name'] === 'jobs' || node['Relation Name'] === 'blocked_jobs')
    .map((node) => {
      const bitmap = node['Node Type'] === 'Bitmap Heap Scan' ? node.Plans?.find((child) => child['Node Type'] === 'Bitmap Index Scan') : undefined;
      const index = node['Index Name'] ?? bitmap?.['Index Name'];
      const rows = (Number(node['Actual Rows'] ?? 0) + Number(node['Rows Removed by Filter'] ?? 0)) * Number(node['Actual Loops'] ?? 1);
      return { text: `${node['Node Type']}${index ? ` using ${index}` : ''} on ${node['Relation Name']}, ${rows} rows`, index, rows };
    });
}

/**
 * Counts that do not grow with the backlog (issue 28): with a million jobs waiting, countJobs()
 * reads the counters and, of `jobs`, only the few thousand jobs that are held, retrying, left
 * over or scheduled, each through the index that holds only them. The plan is asserted, on
 * statistics that say `jobs` is empty (a drained table vacuumed, then filled) and on fresh
 * ones, as planned for the call and as a prepared statement's generic plan; the time is printed.
 */
describe('countJobs with a million jobs waiting', () => {
  let db: TestDatabase;
  let sql: Client;
  let t: TestApp;
  const statements = createQueries('job_queue');
  // statisticsSayJobsIsEmpty leaves one job scheduled a day ahead: the 2,001st
  const APART = { held: 50, leftover: 10, retrying: 500, scheduled: 2_001 };

  before(async () => {
    ({ db, sql, t } = await openTestApp('job_counts_million', { jobQueue: { worker: false, externalTasks: '*' } }));
    await sql.query(`insert into job_queue.workers (id) values ('some-worker')`);
    await statisticsSayJobsIsEmpty(sql);
    const started = Date.now();
    await sql.query(
      `insert into job_queue.jobs (task_identifier, queue_name)
       select case when n % 10 < 7 then 'email' else 'report' end, case when n % 5 = 0 then 'q' || (n % 3) end
       from generate_series(1, $1::int) n`,
      [MILLION],
    );
    await sql.query(`insert into job_queue.jobs (task_identifier, run_at) select 'email', now() + interval '1 hour' from generate_series(1, $1::int)`, [APART.scheduled - 1]);
    await sql.query(`insert into job_queue.jobs (task_identifier, attempts, last_error) select 'report', 1, 'boom' from generate_series(1, $1::int)`, [APART.retrying]);
    await sql.query(`insert into job_queue.jobs (task_identifier, attempts, max_attempts) select 'report', 3, 3 from generate_series(1, $1::int)`, [APART.leftover]);
    await sql.query(
      `insert into job_queue.jobs (task_identifier, attempts, locked_at, locked_by, started_at) select 'email', 1, now(), 'some-worker', now() from generate_series(1, $1::int)`,
      [APART.held],
    );
    await t.jobs.addFlow([
      { ref: 'first', identifier: 'flow_step' },
      { ref: 'then', identifier: 'flow_step', dependsOn: ['first'] },
    ]);
    console.log(`# ${MILLION} waiting jobs and ${Object.values(APART).reduce((a, b) => a + b)} others inserted in ${Date.now() - started} ms`);
  });
  after(() => closeTestApp({ db, sql, t }));

  async function assertPlans(label: string, log: (text: string) => void): Promise<void> {
    for (const generic of [false, true]) {
      const where = `${label}, ${generic ? 'generic' : 'custom'} plan`;
      const { plan, ms } = await explainStatement(sql, statements.countJobs, [], generic);
      const scans = scansOfJobs(plan);
      log(`${where}: ${ms.toFixed(1)} ms; ${scans.map((scan) => scan.text).join('; ')}`);
      assert.deepEqual(
        scans.filter((scan) => !scan.index || !APART_INDEXES.includes(scan.index)).map((scan) => scan.text),
        [],
        `${where}: jobs and blocked_jobs are read only through the indexes of the jobs apart`,
      );
      const read = scans.reduce((sum, scan) => sum + scan.rows, 0);
      const apart = Object.values(APART).reduce((a, b) => a + b);
      assert.ok(read <= apart, `${where}: ${read} rows of jobs read, at most the ${apart} jobs apart`);
    }
  }

  it('reads the counters and the jobs apart through their indexes, on statistics that say jobs is empty and on fresh ones, and counts exactly', async (ctx) => {
    await assertPlans('statistics of an empty table', (text) => ctx.diagnostic(text));
    await sql.query('analyze job_queue.jobs');
    await assertPlans('fresh statistics', (text) => ctx.diagnostic(text));

    const started = performance.now();
    const counts = await t.jobs.countJobs();
    ctx.diagnostic(`countJobs(): ${(performance.now() - started).toFixed(1)} ms`);
    assert.deepEqual(counts, await scannedJobCounts(sql));
    assert.equal(counts.byState.waiting, MILLION + 1, 'a million, and the flow\'s first step');
    assert.deepEqual(
      [counts.byState.scheduled, counts.byState.retrying, counts.byState.running, counts.byState.failed, counts.byState.blocked],
      [APART.scheduled, APART.retrying, APART.held, APART.leftover, 1],
    );
  });
});
