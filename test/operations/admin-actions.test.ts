import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { isJobQueueError } from '../../libs/job-queue/src';
import { closeTestApp, openTestApp, type TestAppContext } from '../support/app';

/**
 * The dashboard's actions as JobQueueService methods: deleteJob (either table, never a held
 * job, waiters told) and retryFailedJobs (every failed job of a task, a page at a time). A
 * producer-only app: nothing runs the jobs, so every state is the test's doing.
 */
describe('admin actions: deleteJob and retryFailedJobs', () => {
  let ctx: TestAppContext;
  before(async () => {
    ctx = await openTestApp('admin_actions', { jobQueue: { worker: false, externalTasks: '*' } });
  });
  after(() => closeTestApp(ctx));

  const rows = async (table: string, ids: string[]) =>
    (await ctx.sql.query(`select id::text from job_queue.${table} where id = any($1::bigint[]) order by id`, [ids])).rows.map((row) => row.id as string);

  it('deleteJob removes a waiting or a finished job, tells its waiter, and refuses a held or unknown one', async () => {
    const { jobs } = ctx.t;
    const [waiting, finished, held] = await jobs.addMany(['a', 'b', 'c'].map((name) => ({ identifier: 'x', payload: { name } })));
    await jobs.completeJobs([finished.id]);
    assert.deepEqual(await rows('finished_jobs', [finished.id]), [finished.id]);
    // held: locked by a worker (this test plays it)
    await ctx.sql.query(`update job_queue.jobs set locked_at = now(), locked_by = 'w-test', started_at = now() where id = $1`, [held.id]);

    // checked from the start: the waiter may hear of the delete before deleteJob() returns
    const waiter = assert.rejects(jobs.waitForJob(waiting.id, { timeout: '10s' }), (error) => isJobQueueError(error, 'JQ_JOB_NOT_FOUND'), 'the waiter learns the job is gone');
    await jobs.deleteJob(waiting.id);
    await waiter;
    await jobs.deleteJob(finished.id);
    assert.deepEqual([...(await rows('jobs', [waiting.id, finished.id])), ...(await rows('finished_jobs', [waiting.id, finished.id]))], []);

    await assert.rejects(jobs.deleteJob(held.id), (error) => isJobQueueError(error, 'JQ_JOB_RUNNING'));
    assert.deepEqual(await rows('jobs', [held.id]), [held.id], 'the held job is still there');
    await assert.rejects(jobs.deleteJob(waiting.id), (error) => isJobQueueError(error, 'JQ_JOB_NOT_FOUND'));
    await assert.rejects(jobs.deleteJob('nope'), (error) => isJobQueueError(error, 'JQ_INVALID_JOB_ID'));
  });

  it('retryFailedJobs retries every failed job of one task, across pages of 1,000, and no other', async () => {
    const { jobs } = ctx.t;
    const add = async (identifier: string, n: number) => (await jobs.addMany(Array.from({ length: n }, (_, i) => ({ identifier, payload: { i } })))).map((job) => job.id);
    const mine = await add('sync', 2_345);
    const others = await add('other', 3);
    const cancelled = await add('sync', 2);
    await jobs.permanentlyFailJobs([...mine, ...others], 'broken');
    for (const id of cancelled) await jobs.cancelJob(id);

    assert.equal(await jobs.retryFailedJobs('sync'), mine.length);
    const { rows: back } = await ctx.sql.query(
      `select count(*)::int as n, count(*) filter (where attempts = 0 and run_at <= now())::int as due from job_queue.jobs where id = any($1::bigint[])`,
      [mine],
    );
    assert.deepEqual(back[0], { n: mine.length, due: mine.length }, 'every failed sync job is waiting again, due now, attempts reset');
    assert.deepEqual(await rows('finished_jobs', [...others, ...cancelled]), [...others, ...cancelled].sort((a, b) => Number(a) - Number(b)), 'other tasks and cancelled jobs untouched');
    assert.equal(await jobs.retryFailedJobs('sync'), 0);
    await assert.rejects(jobs.retryFailedJobs(''), (error) => isJobQueueError(error, 'JQ_INVALID_TASK_IDENTIFIER'));
  });
});
