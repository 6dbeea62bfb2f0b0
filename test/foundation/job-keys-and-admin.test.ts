import assert from 'node:assert/strict';
import { after, before, beforeEach, describe, it } from 'node:test';
import type { Client } from 'pg';
import { closeTestApp, openTestApp, type TestApp, type TestDatabase } from '../support/app';

describe('job keys and admin functions', () => {
  let db: TestDatabase;
  let t: TestApp;
  let sql: Client;

  before(async () => {
    ({ db, sql, t } = await openTestApp('keys', { jobQueue: { worker: false, externalTasks: '*' } }));
  });
  after(() => closeTestApp({ db, sql, t }));
  beforeEach(async () => {
    await sql.query('delete from job_queue.jobs');
  });

  /** What a worker does when it claims a job. */
  const lock = (id: string) => sql.query(`update job_queue.jobs set locked_at = now(), locked_by = 'other-worker', attempts = attempts + 1 where id = $1`, [id]);
  const rows = async () => (await sql.query('select id::text, key, payload, attempts, max_attempts, revision, run_at, locked_by, last_error from job_queue.jobs order by id')).rows;

  it('replace: the keyed job is updated in place, revision bumped, run_at replaced', async () => {
    const first = await t.jobs.add('k', { v: 1 }, { jobKey: 'key', runAt: new Date(Date.now() + 60_000) });
    const runAt = new Date(Date.now() + 120_000);
    const second = await t.jobs.add('k', { v: 2 }, { jobKey: 'key', runAt, priority: 3 });
    assert.equal(second.id, first.id);
    assert.equal(second.revision, 1);
    assert.deepEqual(second.payload, { v: 2 });
    assert.equal(second.priority, 3);
    assert.equal(second.runAt.getTime(), runAt.getTime());
    assert.equal((await rows()).length, 1);
  });

  it('preserve_run_at: payload replaced, run_at kept while the job has not been tried', async () => {
    const runAt = new Date(Date.now() + 60_000);
    const first = await t.jobs.add('k', { v: 1 }, { jobKey: 'debounce', runAt, jobKeyMode: 'preserve_run_at' });
    const second = await t.jobs.add('k', { v: 2 }, { jobKey: 'debounce', runAt: new Date(Date.now() + 999_000), jobKeyMode: 'preserve_run_at' });
    assert.equal(second.id, first.id);
    assert.deepEqual(second.payload, { v: 2 });
    assert.equal(second.runAt.getTime(), runAt.getTime());
    // once it has been tried (a retry is pending), run_at is replaced as in replace mode
    await sql.query(`update job_queue.jobs set attempts = 1 where id = $1`, [first.id]);
    const later = new Date(Date.now() + 30_000);
    const third = await t.jobs.add('k', { v: 3 }, { jobKey: 'debounce', runAt: later, jobKeyMode: 'preserve_run_at' });
    assert.equal(third.runAt.getTime(), later.getTime());
    assert.equal(third.attempts, 0);
  });

  it('unsafe_dedupe: the existing job is returned untouched', async () => {
    const first = await t.jobs.add('k', { v: 1 }, { jobKey: 'dedupe', jobKeyMode: 'unsafe_dedupe' });
    const second = await t.jobs.add('k', { v: 2 }, { jobKey: 'dedupe', jobKeyMode: 'unsafe_dedupe' });
    assert.equal(second.id, first.id);
    assert.deepEqual(second.payload, { v: 1 });
    assert.equal(second.revision, 0);
    // even when it has failed for good or is locked
    await sql.query(`update job_queue.jobs set attempts = max_attempts, last_error = 'x' where id = $1`, [first.id]);
    const third = await t.jobs.add('k', { v: 3 }, { jobKey: 'dedupe', jobKeyMode: 'unsafe_dedupe' });
    assert.equal(third.id, first.id);
    assert.equal(third.lastError, 'x');
    await sql.query(`update job_queue.jobs set attempts = 0 where id = $1`, [first.id]);
    await lock(first.id);
    const fourth = await t.jobs.add('k', { v: 4 }, { jobKey: 'dedupe', jobKeyMode: 'unsafe_dedupe' });
    assert.equal(fourth.id, first.id);
    assert.equal((await rows()).length, 1);
  });

  it('replace on a locked job: the running job loses its key and its retries, a new job takes the key', async () => {
    const first = await t.jobs.add('k', { v: 1 }, { jobKey: 'busy' });
    await lock(first.id);
    const second = await t.jobs.add('k', { v: 2 }, { jobKey: 'busy' });
    assert.notEqual(second.id, first.id);
    const [old, fresh] = await rows();
    assert.equal(old.id, first.id);
    assert.equal(old.key, null);
    assert.equal(old.locked_by, 'other-worker', 'the worker keeps its lock');
    assert.equal(old.attempts, old.max_attempts, 'the outdated job will not be retried');
    assert.equal(fresh.key, 'busy');
    assert.deepEqual(fresh.payload, { v: 2 });
  });

  it('replace on a failed job: it comes back with attempts reset and no error', async () => {
    const first = await t.jobs.add('k', { v: 1 }, { jobKey: 'failed', maxAttempts: 2 });
    await sql.query(`update job_queue.jobs set attempts = 2, last_error = 'boom' where id = $1`, [first.id]);
    const second = await t.jobs.add('k', { v: 2 }, { jobKey: 'failed', maxAttempts: 2 });
    assert.equal(second.id, first.id);
    assert.equal(second.attempts, 0);
    assert.equal(second.lastError, null);
    assert.deepEqual(second.payload, { v: 2 });
  });

  it('removeJob deletes a pending keyed job but not one a worker holds', async () => {
    const free = await t.jobs.add('k', {}, { jobKey: 'free' });
    const held = await t.jobs.add('k', {}, { jobKey: 'held' });
    await lock(held.id);
    assert.equal((await t.jobs.removeJob('free'))?.id, free.id);
    assert.equal(await t.jobs.removeJob('held'), null);
    assert.equal(await t.jobs.removeJob('nope'), null);
    const left = await rows();
    assert.deepEqual(left.map((r) => [r.id, r.key, r.locked_by]), [[held.id, 'held', 'other-worker']]);
  });

  it('completeJobs refuses a locked job (JQ_JOB_RUNNING, nothing written); permanentlyFailJobs and rescheduleJobs skip it', async () => {
    const [a, b, c, d] = await t.jobs.addMany(['a', 'b', 'c', 'd'].map((identifier) => ({ identifier })));
    await lock(d.id);
    const before = (await rows()).find((r) => r.id === d.id);

    // both return the jobs as they ended, moved to finished_jobs
    await assert.rejects(t.jobs.completeJobs([a.id, d.id]), { code: 'JQ_JOB_RUNNING' });
    assert.equal((await t.jobs.getJob(a.id))?.state, 'waiting', 'a refused call completes none of its jobs');
    const completed = await t.jobs.completeJobs([a.id]);
    assert.deepEqual(completed.map((j) => [j.id, j.state, j.lastError]), [[a.id, 'completed', null]]);
    const failed = await t.jobs.permanentlyFailJobs([b.id, d.id], 'given up');
    assert.deepEqual(failed.map((j) => [j.id, j.state, j.lastError, j.attempts, j.maxAttempts]), [[b.id, 'failed', 'given up', 0, 25]]);
    const runAt = new Date(Date.now() + 3_600_000);
    const rescheduled = await t.jobs.rescheduleJobs([c.id, d.id], { runAt, priority: 7, attempts: 2, maxAttempts: 9 });
    assert.deepEqual(rescheduled.map((j) => [j.id, j.priority, j.attempts, j.maxAttempts, j.runAt.getTime()]), [[c.id, 7, 2, 9, runAt.getTime()]]);

    const after = (await rows()).find((r) => r.id === d.id);
    assert.deepEqual(after, before, 'the locked job is untouched');
    assert.deepEqual((await rows()).map((r) => r.id), [c.id, d.id], 'the completed and the failed job left jobs');
    const finished = await sql.query(
      'select id::text, state, last_error, attempts, max_attempts from job_queue.finished_jobs where id = any($1::bigint[]) order by id',
      [[a.id, b.id, c.id, d.id]],
    );
    assert.deepEqual(finished.rows, [
      { id: a.id, state: 'completed', last_error: null, attempts: 0, max_attempts: 25 },
      { id: b.id, state: 'failed', last_error: 'given up', attempts: 0, max_attempts: 25 },
    ]);
  });

  it('add_job works from a SQL trigger', async () => {
    await sql.query(`
      create table orders (id serial primary key, total int);
      create function orders_enqueue() returns trigger language plpgsql as $$
      begin
        perform job_queue.add_job('order_created', json_build_object('orderId', new.id)::jsonb, job_key => 'order:' || new.id);
        return new;
      end $$;
      create trigger orders_enqueue after insert on orders for each row execute function orders_enqueue();`);
    const { rows: inserted } = await sql.query('insert into orders (total) values (10), (20) returning id');
    const jobs = (await sql.query(`select key, payload from job_queue.jobs where task_identifier = 'order_created' order by id`)).rows;
    assert.deepEqual(jobs, inserted.map((o) => ({ key: `order:${o.id}`, payload: { orderId: o.id } })));
  });

  it('add_job from SQL takes named arguments and rejects a bad job key mode', async () => {
    const { rows: [job] } = await sql.query(
      `select * from job_queue.add_job('sql_task', '{"x":1}', queue_name => 'q', priority => 4, max_attempts => 3, flags => array['f'])`,
    );
    assert.equal(job.queue_name, 'q');
    assert.equal(job.priority, 4);
    assert.equal(job.max_attempts, 3);
    assert.deepEqual(job.flags, ['f']);
    await assert.rejects(sql.query(`select job_queue.add_job('sql_task', job_key => 'k', job_key_mode => 'nope')`), /JQ_INVALID_JOB_KEY_MODE/);
  });
});
