import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { createQueries } from '../../libs/job-queue/src/sql/queries';
import { closeTestApp, openTestApp, type TestAppContext } from '../support/app';
import { planNodes, type PlanNode } from '../support/plan';

const QUEUES = 100_000;
const HELD = ['q10', 'q20', 'q30', 'q40', 'q50'];

/**
 * The overview's "Queues held up" (blockedQueues) among 100,000 named queues, each with a
 * waiting job and one behind it: five held up behind a head waiting for its retry, one whose
 * second job (not its head) was tried. It looks up the heads of the queues with a tried job,
 * never every queue's. Its time is printed, not asserted; its plan is.
 */
describe('dashboard: blockedQueues with 100,000 queues', () => {
  let ctx: TestAppContext;
  const statement = createQueries('job_queue').blockedQueues;

  before(async () => {
    ctx = await openTestApp('dashboard_blocked_queues', { jobQueue: { worker: false, externalTasks: '*' } });
    await ctx.sql.query(`insert into job_queue.jobs (task_identifier, queue_name) select 'work', 'q' || g from generate_series(1, $1) g, generate_series(1, 2)`, [QUEUES]);
    await ctx.sql.query(`insert into job_queue.job_queues (queue_name) select 'q' || g from generate_series(1, $1) g`, [QUEUES]);
    // the heads of HELD failed once and wait an hour for their retry (as a release leaves them)
    await ctx.sql.query(
      `update job_queue.jobs set attempts = 1, first_run_at = run_at, run_at = now() + interval '1 hour', last_error = 'down'
       where id in (select min(id) from job_queue.jobs where queue_name = any($1) group by queue_name)`,
      [HELD],
    );
    // q60's second job was tried and waits behind a head that never was: q60 is not held up
    await ctx.sql.query(`update job_queue.jobs set attempts = 1 where id = (select max(id) from job_queue.jobs where queue_name = 'q60')`);
  });
  after(() => closeTestApp(ctx));

  for (const statistics of ['as filled', 'analyzed'] as const) {
    it(`lists the held-up queues and looks up only the heads of queues with a tried job (statistics ${statistics})`, async (t) => {
      if (statistics === 'analyzed') await ctx.sql.query('analyze job_queue.jobs, job_queue.job_queues');
      const started = process.hrtime.bigint();
      const { rows } = await ctx.sql.query(statement);
      t.diagnostic(`blockedQueues with ${QUEUES.toLocaleString('en-US')} queues (statistics ${statistics}): ${(Number(process.hrtime.bigint() - started) / 1e6).toFixed(1)} ms`);
      assert.deepEqual(rows.map((row) => [row.queue_name, row.attempts, row.behind]), HELD.map((queue) => [queue, 1, 1]));

      const plan = (await ctx.sql.query(`explain (analyze, format json) ${statement}`)).rows[0]['QUERY PLAN'][0].Plan as PlanNode;
      const nodes = planNodes(plan);
      assert.deepEqual(nodes.filter((n) => n['Relation Name'] === 'job_queues').map((n) => n['Node Type']), [], 'job_queues is not read');
      const headLookups = nodes.filter((n) => n['Index Name'] === 'jobs_queue_order_idx');
      assert.ok(headLookups.length > 0, 'the heads are looked up by jobs_queue_order_idx');
      for (const node of headLookups) {
        assert.ok(node['Actual Loops'] <= HELD.length + 1, `${node['Node Type']} on jobs_queue_order_idx: ${node['Actual Loops']} loops, one per queue with a tried job at most`);
      }
      assert.ok(nodes.filter((n) => n['Relation Name'] === 'jobs' && /Seq Scan/.test(n['Node Type'])).length <= 1, 'jobs is read whole once at most');
    });
  }
});
