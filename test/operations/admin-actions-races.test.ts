import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { isJobQueueError } from '../../libs/job-queue/src';
import { closeTestApp, openTestApp, type TestAppContext } from '../support/app';
import { connect } from '../support/database';
import { waitFor } from '../support/wait';

/**
 * deleteJob racing what changes the row under it: a worker's claim, a cancel that finishes the
 * job. The other side is played by a transaction of the test, held open until the delete
 * waits for it.
 */
describe('admin actions: deleteJob under concurrent changes', () => {
  let ctx: TestAppContext;
  before(async () => {
    ctx = await openTestApp('admin_actions_races', { jobQueue: { worker: false, externalTasks: '*' } });
  });
  after(() => closeTestApp(ctx));

  /** Runs `change` in a transaction, starts deleteJob(id), commits once the delete waits for the row, and returns how the delete ended. */
  async function deleteDuring(id: string, change: string): Promise<string> {
    const other = await connect(ctx.db.url);
    try {
      await other.query('begin');
      await other.query(change, [id]);
      const deleting = ctx.t.jobs.deleteJob(id).then(
        () => 'deleted',
        (error: unknown) => (isJobQueueError(error) ? error.code : String(error)),
      );
      const { rows } = await other.query('select pg_backend_pid() as pid');
      await waitFor('the delete to wait for the other transaction', async () => {
        const { rows: waiting } = await ctx.sql.query('select count(*)::int as n from pg_locks where not granted and $1 = any(pg_blocking_pids(pid))', [rows[0].pid]);
        return waiting[0].n > 0;
      });
      await other.query('commit');
      return await deleting;
    } finally {
      await other.end();
    }
  }

  it('a job a worker claims meanwhile is refused as held (JQ_JOB_RUNNING), and stays', async () => {
    const { id } = await ctx.t.jobs.add('x', {});
    const outcome = await deleteDuring(id, `update job_queue.jobs set locked_at = now(), locked_by = 'w-claim', attempts = 1, started_at = now() where id = $1`);
    assert.equal(outcome, 'JQ_JOB_RUNNING');
    const { rows } = await ctx.sql.query('select locked_by from job_queue.jobs where id = $1', [id]);
    assert.deepEqual(rows, [{ locked_by: 'w-claim' }]);
  });

  it('a job that finishes meanwhile is deleted from finished_jobs', async () => {
    const { id } = await ctx.t.jobs.add('x', {});
    // what a release does in one statement: out of jobs, into finished_jobs
    const outcome = await deleteDuring(
      id,
      `with gone as (delete from job_queue.jobs where id = $1 returning *)
       insert into job_queue.finished_jobs (id, task_identifier, queue_name, payload, priority, run_at, max_attempts, attempts, key, flags, errors, last_error, created_at, state, finished_at)
       select id, task_identifier, queue_name, payload, priority, run_at, max_attempts, attempts, key, flags, errors, last_error, created_at, 'cancelled', now() from gone`,
    );
    assert.equal(outcome, 'deleted');
    const { rows } = await ctx.sql.query('select (select count(*) from job_queue.jobs where id = $1)::int + (select count(*) from job_queue.finished_jobs where id = $1)::int as n', [id]);
    assert.equal(rows[0].n, 0);
  });
});
